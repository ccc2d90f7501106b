"""The store's contract, once per backend: every test runs on a SQLite file and on a fresh Postgres database
(`db_url`), through the public async Store, and expects the same observable results from both.

What is asserted is what callers read back (records, booleans, orderings); the only look under the hood is
`stored_text`, which reads every stored row raw to prove a planted secret never reached the database.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from bot.core.types import (
    ApprovalState,
    DecisionCause,
    InboxState,
    OutboxKind,
    OutboxPost,
    OutboxState,
    Run,
    RunStatus,
    StopReason,
    Totals,
    Usage,
)
from bot.run.approvals import add_approver, supersede_by_reply
from bot.store import Store
from bot.store.backends import is_postgres
from handlers.policy import requesters

TASK = "web-03 is paging: disk full on /var, please fix"
NEVER = 2e9
SECRET = "sk-ant-api03-PLANTEDsecret0value0123456789"  # redacted wherever the store redacts
HISTORY_SECRET = "sk-ant-api03-HISTORYkept0exactly0123456789"  # messages are stored exactly: it stays


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    s = await Store(db_url, retry_seconds=5).open()
    yield s
    await s.close()


async def new_run(store: Store, thread: str = "1.0", *, requester: str = "U1", task: str = TASK) -> Run:
    return await store.create_run(channel="C1", thread_ts=thread, requester=requester, task=task, model="m")


async def ask(
    store: Store,
    run: Run,
    call: str = "toolu_1",
    *,
    required: int = 1,
    expires_at: float = NEVER,
    requester: str = "U1",
):
    return await store.create_approval(
        run_id=run.id,
        tool_use_id=call,
        tool="restart_service",
        category="mutating",
        args={"unit": "nginx"},
        requester=requester,
        expires_at=expires_at,
        required=required,
        channel=run.channel,
        thread_ts=run.thread_ts,
    )


async def mention(
    store: Store,
    event_id: str,
    *,
    thread: str = "1.0",
    ts: str = "1.1",
    user: str = "U1",
    task: str = TASK,
    prompt: str | None = None,
):
    return await store.accept_mention(
        event_id,
        channel="C1",
        thread_ts=thread,
        requester=user,
        task=task,
        prompt=task if prompt is None else prompt,
        model="m",
        mention_ts=ts,
        on_reply=supersede_by_reply,
    )


async def reply(
    store: Store,
    event_id: str,
    *,
    thread: str = "1.0",
    ts: str = "1.2",
    user: str = "U2",
    text: str = "check the logs first",
):
    return await store.accept_reply(
        event_id, channel="C1", thread_ts=thread, ts=ts, user=user, text=text, on_reply=supersede_by_reply
    )


def post(
    key: str, thread: str = "1.0", *, run_id: str | None = None, text: str = "hello", approval_id: str | None = None
) -> OutboxPost:
    return OutboxPost(key=key, channel="C1", thread_ts=thread, text=text, run_id=run_id, approval_id=approval_id)


def totals(iterations: int = 2) -> Totals:
    return Totals(
        iterations=iterations,
        usage=Usage(input_tokens=10, output_tokens=5, cache_read_tokens=7, cache_write_tokens=3),
        cost_usd=0.25,
        agent_seconds=1.5,
        tools_called=("check_disk", "tail_log"),
        condensed=True,
        model="m2",
    )


def stored_text(location: str) -> str:
    """Every row of every table, as text: what a database dump (or a backup) would hold."""
    if is_postgres(location):
        with psycopg.connect(location) as conn:
            tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
            return "\n".join(
                str(row) for t in tables for row in conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(t)))
            )
    conn = sqlite3.connect(location)
    try:
        return "\n".join(conn.iterdump())
    finally:
        conn.close()


# --------------------------------------------------------------------------------------
# runs
# --------------------------------------------------------------------------------------


async def test_a_new_run_reads_back_as_created(store: Store) -> None:
    run = await new_run(store)
    assert (run.channel, run.thread_ts, run.requester, run.task, run.model, run.status) == (
        "C1",
        "1.0",
        "U1",
        TASK,
        "m",
        RunStatus.RUNNING,
    )
    assert (run.usage, run.tools_called, run.system, run.tools, run.owner, run.stop_requested_by) == (
        Usage(),
        (),
        None,
        None,
        None,
        None,
    )
    assert await store.get_run(run.id) == run == await store.find_run(run.id)
    assert await store.find_run("run_nope") is None
    with pytest.raises(KeyError):
        await store.get_run("run_nope")


async def test_a_runs_fields_round_trip(store: Store) -> None:
    run = await new_run(store)
    tools = [{"name": "check_disk", "description": "Disk usage — ünïcødé", "input_schema": {"type": "object"}}]
    await store.fix_prompt(run.id, system="You are opsloop. password=not-redacted-here", tools=tools)
    await store.set_status(run.id, RunStatus.WAITING_APPROVAL)
    await store.set_drop_block(run.id)
    await store.set_status_ts(run.id, "1.5")
    await store.save_totals(run.id, totals())
    got = await store.get_run(run.id)
    assert (got.system, got.tools, got.status, got.drop_block, got.status_ts) == (
        "You are opsloop. password=not-redacted-here",
        tools,
        RunStatus.WAITING_APPROVAL,
        True,
        "1.5",
    )
    assert (got.iterations, got.usage, got.cost_usd, got.agent_seconds, got.tools_called, got.condensed, got.model) == (
        2,
        totals().usage,
        0.25,
        1.5,
        ("check_disk", "tail_log"),
        True,
        "m2",
    )

    await store.finish_run(
        run.id, stop_reason=StopReason.CANCELLED, stop_detail="stopped", stopped_by="U9", output="done"
    )
    done = await store.get_run(run.id)
    assert (done.status, done.active, done.stop_reason, done.stop_detail, done.stopped_by, done.output) == (
        RunStatus.FINISHED,
        False,
        StopReason.CANCELLED,
        "stopped",
        "U9",
        "done",
    )
    assert done.updated_at >= got.updated_at >= run.created_at


async def test_open_run_returns_the_threads_active_run_instead_of_a_second(store: Store) -> None:
    first, created = await store.open_run(
        channel="C1", thread_ts="1.0", requester="U1", task=TASK, prompt=TASK, model="m", mention_ts="1.1"
    )
    again, created_again = await store.open_run(
        channel="C1", thread_ts="1.0", requester="U2", task="other", prompt="other", model="m", mention_ts="1.2"
    )
    assert (created, created_again, again.id) == (True, False, first.id)
    assert await store.history(first.id) == [{"role": "user", "content": [{"type": "text", "text": TASK}]}]


async def follow_up(store: Store) -> tuple[Run, bool]:
    """U2's mention in thread 1.0: "and web-04?"."""
    return await store.open_run(
        channel="C1",
        thread_ts="1.0",
        requester="U2",
        task="and web-04?",
        prompt="and web-04?",
        model="m",
        mention_ts="1.3",
    )


