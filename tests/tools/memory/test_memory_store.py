"""Incident memory's store contract (docs/context.md, Incident memory), once per backend (`db_url`: a SQLite file, then
a fresh Postgres database), through the public async Store: recording an ended run, full-text search with its ranking,
visibility, feedback, forget, the retention sweep and the migration's backfill of older runs."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import psycopg
import pytest
import sqlite_utils

from bot.core.types import ApprovalState, DecisionCause, FeedbackValue, Run, StopReason
from bot.store import Ledger, Store
from bot.store.backends import is_postgres
from tests.bot.store.test_store_conformance import stored_text
from tools.memory import store as memory
from tools.memory.incidents import IncidentChange, IncidentFeedback, SearchPlan, Targets, search_plans
from tools.reaches import TABLES

SECRET = "sk-ant-api03-PLANTEDsecret0value0123456789"
DAY = 86400.0


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    s = await Store(db_url, tables=TABLES, retry_seconds=5).open()
    yield s
    await s.close()


async def ended(
    store: Store,
    task: str,
    *,
    channel: str = "C1",
    thread: str | None = None,
    output: str | None = "done",
    host: str | None = None,
    change: str | None = None,
    by: tuple[str, str] = ("U0CAROL", "carol"),
    reason: StopReason = StopReason.COMPLETED,
) -> Run:
    """A run that called a tool on `host`, had `change` approved by `by`, and ended with `output`."""
    run = await store.create_run(
        channel=channel, thread_ts=thread or f"{time.monotonic_ns()}.1", requester="U1", task=task, model="m"
    )
    if host is not None:
        await store.save_tool_result(
            run.id,
            tool_use_id="toolu_look",
            tool="check_disk",
            args={"host": host},
            content="98% used",
            is_error=False,
            confirmed_by=None,
        )
    if change is not None:
        approval = await store.create_approval(
            run_id=run.id,
            tool_use_id="toolu_fix",
            tool=change,
            category="mutating",
            args={"host": host or "", "path": "/var/log"},
            requester="U1",
            expires_at=2e9,
        )
        await store.decide_approval(
            approval.id,
            state=ApprovalState.APPROVED,
            cause=DecisionCause.CLICK,
            decided_at=store.now(),
            decided_by=by[0],
            decided_name=by[1],
        )
    await store.finish_run(run.id, stop_reason=reason, stop_detail="", output=output)
    return run


async def remember(store: Store, task: str, *, kind: str | None = "public", **kw: object) -> Run:
    run = await ended(store, task, **kw)  # type: ignore[arg-type]
    await memory.record_incident(store, run.id, kind=kind)
    return run


async def found(store: Store, query: str, *, channel: str = "C1", **kw: object) -> list[str]:
    return [m.incident.run_id for m in await memory.search_incidents(store, query, channel=channel, **kw)]  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the record


async def test_an_ended_run_is_recorded_with_its_changes_targets_and_answer(store: Store) -> None:
    run = await ended(
        store,
        "web-03 is paging: disk full on /var",
        channel="C1",
        thread="7.1",
        host="web-03",
        change="clean_logs",
        output="Cleaned the rotated nginx logs; /var is at 41%.",
    )
    incident = await memory.record_incident(
        store, run.id, kind="public", permalink="https://slack.example/p7", targets=Targets(services=("nginx",))
    )
    assert (incident.title, incident.task, incident.channel, incident.kind, incident.thread_ts) == (
        "web-03 is paging: disk full on /var",
        "web-03 is paging: disk full on /var",
        "C1",
        "public",
        "7.1",
    )
    assert (incident.stop_reason, incident.answer, incident.permalink, incident.feedback) == (
        "completed",
        "Cleaned the rotated nginx logs; /var is at 41%.",
        "https://slack.example/p7",
        IncidentFeedback.NONE,
    )
    assert incident.targets == Targets(hosts=("web-03",), services=("nginx",))
    assert incident.changes == (
        IncidentChange(tool="clean_logs", args="host=web-03, path=/var/log", confirmed_by="U0CAROL", approver="carol"),
    )
    assert incident.started_at is not None and incident.ended_at >= incident.started_at
    assert await memory.incident(store, run.id) == incident


async def test_a_handoff_is_recorded_with_what_the_model_last_said(store: Store) -> None:
    run = await store.create_run(
        channel="C1",
        thread_ts="8.1",
        requester="U1",
        task="api 500s",
        model="m",
        history=[{"role": "user", "content": [{"type": "text", "text": "api 500s"}]}],
    )
    await store.put_message(
        run.id,
        1,
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "The pool is exhausted since the 14:08 deploy.", "signature": "s"},
                {"type": "tool_use", "id": "toolu_1", "name": "http_get", "input": {}},
            ],
        },
    )
    await store.finish_run(run.id, stop_reason=StopReason.ITERATION_LIMIT, stop_detail="20 steps")
    incident = await memory.record_incident(store, run.id, kind="public")
    assert (incident.stop_reason, incident.answer) == (
        "iteration_limit",
        "The pool is exhausted since the 14:08 deploy.",
    )


async def test_an_alert_run_is_titled_and_filtered_by_its_labels(store: Store) -> None:
    run = await ended(store, "Alert DiskFull firing")
    labels = {"alertname": "DiskFull", "instance": "web-07:9100", "severity": "page"}
    incident = await memory.record_incident(store, run.id, kind="public", title="DiskFull web-07", labels=labels)
    assert (incident.title, incident.labels) == ("DiskFull web-07", labels)
    assert await found(store, "disk", alertname="DiskFull") == [run.id]
    assert await found(store, "disk", host="web-07") == [run.id]
    assert await found(store, "disk", alertname="diskfull") == []  # exact


async def test_recording_again_replaces_the_record(store: Store) -> None:
    run = await ended(store, "queue backlog on worker-2")
    await memory.record_incident(store, run.id, kind="public", answer="first")
    await memory.record_incident(store, run.id, kind="public", answer="restarted the consumer")
    assert (await memory.incident(store, run.id)).answer == "restarted the consumer"  # type: ignore[union-attr]
    assert await memory.incident_count(store) == 1
    assert await found(store, "consumer") == [run.id]
    assert await found(store, "first") == []


async def test_secrets_planted_in_task_answer_and_args_reach_no_record(store: Store, db_url: str) -> None:
    run = await store.create_run(channel="C1", thread_ts="9.1", requester="U1", task=f"key {SECRET} leaked", model="m")
    approval = await store.create_approval(
        run_id=run.id,
        tool_use_id="t",
        tool="rotate_key",
        category="mutating",
        args={"token": SECRET, "host": "vault-1"},
        requester="U1",
        expires_at=2e9,
    )
    await store.decide_approval(
        approval.id,
        state=ApprovalState.APPROVED,
        cause=DecisionCause.CLICK,
        decided_at=store.now(),
        decided_by="U2",
        decided_name="dana",
    )
    await store.finish_run(run.id, stop_reason=StopReason.COMPLETED, stop_detail="")
    incident = await memory.record_incident(
        store,
        run.id,
        kind="public",
        answer=f"rotated {SECRET}",
        labels={"note": SECRET},
        title=f"leak {SECRET}",
        permalink=f"https://x/?t={SECRET}",
    )
    assert SECRET not in repr(incident)
    assert SECRET not in stored_text(db_url)
    assert "[REDACTED]" in incident.answer


async def test_only_an_ended_run_is_remembered_and_a_bad_kind_is_refused(store: Store) -> None:
    run = await store.create_run(channel="C1", thread_ts="1.1", requester="U1", task="still going", model="m")
    with pytest.raises(ValueError, match="has not ended"):
        await memory.record_incident(store, run.id, kind="public")
    await store.finish_run(run.id, stop_reason=StopReason.COMPLETED, stop_detail="", output="ok")
    with pytest.raises(ValueError, match="conversation kind must be one of public, private, im, mpim"):
        await memory.record_incident(store, run.id, kind="channel")
    with pytest.raises(KeyError):
        await memory.record_incident(store, "run_nope", kind="public")
    assert await memory.incident_count(store) == 0


async def test_the_record_is_written_in_the_run_ends_transaction(store: Store) -> None:
    run = await store.create_run(channel="C1", thread_ts="2.1", requester="U1", task="redis evictions", model="m")

    def end(db: Ledger) -> None:  # as a Ledger method that ends a run composes its writes
        with db.sql.atomic():
            db.finish_run(run.id, stop_reason=StopReason.COMPLETED, stop_detail="", output="raised maxmemory")
            memory.record_incident(db, run.id, kind="public")
            raise RuntimeError("the end fails after recording")

    with pytest.raises(RuntimeError):
        await store.atomically(end)
    assert (await store.get_run(run.id)).stop_reason is None
    assert await memory.incident(store, run.id) is None

    def end_ok(db: Ledger) -> None:
        with db.sql.atomic():
            db.finish_run(run.id, stop_reason=StopReason.COMPLETED, stop_detail="", output="raised maxmemory")
            memory.record_incident(db, run.id, kind="public")

    await store.atomically(end_ok)
    assert await found(store, "redis maxmemory") == [run.id]


# --------------------------------------------------------------------------- search


async def test_the_querys_words_are_alternatives_ranked_by_how_many_match(store: Store) -> None:
    both = await remember(store, "web-03 disk full on /var", host="web-03")
    disk = await remember(store, "db-1 disk latency")
    other = await remember(store, "checkout-api p99 latency")
    assert await found(store, "disk full again on web-03") == [both.id, disk.id]
    assert set(await found(store, "latency")) == {disk.id, other.id}


async def test_a_deterministic_corpus_ranks_the_same_on_both_backends(store: Store) -> None:
    """Title words outrank target words, which outrank the answer's; more matched words rank higher."""
    in_title = await remember(store, "nginx 502 on edge", output="restarted it")
    in_answer = await remember(store, "edge errors", output="nginx had crashed")
    two_words = await remember(store, "nginx 502 and upstream timeout", output="raised timeout")
    await remember(store, "unrelated redis alert", output="nothing")
    assert await found(store, "nginx") == [in_title.id, two_words.id, in_answer.id]
    assert await found(store, "nginx timeout") == [two_words.id, in_title.id, in_answer.id]


