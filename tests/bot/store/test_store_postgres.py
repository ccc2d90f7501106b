"""What only Postgres promises: several replicas (separate Stores, each its own connection and writer thread) on
one database get the guarantees one process gets from SQLite's single writer; the schema migrates once, and a
newer one is refused; a lost connection is reconnected; LISTEN/NOTIFY wakes the other replicas; the URL's
password stays out of everything printed.

Races are real: the stores' writer threads run their transactions at the same moment (asyncio.gather hands
each store its call at once), a few rounds each. Waits are on observable state with generous timeouts.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from structlog.testing import capture_logs

from bot.core.types import ApprovalState, DecisionCause, OutboxKind, OutboxPost, Run
from bot.run.approvals import add_approver, supersede_by_reply
from bot.store import Ledger, Store, StoreUnavailable
from bot.store.backends import WAKE_OUTBOX, WAKE_RUNS, PgListener
from bot.store.migrations import KNOWN as CORE_KNOWN
from bot.store.migrations import PG_MIGRATIONS, PG_RECORD, SchemaTooNew, SchemaVersion
from tests.support import pgserver
from tools.reaches import TABLES as REACH_TABLES

ROOT = Path(__file__).resolve().parents[3]
TASK = "web-03 is paging: disk full on /var, please fix"
NEVER = 2e9
PASSWORD = "pw-PLANTED-s3cr3t-9f8e7d"
REPLICAS = 4
ROUNDS = 5
# Every migration the app's store runs: the core's and the reaches'.
KNOWN = sorted([*CORE_KNOWN, *(m.name for t in REACH_TABLES for m in t.migrations)])
TABLES = {
    "runs",
    "messages",
    "tool_results",
    "steps",
    "events",
    "inbox",
    "approvals",
    "outbox",
    "feedback",
    "alert_groups",
    "streams",
    "incidents",
    "incident_facets",
    "incident_terms",
    "summaries",
    "change_events",
    "configmap_keys",
    "pagerduty_runs",
    "pagerduty_outbox",
    "opsloop_migrations",
}


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[list[Store]]:
    """REPLICAS stores on one database (opened one after the other: the first one migrates it)."""
    opened = [await Store(pg_url).open() for _ in range(REPLICAS)]
    yield opened
    for s in opened:
        await s.close()


def with_password(url: str) -> str:
    """`url` carrying PASSWORD (the test server trusts local connections: libpq never even sends it)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}:{quote(PASSWORD)}@{parts.hostname or ''}"))


