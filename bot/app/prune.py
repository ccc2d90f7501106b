"""The events dedupe table's housekeeping: forget Slack event ids older than a day, at start-up and every hour."""

from __future__ import annotations

import asyncio
import time

import structlog

from bot.store import Store

log = structlog.get_logger("opsloop.app")

EVENTS_KEPT_SECONDS = 24 * 3600  # the events dedupe table keeps a day (Slack redelivers within minutes)
PRUNE_EVERY_SECONDS = 3600


async def prune_events_once(store: Store) -> None:
    """Forget event ids older than a day (Slack redelivers within minutes)."""
    try:
        pruned = await store.prune_events(time.time() - EVENTS_KEPT_SECONDS)
        if pruned:
            log.info("events.pruned", rows=pruned)
    except Exception as e:  # the store is down: try again at the next round
        log.warning("events.prune_failed", error=f"{type(e).__name__}: {e}")


async def prune_events(store: Store) -> None:
    """Every hour after start-up (which prunes once itself)."""
    while True:
        await asyncio.sleep(PRUNE_EVERY_SECONDS)  # a timer, not a wait for state
        await prune_events_once(store)
