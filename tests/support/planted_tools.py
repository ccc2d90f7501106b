"""A tool whose output carries planted secrets, for tests/e2e/test_planted_secrets_e2e.py.

Loaded like any tool module (`[tools] modules = [..., "tests.support.planted_tools"]`).
`OUTPUT` is what `read_config` returns; the test sets it before the run.
"""

from __future__ import annotations

from tools import Category, tool

__all__ = ["read_config"]

OUTPUT = {"text": "(nothing planted)"}


@tool(category=Category.READ_ONLY)
async def read_config(service: str) -> str:
    """The deployed configuration of a service, as its config server returns it.

    Args:
        service: the service name, e.g. nginx
    """
    return f"config of {service}:\n{OUTPUT['text']}"