async def test_a_thread_with_several_runs_is_redirected_to_its_active_one_not_its_newest(store: Store) -> None:
    """An alert storm's thread holds several runs: a mention there joins the one still going, even when a newer
    one has finished (`thread_run`: the active run first, else the latest, in one query)."""
    going = await new_run(store, "1.0")
    assert going == await store.get_run(going.id)  # create_run's row is the stored row (INSERT … RETURNING)
    newer = await new_run(store, "1.0")
    await store.finish_run(newer.id, stop_reason=StopReason.COMPLETED, stop_detail="")
    assert (await store.thread_run("C1", "1.0")).id == going.id  # type: ignore[union-attr]
    joined, created = await follow_up(store)
    assert (joined.id, created) == (going.id, False)
    await store.finish_run(going.id, stop_reason=StopReason.COMPLETED, stop_detail="")
    assert (await store.thread_run("C1", "1.0")).id == newer.id  # type: ignore[union-attr]  # none going: the latest
    assert await store.thread_run("C1", "9.0") is None


async def test_a_follow_up_run_continues_the_history_with_the_earlier_system_and_tools(store: Store) -> None:
    first, _ = await store.open_run(
        channel="C1", thread_ts="1.0", requester="U1", task=TASK, prompt=TASK, model="m", mention_ts="1.1"
    )
    tools = [{"name": "check_disk", "input_schema": {"type": "object", "properties": {}}}]
    await store.fix_prompt(first.id, system="system v1", tools=tools)
    answer = {"role": "assistant", "content": [{"type": "text", "text": "Freed 19.8 GB."}]}
    await store.put_message(first.id, 1, answer)
    await store.finish_run(first.id, stop_reason=StopReason.COMPLETED, stop_detail="")

    follow, created = await follow_up(store)
    assert created and follow.id != first.id
    assert (follow.system, follow.tools, follow.requester, follow.mention_ts) == ("system v1", tools, "U2", "1.3")
    assert await store.history(follow.id) == [
        *await store.history(first.id),
        {"role": "user", "content": [{"type": "text", "text": "and web-04?"}]},
    ]


async def test_active_latest_and_listed_runs(store: Store) -> None:
    a = await new_run(store, "1.0")
    b = await new_run(store, "2.0")
    assert [r.id for r in await store.active_runs()] == [a.id, b.id]  # oldest first
    await store.finish_run(a.id, stop_reason=StopReason.COMPLETED, stop_detail="")
    a2 = await new_run(store, "1.0")
    assert (await store.active_run("C1", "1.0")).id == a2.id  # type: ignore[union-attr]
    assert (await store.latest_run("C1", "1.0")).id == a2.id  # type: ignore[union-attr]
    await store.finish_run(a2.id, stop_reason=StopReason.COMPLETED, stop_detail="")
    assert await store.active_run("C1", "1.0") is None
    assert (await store.latest_run("C1", "1.0")).id == a2.id  # type: ignore[union-attr]
    assert await store.latest_run("C1", "9.0") is None
    assert [r.id for r in await store.active_runs()] == [b.id]
    assert [r.id for r in await store.list_runs()] == [a2.id, b.id, a.id]  # newest first
    assert [r.id for r in await store.list_runs(limit=2)] == [a2.id, b.id]


async def test_a_stop_is_requested_once_and_only_of_an_active_run(store: Store) -> None:
    run, other = await new_run(store, "1.0"), await new_run(store, "2.0")
    assert await store.stop_requested_by(run.id) is None
    assert await store.request_stop(run.id, "U7")
    assert not await store.request_stop(run.id, "U8")  # already asked: the first asker stays
    assert await store.stop_requested_by(run.id) == "U7"
    assert await store.stop_requested_among([run.id, other.id, "run_nope"]) == [run.id]
    assert await store.stop_requested_among([]) == []
    await store.finish_run(other.id, stop_reason=StopReason.COMPLETED, stop_detail="")
    assert not await store.request_stop(other.id, "U7")


# --------------------------------------------------------------------------------------
# history, tool results, steps
# --------------------------------------------------------------------------------------

SIGNATURE = "EqQBCkYIARgCKkCz9f+" + "A" * 400 + "/w=="  # opaque: must come back byte for byte
MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": TASK}]},
    {
        "role": "assistant",
        "content": [
            {
                "type": "thinking",
                "thinking": "Disk full → check /var first. ünïcødé 日本語 🚀 \u0000 \\ \" '%s ? %%",
                "signature": SIGNATURE,
            },
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
            {"type": "text", "text": f"I'll look. {HISTORY_SECRET}"},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "check_disk",
                "input": {"host": "web-03", "z": 1, "a": [1.5]},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x" * 300_000, "is_error": False},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "nested"},
            {
                "type": "tool_use",
                "id": "toolu_2",
                "name": "q",
                "input": {"rows": [{"i": i, "v": [i] * 5} for i in range(2000)]},
            },
        ],
    },
]


async def test_history_round_trips_exactly(store: Store) -> None:
    run = await new_run(store)
    for seq, message in enumerate(MESSAGES):
        await store.put_message(run.id, seq, message)
    got = await store.history(run.id)
    assert json.dumps(got) == json.dumps(MESSAGES)  # key order, signatures, escapes: byte for byte


async def test_put_message_replaces_its_seq_consumes_inbox_and_saves_totals_together(store: Store) -> None:
    run = await new_run(store)
    queued = await store.add_inbox(run_id=run.id, channel="C1", ts="1.2", user="U2", text="hold on")
    await store.put_message(run.id, 0, MESSAGES[0])
    await store.put_message(
        run.id,
        0,
        {"role": "user", "content": [{"type": "text", "text": "replaced"}]},
        consumed_inbox=[queued],
        totals=totals(iterations=4),
    )
    assert await store.history(run.id) == [{"role": "user", "content": [{"type": "text", "text": "replaced"}]}]
    assert [(i.id, i.state) for i in await store.inbox(run.id)] == [(queued, InboxState.CONSUMED)]
    assert await store.queued_inbox(run.id) == []
    assert (await store.get_run(run.id)).iterations == 4


async def test_replace_history_swaps_the_whole_history(store: Store) -> None:
    run = await new_run(store)
    for seq, message in enumerate(MESSAGES):
        await store.put_message(run.id, seq, message)
    condensed = [{"role": "user", "content": [{"type": "text", "text": "summary ✓"}]}]
    await store.replace_history(run.id, condensed)
    assert await store.history(run.id) == condensed


async def test_the_started_marker_is_claimed_once(store: Store) -> None:
    run = await new_run(store)
    claim = dict(
        tool_use_id="toolu_1",
        tool="restart_service",
        args={"unit": "nginx"},
        content=None,
        is_error=False,
        confirmed_by="U2",
    )
    assert await store.save_tool_result(run.id, **claim)
    assert not await store.save_tool_result(run.id, **claim)  # a second driver may not run the call
    started = (await store.tool_results(run.id))["toolu_1"]
    assert (started.content, started.confirmed_by, started.args) == (None, "U2", {"unit": "nginx"})

    assert await store.save_tool_result(
        run.id,
        tool_use_id="toolu_1",
        tool="restart_service",
        args={"unit": "nginx"},
        content="restarted",
        is_error=False,
        confirmed_by="U2",
    )
    assert await store.save_tool_result(
        run.id, tool_use_id="toolu_2", tool="check_disk", args={}, content="boom", is_error=True, confirmed_by=None
    )
    results = await store.tool_results(run.id)
    assert {k: (r.tool, r.content, r.is_error) for k, r in results.items()} == {
        "toolu_1": ("restart_service", "restarted", False),
        "toolu_2": ("check_disk", "boom", True),
    }
    assert list(await store.tool_results(run.id, ["toolu_2", "toolu_9"])) == ["toolu_2"]
    assert await store.tool_results(run.id, []) == {}


