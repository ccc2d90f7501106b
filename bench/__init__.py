"""Benchmarks (not timed tests): run with `make bench` or `python -m bench`."""
