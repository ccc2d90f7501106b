"""A team module whose tool takes the name of opsloop's own living-summary tool (`update_summary`), for the tests
that `opsloop check` and `opsloop run` refuse it. Loaded like any tool module (`[tools] modules = [...]`)."""

from __future__ import annotations

from tools import Category, tool

__all__ = ["update_summary"]


@tool(category=Category.READ_ONLY)
async def update_summary(text: str) -> str:
    """The team's own incident summary, kept in their wiki."""
    return text