async def test_the_started_marker_is_refused_once_a_stop_was_requested(store: Store) -> None:
    run = await new_run(store)
    assert await store.request_stop(run.id, "U7")
    assert not await store.save_tool_result(
        run.id, tool_use_id="toolu_1", tool="restart_service", args={}, content=None, is_error=False, confirmed_by="U2"
    )
    assert await store.tool_results(run.id) == {}


async def test_a_big_tool_result_round_trips(store: Store) -> None:
    run = await new_run(store)
    content = ("line ünïcødé 🚀 '%s' ? \\ \n" * 40_000)[:1_000_000]
    await store.save_tool_result(
        run.id, tool_use_id="toolu_1", tool="tail_log", args={}, content=content, is_error=False, confirmed_by=None
    )
    assert (await store.tool_results(run.id))["toolu_1"].content == content


async def test_a_tool_result_with_nul_bytes_is_stored(store: Store) -> None:
    """A log cut short by a crash is padded with NUL bytes; tail_log returns them (decode keeps \\x00)."""
    run = await new_run(store)
    content = "Jan 1 kernel: ok\n\x00\x00\x00\x00\nJan 1 sshd: started\n"
    assert await store.save_tool_result(
        run.id,
        tool_use_id="toolu_1",
        tool="tail_log",
        args={"path": "/var/log/x"},
        content=content,
        is_error=False,
        confirmed_by=None,
    )
    stored = (await store.tool_results(run.id))["toolu_1"].content
    assert stored is not None and "Jan 1 sshd: started" in stored


async def test_steps_come_back_in_order(store: Store) -> None:
    run = await new_run(store)
    await store.add_step(run.id, "model", {"n": 1, "text": "ünïcødé"})
    await store.add_step(run.id, "tool", {"n": 2, "at": 1.5})
    assert [(s.kind, s.data) for s in await store.steps(run.id)] == [
        ("model", {"n": 1, "text": "ünïcødé"}),
        ("tool", {"n": 2, "at": 1.5}),
    ]


# --------------------------------------------------------------------------------------
# events: store, then ack
# --------------------------------------------------------------------------------------


async def test_an_event_id_is_claimed_once_and_pruned_by_age(store: Store) -> None:
    assert await store.claim_event("Ev1")
    assert not await store.claim_event("Ev1")
    assert await store.claim_event("Ev2")
    assert await store.prune_events(store.now() - 3600) == 0  # nothing is an hour old
    assert not await store.claim_event("Ev1")
    assert await store.prune_events(store.now() + 3600) == 2
    assert (await store.claim_event("Ev1"), await store.claim_event("Ev2")) == (True, True)


async def test_a_mention_opens_one_run_and_its_redelivery_is_a_duplicate(store: Store) -> None:
    accepted = await mention(store, "Ev1")
    assert accepted is not None and accepted.created and accepted.redirect is None
    assert (accepted.run.task, accepted.run.mention_ts) == (TASK, "1.1")
    assert await mention(store, "Ev1") is None
    assert [r.id for r in await store.list_runs()] == [accepted.run.id]


async def test_a_second_mention_in_a_going_thread_redirects_its_run(store: Store) -> None:
    first = await mention(store, "Ev1")
    again = await mention(store, "Ev2", ts="1.3", user="U3", task="actually check web-04")
    assert first is not None and again is not None and again.redirect is not None
    assert (again.created, again.run.id) == (False, first.run.id)
    assert (again.redirect.item.user, again.redirect.item.text, again.redirect.item.state) == (
        "U3",
        "actually check web-04",
        InboxState.QUEUED,
    )
    assert [i.text for i in await store.queued_inbox(first.run.id)] == ["actually check web-04"]


async def test_a_reply_is_queued_for_the_threads_run_once(store: Store) -> None:
    accepted = await mention(store, "Ev1")
    assert accepted is not None
    stored = await reply(store, "Ev2")
    assert stored is not None and stored.superseded == ()
    assert (stored.item.run_id, stored.item.state, stored.item.ts) == (accepted.run.id, InboxState.QUEUED, "1.2")
    assert await reply(store, "Ev2") is None  # a redelivery
    assert await reply(store, "Ev3", thread="9.0") is None  # no run in that thread
    assert [i.id for i in await store.queued_inbox(accepted.run.id)] == [stored.item.id]


async def test_a_reply_or_redirect_supersedes_the_runs_pending_approvals(store: Store) -> None:
    accepted = await mention(store, "Ev1")
    assert accepted is not None
    run = accepted.run
    one, two = await ask(store, run, "toolu_1"), await ask(store, run, "toolu_2")
    stored = await reply(store, "Ev2", text="leave postgres alone")
    assert stored is not None and set(stored.superseded) == {one.id, two.id}
    assert stored.item.state == InboxState.SUPERSEDING
    decided = await store.get_approval(one.id)
    assert (decided.state, decided.cause, decided.decided_by, decided.reason) == (
        ApprovalState.SUPERSEDED,
        DecisionCause.REPLY,
        "U2",
        "leave postgres alone",
    )
    assert await store.queued_inbox(run.id) == []

    three = await ask(store, run, "toolu_3")
    redirect = await mention(store, "Ev3", ts="1.4", user="U3", task="stop, check web-04")
    assert redirect is not None and redirect.redirect is not None
    assert redirect.redirect.superseded == (three.id,)
    assert (await store.get_approval(three.id)).state == ApprovalState.SUPERSEDED
    assert await store.pending_approvals(run.id) == []


# --------------------------------------------------------------------------------------
# approvals
# --------------------------------------------------------------------------------------


async def test_an_approval_reads_back_as_created(store: Store) -> None:
    run = await new_run(store)
    a = await store.create_approval(
        run_id=run.id,
        tool_use_id="toolu_1",
        tool="clean_logs",
        category="destructive",
        args={"path": "/var/log"},
        requester="U1",
        expires_at=NEVER,
        args_hash="h1",
        preview="would free 19.8 GB",
        preview_hash="p1",
        channel="C1",
        thread_ts="1.0",
        required=2,
        run_tokens=1234,
        run_cost_usd=0.5,
    )
    assert (a.state, a.cause, a.approvals, a.required, a.args, a.args_hash, a.preview, a.preview_hash) == (
        ApprovalState.PENDING,
        None,
        (),
        2,
        {"path": "/var/log"},
        "h1",
        "would free 19.8 GB",
        "p1",
    )
    assert (a.tool, a.category, a.requester, a.channel, a.thread_ts, a.run_tokens, a.run_cost_usd, a.message_ts) == (
        "clean_logs",
        "destructive",
        "U1",
        "C1",
        "1.0",
        1234,
        0.5,
        None,
    )
    assert await store.get_approval(a.id) == a == await store.find_approval(a.id)
    assert await store.find_approval("apr_nope") is None
    with pytest.raises(KeyError):
        await store.get_approval("apr_nope")


