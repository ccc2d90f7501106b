"""Incident memory wired (docs/context.md, Incident memory), once per backend: a run's end records it in the same call
when memory is on, search_incidents and the run-start offer through the real registry (the [memory] reach with the app's
Store shared), visibility by the asking run's conversation, feedback, and [memory] enabled = false."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from bot.config.reader import Reader
from bot.core.types import ApprovalState, DecisionCause, FeedbackValue, StopReason
from bot.store import Store
from tools.api import Link, RunFacts, RunScope, run_scope
from tools.config import build_registry
from tools.memory import store as memory
from tools.memory.reach import REACH, MemoryConfig
from tools.reaches import TABLES
from tools.registry import ToolRegistry

SECRET = "sk-ant-api03-PLANTEDsecret0value0123456789"


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    s = await Store(db_url, tables=TABLES, retry_seconds=5).open()
    yield s
    await s.close()


@pytest.fixture
async def registry(store: Store) -> AsyncIterator[ToolRegistry]:
    reg = await build_registry({"modules": []}, reaches={"memory": MemoryConfig()}, shared={Store: store})
    yield reg
    await reg.aclose()


async def end_run(
    store: Store,
    task: str,
    *,
    channel: str,
    kind: str | None,
    output: str,
    host: str = "web-03",
    change: str | None = "clean_logs",
) -> str:
    run = await store.create_run(
        channel=channel, thread_ts=f"{time.monotonic_ns()}.1", requester="U1", task=task, model="m"
    )
    await store.save_tool_result(
        run.id,
        tool_use_id="toolu_look",
        tool="check_disk",
        args={"host": host},
        content="98% used",
        is_error=False,
        confirmed_by=None,
    )
    if change:
        approval = await store.create_approval(
            run_id=run.id,
            tool_use_id="toolu_fix",
            tool=change,
            category="mutating",
            args={"host": host, "path": "/var/log"},
            requester="U1",
            expires_at=2e9,
        )
        await store.decide_approval(
            approval.id,
            state=ApprovalState.APPROVED,
            cause=DecisionCause.CLICK,
            decided_at=store.now(),
            decided_by="U0CAROL",
            decided_name="carol",
        )
    link = f"https://slack.com/archives/{channel}/p{run.thread_ts.replace('.', '')}"
    await store.finish_run(
        run.id,
        stop_reason=StopReason.COMPLETED,
        stop_detail="",
        output=output,
        at_end=[lambda ledger: REACH.at_end(MemoryConfig())(ledger, run.id, RunFacts(kind=kind, permalink=link))],
    )
    return run.id


def scope(channel: str, task: str, run_id: str = "run_b") -> RunScope:
    return RunScope(run_id=run_id, conversation=channel, started_at=0.0, anchor=0.0, task=task)


async def search(registry: ToolRegistry, channel: str | None, **args: object) -> str:
    tool = registry.get("search_incidents")
    assert tool is not None
    with run_scope(scope(channel, "x") if channel else None):
        result = await tool.run(args)
    return str(getattr(result, "content", result))


async def test_the_repeat_incident_is_recorded_at_its_end_and_offered_to_the_next_run(
    store: Store, registry: ToolRegistry
) -> None:
    a = await end_run(
        store,
        f"web-03 disk full on /var token={SECRET}",
        channel="C1",
        kind="public",
        output=f"Cleaned the rotated nginx logs; /var is at 41%. {SECRET}",
    )
    await end_run(
        store, "payments latency high", channel="C1", kind="public", output="scaled", host="db-01", change=None
    )
    incident = await memory.incident(store, a)  # written by finish_run itself: no separate call
    assert incident is not None and incident.kind == "public" and incident.changes[0].approver == "carol"
    assert SECRET not in repr(incident)

    text = await search(registry, "C2", query="disk full web-03")
    assert text.index("web-03 disk full") < text.find("payments") if "payments" in text else True
    assert "clean_logs" in text and "approved by carol" in text and "<@" not in text and SECRET not in text

    offers = await registry.offers(scope("C2", "web-03 /var is full again"))
    assert len(offers) == 1
    offer = offers[0]
    assert offer.prompt.startswith("[past incidents") and "clean_logs" in offer.prompt and SECRET not in offer.prompt
    assert offer.thread_line[:2] == ("Similar past incidents:", "\n• ")
    link = offer.thread_line[2]
    assert isinstance(link, Link) and link.url == incident.permalink and "web-03 disk full" in link.label
    assert offer.thread_line[3] == " — clean_logs, approved by carol"
    assert "payments" not in offer.prompt  # below the threshold: shares no word with the task


async def test_a_private_conversation_s_incident_reaches_only_that_conversation(
    store: Store, registry: ToolRegistry
) -> None:
    await end_run(store, "web-03 disk full on /var", channel="G_PRIV", kind="private", output="cleaned")
    await end_run(store, "web-03 disk full in a DM", channel="D_DM", kind=None, output="cleaned")  # unknown: private
    for elsewhere in ("C_OTHER", None):  # another channel, and no run at all
        assert "No past incident" in await search(registry, elsewhere, query="web-03 disk full")
    assert await registry.offers(scope("C_OTHER", "web-03 disk full")) == []
    own = await search(registry, "G_PRIV", query="web-03 disk full")
    assert "on /var" in own and "in a DM" not in own
    offers = await registry.offers(scope("G_PRIV", "web-03 disk full"))
    assert len(offers) == 1 and "in a DM" not in offers[0].prompt
    assert "in a DM" not in "".join(str(p) for p in offers[0].thread_line)


async def test_not_helpful_comes_last_and_says_so(store: Store, registry: ToolRegistry) -> None:
    bad = await end_run(store, "web-03 disk full on /var", channel="C1", kind="public", output="rebooted it")
    await end_run(store, "web-03 disk full again", channel="C1", kind="public", output="cleaned logs")
    await store.record_feedback(
        click="k1", run_id=bad, user="U2", value=FeedbackValue.NEGATIVE, channel="C1", message_ts="9.9"
    )
    text = await search(registry, "C1", query="web-03 disk full on /var")
    assert text.index("again") < text.index("rebooted") and "NOT HELPFUL" in text
    await memory.forget(store, bad)
    assert "rebooted" not in await search(registry, "C1", query="web-03 disk full on /var")


async def test_memory_disabled_records_nothing_and_offers_nothing(store: Store) -> None:
    assert REACH.parse(Reader({"memory": {"enabled": False}}), {}) is None
    assert REACH.parse(Reader({"memory": {"retention_days": 30}}), {}) == MemoryConfig(retention_days=30.0)
    run = await store.create_run(channel="C1", thread_ts="1.1", requester="U1", task="web-03 disk", model="m")
    await store.finish_run(run.id, stop_reason=StopReason.COMPLETED, stop_detail="", output="ok")
    assert await memory.incident(store, run.id) is None
    reg = await build_registry({"modules": []}, reaches={}, shared={Store: store})
    assert reg.get("search_incidents") is None and await reg.offers(scope("C1", "web-03 disk")) == []
    await reg.aclose()


def test_opsloop_forget_takes_a_run_out_of_memory(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Once per backend: `opsloop forget RUN_ID --db <file or postgresql:// URL>` (a sync CLI, no event loop)."""
    import asyncio

    from bot.app.cli import main

    async def seed() -> tuple[str, str]:
        s = await Store(db_url, tables=TABLES).open()
        try:
            return (
                await end_run(s, "web-03 disk full", channel="C1", kind="public", output="cleaned"),
                await end_run(s, "web-03 disk full again", channel="C1", kind="public", output="cleaned"),
            )
        finally:
            await s.close()

    async def left() -> tuple[bool, bool, list[str]]:
        s = await Store(db_url, tables=TABLES).open()
        try:
            found = [m.incident.run_id for m in await memory.search_incidents(s, "web-03 disk", channel="C1")]
            return await memory.incident(s, run_id) is None, await memory.incident(s, kept) is not None, found
        finally:
            await s.close()

    run_id, kept = asyncio.run(seed())
    assert main(["forget", run_id, "--db", db_url]) == 0
    assert f"forgot {run_id}" in capsys.readouterr().out
    assert asyncio.run(left()) == (True, True, [kept])  # gone from search too; the other record stays
    assert main(["forget", run_id, "--db", db_url]) != 0  # not there any more: said, not silent
    assert "is not in incident memory" in capsys.readouterr().err
