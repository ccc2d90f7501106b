"""Shared pytest fixtures: temp databases and the local fake servers."""
