# Two commands set up a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV := $(BIN)/uv

.PHONY: test test-fast test-latest lock chaos lint demo sandbox screenshot apt-note browser postgres sshd prometheus journal run bench clean

# Every install comes from a committed lock with hashes (locks/): a fresh clone gets exactly what CI tested.
# uv (itself pinned, with hashes, in locks/uv.txt) installs them; plain pip can install the same files
# (`pip install --require-hashes -r locks/dev.txt`). opsloop itself goes in editable, without build isolation,
# using the locked setuptools: nothing unpinned is fetched.
$(STAMP): pyproject.toml locks/dev.txt locks/uv.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r locks/uv.txt
	$(UV) pip install --quiet --python $(BIN)/python --require-hashes -r locks/dev.txt
	$(UV) pip install --quiet --python $(BIN)/python --no-deps --no-build-isolation -e .
	touch $(STAMP)

# Refresh the locks from the ranges in pyproject.toml (and locks/uv.in): the newest versions they allow,
# for every platform and Python 3.11+. Commit the result; `make test` then installs exactly it.
LOCK := $(UV) pip compile --quiet --generate-hashes --universal --python-version 3.11 --custom-compile-command "make lock"
lock: $(STAMP)
	$(LOCK) --upgrade locks/uv.in -o locks/uv.txt
	$(LOCK) --upgrade pyproject.toml -o locks/run.txt
	$(LOCK) --upgrade pyproject.toml --extra dev -o locks/dev.txt
	$(LOCK) --upgrade pyproject.toml --extra dev --extra bench -o locks/bench.txt

# The suite on the newest versions pyproject.toml's ranges allow, ignoring the lock, in a venv of its own:
# drift found on purpose (then `make lock`), not by a red CI on a fresh clone.
LATEST := .venv-latest
test-latest: $(STAMP) apt-note browser postgres sshd prometheus journal
	test -x $(LATEST)/bin/python || $(PY) -m venv $(LATEST)
	$(UV) pip install --quiet --python $(LATEST)/bin/python --upgrade --resolution highest -e '.[dev]'
	$(LATEST)/bin/python -m pip list --format=freeze 2>/dev/null | grep -iE '^(anthropic|slack|aiohttp|sqlite-utils|structlog|asyncssh|google-re2|psycopg)' || true
	$(LATEST)/bin/python -m pytest $(PYTEST)

# The whole suite, spread over TEST_WORKERS processes by pytest-xdist (each with its own Postgres databases
# and random ports; worksteal: an idle worker takes tests queued for a busy one, the minute-long ones included);
# -rfEs lists failures, errors and every skip with its reason. Two workers a core: a third of the suite waits on
# child processes, servers and clocks, so a core's second worker runs while the first waits (measured when the
# suite had 2,641 tests, on 2 cores: 478 s with 2 workers, 377 s with 4, 426 s with 6).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) * 2 )))
PYTEST := -q -rfEs -n $(TEST_WORKERS) --dist worksteal
test: $(STAMP) apt-note browser postgres sshd prometheus journal
	$(BIN)/python -m pytest $(PYTEST)

# The loop to run every few minutes: no processes, no real servers (tests/support/markers.py marks those) and none of the
# tests marked `slow` (each a second or more, paced by the clock); under 90 s on 2 cores. `make test` runs them all.
# One worker a core here: these tests only compute, and a second worker a core slows them (63 s vs 86 s).
FAST_WORKERS ?= $(shell nproc 2>/dev/null || echo 1)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -rfEs -n $(FAST_WORKERS) --dist worksteal -m "not processes and not servers and not slow"

# The long crash test: 200 runs of `opsloop run` SIGKILLed at chosen and random points (seed printed;
# replay one with CHAOS_SEED=...). `make test` runs its short, fixed-seed version.
CHAOS_RUNS ?= 200
chaos: $(STAMP)
	$(BIN)/python -m pytest -q -s tests/e2e/test_crash.py --chaos-runs=$(CHAOS_RUNS) $(if $(CHAOS_SEED),--chaos-seed=$(CHAOS_SEED))

# What CI checks first (and .pre-commit-config.yaml before a commit): lint, formatting, types. The rules live in
# pyproject.toml: ruff's rule sets, and mypy's files (tests/ and bench/ too) and strictness (looser for those two).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

demo: $(STAMP)
	$(BIN)/opsloop demo

sandbox: $(STAMP)
	$(BIN)/opsloop sandbox

# docs/sandbox.png: the demo incident played in the sandbox by headless Chromium.
screenshot: $(STAMP) browser
	$(BIN)/python -m bot.playground.sandbox.screenshot docs/sandbox.png

# The Debian packages the real-server tests need (.ci/apt-install says which): each target installs its set with
# apt-get when missing and possible (root or passwordless sudo), never fails the build, and says what will skip.
# apt-note is the one line before `make test` installs anything: what it is about to install, or why not.
apt-note:
	@.ci/apt-install note

browser postgres sshd prometheus journal:
	@.ci/apt-install $@

run: $(STAMP)
	$(BIN)/opsloop run $(if $(CONFIG),--config $(CONFIG))

# Writes bench/RESULTS.md (and growth.png, PROFILE.md); installs the peers it compares against first.
bench: $(STAMP)
	$(UV) pip install --quiet --python $(BIN)/python --require-hashes -r locks/bench.txt
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) $(LATEST) .pytest_cache .mypy_cache .ruff_cache