@pytest.mark.parametrize(
    "query",
    [
        "-",
        ":",
        "*",
        "^",
        '"',
        "NEAR",
        "&",
        "|",
        "!",
        "'",
        'disk" OR (full',
        "NEAR(disk full)",
        "disk:* & !full | 'x'",
        "a-b:c^d*",
        "\x00",
        "\\",
        "()",
    ],
)
async def test_raw_user_text_never_raises(store: Store, query: str) -> None:
    run = await remember(store, "disk full near web-03")
    result = await found(store, query)
    assert result in ([], [run.id])


async def test_syntax_in_a_query_is_searched_as_words(store: Store) -> None:
    run = await remember(store, "disk full near web-03")
    assert await found(store, 'disk:* NEAR("web-03")') == [run.id]


async def test_an_empty_query_finds_nothing(store: Store) -> None:
    await remember(store, "disk full")
    assert await found(store, "") == []
    assert await found(store, "  -- ?? ") == []
    assert await found(store, "the and of") == []  # stopwords only


async def test_the_limit_defaults_to_five_caps_at_twenty_and_refuses_nonsense(store: Store) -> None:
    for i in range(22):
        await remember(store, f"disk full {i}")
    assert len(await found(store, "disk")) == 5
    assert len(await found(store, "disk", limit=50)) == 20
    with pytest.raises(ValueError, match="limit must be a whole number from 1 to 20"):
        await found(store, "disk", limit=0)


