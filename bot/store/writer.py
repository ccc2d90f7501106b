"""The store's one writer thread, and the async facade's core: open (retried while the database starts), the
clock, Postgres wake-ups, close, and `_call`, which runs one unit on the writer thread and retries transient
errors until they become StoreUnavailable."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, TypeVar

import structlog

from bot.core.errors import OpsloopError
from bot.store.backends import PgListener, PostgresBackend, SqliteBackend, describe, is_postgres
from bot.store.lane import Caller
from bot.store.ledger import Ledger
from bot.store.migrations import Tables

T = TypeVar("T")
log = structlog.get_logger("opsloop.store")


class StoreUnavailable(OpsloopError):
    """The database kept failing (locked, disk full, I/O, connection lost) past the retries. Not a run's failure:
    the run waits and resumes when the store works again."""

    def __init__(self, message: str, *, disk_full: bool) -> None:
        super().__init__(message)
        self.disk_full = disk_full


Group = Callable[[Sequence[Callable[[], Any]]], list[tuple[Any, Exception | None]]]  # see SqliteBackend.call_group


@dataclass
class _Job:
    fn: Callable[[], Any]  # the call on its own
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    group: Group | None = None  # how to run it with others queued with it (one transaction), when it may be
    part: Callable[[], Any] | None = None  # the call inside that group's transaction


class _Writer:
    """The store's one thread (a sqlite-utils Database is bound to the thread that opened it). Work waits in a
    priority queue: what Slack waits on for its ack (accepting an event, a click's decision) goes ahead of
    the runs' bookkeeping, so a busy bot still acks within Slack's 3 seconds; what nobody waits on (a CI's
    POSTed change events, retention sweeps) goes last, so a flood of them never queues a run's writes behind
    it (only the one transaction already running). A background call waits while other work keeps coming.
    Urgent calls queued together (a burst of mentions) share one transaction and one fsync (`group`), each
    with its own result."""

    def __init__(self) -> None:
        self._queue: queue.PriorityQueue[tuple[int, int, _Job | None]] = queue.PriorityQueue()
        self._order = itertools.count()
        self.grouped = 0  # calls that shared a transaction with others queued with them (bench and tests)
        self._thread = threading.Thread(target=self._work, name="opsloop-store", daemon=True)
        self._thread.start()

    def submit(
        self,
        fn: Callable[[], T],
        *,
        urgent: bool = False,
        background: bool = False,
        group: Group | None = None,
        part: Callable[[], T] | None = None,
    ) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        job = _Job(fn, loop, future, group if urgent and part is not None else None, part)
        self._queue.put((0 if urgent else 2 if background else 1, next(self._order), job))
        return future

    def close(self) -> None:
        self._queue.put((3, next(self._order), None))  # after everything already queued
        self._thread.join()

    def _work(self) -> None:
        while (job := self._queue.get()[2]) is not None:
            jobs = self._queued_with(job)
            if len(jobs) > 1 and job.group is not None:
                self.grouped += len(jobs)
                try:
                    outcomes: list[tuple[Any, BaseException | None]] = list(
                        job.group([j.part for j in jobs if j.part is not None])
                    )
                except Exception:  # the group as a whole failed and wrote nothing: each call on its own
                    outcomes = [self._run(j) for j in jobs]
            else:
                outcomes = [self._run(j) for j in jobs]
            for j, outcome in zip(jobs, outcomes, strict=True):
                with contextlib.suppress(RuntimeError):  # the caller's loop is gone: nobody to tell
                    j.loop.call_soon_threadsafe(_settle, j.future, *outcome)

    def _queued_with(self, job: _Job) -> list[_Job]:
        """`job` and the groupable urgent calls queued right behind it (the first other item goes back)."""
        jobs = [job]
        while job.group is not None:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item[2] is None or item[2].group != job.group:  # bound methods: equal, not identical
                self._queue.put(item)  # same (priority, order): it keeps its place
                break
            jobs.append(item[2])
        return jobs

    @staticmethod
    def _run(job: _Job) -> tuple[Any, BaseException | None]:
        try:
            return job.fn(), None
        except BaseException as e:  # handed to the caller, whatever it is
            return None, e


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class StoreBase(Caller):
    """Async facade over Ledger: every call runs on one dedicated writer thread.

    `path` is a SQLite file path or a postgresql:// URL (then also `listen` for other replicas' news); `tables`
    the reaches' tables, migrated after the core's."""

    def __init__(self, path: str | Path, *, tables: Sequence[Tables] = (), retry_seconds: float = 10.0) -> None:
        self.path = str(path)
        self.tables = tuple(tables)
        self.retry_seconds = retry_seconds
        self.backend = "postgres" if is_postgres(self.path) else "sqlite"
        self.where = describe(self.path)  # without a password: for logs
        self._writer = _Writer()
        self._ledger: Ledger | None = None
        self._listener: PgListener | None = None
        self.round_trips = 0  # calls handed to the writer thread (a retried call counts once): bench and tests

    async def open(self) -> Self:
        """Connect and migrate. A database that is down or starting (Postgres next to us in a deploy) is retried
        for `retry_seconds`, then StoreUnavailable says where (without the password) and why."""

        def _open() -> None:
            self._ledger = Ledger(self.path, self.tables)

        deadline = time.monotonic() + self.retry_seconds
        delay = 0.1
        while True:
            try:
                await self._writer.submit(_open)
                return self
            except Exception as e:
                backend = PostgresBackend if self.backend == "postgres" else SqliteBackend
                transient = backend.transient(e)
                if transient is None:
                    raise
                if time.monotonic() + delay > deadline:
                    raise StoreUnavailable(
                        f"can't open the store at {self.where}: {type(e).__name__}: {e}".strip(),
                        disk_full=transient.disk_full,
                    ) from e
                log.warning(
                    "store.open_retry",
                    where=self.where,
                    error=f"{type(e).__name__}: {e}".strip(),
                    delay_s=round(delay, 2),
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def now(self) -> float:
        """The store's clock (epoch seconds): every replica's leases, claims and expiries are measured against the
        database server's clock, so replicas on machines whose clocks disagree still agree on who holds what.
        SQLite: this machine's clock."""
        ledger = self._ledger
        return ledger.sql.now() if ledger is not None else time.time()

    def listen(self, on_wake: Callable[[str], None]) -> PgListener | None:
        """Postgres: call `on_wake(WAKE_RUNS | WAKE_OUTBOX)` whenever another replica (or this one) commits news
        for the run schedulers or the senders, so a decision or a Stop anywhere reaches its run at once. SQLite:
        nothing (the schedulers' poll finds it)."""
        if self.backend != "postgres" or self._listener is not None:
            return self._listener
        self._listener = PgListener(self.path, on_wake)
        self._listener.start()
        return self._listener

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        if self._ledger is not None:
            await self._writer.submit(self._ledger.close)
            self._ledger = None
        await asyncio.to_thread(self._writer.close)

    async def atomically(self, fn: Callable[[Ledger], T], *, urgent: bool = False) -> T:
        """`fn(ledger)` as one unit, like every call (see `_call`): for a rule that reads and writes through the
        store's plain operations together, e.g. bot/run/approvals.py's N-of-M count. `fn` may run more than
        once (a retried conflict or transient error): it must only use the ledger."""
        return await self._call(fn, urgent=urgent)

    async def _call(self, fn: Callable[[Ledger], T], *, urgent: bool = False, background: bool = False) -> T:
        """Run `fn(ledger)` on the writer thread as one unit (`Ledger.call`), retrying transient errors
        ("database is locked", a full disk, a lost Postgres connection, a failover) with backoff; after
        `retry_seconds` they become StoreUnavailable, and the run waits instead of failing. Each call is one
        statement or one transaction, so a failed attempt left nothing behind and a retry is safe."""
        ledger = self._ledger
        if ledger is None:  # said here, before the closed store's executor refuses the call
            raise RuntimeError("store is not open")
        self.round_trips += 1
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.05
        group: Group | None = getattr(ledger.sql, "call_group", None)  # SQLite: urgent calls share a commit
        while True:
            try:
                return await self._writer.submit(
                    lambda: ledger.call(fn), urgent=urgent, background=background, group=group, part=lambda: fn(ledger)
                )
            except Exception as e:
                transient = ledger.sql.transient(e)
                if transient is None:
                    raise
                if time.monotonic() + delay > deadline:
                    raise StoreUnavailable(str(e), disk_full=transient.disk_full) from e
                log.warning("store.retry", error=f"{type(e).__name__}: {e}".strip(), delay_s=round(delay, 2))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