def query(url: str, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    """One statement on a connection of its own (not an `opsloop` one): the operator's psql."""
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def kill_opsloop_connections(url: str, extra: str = "") -> list[int]:
    """Terminate this database's `opsloop` sessions (a failover, an idle-timeout, an admin) and wait till gone."""
    rows = query(
        url,
        "SELECT pid, pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
        "WHERE application_name = 'opsloop' AND datname = current_database() "
        f"AND pid <> pg_backend_pid() {extra}",
    )
    return [r[0] for r in rows if r[1]]


def listener_pids(url: str) -> list[int]:
    return [
        r[0]
        for r in query(
            url,
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'opsloop' AND query ILIKE 'LISTEN%'",
        )
    ]


async def at_once(stores: list[Store], call: Callable[[int, Store], Any]) -> list[Any]:
    """`call(i, store)` on every store at the same moment."""
    return list(await asyncio.gather(*(call(i, s) for i, s in enumerate(stores))))


async def new_run(store: Store, thread: str) -> Run:
    return await store.create_run(channel="C1", thread_ts=thread, requester="U1", task=TASK, model="m")


def in_threads(n: int, fn: Callable[[], Any]) -> list[Any]:
    """`fn()` on n threads released together: each returns its result or the exception it raised."""
    barrier = threading.Barrier(n)
    out: list[Any] = [None] * n

    def work(i: int) -> None:
        barrier.wait()
        try:
            out[i] = fn()
        except Exception as e:  # handed back to the test
            out[i] = e

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def open_and_close(url: str) -> SchemaVersion:
    """A replica starting: open the store (migrating it), on this thread, and close it."""
    ledger = Ledger(url, REACH_TABLES)
    try:
        return ledger.schema
    finally:
        ledger.close()


# --------------------------------------------------------------------------------------
# replicas racing
# --------------------------------------------------------------------------------------


async def test_replicas_racing_to_claim_a_run_let_exactly_one_win(stores: list[Store]) -> None:
    async def race(round_: int) -> None:
        run = await new_run(stores[0], f"{round_}.0")
        now = stores[0].now()
        won = await at_once(stores, lambda i, s: s.claim_run(run.id, f"p{i}", until=now + 10, now=now))
        assert won.count(True) == 1, won
        assert (await stores[0].get_run(run.id)).owner == f"p{won.index(True)}"

    for round_ in range(ROUNDS):
        await race(round_)


async def test_replicas_racing_to_claim_the_outbox_never_hold_one_item_twice(stores: list[Store]) -> None:
    threads = [f"{t}.0" for t in range(12)]
    posts = [
        OutboxPost(key=f"{t}:{n}", channel="C1", thread_ts=t, text=f"{t} part {n}") for t in threads for n in range(2)
    ]
    ids = await stores[0].enqueue_posts(posts)
    firsts, seconds = set(ids[0::2]), set(ids[1::2])
    now = stores[0].now()

    async def drain(i: int, store: Store) -> list[str]:
        held = []
        while (item := await store.claim_outbox(f"s{i}", now=now, until=now + 60)) is not None:
            held.append(item.id)
        return held

    held = await at_once(stores, drain)
    claimed = [item for h in held for item in h]
    assert sorted(claimed) == sorted(firsts)  # each thread's first post, each held by one sender
    for i, h in enumerate(held):
        for item in h:
            assert await stores[i].outbox_sent(item, f"s{i}", ts="1.1", now=now)
    held = await at_once(stores, drain)
    claimed = [item for h in held for item in h]
    assert sorted(claimed) == sorted(seconds)


async def test_two_of_two_approvals_clicked_at_once_on_two_replicas_are_both_recorded(stores: list[Store]) -> None:
    a_store, b_store = stores[:2]
    for round_ in range(ROUNDS):
        run = await new_run(a_store, f"{round_}.0")
        a = await a_store.create_approval(
            run_id=run.id,
            tool_use_id="toolu_1",
            tool="clean_logs",
            category="destructive",
            args={},
            requester="U1",
            expires_at=NEVER,
            required=2,
        )
        added = await asyncio.gather(
            add_approver(a_store, a.id, "U2", decided_name="bob", now=1.0),
            add_approver(b_store, a.id, "U3", decided_name="carol", now=1.0),
        )
        assert added == [True, True]
        done = await b_store.get_approval(a.id)
        assert (done.state, done.cause, sorted(done.approvals)) == (
            ApprovalState.APPROVED,
            DecisionCause.CLICK,
            ["U2", "U3"],
        )
        assert done.decided_by == done.approvals[-1]  # approved by the second click, once


async def test_one_approver_clicking_on_two_replicas_at_once_counts_once(stores: list[Store]) -> None:
    async def race(round_: int) -> None:
        run = await new_run(stores[0], f"{round_}.0")
        a = await stores[0].create_approval(
            run_id=run.id,
            tool_use_id="toolu_1",
            tool="clean_logs",
            category="destructive",
            args={},
            requester="U1",
            expires_at=NEVER,
            required=2,
        )
        added = await at_once(stores, lambda i, s: add_approver(s, a.id, "U2", decided_name="bob", now=1.0))
        assert added.count(True) == 1
        got = await stores[0].get_approval(a.id)
        assert (got.state, got.approvals) == (ApprovalState.PENDING, ("U2",))

    for round_ in range(ROUNDS):
        await race(round_)


async def test_an_approve_and_a_deny_at_once_decide_once(stores: list[Store]) -> None:
    states = [ApprovalState.APPROVED, ApprovalState.DENIED] * (REPLICAS // 2)

    async def race(round_: int) -> None:
        run = await new_run(stores[0], f"{round_}.0")
        a = await stores[0].create_approval(
            run_id=run.id,
            tool_use_id="toolu_1",
            tool="restart_service",
            category="mutating",
            args={},
            requester="U1",
            expires_at=NEVER,
        )
        decided = await at_once(
            stores,
            lambda i, s: s.decide_approval(
                a.id, state=states[i], cause=DecisionCause.CLICK, decided_at=1.0, decided_by=f"U{i}"
            ),
        )
        assert decided.count(True) == 1
        got = await stores[0].get_approval(a.id)
        assert (got.state, got.decided_by) == (states[decided.index(True)], f"U{decided.index(True)}")

    for round_ in range(ROUNDS):
        await race(round_)


async def test_a_reply_and_an_approve_click_at_once_on_two_replicas_never_both_win(stores: list[Store]) -> None:
    a_store, b_store = stores[:2]

    async def race(round_: int) -> None:
        thread = f"{round_}.0"
        accepted = await a_store.accept_mention(
            f"Ev{round_}",
            channel="C1",
            thread_ts=thread,
            requester="U1",
            task=TASK,
            prompt=TASK,
            model="m",
            mention_ts=f"{round_}.1",
            on_reply=supersede_by_reply,
        )
        assert accepted is not None
        a = await a_store.create_approval(
            run_id=accepted.run.id,
            tool_use_id="toolu_1",
            tool="restart_service",
            category="mutating",
            args={},
            requester="U1",
            expires_at=NEVER,
        )
        clicked, replied = await asyncio.gather(
            add_approver(a_store, a.id, "U2", decided_name="bob", now=1.0),
            b_store.accept_reply(
                f"Ev{round_}.r",
                channel="C1",
                thread_ts=thread,
                ts=f"{round_}.2",
                user="U3",
                text="wait",
                on_reply=supersede_by_reply,
            ),
        )
        assert replied is not None
        got = await a_store.get_approval(a.id)
        if clicked:  # the click went first: the reply is queued for the model, the approval stands
            assert (got.state, replied.superseded) == (ApprovalState.APPROVED, ())
        else:  # the reply went first: it declined the approval, the click found nothing pending
            assert (got.state, replied.superseded) == (ApprovalState.SUPERSEDED, (a.id,))

    for round_ in range(ROUNDS):
        await race(round_)


async def test_one_event_delivered_to_every_replica_at_once_opens_one_run(stores: list[Store]) -> None:
    async def race(round_: int) -> None:
        thread = f"{round_}.0"
        accepted = await at_once(
            stores,
            lambda i, s: s.accept_mention(
                f"Ev{round_}",
                channel="C1",
                thread_ts=thread,
                requester="U1",
                task=TASK,
                prompt=TASK,
                model="m",
                mention_ts=f"{round_}.1",
                on_reply=supersede_by_reply,
            ),
        )
        assert sum(a is not None for a in accepted) == 1, accepted
        assert len([r for r in await stores[0].list_runs() if r.thread_ts == thread]) == 1

    for round_ in range(ROUNDS):
        await race(round_)


async def test_two_mentions_in_one_thread_at_once_make_one_run_and_one_redirect(stores: list[Store]) -> None:
    async def race(round_: int) -> None:
        thread = f"{round_}.0"
        accepted = await at_once(
            stores,
            lambda i, s: s.accept_mention(
                f"Ev{round_}.{i}",
                channel="C1",
                thread_ts=thread,
                requester=f"U{i}",
                task=f"task {i}",
                prompt=f"task {i}",
                model="m",
                mention_ts=f"{round_}.{i + 1}",
                on_reply=supersede_by_reply,
            ),
        )
        assert all(a is not None for a in accepted)
        assert [a.created for a in accepted].count(True) == 1
        assert len({a.run.id for a in accepted}) == 1  # the others redirect the one run
        assert all(a.redirect is not None for a in accepted if not a.created)
        runs = [r for r in await stores[0].list_runs() if r.thread_ts == thread]
        assert len(runs) == 1 and runs[0].active
        assert len(await stores[0].inbox(runs[0].id)) == REPLICAS - 1

    for round_ in range(ROUNDS):
        await race(round_)


async def test_the_started_marker_claimed_at_once_is_won_once(stores: list[Store]) -> None:
    run = await new_run(stores[0], "1.0")

    async def race(round_: int) -> None:
        won = await at_once(
            stores,
            lambda i, s: s.save_tool_result(
                run.id,
                tool_use_id=f"toolu_{round_}",
                tool="restart_service",
                args={},
                content=None,
                is_error=False,
                confirmed_by=f"U{i}",
            ),
        )
        assert won.count(True) == 1, won
        assert (await stores[0].tool_results(run.id))[f"toolu_{round_}"].confirmed_by == f"U{won.index(True)}"

    for round_ in range(ROUNDS):
        await race(round_)


async def test_the_same_key_enqueued_on_every_replica_at_once_is_one_item(stores: list[Store]) -> None:
    async def race(round_: int) -> None:
        ids = await at_once(
            stores,
            lambda i, s: s.enqueue(
                kind=OutboxKind.POST, key=f"card:{round_}", channel="C1", thread_ts="1.0", text=f"from {i}"
            ),
        )
        assert len(set(ids)) == 1

    for round_ in range(ROUNDS):
        await race(round_)
    assert len(await stores[0].outbox_items()) == ROUNDS


# --------------------------------------------------------------------------------------
# migrations
# --------------------------------------------------------------------------------------


def test_a_fresh_database_is_migrated_to_the_latest_version(pg_url: str) -> None:
    assert open_and_close(pg_url) == SchemaVersion(current=len(KNOWN), known=len(KNOWN))
    tables = {r[0] for r in query(pg_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert tables == TABLES
    assert [r[0] for r in query(pg_url, "SELECT name FROM opsloop_migrations ORDER BY name")] == KNOWN


def test_m014_titles_the_alert_runs_stored_before_it_from_their_payloads(pg_url: str) -> None:
    from tests.bot.store.test_store import ALERT_PAYLOAD

    with psycopg.connect(pg_url, autocommit=True) as conn:  # a database an opsloop before m014 migrated
        conn.execute(PG_RECORD)
        for name in CORE_KNOWN[: CORE_KNOWN.index("m014_run_titles")]:
            step = PG_MIGRATIONS[name]
            assert isinstance(step, str)
            conn.execute(step)
            conn.execute("INSERT INTO opsloop_migrations (name, applied_at) VALUES (%s, 1.0)", [name])
        for id_, task in (("r1", 'Alertmanager group {}:{alertname="DiskFull"} is firing'), ("r2", "disk full")):
            conn.execute(
                "INSERT INTO runs (id, channel, thread_ts, requester, task, status, model, created_at, "
                "updated_at) VALUES (%s, 'C1', '1.0', '', %s, 'finished', 'm', 1.0, 1.0)",
                [id_, task],
            )
        conn.execute(
            "INSERT INTO alert_groups (key, source, channel, state, run_id, payload) "
            "VALUES ('am:g1', 'webhook', 'C1', 'started', 'r1', %s)",
            [json.dumps(ALERT_PAYLOAD)],
        )
    assert open_and_close(pg_url) == SchemaVersion(current=len(KNOWN), known=len(KNOWN))
    assert query(pg_url, "SELECT id, title FROM runs ORDER BY id") == [("r1", "DiskFull web-03 (firing)"), ("r2", None)]


def test_opening_a_migrated_database_again_changes_nothing(pg_url: str) -> None:
    ledger = Ledger(pg_url, REACH_TABLES)
    run = ledger.create_run(channel="C1", thread_ts="1.0", requester="U1", task=TASK, model="m")
    ledger.close()
    before = query(pg_url, "SELECT name, applied_at FROM opsloop_migrations ORDER BY name")
    again = Ledger(pg_url, REACH_TABLES)
    assert again.schema == SchemaVersion(current=len(KNOWN), known=len(KNOWN))
    assert again.get_run(run.id) == run
    again.close()
    assert query(pg_url, "SELECT name, applied_at FROM opsloop_migrations ORDER BY name") == before


def test_replicas_starting_together_all_migrate_one_schema(pg_url: str) -> None:
    versions = in_threads(REPLICAS, lambda: open_and_close(pg_url))
    assert versions == [SchemaVersion(current=len(KNOWN), known=len(KNOWN))] * REPLICAS
    assert query(pg_url, "SELECT count(*) FROM opsloop_migrations") == [(len(KNOWN),)]
    tables = [r[0] for r in query(pg_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
    assert sorted(tables) == sorted(TABLES)


def test_processes_starting_together_all_migrate_one_schema(pg_url: str) -> None:
    code = (
        "import sys; from bot.store import Ledger; from tools.reaches import TABLES; "
        "Ledger(sys.argv[1], TABLES).close()"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, pg_url], cwd=ROOT, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    assert query(pg_url, "SELECT count(*) FROM opsloop_migrations") == [(len(KNOWN),)]


async def test_a_database_a_newer_opsloop_migrated_is_refused(pg_url: str) -> None:
    open_and_close(pg_url)
    query(pg_url, "INSERT INTO opsloop_migrations (name, applied_at) VALUES ('m999_from_the_future', 1.0)")
    with pytest.raises(SchemaTooNew, match="m999_from_the_future"):
        Ledger(pg_url)
    store = Store(pg_url)
    with pytest.raises(SchemaTooNew):
        await store.open()
    await store.close()
    assert query(pg_url, "SELECT count(*) FROM opsloop_migrations") == [(len(KNOWN) + 1,)]  # nothing touched


def opsloop_check(db: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`opsloop check` with OPSLOOP_DB and nothing else: no tokens, so it reaches no Slack and no model."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "OPSLOOP_DB": db}
    return subprocess.run(
        [sys.executable, "-m", "bot.app.cli", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_opsloop_check_names_a_newer_schema_and_fails(pg_url: str, tmp_path: Path) -> None:
    open_and_close(pg_url)
    query(pg_url, "INSERT INTO opsloop_migrations (name, applied_at) VALUES ('m999_from_the_future', 1.0)")
    done = opsloop_check(with_password(pg_url), tmp_path)
    assert done.returncode != 0
    [line] = [line for line in done.stderr.splitlines() if "store:" in line]
    assert "m999_from_the_future" in line and "newer opsloop" in line
    assert PASSWORD not in done.stdout + done.stderr


def test_opsloop_check_prints_the_current_schema_version(pg_url: str, tmp_path: Path) -> None:
    open_and_close(pg_url)
    done = opsloop_check(with_password(pg_url), tmp_path)
    [line] = [line for line in done.stdout.splitlines() if line.startswith("store:")]
    assert line.startswith("store: ok, postgresql://postgres@/") and urlsplit(pg_url).path in line
    assert f"schema version {len(KNOWN)} of {len(KNOWN)} (current)" in line
    assert PASSWORD not in done.stdout + done.stderr
    assert "store:" not in done.stderr  # not a problem: the failure is only the missing tokens


# --------------------------------------------------------------------------------------
# connections lost
# --------------------------------------------------------------------------------------


async def test_a_killed_connection_is_reconnected_and_nothing_committed_is_lost(pg_url: str) -> None:
    store = await Store(pg_url).open()
    try:
        run = await new_run(store, "1.0")
        message = {"role": "user", "content": [{"type": "text", "text": TASK}]}
        await store.put_message(run.id, 0, message)
        killed = kill_opsloop_connections(pg_url)
        assert killed  # the store's connection was there, and is gone

        assert await store.get_run(run.id) == run  # the next call reconnects by itself
        await store.put_message(run.id, 1, {"role": "assistant", "content": [{"type": "text", "text": "ok"}]})
        assert [m["role"] for m in await store.history(run.id)] == ["user", "assistant"]
        pids = [
            r[0]
            for r in query(
                pg_url,
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'opsloop' AND datname = current_database()",
            )
        ]
        assert pids and not set(pids) & set(killed)
    finally:
        await store.close()


async def test_a_store_whose_server_is_unreachable_is_unavailable_after_retrying(tmp_path: Path) -> None:
    nowhere = tmp_path / "no-server-here"
    nowhere.mkdir()
    url = f"postgresql://postgres:{quote(PASSWORD)}@/opsloop?host={quote(str(nowhere), safe='')}"
    store = Store(url, retry_seconds=0.5)
    with capture_logs() as logs, pytest.raises(StoreUnavailable) as raised:
        await store.open()
    await store.close()
    assert len([e for e in logs if e["event"] == "store.open_retry"]) >= 2  # it tried, with backoff, first
    assert str(nowhere) in str(raised.value)  # says where it looked
    assert PASSWORD not in f"{raised.value!r} {raised.value} {logs} {store.where}"


async def test_a_store_whose_server_went_away_is_unavailable_after_retrying() -> None:
    server = pgserver.PgServer().start()
    try:
        url = with_password(pgserver.new_database(server.url))
        store = await Store(url, retry_seconds=0.5).open()
        run = await new_run(store, "1.0")
        server.stop()  # the whole server: a restart or a failover in progress
        with capture_logs() as logs, pytest.raises(StoreUnavailable) as raised:
            await store.get_run(run.id)
        retries = [e for e in logs if e["event"] == "store.retry"]
        assert len(retries) >= 2  # retried with backoff before giving up
        assert not raised.value.disk_full
        assert PASSWORD not in f"{raised.value!r} {raised.value} {logs} {store.where}"
        await store.close()
    finally:
        server.stop()


async def test_the_urls_password_stays_out_of_where_and_the_logs(pg_url: str) -> None:
    url = with_password(pg_url)
    assert PASSWORD in url
    woken = asyncio.Event()
    with capture_logs() as logs:
        store = await Store(url).open()
        listener = store.listen(lambda _payload: woken.set())
        assert listener is not None
        await asyncio.wait_for(listener.connected.wait(), 30)
        run = await new_run(store, "1.0")
        kill_opsloop_connections(pg_url)  # a lost connection and a lost listener: both are logged
        assert await store.get_run(run.id) == run
        woken.clear()
        await asyncio.wait_for(woken.wait(), 30)  # the listener came back
        await store.close()
    assert PASSWORD not in store.where and store.where.startswith("postgresql://postgres@/")
    assert any(e["event"] == "store.listen_lost" for e in logs)
    assert PASSWORD not in str(logs)
    query_password = f"{pg_url}&password={PASSWORD}"
    assert PASSWORD not in Store(query_password).where


# --------------------------------------------------------------------------------------
# LISTEN / NOTIFY
# --------------------------------------------------------------------------------------


class Heard:
    """What one replica's listener hears, in order."""

    def __init__(self) -> None:
        self.payloads: asyncio.Queue[str] = asyncio.Queue()

    def __call__(self, payload: str) -> None:
        self.payloads.put_nowait(payload)

    async def next(self) -> str:
        return await asyncio.wait_for(self.payloads.get(), 30)

    async def connected(self, listener: PgListener | None) -> None:
        """Once listening: the wake-up every (re)connect makes, for anything missed meanwhile."""
        assert listener is not None
        await asyncio.wait_for(listener.connected.wait(), 30)
        assert [await self.next(), await self.next()] == [WAKE_RUNS, WAKE_OUTBOX]


async def test_a_replica_hears_the_news_another_replica_commits(stores: list[Store]) -> None:
    a, b = stores[:2]
    accepted = await b.accept_mention(
        "Ev1",
        channel="C1",
        thread_ts="1.0",
        requester="U1",
        task=TASK,
        prompt=TASK,
        model="m",
        mention_ts="1.1",
        on_reply=supersede_by_reply,
    )
    assert accepted is not None
    run = accepted.run
    approval = await b.create_approval(
        run_id=run.id,
        tool_use_id="toolu_1",
        tool="restart_service",
        category="mutating",
        args={},
        requester="U1",
        expires_at=NEVER,
    )
    heard = Heard()
    await heard.connected(a.listen(heard))

    assert await b.decide_approval(
        approval.id, state=ApprovalState.APPROVED, cause=DecisionCause.CLICK, decided_at=1.0, decided_by="U2"
    )
    assert await heard.next() == WAKE_RUNS
    await b.enqueue(kind=OutboxKind.POST, key="card:1", channel="C1", thread_ts="1.0", text="approved")
    assert await heard.next() == WAKE_OUTBOX
    assert await b.accept_reply(
        "Ev2", channel="C1", thread_ts="1.0", ts="1.2", user="U2", text="go on", on_reply=supersede_by_reply
    )
    assert await heard.next() == WAKE_RUNS
    assert await b.request_stop(run.id, "U3")
    assert await heard.next() == WAKE_RUNS
    assert heard.payloads.empty()


async def test_nothing_is_heard_from_a_rolled_back_transaction(pg_url: str, stores: list[Store]) -> None:
    a, b = stores[:2]
    run = await new_run(b, "1.0")
    heard = Heard()
    await heard.connected(a.listen(heard))

    def enqueue_then_fail() -> None:
        ledger = Ledger(pg_url)  # a replica's writer thread: this one's call fails after its enqueue

        def work(db: Ledger) -> None:
            db.enqueue(kind=OutboxKind.POST, key="doomed", channel="C1", thread_ts="1.0", text="never sent")
            raise RuntimeError("the rest of the transaction failed")

        try:
            with pytest.raises(RuntimeError):
                ledger.call(work)
        finally:
            ledger.close()

    await asyncio.to_thread(enqueue_then_fail)
    assert await b.outbox_by_key("doomed") is None
    assert await b.request_stop(run.id, "U3")  # a marker: NOTIFYs arrive in commit order
    assert await heard.next() == WAKE_RUNS
    assert heard.payloads.empty()


async def test_a_listener_whose_connection_is_killed_reconnects_and_wakes_again(
    stores: list[Store], pg_url: str
) -> None:
    a, b = stores[:2]
    heard = Heard()
    await heard.connected(a.listen(heard))
    [before] = listener_pids(pg_url)

    assert kill_opsloop_connections(pg_url, f"AND pid = {int(before)}") == [before]
    assert [await heard.next(), await heard.next()] == [WAKE_RUNS, WAKE_OUTBOX]  # reconnected: look once
    [after] = listener_pids(pg_url)
    assert after != before
    await b.enqueue(kind=OutboxKind.POST, key="k", channel="C1", thread_ts="1.0", text="t")
    assert await heard.next() == WAKE_OUTBOX  # listening again