async def test_filters_match_targets_exactly(store: Store) -> None:
    web3 = await remember(store, "disk full", host="web-03")
    web30 = await remember(store, "disk full", host="web-030")
    assert await found(store, "disk", host="web-03") == [web3.id]
    assert await found(store, "disk", host="web-030") == [web30.id]
    assert await found(store, "disk", service="nginx") == []


async def test_diacritics_and_case_do_not_matter(store: Store) -> None:
    run = await remember(store, "Café-Service DOWN")
    assert await found(store, "cafe service down") == [run.id]


# --------------------------------------------------------------------------- visibility


async def test_a_private_record_is_offered_only_in_its_own_channel(store: Store) -> None:
    secret_a = await remember(store, "payroll db disk full", channel="CPRIVA", kind="private")
    secret_b = await remember(store, "payroll db disk full again", channel="CPRIVB", kind="private")
    dm = await remember(store, "payroll db disk", channel="D0DM", kind="im")
    group = await remember(store, "payroll db disk", channel="G0GROUP", kind="mpim")
    public = await remember(store, "payroll db disk", channel="CPUBLIC", kind="public")
    seen = {
        c: set(await found(store, "payroll disk", channel=c, limit=20))
        for c in ("CPRIVA", "CPRIVB", "D0DM", "G0GROUP", "CPUBLIC", "CELSEWHERE")
    }
    assert seen == {
        "CPRIVA": {secret_a.id, public.id},
        "CPRIVB": {secret_b.id, public.id},
        "D0DM": {dm.id, public.id},
        "G0GROUP": {group.id, public.id},
        "CPUBLIC": {public.id},
        "CELSEWHERE": {public.id},
    }  # CELSEWHERE sees neither private record, nor the DMs