async def test_the_newest_approval_of_a_call_and_the_pending_ones(store: Store) -> None:
    run, other = await new_run(store, "1.0"), await new_run(store, "2.0")
    old = await ask(store, run, "toolu_1")
    await store.decide_approval(
        old.id,
        state=ApprovalState.SUPERSEDED,
        cause=DecisionCause.CHANGED_CALL,
        decided_at=store.now(),
        reason="the call changed",
    )
    new = await ask(store, run, "toolu_1")
    elsewhere = await ask(store, other, "toolu_1")
    assert (await store.approval_for_call(run.id, "toolu_1")).id == new.id  # type: ignore[union-attr]
    assert await store.approval_for_call(run.id, "toolu_9") is None
    assert {a.id for a in await store.pending_approvals()} == {new.id, elsewhere.id}
    assert [a.id for a in await store.pending_approvals(run.id)] == [new.id]
    assert [a.id for a in await store.run_approvals(run.id)] == [old.id, new.id]


async def test_a_decision_is_compare_and_set(store: Store) -> None:
    run = await new_run(store)
    a = await ask(store, run)
    assert await store.decide_approval(
        a.id,
        state=ApprovalState.DENIED,
        cause=DecisionCause.CLICK,
        decided_at=5.0,
        decided_by="U2",
        decided_name="bob",
        reason="not now",
    )
    assert not await store.decide_approval(
        a.id, state=ApprovalState.APPROVED, cause=DecisionCause.CLICK, decided_at=6.0, decided_by="U3"
    )
    assert not await add_approver(store, a.id, "U3", decided_name="carol", now=6.0)
    got = await store.get_approval(a.id)
    assert (got.state, got.cause, got.decided_by, got.decided_name, got.reason, got.decided_at, got.approvals) == (
        ApprovalState.DENIED,
        DecisionCause.CLICK,
        "U2",
        "bob",
        "not now",
        5.0,
        (),
    )


async def test_two_of_two_approvals_approve_on_the_second_distinct_approver(store: Store) -> None:
    run = await new_run(store)
    a = await ask(store, run, required=2)
    assert await add_approver(store, a.id, "U2", decided_name="bob", now=1.0)
    assert not await add_approver(store, a.id, "U2", decided_name="bob", now=1.5)  # the same person twice
    half = await store.get_approval(a.id)
    assert (half.state, half.approvals, half.cause) == (ApprovalState.PENDING, ("U2",), None)
    assert await add_approver(store, a.id, "U3", decided_name="carol", now=2.0)
    done = await store.get_approval(a.id)
    assert (done.state, done.cause, done.approvals, done.decided_by, done.decided_name, done.decided_at) == (
        ApprovalState.APPROVED,
        DecisionCause.CLICK,
        ("U2", "U3"),
        "U3",
        "carol",
        2.0,
    )
    assert not await add_approver(store, a.id, "U4", decided_name="dave", now=3.0)
    assert not await add_approver(store, "apr_nope", "U4", decided_name="dave", now=3.0)


async def test_the_card_ts_is_recorded_only_in_the_expected_state(store: Store) -> None:
    run = await new_run(store)
    a = await ask(store, run)
    assert not await store.set_card_ts(a.id, "9.0", expect=ApprovalState.APPROVED)
    assert await store.set_card_ts(a.id, "9.1", expect=ApprovalState.PENDING)
    assert (await store.get_approval(a.id)).message_ts == "9.1"


async def test_approvals_past_their_expiry_are_due_and_expire(store: Store) -> None:
    run = await new_run(store)
    now = store.now()
    due, later = (
        await ask(store, run, "toolu_1", expires_at=now - 1),
        await ask(store, run, "toolu_2", expires_at=now + 600),
    )
    assert [a.id for a in await store.due_approvals(now=now)] == [due.id]
    assert await store.decide_approval(due.id, state=ApprovalState.EXPIRED, cause=DecisionCause.EXPIRY, decided_at=now)
    assert await store.due_approvals(now=now) == []
    assert [a.id for a in await store.due_approvals(now=now + 601)] == [later.id]
    assert (await store.get_approval(due.id)).cause == DecisionCause.EXPIRY


async def test_requesters_are_everyone_who_asked_for_the_call(store: Store) -> None:
    first = await mention(store, "Ev1", user="U1")
    assert first is not None
    await store.finish_run(first.run.id, stop_reason=StopReason.COMPLETED, stop_detail="")
    follow = await mention(store, "Ev2", ts="1.3", user="U2", task="and web-04?")
    assert follow is not None and follow.created
    run = follow.run
    consumed = await reply(store, "Ev3", ts="1.4", user="U3")
    assert consumed is not None
    await store.put_message(
        run.id, 5, {"role": "user", "content": [{"type": "text", "text": "x"}]}, consumed_inbox=[consumed.item.id]
    )
    superseder = await ask(store, run, "toolu_0")
    assert (await reply(store, "Ev4", ts="1.5", user="U4")) is not None  # supersedes toolu_0
    a = await ask(store, run, "toolu_1", requester="U2")
    assert (await store.get_approval(superseder.id)).state == ApprovalState.SUPERSEDED
    assert (await reply(store, "Ev5", ts="1.6", user="U5")) is not None  # queued after the ask: not a requester
    assert await requesters(store, a.id) == ["U1", "U2", "U3", "U4"]
    assert await requesters(store, "apr_nope") == []


async def test_the_audit_pairs_each_approval_with_its_calls_result(store: Store) -> None:
    run = await new_run(store)
    ran, never = await ask(store, run, "toolu_1"), await ask(store, run, "toolu_2")
    await add_approver(store, ran.id, "U2", decided_name="bob", now=store.now())
    await store.save_tool_result(
        run.id, tool_use_id="toolu_1", tool="restart_service", args={}, content="ok", is_error=False, confirmed_by="U2"
    )
    audit = await store.audit()
    assert [(e.approval.id, e.approval.state, e.result, e.result_is_error) for e in audit] == [
        (ran.id, ApprovalState.APPROVED, "ok", False),
        (never.id, ApprovalState.PENDING, None, None),
    ]


# --------------------------------------------------------------------------------------
# outbox
# --------------------------------------------------------------------------------------


async def test_enqueueing_a_key_again_returns_the_first_item(store: Store) -> None:
    first = await store.enqueue(
        kind=OutboxKind.POST,
        key="card:apr_1",
        channel="C1",
        thread_ts="1.0",
        text="a",
        blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "*a* ✓"}}],
    )
    again = await store.enqueue(kind=OutboxKind.POST, key="card:apr_1", channel="C1", thread_ts="1.0", text="b")
    assert again == first
    item = await store.outbox_by_key("card:apr_1")
    assert item is not None and await store.outbox_item(first) == item
    assert (item.kind, item.state, item.text, item.blocks, item.attempts, item.unsure, item.owner) == (
        OutboxKind.POST,
        OutboxState.PENDING,
        "a",
        [{"type": "section", "text": {"type": "mrkdwn", "text": "*a* ✓"}}],
        0,
        False,
        None,
    )
    assert await store.outbox_by_key("card:nope") is None and await store.outbox_item("out_nope") is None
    ids = await store.enqueue_posts(
        [post("answer:r:0", run_id="r"), post("answer:r:1", run_id="r"), post("card:apr_1")]
    )
    assert ids[2] == first
    assert [i.id for i in await store.outbox_items()] == [first, ids[0], ids[1]]  # enqueue order
    assert [i.id for i in await store.outbox_items("r")] == ids[:2]


