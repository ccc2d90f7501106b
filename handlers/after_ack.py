"""Work that must not hold up an ack: with process_before_response, Slack gets its ack only when the
listener returns, so a listener stores what matters and hands Slack calls (:eyes:, ephemerals) to here."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import structlog

log = structlog.get_logger("opsloop.after_ack")


QUIET_WAIT_S = 0.5  # the longest work `after_deliveries` waits for the deliveries in hand to be acked


class AfterAck:
    """Tasks started by listeners, kept referenced until done, logged when they fail, awaited on close.

    It also knows whether Slack deliveries are in hand (`delivering`: Socket Mode envelopes being handled, and
    those read and queued behind them): work spawned `after_deliveries` (the :eyes: reactions, a new run's start)
    waits until none is, at most QUIET_WAIT_S, so in a burst of mentions every ack goes out before the burst's
    reactions and runs compete with them for the event loop."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._in_hand = 0
        self._queued: Callable[[], int] = lambda: 0  # deliveries read and not yet handled (the socket's queue)
        self._quiet = asyncio.Event()
        self._quiet.set()

    def spawn(self, work: Coroutine[Any, Any, Any], *, name: str, after_deliveries: bool = False) -> asyncio.Task[Any]:
        task = asyncio.create_task(self._after_deliveries(work) if after_deliveries else work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    @contextlib.contextmanager
    def delivering(self, queued: Callable[[], int] | None = None) -> Iterator[None]:
        """Around one delivery, from its arrival to its ack. `queued`: how many more are read and waiting."""
        if queued is not None:
            self._queued = queued
        self._in_hand += 1
        self._quiet.clear()
        try:
            yield
        finally:
            self._in_hand -= 1
            if not self._busy():
                self._quiet.set()

    def _busy(self) -> bool:
        return self._in_hand > 0 or self._queued() > 0

    async def quiet(self) -> None:
        """Until no delivery is in hand or queued (at most QUIET_WAIT_S: a steady stream never starves the rest)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(QUIET_WAIT_S):
                while self._busy():
                    if self._quiet.is_set():  # queued, not yet picked up: let the socket's reader take it
                        await asyncio.sleep(0)
                    else:
                        await self._quiet.wait()

    async def _after_deliveries(self, work: Coroutine[Any, Any, Any]) -> Any:
        try:
            await self.quiet()
        except BaseException:
            work.close()  # never started: no "coroutine was never awaited"
            raise
        return await work

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("after_ack.failed", task=task.get_name(), error=f"{type(error).__name__}: {error}")

    async def close(self, grace: float = 5.0) -> None:
        await finish(list(self._tasks), grace)


async def finish(tasks: list[asyncio.Task[Any]], grace: float) -> None:
    """Let running `tasks` finish for up to `grace` seconds, then cancel what is left."""
    if tasks:
        _, late = await asyncio.wait(tasks, timeout=grace)
        for task in late:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