async def test_an_unknown_kind_is_private(store: Store) -> None:
    run = await remember(store, "vpn flapping", channel="C9", kind=None)
    assert (await memory.incident(store, run.id)).kind == "private"  # type: ignore[union-attr]
    assert await found(store, "vpn", channel="C8") == []
    assert await found(store, "vpn", channel="C9") == [run.id]


async def test_a_learned_kind_applies_to_the_channels_earlier_records(store: Store) -> None:
    old = await remember(store, "vpn flapping", channel="C9", kind=None)
    new = await remember(store, "vpn down", channel="C9", kind="public")
    assert set(await found(store, "vpn", channel="C8")) == {old.id, new.id}


# --------------------------------------------------------------------------- feedback, forget, sweep


async def test_not_helpful_records_come_last_and_say_so(store: Store) -> None:
    best = await remember(store, "disk full on web-03 /var", host="web-03")
    worse = await remember(store, "disk full")
    await store.record_feedback(
        click="k1", run_id=best.id, user="U2", value=FeedbackValue.NEGATIVE, channel="C1", message_ts="1.2"
    )
    assert await memory.note_incident_feedback(store, best.id) is True
    matches = await memory.search_incidents(store, "disk full web-03", channel="C1")
    assert [(m.incident.run_id, m.not_helpful) for m in matches] == [(worse.id, False), (best.id, True)]
    assert matches[1].incident.feedback == IncidentFeedback.NOT_HELPFUL
    await store.record_feedback(
        click="k2", run_id=best.id, user="U3", value=FeedbackValue.POSITIVE, channel="C1", message_ts="1.2"
    )
    await memory.note_incident_feedback(store, best.id)
    assert await found(store, "disk full web-03") == [best.id, worse.id]
    assert await memory.note_incident_feedback(store, "run_nope") is False


async def test_feedback_given_before_the_record_is_carried_in(store: Store) -> None:
    run = await ended(store, "dns timeouts")
    await store.record_feedback(
        click="k1", run_id=run.id, user="U2", value=FeedbackValue.POSITIVE, channel="C1", message_ts="1.2"
    )
    assert (await memory.record_incident(store, run.id, kind="public")).feedback == IncidentFeedback.HELPFUL


