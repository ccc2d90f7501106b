"""search_incidents: the model asks incident memory, seeing only what the run's conversation may see."""

from __future__ import annotations

from bot.store import Store
from tools.api import current_run
from tools.memory.render import search_text
from tools.memory.store import search_incidents as search
from tools.registry import Category, ToolContext, ToolError, tool


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True)
async def search_incidents(
    query: str,
    host: str | None = None,
    service: str | None = None,
    alertname: str | None = None,
    limit: int = 5,
    *,
    ctx: ToolContext,
) -> str:
    """Search the past incidents opsloop handled (incident memory), only those this conversation may see.

    Returns up to `limit` incidents, best first: when, what it was, how it ended, what was changed and by whom,
    the start of the answer and the thread link; answers marked not helpful come last, and with none matching
    it says what was asked. The output is bounded to about 12,000 characters. Use it when a problem looks
    familiar, e.g. the same alert on the same host, to learn what fixed it last time.

    Args:
        query: words describing the problem (any of them may match).
        host: only incidents that touched this host.
        service: only incidents that touched this service or unit.
        alertname: only incidents of this alert.
        limit: at most this many (1 to 20).
    """
    store = ctx.require(Store, "incident memory has no store here")
    scope = current_run()
    # Outside a run nobody's conversation is known: only public channels' incidents.
    channel = scope.conversation if scope is not None else ""
    try:
        matches = await search(
            store, query, channel=channel, host=host, service=service, alertname=alertname, limit=limit
        )
    except ValueError as e:
        raise ToolError(str(e)) from None
    if not matches:  # name what was asked, so "no match" can be trusted
        filters = [f"{k} {v!r}" for k, v in (("host", host), ("service", service), ("alertname", alertname)) if v]
        return f"{search_text(matches)} Asked: {', '.join([repr(query), *filters])}."
    return search_text(matches)
