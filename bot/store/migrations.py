"""The store's schema, for SQLite and Postgres: the core's migrations, then each reach's (`Tables`, declared in the
reach's folder and handed to the store by whoever opens it), in a fixed order: the core's, then the reaches' in the
order they are given. Every migration is written for both backends.

Each set of migrations is recorded under its name: SQLite in sqlite-utils' record (`_sqlite_migrations`, the core's
set is "opsloop"), Postgres in `opsloop_migrations`, applied under an advisory lock so replicas starting together
migrate once. A reach's migration also counts as applied when the core's set records its name: the core ran it
before the reach owned its tables. A store opened without a reach's tables leaves them alone. A database that
has a migration this code doesn't know (in a set it was given) was migrated by a newer opsloop: opening it fails
(`SchemaTooNew`) rather than writing rows an older schema reader would misread.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlite_utils
from sqlite_utils.migrations import Migrations

from bot.core.errors import OpsloopError
from bot.store.migrations_pg import PG_MIGRATIONS as PG_MIGRATIONS  # re-exported: importers keep bot.store.migrations
from bot.store.migrations_sql import (
    ALERT_OCCURRENCES,
    ALERT_PAYLOADS,
    CAUSE_FROM_REASON,
    FEEDBACK_LATEST,
    SUMMARIES,
    alert_titles,
)

# A migration's half for one backend: SQL (SQLite: one statement, or a tuple of them), or a function given the
# backend's connection (a sqlite_utils Database; a psycopg connection) for a step SQL alone can't write.
Step = str | tuple[str, ...] | Callable[[Any], None]


@dataclass(frozen=True)
class Migration:
    name: str  # unique across every set: m001_incidents
    sqlite: Step
    postgres: Step


@dataclass(frozen=True, kw_only=True)
class Tables:
    """What a reach keeps in the store: its migrations for both backends, recorded under its `name`, and what the
    store writes for it inside the store's own transactions, each given the ledger: `on_feedback(ledger, run_id)`
    where a feedback click is stored, `on_kind(ledger, channel, kind)` where a run's drive start notes what Slack
    says its conversation is now (public/private/im/mpim; None: unknown), `on_summary(ledger, run_id, summary)` where
    a run's living summary update is accepted (a `bot.run.summary.Summary`), `on_approved(ledger, run_id, result)`
    where the outcome of a call a person approved is stored (a `bot.core.types.CallResult` with `confirmed_by`)."""

    name: str
    migrations: tuple[Migration, ...]
    on_feedback: Callable[[Any, str], object] | None = None
    on_kind: Callable[[Any, str, str | None], object] | None = None
    on_summary: Callable[[Any, str, Any], object] | None = None
    on_approved: Callable[[Any, str, Any], object] | None = None


sqlite_migrations = Migrations("opsloop")
PG_LOCK = 0x6F70_736C_6F6F_70  # pg_advisory_xact_lock key for migrating ("opsloop")
# The core's own migrations that their reaches own now (incident memory's, what changed's): still in the core's
# record of an older database, neither unknown nor run again.
FORMERLY_CORE = frozenset({"m015_incidents", "m016_change_events", "m018_incident_terms"})


class SchemaTooNew(OpsloopError):
    """The database was migrated by a newer opsloop than this one."""


@dataclass(frozen=True)
class SchemaVersion:
    """How far a database is migrated: `current` of the `known` migrations this code has."""

    current: int
    known: int
    unknown: tuple[str, ...] = ()  # applied by a newer opsloop

    @property
    def ok(self) -> bool:
        return self.current == self.known and not self.unknown


@sqlite_migrations()
def m001_runs(db: sqlite_utils.Database) -> None:
    db.table("runs").create(
        {
            "id": str,
            "channel": str,
            "thread_ts": str,
            "mention_ts": str,
            "requester": str,
            "task": str,
            "status": str,  # running | waiting_approval | finished
            "model": str,
            "stop_reason": str,
            "stop_detail": str,
            "stopped_by": str,
            "output": str,
            "iterations": int,
            "input_tokens": int,
            "output_tokens": int,
            "cache_read_tokens": int,
            "cache_write_tokens": int,
            "cost_usd": float,
            "agent_seconds": float,
            "condensed": int,
            "tools_called": str,  # JSON list
            "status_ts": str,
            "stop_requested_by": str,
            "created_at": float,
            "updated_at": float,
        },
        pk="id",
        defaults={
            "iterations": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "cost_usd": 0.0,
            "agent_seconds": 0.0,
            "condensed": 0,
            "tools_called": "[]",
        },
    )
    db.table("runs").create_index(["channel", "thread_ts"])
    db.table("runs").create_index(["status"])
    db.table("messages").create(
        {"run_id": str, "seq": int, "role": str, "content": str, "created_at": float},
        pk=("run_id", "seq"),
        foreign_keys=[("run_id", "runs", "id")],
    )
    db.table("tool_results").create(
        {
            "run_id": str,
            "tool_use_id": str,
            "tool": str,
            "args": str,
            "content": str,
            "is_error": int,
            "confirmed_by": str,
            "created_at": float,
        },
        pk=("run_id", "tool_use_id"),
    )
    db.table("steps").create({"id": int, "run_id": str, "kind": str, "data": str, "at": float}, pk="id")
    db.table("steps").create_index(["run_id"])
    db.table("events").create({"event_id": str, "received_at": float}, pk="event_id")
    db.table("inbox").create(
        {
            "id": str,
            "run_id": str,
            "channel": str,
            "ts": str,
            "user": str,
            "text": str,
            "state": str,  # queued | consumed | superseding
            "created_at": float,
        },
        pk="id",
    )
    db.table("inbox").create_index(["run_id", "state"])
    db.table("approvals").create(
        {
            "id": str,
            "run_id": str,
            "tool_use_id": str,
            "tool": str,
            "category": str,
            "args": str,
            "args_hash": str,
            "preview": str,
            "preview_hash": str,
            "requester": str,
            "channel": str,
            "thread_ts": str,
            "message_ts": str,
            "state": str,  # pending | approved | denied | expired | superseded
            "required": int,
            "approvals": str,  # JSON list of user ids who approved so far
            "decided_by": str,
            "decided_name": str,
            "reason": str,
            "created_at": float,
            "expires_at": float,
            "decided_at": float,
            "run_tokens": int,
            "run_cost_usd": float,
        },
        pk="id",
        defaults={"required": 1, "approvals": "[]"},
    )
    db.table("approvals").create_index(["run_id", "tool_use_id"])
    db.table("approvals").create_index(["state"])


@sqlite_migrations()
def m002_fixed_prompt(db: sqlite_utils.Database) -> None:
    """A run's system prompt and tool schemas, fixed when it starts: current models bind their
    thinking to them, so a resumed run must send them byte-identical whatever the config says now."""
    runs = db.table("runs")
    runs.add_column("system", str)
    runs.add_column("tools", str)  # JSON list of tool schemas, exactly as sent
    runs.add_column("drop_block", int, not_null_default=0)  # the run needed prefix_mismatch_behavior=drop_block


@sqlite_migrations()
def m003_decision_cause(db: sqlite_utils.Database) -> None:
    """What ended an approval, as a value (it used to hide in `reason`); earlier rows get it from their reason."""
    db.table("approvals").add_column("cause", str)
    db.execute(CAUSE_FROM_REASON)


@sqlite_migrations()
def m004_outbox(db: sqlite_utils.Database) -> None:
    """Slack posts that matter, stored before they are sent and delivered exactly once (see handlers/outbox.py);
    and the index that prunes the events dedupe table."""
    db.table("outbox").create(
        {
            "id": str,
            "key": str,  # idempotency key: enqueueing the same key again is a no-op
            "kind": str,  # post | update
            "run_id": str,
            "channel": str,
            "thread_ts": str,
            "target": str,  # update: the post item whose message it changes
            "approval_id": str,  # post of a card: its ts is recorded on the approval when sent
            "text": str,
            "blocks": str,  # JSON
            "state": str,  # pending | sent | failed | superseded
            "ts": str,
            "attempts": int,
            "unsure": int,  # a post call started and its outcome is unknown
            "plain": int,  # sending the plain-text fallback
            "owner": str,  # the sender holding the claim
            "claimed_until": float,
            "next_at": float,
            "error": str,
            "created_at": float,
            "sent_at": float,
        },
        pk="id",
        not_null={"key", "kind", "channel", "state"},
        defaults={"attempts": 0, "unsure": 0, "plain": 0},
    )
    db.table("outbox").create_index(["key"], unique=True)
    db.table("outbox").create_index(["state", "next_at"])
    db.table("outbox").create_index(["target"])
    db.table("outbox").create_index(["run_id"])
    db.table("events").create_index(["received_at"])


@sqlite_migrations()
def m005_leases(db: sqlite_utils.Database) -> None:
    """One driver per run: the process that holds a run's lease drives it; a lapsed lease is free to take."""
    runs = db.table("runs")
    runs.add_column("owner", str)
    runs.add_column("lease_until", float)