async def test_forget_takes_a_run_out_of_memory(store: Store) -> None:
    run = await remember(store, "disk full", host="web-03")
    keep = await remember(store, "disk full too")
    assert await memory.forget(store, run.id) is True
    assert await memory.incident(store, run.id) is None
    assert await found(store, "disk") == [keep.id]
    assert await found(store, "disk", host="web-03") == []
    assert await memory.forget(store, run.id) is False


async def test_the_sweep_drops_records_past_retention_in_bounded_batches(store: Store) -> None:
    runs = [await remember(store, f"disk full {i}") for i in range(5)]
    now = store.now()
    assert await memory.sweep_incidents(store, 0, now=now + 1000 * DAY) == 0  # 0 keeps forever
    assert await memory.sweep_incidents(store, 30, now=now) == 0
    assert await memory.sweep_incidents(store, 30, now=now + 31 * DAY, batch=2) == 2
    assert await memory.sweep_incidents(store, 30, now=now + 31 * DAY, batch=2) == 2
    assert await memory.sweep_incidents(store, 30, now=now + 31 * DAY, batch=2) == 1
    assert await memory.sweep_incidents(store, 30, now=now + 31 * DAY, batch=2) == 0
    assert await memory.incident_count(store) == 0
    assert await found(store, "disk") == []
    assert len(runs) == 5


async def test_two_replicas_sweeping_at_once_delete_each_record_once(db_url: str) -> None:
    a, b = (
        await Store(db_url, tables=TABLES, retry_seconds=5).open(),
        await Store(db_url, tables=TABLES, retry_seconds=5).open(),
    )
    try:
        for i in range(6):
            await remember(a, f"disk full {i}")
        later = a.now() + 400 * DAY
        import asyncio

        swept = await asyncio.gather(*(memory.sweep_incidents(s, 365, now=later, batch=2) for s in (a, b, a, b, a, b)))
        assert sum(swept) == 6
        assert await memory.incident_count(b) == 0
    finally:
        await a.close()
        await b.close()


# --------------------------------------------------------------------------- the migration's backfill


def _migrate_to_before_incidents(location: str) -> None:
    """The core's tables without memory's: what an opsloop before memory left (a store opened without them)."""
    Ledger(location).close()


def _old_rows(location: str) -> None:
    """What an opsloop before memory left: a finished run with an approved change and feedback, one still going."""
    rows = [
        (
            "INSERT INTO runs (id, channel, thread_ts, task, status, stop_reason, output, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ["run_old", "CPUB", "5.1", f"web-03 disk full {SECRET}", "finished", "completed", None, 100.0, 160.0],
        ),
        (
            "INSERT INTO runs (id, channel, thread_ts, task, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",  # noqa: E501
            ["run_going", "CPUB", "6.1", "web-04 disk full", "running", 200.0, 200.0],
        ),
        (
            "INSERT INTO messages (run_id, seq, role, content, created_at) VALUES (?, ?, ?, ?, ?)",
            ["run_old", 1, "assistant", json.dumps([{"type": "text", "text": f"Cleaned logs. {SECRET}"}]), 150.0],
        ),
        (
            "INSERT INTO tool_results (run_id, tool_use_id, tool, args, content, is_error, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            ["run_old", "t1", "check_disk", '{"host": "web-03"}', "98%", 0, 120.0],
        ),
        (
            "INSERT INTO approvals (id, run_id, tool_use_id, tool, args, state, decided_by, decided_name, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ["apr_1", "run_old", "t2", "clean_logs", '{"host": "web-03"}', "approved", "U0CAROL", "carol", 130.0],
        ),
        (
            'INSERT INTO feedback (id, click, run_id, "user", value, at) VALUES (?, ?, ?, ?, ?, ?)',
            ["fb_1", "c1", "run_old", "U2", "negative", 170.0],
        ),
    ]
    if is_postgres(location):
        with psycopg.connect(location, autocommit=True) as conn:
            for statement, params in rows:
                conn.execute(statement.replace("?", "%s"), params)
        return
    db = sqlite_utils.Database(location)
    for statement, params in rows:
        db.execute(statement, params)
    db.conn.commit()
    db.close()