async def test_posts_in_a_thread_are_claimed_in_order(store: Store) -> None:
    a1, a2, b1 = await store.enqueue_posts([post("a1", "1.0"), post("a2", "1.0"), post("b1", "2.0")])
    now = store.now()
    first = await store.claim_outbox("s1", now=now, until=now + 30)
    second = await store.claim_outbox("s2", now=now, until=now + 30)  # a2 waits for a1: b1 instead
    assert (first.id, second.id) == (a1, b1)  # type: ignore[union-attr]
    assert await store.claim_outbox("s3", now=now, until=now + 30) is None
    assert await store.outbox_sent(a1, "s1", ts="1.1", now=now)
    third = await store.claim_outbox("s3", now=now, until=now + 30)
    assert third is not None and (third.id, third.owner, third.claimed_until) == (a2, "s3", now + 30)


async def test_an_update_waits_for_its_post_and_only_the_newest_is_sent(store: Store) -> None:
    target = await store.enqueue(kind=OutboxKind.POST, key="card:apr_1", channel="C1", thread_ts="1.0", text="ask")
    old = await store.enqueue(
        kind=OutboxKind.UPDATE, key="card:apr_1:approved", channel="C1", target=target, text="approved"
    )
    new = await store.enqueue(kind=OutboxKind.UPDATE, key="card:apr_1:done", channel="C1", target=target, text="done")
    now = store.now()
    claimed = await store.claim_outbox("s1", now=now, until=now + 30)
    assert claimed is not None and claimed.id == target
    assert await store.claim_outbox("s2", now=now, until=now + 30) is None  # no update before its post
    assert await store.outbox_sent(target, "s1", ts="1.1", now=now)
    update = await store.claim_outbox("s1", now=now, until=now + 30)
    assert update is not None and update.id == new
    assert (await store.outbox_item(old)).state == OutboxState.SUPERSEDED  # type: ignore[union-attr]


async def test_a_claim_is_not_taken_before_next_at_or_while_held(store: Store) -> None:
    item = await store.enqueue(kind=OutboxKind.POST, key="k", channel="C1", thread_ts="1.0", text="t")
    now = store.now()
    assert (await store.claim_outbox("s1", now=now, until=now + 30)).id == item  # type: ignore[union-attr]
    assert await store.claim_outbox("s2", now=now, until=now + 30) is None
    await store.outbox_retry(item, "s1", next_at=now + 60, error="ratelimited", unsure=False)
    assert await store.claim_outbox("s2", now=now, until=now + 30) is None  # backing off
    retried = await store.claim_outbox("s2", now=now + 61, until=now + 90)
    assert retried is not None and (retried.owner, retried.error) == ("s2", "ratelimited")


async def test_a_held_items_life_attempt_plain_sent(store: Store) -> None:
    item = await store.enqueue(
        kind=OutboxKind.POST, key="k", channel="C1", thread_ts="1.0", text="t", blocks=[{"type": "divider"}]
    )
    now = store.now()
    await store.claim_outbox("s1", now=now, until=now + 30)
    assert not await store.outbox_attempt(item, "s2", until=now + 60, unsure=True)  # not s2's
    assert await store.outbox_attempt(item, "s1", until=now + 60, unsure=True)
    assert await store.renew_outbox_claim(item, "s1", until=now + 90)
    assert not await store.renew_outbox_claim(item, "s2", until=now + 90)
    held = await store.outbox_item(item)
    assert held is not None and (held.attempts, held.unsure, held.claimed_until) == (1, True, now + 90)
    assert await store.outbox_plain(item, "s1", error="invalid_blocks")
    plain = await store.outbox_item(item)
    assert plain is not None and (plain.plain, plain.unsure, plain.error) == (True, False, "invalid_blocks")
    assert not await store.outbox_sent(item, "s2", ts="1.1", now=now)
    assert await store.outbox_sent(item, "s1", ts="1.1", now=now + 1)
    sent = await store.outbox_item(item)
    assert sent is not None and (sent.state, sent.ts, sent.sent_at, sent.owner, sent.claimed_until) == (
        OutboxState.SENT,
        "1.1",
        now + 1,
        None,
        None,
    )
    assert not await store.outbox_attempt(item, "s1", until=now + 60, unsure=False)  # sent: nothing to do


async def test_a_failed_item_is_never_claimed_again(store: Store) -> None:
    item = await store.enqueue(kind=OutboxKind.POST, key="k", channel="C1", thread_ts="1.0", text="t")
    now = store.now()
    await store.claim_outbox("s1", now=now, until=now + 30)
    await store.outbox_failed(item, "s1", error="channel_not_found")
    failed = await store.outbox_item(item)
    assert failed is not None and (failed.state, failed.error, failed.owner) == (
        OutboxState.FAILED,
        "channel_not_found",
        None,
    )
    assert await store.claim_outbox("s2", now=now + 100, until=now + 130) is None


async def test_a_lapsed_claim_is_taken_over_and_the_old_holder_loses_it(store: Store) -> None:
    item = await store.enqueue(kind=OutboxKind.POST, key="k", channel="C1", thread_ts="1.0", text="t")
    now = store.now()
    await store.claim_outbox("s1", now=now, until=now + 1)
    taken = await store.claim_outbox("s2", now=now + 2, until=now + 30)
    assert taken is not None and taken.owner == "s2"
    assert not await store.outbox_attempt(item, "s1", until=now + 60, unsure=True)
    assert not await store.outbox_sent(item, "s1", ts="1.1", now=now)


async def test_a_stopping_sender_releases_its_claims(store: Store) -> None:
    a, b = await store.enqueue_posts([post("a", "1.0"), post("b", "2.0")])
    now = store.now()
    await store.claim_outbox("s1", now=now, until=now + 30)
    await store.claim_outbox("s1", now=now, until=now + 30)
    assert await store.release_outbox("s1") == 2
    assert await store.release_outbox("s1") == 0
    assert {(await store.claim_outbox("s2", now=now, until=now + 30)).id for _ in range(2)} == {a, b}  # type: ignore[union-attr]


async def test_a_cards_ts_is_copied_to_its_approval_when_sent(store: Store) -> None:
    run = await new_run(store)
    a = await ask(store, run)
    [card] = await store.enqueue_posts([post(f"card:{a.id}", run_id=run.id, approval_id=a.id)])
    now = store.now()
    await store.claim_outbox("s1", now=now, until=now + 30)
    assert await store.outbox_sent(card, "s1", ts="7.7", now=now)
    assert (await store.get_approval(a.id)).message_ts == "7.7"


# --------------------------------------------------------------------------------------
# leases, reports
# --------------------------------------------------------------------------------------


async def test_a_runs_lease_is_taken_kept_lapsed_and_taken_from_the_dead(store: Store) -> None:
    run = await new_run(store)
    now = store.now()
    assert await store.claim_run(run.id, "p1", until=now + 10, now=now)
    assert not await store.claim_run(run.id, "p2", until=now + 10, now=now)
    assert await store.claim_run(run.id, "p1", until=now + 20, now=now)  # ours: kept
    assert await store.lease_owners() == ["p1"]
    assert await store.claim_run(run.id, "p2", until=now + 40, now=now + 21)  # lapsed
    assert await store.claim_run(run.id, "p3", until=now + 40, now=now, dead=["p9", "p2"])  # its owner died
    held = await store.get_run(run.id)
    assert (held.owner, held.lease_until) == ("p3", now + 40)
    assert not await store.claim_run("run_nope", "p1", until=now + 10, now=now)
    await store.finish_run(run.id, stop_reason=StopReason.COMPLETED, stop_detail="")
    assert not await store.claim_run(run.id, "p3", until=now + 50, now=now)  # finished: nothing to drive
    assert await store.lease_owners() == []