@sqlite_migrations()
def m006_reported(db: sqlite_utils.Database) -> None:
    """A finished run's answer or handoff report is enqueued exactly once; runs finished before are done."""
    db.table("runs").add_column("reported", int)
    db.execute("UPDATE runs SET reported = 1 WHERE status = 'finished'")


@sqlite_migrations()
def m007_feedback(db: sqlite_utils.Database) -> None:
    """Feedback clicks on answers and handoff reports: who, which way, when (one row per click)."""
    db.table("feedback").create(
        {
            "id": str,
            "click": str,
            "run_id": str,
            "user": str,
            "value": str,
            "channel": str,
            "message_ts": str,
            "at": float,
        },
        pk="id",
        not_null={"click", "run_id", "user", "value"},
    )
    db.table("feedback").create_index(["click"], unique=True)
    db.table("feedback").create_index(["run_id"])


@sqlite_migrations()
def m008_alerts(db: sqlite_utils.Database) -> None:
    """Alerts that start runs (docs/alerts.md): one row per alert group (Alertmanager's groupKey, or a Slack alert
    message), what it started, and each channel's alert-storm thread."""
    db.table("alert_groups").create(
        {
            "key": str,  # am:<groupKey> | slack:<channel>:<ts> | storm:<channel>
            "source": str,  # webhook | slack | storm
            "channel": str,
            "thread_ts": str,  # the group's thread (webhook: once its root message is posted)
            "run_id": str,
            "state": str,  # opening | started | dropped | ignored | storm (m009: unopened)
            "status": str,  # firing | resolved
            "fingerprints": str,  # JSON: the sorted fingerprints of the firing alerts
            "summary": str,  # one line naming the alert (the storm thread lists it)
            "repeat_noted": int,  # the thread heard once that a repeat started nothing
            "created_at": float,
            "updated_at": float,
        },
        pk="key",
        not_null={"source", "channel", "state"},
        defaults={"repeat_noted": 0},
    )
    db.table("alert_groups").create_index(["channel", "state", "created_at"])