async def test_the_migration_backfills_finished_runs_as_private(db_url: str) -> None:
    _migrate_to_before_incidents(db_url)
    _old_rows(db_url)
    store = await Store(db_url, tables=TABLES, retry_seconds=5).open()
    try:
        incident = await memory.incident(store, "run_old")
        assert incident is not None
        assert (incident.kind, incident.backfilled, incident.channel, incident.thread_ts, incident.stop_reason) == (
            "private",
            True,
            "CPUB",
            "5.1",
            "completed",
        )
        assert (incident.started_at, incident.ended_at, incident.feedback) == (
            100.0,
            160.0,
            IncidentFeedback.NOT_HELPFUL,
        )
        assert incident.answer == "Cleaned logs. [REDACTED]"
        assert incident.targets == Targets(hosts=("web-03",))
        assert incident.changes == (
            IncidentChange(tool="clean_logs", args="host=web-03", confirmed_by="U0CAROL", approver="carol"),
        )
        assert await memory.incident(store, "run_going") is None
        assert await found(store, "web-03 disk", channel="CPUB") == ["run_old"]
        assert await found(store, "web-03 disk", channel="COTHER") == []  # fail closed
        assert SECRET not in repr(incident)
    finally:
        await store.close()
    assert stored_counts(db_url) == recounted(db_url)  # m018 counted the backfilled record's words


# --------------------------------------------------------------------------- a large memory: word counts, plans


def _rows(location: str, sql: str) -> list[tuple[object, ...]]:
    if is_postgres(location):
        with psycopg.connect(location, autocommit=True) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    db = sqlite_utils.Database(location)
    try:
        return [tuple(r) for r in db.execute(sql).fetchall()]
    finally:
        db.close()


def stored_counts(location: str) -> dict[str, int]:
    return {str(t): int(str(n)) for t, n in _rows(location, "SELECT term, docs FROM incident_terms")}


def recounted(location: str) -> dict[str, int]:
    """incident_terms as it should be: every stored record's words counted afresh."""
    counts: dict[str, int] = {}
    for title, targets, body in _rows(location, "SELECT search_title, search_targets, search_body FROM incidents"):
        for term in memory.record_terms({"search_title": title, "search_targets": targets, "search_body": body}):
            counts[term] = counts.get(term, 0) + 1
    return counts


async def test_word_counts_follow_every_write_replace_forget_and_sweep(store: Store, db_url: str) -> None:
    a = await remember(store, "web-03 disk full on /var", host="web-03", output="cleaned logs on web-03")
    b = await remember(store, "db-1 disk latency", output="raised iops")
    await remember(store, "checkout-api p99 latency")
    assert stored_counts(db_url) == recounted(db_url)
    assert stored_counts(db_url)[""] == 3 and stored_counts(db_url)["disk"] == 2
    await memory.record_incident(store, a.id, kind="public", answer="rotated nginx logs instead")  # replaced, recounted
    assert stored_counts(db_url) == recounted(db_url)
    assert "cleaned" not in stored_counts(db_url) and stored_counts(db_url)["nginx"] == 1
    assert await memory.forget(store, b.id)
    assert stored_counts(db_url) == recounted(db_url) and "iops" not in stored_counts(db_url)
    assert await memory.sweep_incidents(store, 1, now=store.now() + 2 * DAY) == 2
    assert stored_counts(db_url) == {}
    if not is_postgres(db_url):  # the words counted are the words FTS5 indexed, one record each
        await remember(store, "Ünïcode DiskFull naïve café-42 web_03 x²", output="ẞtraße ǅ ﬁx İstanbul")
        db = sqlite_utils.Database(db_url)
        try:
            db.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, incidents_fts, 'row')")
            fts = {str(t): int(n) for t, n in db.execute("SELECT term, doc FROM temp.vocab").fetchall()}
        finally:
            db.close()
        assert fts == {t: n for t, n in stored_counts(db_url).items() if t}