async def test_leases_are_renewed_only_by_their_owner_and_released(store: Store) -> None:
    a, b = await new_run(store, "1.0"), await new_run(store, "2.0")
    now = store.now()
    await store.claim_run(a.id, "p1", until=now + 10, now=now)
    await store.claim_run(b.id, "p2", until=now + 10, now=now)
    assert await store.renew_leases("p1", [a.id, b.id], until=now + 20) == [a.id]
    assert (await store.get_run(a.id)).lease_until == now + 20
    await store.release_run(b.id, "p1")  # not p1's: nothing
    assert (await store.get_run(b.id)).owner == "p2"
    await store.release_run(b.id, "p2")
    released = await store.get_run(b.id)
    assert (released.owner, released.lease_until) == (None, None)


async def test_runnable_runs_are_the_undriven_ones_with_something_to_do(store: Store) -> None:
    now = store.now()
    free = await new_run(store, "1.0")
    driven = await new_run(store, "2.0")
    lapsed = await new_run(store, "3.0")
    orphan = await new_run(store, "4.0")
    waiting = await new_run(store, "5.0")
    decided = await new_run(store, "6.0")
    stopping = await new_run(store, "7.0")
    done = await new_run(store, "8.0")
    await store.claim_run(driven.id, "p1", until=now + 10, now=now)
    await store.claim_run(lapsed.id, "p1", until=now - 1, now=now - 5)
    await store.claim_run(orphan.id, "p2", until=now + 10, now=now)
    for run in (waiting, decided, stopping):
        await store.set_status(run.id, RunStatus.WAITING_APPROVAL)
        await ask(store, run)
    [d] = await store.pending_approvals(decided.id)
    await store.decide_approval(
        d.id, state=ApprovalState.APPROVED, cause=DecisionCause.CLICK, decided_at=now, decided_by="U2"
    )
    await store.request_stop(stopping.id, "U7")
    await store.finish_run(done.id, stop_reason=StopReason.COMPLETED, stop_detail="")
    runnable = [r.id for r in await store.runnable_runs(now=now, dead=["p2"])]
    assert runnable == [free.id, lapsed.id, orphan.id, decided.id, stopping.id]  # oldest first
    assert orphan.id not in [r.id for r in await store.runnable_runs(now=now)]


async def test_a_finished_run_is_reported_once(store: Store) -> None:
    run = await new_run(store)
    await store.finish_run(run.id, stop_reason=StopReason.COMPLETED, stop_detail="", output="done")
    assert [r.id for r in await store.unreported_runs()] == [run.id]
    parts = [
        post(f"answer:{run.id}:0", run_id=run.id, text="part 1"),
        post(f"answer:{run.id}:1", run_id=run.id, text="part 2"),
    ]
    await store.report(run.id, parts)
    await store.report(run.id, parts)  # a second driver reporting again changes nothing
    assert await store.unreported_runs() == []
    assert [(i.key, i.text) for i in await store.outbox_items(run.id)] == [
        (f"answer:{run.id}:0", "part 1"),
        (f"answer:{run.id}:1", "part 2"),
    ]


# --------------------------------------------------------------------------------------
# metrics, health
# --------------------------------------------------------------------------------------


async def test_metrics_queries(store: Store) -> None:
    assert (await store.active_run_counts(), await store.pending_approval_count(), await store.approval_waits()) == (
        {},
        0,
        [],
    )
    a, b, c = await new_run(store, "1.0"), await new_run(store, "2.0"), await new_run(store, "3.0")
    await store.set_status(b.id, RunStatus.WAITING_APPROVAL)
    await store.finish_run(c.id, stop_reason=StopReason.COMPLETED, stop_detail="")
    assert await store.active_run_counts() == {RunStatus.RUNNING: 1, RunStatus.WAITING_APPROVAL: 1}
    pending, decided = await ask(store, b, "toolu_1"), await ask(store, a, "toolu_2")
    await store.decide_approval(
        decided.id,
        state=ApprovalState.DENIED,
        cause=DecisionCause.CLICK,
        decided_at=decided.created_at + 4.0,
        decided_by="U2",
    )
    assert await store.pending_approval_count() == 1
    [(state, waited)] = await store.approval_waits()
    assert state == ApprovalState.DENIED and waited == pytest.approx(4.0)
    assert pending.pending


async def test_a_writable_store_passes_the_write_probe(store: Store) -> None:
    await store.probe_write()
    run = await new_run(store)  # the probe left nothing locked or written
    assert [r.id for r in await store.list_runs()] == [run.id]


# --------------------------------------------------------------------------------------
# redaction at the boundary
# --------------------------------------------------------------------------------------


async def test_a_planted_secret_is_never_stored_but_messages_are_stored_exactly(store: Store, db_url: str) -> None:
    # the handler redacts the prompt before it enters the history (handlers/mentions.py); the task is the store's
    accepted = await mention(store, "Ev1", task=f"disk full; the key is {SECRET}", prompt="disk full")
    assert accepted is not None
    run = accepted.run
    assert SECRET not in run.task and "[REDACTED]" in run.task
    stored = await reply(store, "Ev2", text=f"try password={SECRET}")
    assert stored is not None and SECRET not in stored.item.text
    await store.save_tool_result(
        run.id,
        tool_use_id="toolu_1",
        tool="tail_log",
        args={"token": SECRET},
        content=f"AWS creds: {SECRET}",
        is_error=False,
        confirmed_by=None,
    )
    result = (await store.tool_results(run.id))["toolu_1"]
    assert result.content is not None and SECRET not in result.content and SECRET not in json.dumps(result.args)
    await store.add_step(run.id, "tool", {"output": SECRET})
    a = await store.create_approval(
        run_id=run.id,
        tool_use_id="toolu_2",
        tool="http_post",
        category="mutating",
        args={"header": f"Bearer {SECRET}"},
        requester="U1",
        expires_at=NEVER,
        preview=f"POST with {SECRET}",
    )
    await store.decide_approval(
        a.id,
        state=ApprovalState.DENIED,
        cause=DecisionCause.CLICK,
        decided_at=1.0,
        decided_by="U2",
        reason=f"no, {SECRET}",
    )
    item = await store.enqueue(
        kind=OutboxKind.POST,
        key="answer",
        channel="C1",
        thread_ts="1.0",
        text=f"done {SECRET}",
        blocks=[{"type": "section", "text": SECRET}],
    )
    now = store.now()
    await store.claim_outbox("s1", now=now, until=now + 30)
    await store.outbox_retry(item, "s1", next_at=now, error=f"failed: {SECRET}", unsure=False)
    await store.finish_run(
        run.id, stop_reason=StopReason.COMPLETED, stop_detail=f"detail {SECRET}", output=f"answer {SECRET}"
    )
    await store.put_message(run.id, 1, MESSAGES[1])  # carries HISTORY_SECRET: the history is exact
    assert json.dumps((await store.history(run.id))[1]) == json.dumps(MESSAGES[1])

    dump = stored_text(db_url)
    assert SECRET not in dump and "PLANTEDsecret" not in dump
    assert HISTORY_SECRET in dump and "[REDACTED]" in dump