@sqlite_migrations()
def m009_alert_recovery(db: sqlite_utils.Database) -> None:
    """An Alertmanager group is stored with what opens it (its validated payload, redacted) and the outbox item of
    its root post; `owner`/`claimed_until` is the compare-and-set claim of whoever is opening it, so a group left
    `opening` by a dead process (or a root post Slack refused) is opened exactly once by a recovery pass."""
    groups = db.table("alert_groups")
    groups.add_column("payload", str)
    groups.add_column("root_item", str)
    groups.add_column("attempts", int)
    groups.add_column("owner", str)
    groups.add_column("claimed_until", float)
    db.execute("UPDATE alert_groups SET state = 'unopened' WHERE state = 'opening'")  # no payload to open them by


@sqlite_migrations()
def m010_streams(db: sqlite_utils.Database) -> None:
    """Streamed answers (chat.startStream): each stream's ts and state, stored when it starts, so the answer's
    outbox item finishes that message exactly once, after a restart too; and the run's team (a channel stream
    names its recipient's team)."""
    db.table("streams").create(
        {
            "id": str,
            "run_id": str,
            "step": int,
            "channel": str,
            "thread_ts": str,
            "ts": str,  # NULL between the intent and startStream's answer
            "state": str,  # starting | streaming | interim | finished | abandoned
            "start_text": str,  # the (redacted) markdown startStream sent: how a lost ts is found again
            "sent": str,  # the (redacted) markdown Slack shows so far
            "final": str,  # the whole (redacted) answer once the step ended as the answer
            "broken": int,  # Slack refused an append (lifetime, error): finished by chat.update
            "created_at": float,
            "updated_at": float,
        },
        pk="id",
        not_null={"run_id", "channel", "state"},
        defaults={"broken": 0},
    )
    db.table("streams").create_index(["run_id"])
    db.table("runs").add_column("team_id", str)


