"""Incident memory's retention sweep ([memory] retention_days): a pass takes batches until one comes back short,
replicas sweeping at once share the work, 0 keeps forever, and the running app sweeps once as it opens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.store import Ledger, Store
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import bot_env
from tests.tools.memory.test_memory_wiring import end_run
from tools.memory import store as memory
from tools.memory.sweep import MemorySweep
from tools.reaches import TABLES

DAY = 86400.0


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    s = await Store(db_url, tables=TABLES, retry_seconds=5).open()
    yield s
    await s.close()


async def seed(store: Store, n: int) -> list[str]:
    return [
        await end_run(store, f"web-03 disk full {i}", channel="C1", kind="public", output="cleaned") for i in range(n)
    ]


async def test_one_pass_takes_every_batch_past_retention_and_keeps_the_rest(store: Store) -> None:
    await seed(store, 7)
    now = store.now()
    assert await MemorySweep(store, 30, batch=3, now=lambda: now + 29 * DAY).sweep() == 0  # not old enough
    assert await memory.incident_count(store) == 7
    assert await MemorySweep(store, 0, batch=3, now=lambda: now + 9999 * DAY).sweep() == 0  # 0: forever
    assert await memory.incident_count(store) == 7
    assert await MemorySweep(store, 30, batch=3, now=lambda: now + 31 * DAY).sweep() == 7  # 3 + 3 + 1
    assert await memory.incident_count(store) == 0


async def test_replicas_sweeping_at_once_share_the_work(db_url: str, store: Store) -> None:
    await seed(store, 9)
    later = store.now() + 400 * DAY
    other = await Store(db_url, tables=TABLES, retry_seconds=5).open()
    try:
        passes = [MemorySweep(s, 365, batch=2, now=lambda: later) for s in (store, other, store, other)]
        gone = await asyncio.gather(*(p.sweep() for p in passes))
        assert sum(gone) == 9 and await memory.incident_count(other) == 0
    finally:
        await other.close()


async def test_retention_zero_starts_no_sweep(store: Store) -> None:
    sweep = MemorySweep(store, 0)
    await sweep.start()
    assert sweep._task is None
    await sweep.close()


async def test_the_app_sweeps_old_incidents_once_as_it_opens(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    db = str(tmp_path / "opsloop.db")  # bot_env's OPSLOOP_DB
    s = await Store(db, tables=TABLES).open()
    try:
        old, recent = await seed(s, 2)
    finally:
        await s.close()
    ledger = Ledger(db, TABLES)
    try:
        with ledger.sql.atomic():
            ledger.sql.execute("UPDATE incidents SET ended_at = ended_at - ? WHERE run_id = ?", [40 * DAY, old])
    finally:
        ledger.close()
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[memory]\nretention_days = 30\n") as env:
        (sweep,) = [s for s in env.ops.tools.services if isinstance(s, MemorySweep)]
        assert sweep.retention_days == 30
        await asyncio.wait_for(sweep.swept.wait(), timeout=10)
        assert await memory.incident(env.ops.store, old) is None
        assert await memory.incident(env.ops.store, recent) is not None
    assert sweep._task is None  # closed with the app
