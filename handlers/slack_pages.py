"""Slack's cursor pagination, read one way for every list opsloop pages through (a thread's replies, a channel's
history, a person's conversations)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any


def next_cursor(response: Any) -> str | None:
    """The cursor of the page after `response`; None when it was the last."""
    if response.get("has_more") is False:
        return None
    return (response.get("response_metadata") or {}).get("next_cursor") or None


async def slack_pages(fetch: Callable[[str | None], Awaitable[Any]], *, most: int) -> AsyncIterator[Any]:
    """Each page `fetch(cursor)` returns, from the first (cursor None), at most `most`; a caller that stops early
    (found what it looked for) reads no more."""
    cursor: str | None = None
    for _ in range(most):
        response = await fetch(cursor)
        yield response
        if (cursor := next_cursor(response)) is None:
            return