@sqlite_migrations()
def m011_run_settings(db: sqlite_utils.Database) -> None:
    """What a run ran under, fixed when it is first driven: limits, effort, max_tokens, thinking display, the
    model it started on and each of its tools' category (JSON). `opsloop export` records it; older runs have
    NULL and their record says the limits came from the config at export."""
    db.table("runs").add_column("settings", str)


@sqlite_migrations()
def m012_askers(db: sqlite_utils.Database) -> None:
    """Everyone whose words a run read when it started, beside its requester (JSON: the author of the message the
    shortcut ran on, the authors of the earlier thread messages a mid-thread mention read): askers of its calls."""
    db.table("runs").add_column("askers", str)


@sqlite_migrations()
def m013_feedback_once(db: sqlite_utils.Database) -> None:
    """Feedback counts once per person per answer message: the latest click is kept (an older one is dropped),
    and a new click replaces the person's earlier one. The click id stays, to know a redelivery."""
    db.execute(FEEDBACK_LATEST)
    db.execute("DROP INDEX IF EXISTS idx_feedback_click")
    db.table("feedback").create_index(["click"])
    db.table("feedback").create_index(["channel", "message_ts", "user"], unique=True)


@sqlite_migrations()
def m014_run_titles(db: sqlite_utils.Database) -> None:
    """A run's title, what App Home and `opsloop runs` name it by: an alert run's "DiskFull web-03 (firing)" rather
    than its task's raw groupKey (NULL: the task is the name). Alert runs stored before are titled from their
    group's stored payload."""
    db.table("runs").add_column("title", str)
    rows = db.execute(ALERT_PAYLOADS).fetchall()
    db.conn.executemany("UPDATE runs SET title = ? WHERE id = ?", alert_titles(rows))


@sqlite_migrations()
def m017_summaries(db: sqlite_utils.Database) -> None:
    """The living summary (docs/context.md): every accepted update_summary, with its run step and time (JSON)."""
    db.execute(SUMMARIES)
    db.execute("CREATE INDEX idx_summaries_run_id ON summaries (run_id)")


@sqlite_migrations()
def m019_alert_occurrences(db: sqlite_utils.Database) -> None:
    """An Alertmanager group that fires again once its occurrence is over opens a new thread: each occurrence is
    a row (the ended one kept as `am:<groupKey>#<occurrence>`, `previous` links it from the next), and
    `seen_at`, when Alertmanager last sent the group, is what the re-open window counts from."""
    groups = db.table("alert_groups")
    groups.add_column("occurrence", int)
    groups.add_column("previous", str)
    groups.add_column("seen_at", float)
    db.execute(ALERT_OCCURRENCES)


@sqlite_migrations()
def m021_approval_alert_notes(db: sqlite_utils.Database) -> None:
    """What the alert that started a run said while one of its cards waited (it resolved), shown on the card."""
    db.table("approvals").add_column("alert_note", str)


CORE = Tables(
    name=sqlite_migrations.name,
    migrations=tuple(Migration(m.name, m.fn, PG_MIGRATIONS[m.name]) for m in sqlite_migrations._migrations),
)
KNOWN = [m.name for m in CORE.migrations]
assert KNOWN == list(PG_MIGRATIONS), "every migration is written for both backends, in the same order"


def _plan(applied: set[tuple[str, str]], tables: Sequence[Tables]) -> tuple[SchemaVersion, list[tuple[str, Migration]]]:
    """How far the database is (`applied`: its record's (set, name) pairs), and what is left to run, in order."""
    core = {n for s, n in applied if s == CORE.name}
    current = known = 0
    unknown: list[str] = []
    pending: list[tuple[str, Migration]] = []
    for t in (CORE, *tables):
        mine = {n for s, n in applied if s == t.name}
        done = mine if t is CORE else mine | core
        names = {m.name for m in t.migrations}
        unknown += sorted(mine - names - (FORMERLY_CORE if t is CORE else set()))
        known += len(names)
        current += len(names & done)
        pending += [(t.name, m) for m in t.migrations if m.name not in done]
    return SchemaVersion(current=current, known=known, unknown=tuple(unknown)), pending


def _refuse_newer(version: SchemaVersion) -> None:
    if version.unknown:
        raise SchemaTooNew(
            f"the database's schema has migrations this opsloop doesn't know ({', '.join(version.unknown)}): "
            "a newer opsloop migrated it; run that version (or newer) here too"
        )


