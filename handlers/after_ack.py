"""Work that must not hold up an ack: with process_before_response, Slack gets its ack only when the
listener returns, so a listener stores what matters and hands Slack calls (:eyes:, ephemerals) to here."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

log = structlog.get_logger("opsloop.after_ack")


class AfterAck:
    """Tasks started by listeners, kept referenced until done, logged when they fail, awaited on close."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, work: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("after_ack.failed", task=task.get_name(), error=f"{type(error).__name__}: {error}")

    async def close(self, grace: float = 5.0) -> None:
        """Let running work finish for up to `grace` seconds, then cancel what is left."""
        tasks = list(self._tasks)
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=grace)
        for task in late:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
