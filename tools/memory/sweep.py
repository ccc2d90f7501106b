"""Incident memory's retention ([memory] retention_days, docs/context.md, Incident memory): records that ended longer
ago go, once when the app starts it (a service of the memory reach: tools/memory/reach.py `services`) and then every
SWEEP_EVERY_S.

Each pass asks the store for one batch at a time (tools.memory.store `sweep_incidents`: bounded, idempotent, its
own transaction, rows another replica is deleting skipped on Postgres) and asks again while a full batch came
back, so a large backlog goes in one pass and replicas sweeping at once only share the work. `0` keeps forever.
A failing pass (the store is down) is logged and tried again at the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from bot.core.redact import redact
from bot.store import Store
from tools.memory.store import SWEEP_BATCH, sweep_incidents

log = structlog.get_logger("opsloop.memory")

SWEEP_EVERY_S = 3600.0  # retention is counted in days: hourly is prompt enough


class MemorySweep:
    """The periodic retention sweep of one process."""

    def __init__(
        self,
        store: Store,
        retention_days: float,
        *,
        batch: int = SWEEP_BATCH,
        now: Callable[[], float] | None = None,
    ) -> None:
        self.store, self.retention_days, self.batch = store, retention_days, batch
        self.now = now or store.now
        self.passes = 0  # finished passes (a test waits on `swept`)
        self.swept = asyncio.Event()  # set after every pass, failed or not
        self._task: asyncio.Task[None] | None = None
        self.name = "memory.sweep"

    async def sweep(self) -> int:
        """One pass: batches until one comes back short; how many records went."""
        if self.retention_days <= 0:
            return 0
        gone = 0
        while True:
            went = await sweep_incidents(self.store, self.retention_days, now=self.now(), batch=self.batch)
            gone += went
            if went < self.batch:
                return gone

    async def start(self) -> None:
        if self._task is None and self.retention_days > 0:
            self._task = asyncio.create_task(self._forever(), name="opsloop-memory-sweep")

    async def _forever(self) -> None:
        while True:
            try:
                if gone := await self.sweep():
                    log.info("memory.swept", incidents=gone, retention_days=self.retention_days)
            except Exception as e:  # the store is down or busy: the next pass tries again
                log.warning("memory.sweep_failed", error=f"{type(e).__name__}: {redact(str(e))}")
            self.passes += 1
            self.swept.set()
            await asyncio.sleep(SWEEP_EVERY_S)  # nothing to wait on but the clock

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