async def test_feedback_clicks_are_kept_once_each_with_who_and_when(store: Store) -> None:
    from bot.core.types import FeedbackValue

    run = await new_run(store)
    other = await new_run(store, "2.0")
    assert await store.record_feedback(
        click="U2:1.1:9.1", run_id=run.id, user="U2", value=FeedbackValue.POSITIVE, channel="C1", message_ts="1.1"
    )
    assert not await store.record_feedback(
        click="U2:1.1:9.1", run_id=run.id, user="U2", value=FeedbackValue.POSITIVE, channel="C1", message_ts="1.1"
    )
    assert await store.record_feedback(
        click="U3:1.1:9.2", run_id=run.id, user="U3", value=FeedbackValue.NEGATIVE, channel="C1", message_ts="1.1"
    )
    assert await store.record_feedback(
        click="U2:2.1:9.3", run_id=other.id, user="U2", value=FeedbackValue.NEGATIVE, channel="C1", message_ts="2.1"
    )
    mine = await store.feedback(run.id)
    assert [(f.user, f.value, f.message_ts) for f in mine] == [
        ("U2", FeedbackValue.POSITIVE, "1.1"),
        ("U3", FeedbackValue.NEGATIVE, "1.1"),
    ]
    assert all(f.at > 0 for f in mine)
    assert len(await store.feedback()) == 3
    assert await store.feedback_counts() == {FeedbackValue.POSITIVE: 1, FeedbackValue.NEGATIVE: 2}


async def test_feedback_counts_once_per_person_per_answer_and_the_latest_click_wins(store: Store) -> None:
    from bot.core.types import FeedbackValue

    run = await new_run(store)
    for click, value in (
        ("U2:1.1:9.1", FeedbackValue.POSITIVE),
        ("U2:1.1:9.2", FeedbackValue.POSITIVE),
        ("U2:1.1:9.3", FeedbackValue.NEGATIVE),
    ):
        assert await store.record_feedback(
            click=click, run_id=run.id, user="U2", value=value, channel="C1", message_ts="1.1"
        )
    assert not await store.record_feedback(
        click="U2:1.1:9.3",
        run_id=run.id,
        user="U2",  # a redelivery
        value=FeedbackValue.NEGATIVE,
        channel="C1",
        message_ts="1.1",
    )
    assert await store.record_feedback(
        click="U2:1.5:9.4", run_id=run.id, user="U2", value=FeedbackValue.POSITIVE, channel="C1", message_ts="1.5"
    )  # another answer of the run: its own say
    assert [(f.value, f.message_ts) for f in await store.feedback(run.id)] == [
        (FeedbackValue.NEGATIVE, "1.1"),
        (FeedbackValue.POSITIVE, "1.5"),
    ]
    assert await store.feedback_counts() == {FeedbackValue.POSITIVE: 1, FeedbackValue.NEGATIVE: 1}


async def test_the_askers_a_request_names_are_kept_on_its_run_and_ask_for_its_calls(store: Store) -> None:
    accepted = await store.accept_mention(
        "Ev1",
        channel="C1",
        thread_ts="1.0",
        requester="U1",
        task=TASK,
        prompt=TASK,
        model="m",
        mention_ts="1.1",
        on_reply=supersede_by_reply,
        askers=["U7", "U1"],
    )
    assert accepted is not None and accepted.run.askers == ("U1", "U7")
    again = await store.accept_mention(
        "Ev2",
        channel="C1",
        thread_ts="1.0",
        requester="U2",
        task=TASK,
        prompt=TASK,
        model="m",
        mention_ts="1.2",
        on_reply=supersede_by_reply,
        askers=["U8"],
    )
    assert again is not None and again.run.id == accepted.run.id and again.run.askers == ("U1", "U7", "U8")
    approval = await ask(store, accepted.run)
    assert set(await requesters(store, approval.id)) >= {"U1", "U7", "U8"}


# --- alerts (docs/alerts.md) -------------------------------------------------------------------------------------
async def test_alert_groups_dedupe_repeats_storm_and_resolve_the_same_on_both_backends(store: Store) -> None:
    from bot.store import AlertOutcome

    async def accept(key: str, fps: list[str], status: str = "firing", limit: int = 2):
        return await store.accept_alert_group(
            f"am:{key}",
            source="webhook",
            sender="Alertmanager",
            channel="C1",
            status=status,
            fingerprints=fps,
            summary=f"{key} {SECRET}",
            update=f"update {SECRET}",
            limit=limit,
            reopen_after=3600,
            root_text=lambda previous: "root",
        )

    new, twin = await asyncio.gather(accept("g1", ["a"]), accept("g1", ["a"]))  # two deliveries racing
    assert sorted(x.outcome.value for x in (new, twin)) == ["repeat", "started"]
    run = await store.open_alert_run("am:g1", thread_ts="9.0", task="t", prompt="p", model="m")
    assert run is not None and run.requester == "" and run.thread_ts == "9.0"
    assert await store.open_alert_run("am:g1", thread_ts="9.1", task="t", prompt="p", model="m") is None
    first, again = await accept("g1", ["a"]), await accept("g1", ["a"])
    assert (first.outcome, first.note, again.outcome, again.note) == (
        AlertOutcome.REPEAT,
        True,
        AlertOutcome.REPEAT,
        False,
    )
    changed = await accept("g1", ["a", "b"])
    assert changed.outcome is AlertOutcome.CHANGED and changed.run is not None and changed.run.id == run.id
    resolved = await accept("g1", [], status="resolved")
    assert resolved.outcome is AlertOutcome.RESOLVED
    assert [i.user for i in await store.queued_inbox(run.id)] == ["alert:Alertmanager", "alert:Alertmanager"]
    assert (await accept("g2", ["c"])).outcome is AlertOutcome.STARTED
    assert (await accept("g3", ["d"])).outcome is AlertOutcome.DROPPED  # the third in ten minutes, limit 2
    assert (await accept("g4", [], status="resolved")).outcome is AlertOutcome.IGNORED
    slack = await store.accept_slack_alert(
        "Ev1", channel="C2", ts="5.0", task="t", prompt="p", model="m", summary="s", limit=1
    )
    assert slack.outcome is AlertOutcome.STARTED and slack.run is not None and slack.run.requester == ""
    assert (
        await store.accept_slack_alert(
            "Ev2", channel="C2", ts="5.0", task="t", prompt="p", model="m", summary="s", limit=1
        )
    ).outcome is AlertOutcome.DUPLICATE
    one, two = await asyncio.gather(
        store.claim_storm_thread("C1", text="storm"),  # two replicas in one storm
        store.claim_storm_thread("C1", text="storm"),
    )
    assert one.key == two.key and one.root_item == two.root_item is not None
    assert one.thread_ts is None  # until its root is posted
    roots = [i for i in await store.outbox_items() if i.key.startswith("alert_storm:")]
    assert [i.id for i in roots] == [one.root_item]
    assert SECRET not in json.dumps([g.summary for g in await store.alert_groups()])


