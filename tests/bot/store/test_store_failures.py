"""Transient store errors ("database is locked", a full disk) are retried and never end a run.

The database is made to fail for real: another connection holds the write lock, or the writer's connection
is capped with `PRAGMA max_page_count` (SQLite then answers SQLITE_FULL, "database or disk is full", exactly
as on a full disk). The cap is set through the store's own writer thread (`Store._call`): that is the one
connection SQLite applies it to.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from bot.store import Store, StoreUnavailable
from tests.support import incident_tools
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import answered, bot_env, text_of

TASK = "web-03 is paging: disk full on /var, please fix"


async def cap_pages(store: Store, extra: int) -> None:
    """Let the writer's connection grow the file by at most `extra` pages (a disk about to be full)."""

    def cap(db: object) -> None:
        conn = db.db  # type: ignore[attr-defined]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + extra}")

    await store._call(cap)


@pytest.mark.slow
async def test_a_locked_database_is_retried_until_the_lock_is_released(tmp_path: Path) -> None:
    store = await Store(tmp_path / "opsloop.db", retry_seconds=60).open()
    run = await store.create_run(channel="C1", thread_ts="1.0", requester="U1", task="t", model="m")
    other = sqlite3.connect(tmp_path / "opsloop.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer (a backup, a second process) holds the lock
    try:
        with capture_logs() as logs:
            write = asyncio.create_task(store.add_step(run.id, "note", {"n": 1}))
            # SQLite gave up after busy_timeout and the store retries (a log event is all there is to wait on)
            while not any(e["event"] == "store.retry" for e in logs):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            assert not write.done()
            other.execute("ROLLBACK")
            await write
    finally:
        other.close()
    assert [s.kind for s in await store.steps(run.id)] == ["note"]
    await store.close()


async def test_a_full_disk_is_retried_then_reported_as_unavailable_and_recovers(tmp_path: Path) -> None:
    store = await Store(tmp_path / "opsloop.db", retry_seconds=0.3).open()
    run = await store.create_run(channel="C1", thread_ts="1.0", requester="U1", task="t", model="m")
    await cap_pages(store, 0)
    with pytest.raises(StoreUnavailable) as e:
        await store.add_step(run.id, "note", {"big": "x" * 100_000})
    assert e.value.disk_full
    await cap_pages(store, 10_000)  # space again
    await store.add_step(run.id, "note", {"big": "x" * 100_000})
    assert [s.kind for s in await store.steps(run.id)] == ["note"]
    await store.close()


@pytest.mark.slow
async def test_a_store_that_keeps_failing_pauses_the_run_tells_the_thread_once_and_it_resumes(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"})),
        reply(tool_use("check_disk", {"host": "web-03"})),
        *answered(reply(text("/var is full of rotated nginx logs."))),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        store = env.ops.store
        store.retry_seconds = 0.3
        gate = incident_tools.hold("check_disk")
        channel, ts = await env.mention(TASK)
        await gate.wait_entered()
        other = sqlite3.connect(store.path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # the database stays locked past busy_timeout and every retry
        try:
            gate.release()
            told = await fake_slack.wait_for_message(
                channel, lambda m: "can't write to its database" in text_of(m), timeout=30
            )
            assert "paused, not lost" in text_of(told)
            assert [r.status for r in env.runs()] != ["finished"]  # never marked finished by a store error
        finally:
            other.execute("ROLLBACK")  # the database works again: the scheduler resumes the run by itself
            other.close()
        await fake_slack.wait_for_message(channel, lambda m: "rotated nginx logs" in text_of(m), timeout=30)
        warnings = [m for m in fake_slack.thread(channel, ts) if "can't write to its database" in text_of(m)]
        assert len(warnings) == 1
        await env.wait_idle()
        assert env.runs()[0].stop_reason == "completed"