async def test_a_large_memory_is_searched_by_its_rare_words_and_ranks_like_the_whole_search(store: Store) -> None:
    """Past focus_from records, the candidates are the records holding a rare word (here: in at most 1% of
    them, or one record), then the common words' records; each is scored exactly as the plain search scores it
    (every query word ranks), on both backends alike."""
    for i in range(40):  # "disk" is common (in every record); "inode" and "iostat" are in one record each
        await remember(store, f"web-{i:02d} disk full", output="cleaned logs")
    rare = await remember(store, "web-40 disk inode exhaustion", output="cleaned logs")
    only_rare = await remember(store, "db iostat alert", output="nothing")
    query = "disk inode iostat"
    plain = await memory.search_incidents(store, query, channel="C1", limit=5, focus_from=10**9)
    focused = await memory.search_incidents(store, query, channel="C1", limit=5, focus_from=0)
    ids = [m.incident.run_id for m in focused]
    assert set(ids[:2]) == {rare.id, only_rare.id} and len(ids) == 5  # the rare words outrank the common one
    assert ids == [m.incident.run_id for m in plain]  # here the rare words' records and then the common word's
    exact = {m.incident.run_id: m.score for m in plain}
    for m in focused:  # a found record's score is the whole search's score for it
        assert m.score == pytest.approx(exact[m.incident.run_id], rel=1e-9)
    # two asked: the rare words' pass found two, so no record of only the common word was ranked at all
    assert set(await found(store, query, limit=2, focus_from=0)) == {rare.id, only_rare.id}


async def test_only_common_words_need_every_one_then_relax_the_commonest_first(store: Store) -> None:
    both = [await remember(store, f"checkout latency {i}", output="scaled up") for i in range(3)]
    for i in range(3):
        await remember(store, f"checkout errors {i}", output="rolled back")
    latency = await remember(store, "search latency", output="reindexed")
    all_words = await found(store, "checkout latency", limit=3, focus_from=0)
    assert set(all_words) == {r.id for r in both}  # every common word: three found, the limit, done
    relaxed = await found(store, "checkout latency", limit=4, focus_from=0)
    assert set(relaxed) == {*(r.id for r in both), latency.id}  # then "latency" alone: the rarer word's records


async def test_a_stray_rare_word_does_not_hide_the_records_of_the_common_ones(store: Store) -> None:
    """ "again" is in one record (rare), which shares nothing else with the query: the rare words' pass found
    as many as asked, but none holding two of the query's words, so every common word's records are ranked
    too, and the one holding them outranks it, as in the plain search."""
    for i in range(4):
        await remember(store, f"checkout latency {i}", output="scaled up")
    for i in range(20):
        await remember(store, f"redis evictions {i}", output="raised maxmemory")
    stray = await remember(store, "unrelated cron job", output="ran again")
    plain = await found(store, "checkout latency again", limit=1, focus_from=10**9)
    focused = await found(store, "checkout latency again", limit=1, focus_from=0)
    assert focused == plain and focused != [stray.id]


def test_search_plans_split_rare_from_common_words_and_end_with_everything() -> None:
    docs = {"web": 20_000, "03": 500, "disk": 8_000, "full": 8_000, "inode": 0}
    tokens = ["web", "03", "disk", "full", "inode"]
    assert search_plans(tokens, docs, 10_000) == [SearchPlan(("web", "03", "disk", "full"))]  # small: every word
    assert search_plans(tokens, docs, 100_000) == [
        SearchPlan(("03",), rest=("disk", "full", "web")),
        SearchPlan(("disk", "full", "web"), every=True, rest=("03",)),
        SearchPlan(("disk", "full"), every=True, rest=("03", "web")),
        SearchPlan(("disk",), rest=("03", "full", "web")),
        SearchPlan(("web", "03", "disk", "full")),
    ]
    assert search_plans(["03"], docs, 100_000) == [SearchPlan(("03",))]
    assert search_plans(["web"], docs, 100_000) == [SearchPlan(("web",))]
    assert search_plans(["inode"], docs, 100_000) == []  # no record holds it: nothing to search