def _run(step: Step, execute: Callable[[str], Any], conn: Any) -> None:
    if callable(step):
        step(conn)
    else:
        for statement in (step,) if isinstance(step, str) else step:
            execute(statement)


def _sqlite_applied(db: sqlite_utils.Database) -> set[tuple[str, str]]:
    table = Migrations.migrations_table
    if not db[table].exists():
        return set()
    return {(s, n) for s, n in db.execute(f"SELECT migration_set, name FROM {table}").fetchall()}


def sqlite_version(db: sqlite_utils.Database, tables: Sequence[Tables] = ()) -> SchemaVersion:
    return _plan(_sqlite_applied(db), tables)[0]


def migrate_sqlite(db: sqlite_utils.Database, tables: Sequence[Tables] = ()) -> SchemaVersion:
    """Bring a SQLite database up to date (refusing one a newer opsloop migrated)."""
    version, pending = _plan(_sqlite_applied(db), tables)
    _refuse_newer(version)
    sqlite_migrations.ensure_migrations_table(db)
    for set_name, m in pending:
        with db.atomic():
            _run(m.sqlite, db.execute, db)
            db.table(Migrations.migrations_table).insert(
                {"migration_set": set_name, "name": m.name, "applied_at": str(datetime.datetime.now(datetime.UTC))}
            )
    return sqlite_version(db, tables)


PG_RECORD = """CREATE TABLE IF NOT EXISTS opsloop_migrations (name TEXT PRIMARY KEY, applied_at DOUBLE PRECISION);
    ALTER TABLE opsloop_migrations ADD COLUMN IF NOT EXISTS migration_set TEXT NOT NULL DEFAULT 'opsloop'"""


def pg_version(conn: Any, tables: Sequence[Tables] = ()) -> SchemaVersion:
    """Read-only: how far a Postgres database is migrated (a psycopg connection)."""
    return _plan(_pg_applied(conn), tables)[0]


def _pg_applied(conn: Any) -> set[tuple[str, str]]:
    from psycopg.rows import dict_row

    cur = conn.cursor(row_factory=dict_row)
    if not cur.execute("SELECT to_regclass('opsloop_migrations') IS NOT NULL AS e").fetchone()["e"]:
        return set()
    # A record from before the reaches kept their own has no set column: all of it is the core's.
    return {(r.get("migration_set", CORE.name), r["name"]) for r in cur.execute("SELECT * FROM opsloop_migrations")}


def migrate_pg(conn: Any, tables: Sequence[Tables] = ()) -> SchemaVersion:
    """Bring a Postgres database up to date in one transaction, under an advisory lock: replicas starting at
    once wait for the first one's migration and then find nothing left to do."""
    # The lock is taken before the transaction begins: a serializable transaction's snapshot dates from its first
    # statement, so one that waited on the lock inside would not see the tables the first replica just made.
    conn.execute("SELECT pg_advisory_lock(%s)", [PG_LOCK])
    try:
        with conn.transaction():
            conn.execute(PG_RECORD)
            version, pending = _plan(_pg_applied(conn), tables)
            _refuse_newer(version)
            for set_name, m in pending:
                _run(m.postgres, conn.execute, conn)
                conn.execute(
                    "INSERT INTO opsloop_migrations (name, applied_at, migration_set) VALUES (%s, %s, %s)",
                    [m.name, time.time(), set_name],
                )
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", [PG_LOCK])
    return pg_version(conn, tables)


def sql_calls(conn: Any) -> tuple[Callable[[str, list[Any]], list[dict[str, Any]]], Callable[[str, list[Any]], int]]:
    """`select` and `execute` in the `?` SQL both backends share, on a migration's connection (a sqlite_utils
    Database or a psycopg connection): for a reach's migration that reads and writes rows."""
    pg = not isinstance(conn, sqlite_utils.Database)

    def run(sql: str, params: list[Any]) -> Any:
        return conn.execute(sql.replace("%", "%%").replace("?", "%s") if pg else sql, params)

    def select(sql: str, params: list[Any]) -> list[dict[str, Any]]:
        cur = run(sql, params)
        cols = [c[0] for c in cur.description]
        return [r if isinstance(r, dict) else dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

    def execute(sql: str, params: list[Any]) -> int:
        return int(run(sql, params).rowcount)

    return select, execute