async def test_an_alert_notifications_delivery_id_is_claimed_once_the_same_on_both_backends(store: Store) -> None:
    """A source whose notifications carry their own id (a pager's event id): a second delivery of one id is a
    DUPLICATE that changes nothing, whatever it says; another id of the same alert is an update."""
    from bot.store import AlertOutcome

    async def accept(delivery: str, status: str) -> Any:
        return await store.accept_alert_group(
            "pd:P1",
            source="pager",
            sender="PagerDuty",
            delivery=delivery,
            channel="C1",
            status=status,
            fingerprints=["triggered"] if status == "firing" else [],
            summary="s",
            update="u",
            limit=5,
            reopen_after=3600,
            root_text=lambda previous: "root",
            payload={},
        )

    assert (await accept("e1", "firing")).outcome is AlertOutcome.STARTED
    assert (await accept("e1", "resolved")).outcome is AlertOutcome.DUPLICATE
    assert (await store.alert_group("pd:P1")).status == "firing"  # type: ignore[union-attr]
    assert await store.stuck_alert_groups(store.now() + 1, source="pager") == ["pd:P1"]
    assert (await accept("e2", "resolved")).outcome is AlertOutcome.RESOLVED


async def test_an_opening_alert_group_is_claimed_by_compare_and_set_the_same_on_both_backends(store: Store) -> None:
    """A group stored `opening` with its payload (redacted) and root post; one claimant at a time, a lapsed
    claim is taken over, and only the claimant may enqueue a new root."""
    from bot.store import AlertOutcome

    body = {"alerts": [{"labels": {"alertname": "X"}, "annotations": {"summary": f"token {SECRET}"}}]}
    new = await store.accept_alert_group(
        "am:g9",
        source="webhook",
        sender="Alertmanager",
        channel="C9",
        status="firing",
        fingerprints=["z"],
        summary="s",
        update="u",
        limit=5,
        reopen_after=3600,
        root_text=lambda previous: "root",
        payload=body,
        owner="A",
        claim_seconds=60,
    )
    assert new.outcome is AlertOutcome.STARTED and new.group is not None and new.group.owner == "A"
    assert SECRET not in new.group.payload and json.loads(new.group.payload)["alerts"][0]["labels"]["alertname"] == "X"
    root = await store.outbox_item(new.group.root_item or "")
    assert root is not None and root.thread_ts is None and root.text == "root"
    now = store.now()
    assert await store.stuck_alert_groups(now) == []  # A's claim is live
    racing = await asyncio.gather(*(store.claim_alert_group("am:g9", who, now=now, until=now + 5) for who in "BC"))
    assert racing == [None, None]
    assert await store.retry_alert_root("am:g9", "B", text="root") is None  # not B's to open
    later = now + 61
    assert await store.stuck_alert_groups(later) == ["am:g9"]
    taken = await asyncio.gather(*(store.claim_alert_group("am:g9", who, now=later, until=later + 5) for who in "BC"))
    assert [t is not None for t in taken].count(True) == 1
    holder = "B" if taken[0] is not None else "C"
    assert await store.retry_alert_root("am:g9", holder, text="root") == root.id  # still pending: no second root
    run = await store.open_alert_run("am:g9", thread_ts="3.0", task="t", prompt="p", model="m")
    assert run is not None and (await store.alert_group("am:g9")).state == "started"  # type: ignore[union-attr]
    assert await store.claim_alert_group("am:g9", holder, now=later, until=later + 5) is None


async def test_an_alert_group_firing_again_once_its_occurrence_is_over_opens_anew_the_same_on_both_backends(
    store: Store,
) -> None:
    """Over: its run ended, and it resolved or was not sent for `reopen_after`. The ended occurrence is kept as
    `am:<key>#<n>`; the new one links it, gets a root of its own, and points the old thread at the new once."""
    from bot.store import AlertOutcome

    async def accept(key: str, fps: list[str], status: str = "firing", *, limit: int = 5, reopen_after: float = 60):
        return await store.accept_alert_group(
            f"am:{key}",
            source="webhook",
            sender="Alertmanager",
            channel="C1",
            status=status,
            fingerprints=fps,
            summary=key,
            update="u",
            limit=limit,
            reopen_after=reopen_after,
            root_text=lambda previous: f"root after {previous.key if previous else None}",
            payload={"alerts": [{"labels": {"alertname": "X"}}]},
        )

    async def opened(key: str, ts: str) -> Run:
        run = await store.open_alert_run(
            f"am:{key}", thread_ts=ts, task="t", prompt="p", model="m", pointer=f"see {ts}"
        )
        assert run is not None
        return run

    assert (await accept("g1", ["a"])).outcome is AlertOutcome.STARTED
    first = await opened("g1", "1.0")
    await accept("g1", [], status="resolved")
    assert (await accept("g1", ["a"])).outcome is AlertOutcome.CHANGED  # its run goes on: told, not reopened
    await store.finish_run(first.id, stop_reason=StopReason.COMPLETED, stop_detail="")
    assert (await accept("g1", ["a"], reopen_after=3600)).outcome is AlertOutcome.REPEAT  # not resolved, recent
    assert (await accept("g1", ["a"], reopen_after=0)).outcome is AlertOutcome.REOPENED  # silent for too long
    again = await asyncio.gather(accept("g1", ["a"], reopen_after=0), accept("g1", ["a"], reopen_after=0))
    assert [a.outcome for a in again] == [AlertOutcome.REPEAT] * 2  # opening: the new occurrence goes on
    group, old = await store.alert_group("am:g1"), await store.alert_group("am:g1#1")
    assert group is not None and old is not None
    assert (group.state, group.occurrence, group.previous, group.run_id) == ("opening", 2, "am:g1#1", None)
    assert (old.state, old.thread_ts, old.run_id) == ("started", "1.0", first.id)
    root = await store.outbox_item(group.root_item or "")
    assert root is not None and root.text == "root after am:g1#1" and root.thread_ts is None
    second = await opened("g1", "2.0")
    assert await store.open_alert_run("am:g1", thread_ts="2.1", task="t", prompt="p", model="m", pointer="x") is None
    pointers = [i for i in await store.outbox_items() if i.key.startswith("alert_pointer:")]
    assert [(i.thread_ts, i.text) for i in pointers] == [("1.0", "see 2.0")]
    assert (await store.alert_group_of_run(first.id)).key == "am:g1#1"  # type: ignore[union-attr]
    await store.finish_run(second.id, stop_reason=StopReason.COMPLETED, stop_detail="")
    await accept("g1", [], status="resolved")
    dropped = await accept("g1", ["a"], limit=2)  # over the storm limit: a new occurrence, dropped
    assert dropped.outcome is AlertOutcome.DROPPED and dropped.previous is not None
    assert dropped.previous.key == "am:g1#2" and dropped.group is not None and dropped.group.occurrence == 3
    assert [g.key for g in await store.alert_groups("C1")] == ["am:g1#1", "am:g1#2", "am:g1"]


async def test_failed_tool_calls_counts_errors_per_run(store: Store) -> None:
    a, b, c = await new_run(store, "1.0"), await new_run(store, "2.0"), await new_run(store, "3.0")
    for run, use, is_error in ((a, "t1", True), (a, "t2", True), (a, "t3", False), (b, "t4", False)):
        await store.save_tool_result(
            run.id, tool_use_id=use, tool="check_disk", args={}, content="out", is_error=is_error, confirmed_by=None
        )
    assert await store.failed_tool_calls([a.id, b.id, c.id]) == {a.id: 2}
    assert await store.failed_tool_calls([]) == {}
