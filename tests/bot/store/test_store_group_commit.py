"""Urgent calls queued together (a burst of mentions after start-up) share one SQLite transaction and one fsync:
each still gets its own result, and one that fails rolls back alone."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from bot.run.approvals import supersede_by_reply
from bot.store import Ledger, Store
from tools.changes.store import StoredChange, record_changes
from tools.reaches import TABLES


async def hold_the_writer(store: Store) -> tuple[threading.Event, asyncio.Future[None]]:
    """Park the writer thread on a plain call until released, so the calls behind it queue up together."""
    started, release = threading.Event(), threading.Event()

    def parked(_: Ledger) -> None:
        started.set()
        release.wait(30)

    busy = asyncio.ensure_future(store.atomically(parked))
    await asyncio.to_thread(started.wait, 30)
    return release, busy


async def mention(store: Store, i: int):
    return await store.accept_mention(
        f"Ev{i:03d}",
        channel="C1",
        thread_ts=f"{i}.0",
        requester="U1",
        task=f"web-{i:02d} is out of disk",
        prompt="task",
        model="m",
        mention_ts=f"{i}.0",
        on_reply=supersede_by_reply,
    )


async def test_a_burst_of_accepts_shares_one_commit_and_each_gets_its_own_run(tmp_path: Path) -> None:
    store = await Store(tmp_path / "opsloop.db", tables=TABLES).open()
    try:
        release, busy = await hold_the_writer(store)
        burst = [asyncio.ensure_future(mention(store, i)) for i in range(5)]
        duplicate = asyncio.ensure_future(mention(store, 0))  # the same event again, in the same group
        while store._writer._queue.qsize() < 6:  # noqa: ASYNC110 (waiting on the queue's observable size)
            await asyncio.sleep(0)
        release.set()
        await busy
        accepted = await asyncio.gather(*burst)
        assert ([a.run.task for a in accepted], await duplicate) == (
            [f"web-{i:02d} is out of disk" for i in range(5)],
            None,
        )
        assert store._writer.grouped == 6
        assert len({a.run.id for a in accepted}) == 5
    finally:
        await store.close()


async def test_a_call_that_fails_in_a_group_rolls_back_alone(tmp_path: Path) -> None:
    store = await Store(tmp_path / "opsloop.db", tables=TABLES).open()
    try:
        release, busy = await hold_the_writer(store)

        def half_then_fail(ledger: Ledger) -> None:
            ledger.claim_event("EvBAD")
            raise ValueError("after writing half")

        first = asyncio.ensure_future(mention(store, 1))
        bad = asyncio.ensure_future(store.atomically(half_then_fail, urgent=True))
        last = asyncio.ensure_future(mention(store, 2))
        while store._writer._queue.qsize() < 3:  # noqa: ASYNC110
            await asyncio.sleep(0)
        release.set()
        await busy
        with pytest.raises(ValueError, match="after writing half"):
            await bad
        assert ((await first).run.thread_ts, (await last).run.thread_ts) == ("1.0", "2.0")
        assert store._writer.grouped == 3
        assert await store.atomically(lambda ledger: ledger.claim_event("EvBAD"))  # its claim was rolled back
    finally:
        await store.close()


async def test_background_writes_wait_behind_a_runs_writes(tmp_path: Path) -> None:
    """A flood of POSTed change events (background) queued before a run's own write: the run's goes first,
    right after the call already running, and every event is still stored."""
    store = await Store(str(tmp_path / "s.db"), tables=TABLES).open()
    try:
        run = await store.create_run(channel="C1", thread_ts="1.0", requester="U1", task="t", model="m")
        release, busy = await hold_the_writer(store)
        done: list[str] = []

        async def event(i: int) -> None:
            stored = StoredChange(id=f"ev{i}", at=1.0e9 + i, summary=f"deploy {i}", received_at=1.0e9 + i)
            await record_changes(store, [stored])
            done.append(f"event {i}")

        async def run_write() -> None:
            await store.set_status_ts(run.id, "2.0")
            done.append("run")

        events = [asyncio.ensure_future(event(i)) for i in range(20)]
        await asyncio.sleep(0.05)  # the events are queued first
        ours = asyncio.ensure_future(run_write())
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(busy, ours, *events)
        assert done[0] == "run" and len(done) == 21
    finally:
        await store.close()
