"""A database an older opsloop migrated, from before incident memory and change events kept their own tables
(tests/bot/store/data/v19.*.sql: the core's record holds m015_incidents, m016_change_events and
m018_incident_terms), opens with this code on both backends: nothing runs again, its rows stay as they were, the
reaches' hooks reach them, and its schema is the one a fresh database gets."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bot.core.types import FeedbackValue
from bot.store import Ledger
from bot.store.backends import is_postgres
from tests.support import pgserver
from tools.memory import store as memory
from tools.reaches import TABLES

DATA = Path(__file__).parent / "data"
RECORD = ("_sqlite_migrations", "opsloop_migrations")
NEWER = [
    "m020_configmap_keys",
    "m021_approval_alert_notes",
    "pagerduty_m001_runs_outbox",
]  # newer than the v19 data: these, and only these, run
CORE_NEWER = ["m021_approval_alert_notes"]  # those of them the core's (a store opened without the reaches runs them)
WIDENED = {"approvals"}  # tables a newer migration added a column to (SQLite rewrites their CREATE statement)


def load_old(location: str, *, drop: str = "") -> None:
    """The older opsloop's database at `location`; `drop`: SQL run after, to make it older still."""
    if is_postgres(location):
        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute((DATA / "v19.postgres.sql").read_text().encode())
            if drop:
                conn.execute(drop.encode())
        return
    db = sqlite3.connect(location)
    db.executescript((DATA / "v19.sqlite.sql").read_text() + drop)
    db.close()


def query(location: str, sql: str) -> list[tuple[Any, ...]]:
    if is_postgres(location):
        with psycopg.connect(location, autocommit=True) as conn:
            return [tuple(r) for r in conn.execute(sql.encode()).fetchall()]
    db = sqlite3.connect(location)
    try:
        return [tuple(r) for r in db.execute(sql).fetchall()]
    finally:
        db.close()


def schema(location: str) -> set[tuple[Any, ...]]:
    """Tables, columns, indexes, constraints and triggers, as the database describes them (SQLite's statements with
    their spacing evened out), the migration record left out."""
    if is_postgres(location):
        rows = query(
            location,
            "SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity, "
            "generation_expression FROM information_schema.columns WHERE table_schema = 'public' "
            "UNION ALL SELECT tablename, indexname, indexdef, '', '', '', '' FROM pg_indexes "
            "WHERE schemaname = 'public' "
            "UNION ALL SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid), '', '', '', '' "
            "FROM pg_constraint WHERE connamespace = 'public'::regnamespace",
        )
    else:
        rows = [
            (kind, name, re.sub(r"\s*([(),])\s*", r"\1", re.sub(r"\s+", " ", sql or "")))
            for kind, name, sql in query(location, "SELECT type, name, sql FROM sqlite_master")
        ]
    return {r for r in rows if not any(str(r[0]).startswith(t) or str(r[1]).startswith(t) for t in RECORD)}


def record(location: str) -> list[tuple[str, str]]:
    table = "opsloop_migrations" if is_postgres(location) else "_sqlite_migrations"
    return sorted(query(location, f"SELECT name, applied_at FROM {table}"))


@pytest.fixture
def fresh(db_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A second, new database on the test's backend."""
    if not is_postgres(db_url):
        yield str(tmp_path / "fresh.db")
        return
    url = pgserver.new_database(request.getfixturevalue("pg_server"))
    yield url
    pgserver.drop_database(url)


def test_an_older_database_opens_with_nothing_run_again_and_the_fresh_schema(db_url: str, fresh: str) -> None:
    load_old(db_url)
    before_schema, before_record = schema(db_url), record(db_url)
    incident = query(db_url, "SELECT run_id, kind, feedback, backfilled FROM incidents")
    terms = sorted(query(db_url, "SELECT term, docs FROM incident_terms"))
    ledger = Ledger(db_url, TABLES)
    try:
        assert ledger.schema.ok and ledger.schema.unknown == ()
        after = record(db_url)  # every migration was recognized: none ran again, the newer ones ran once
        assert set(before_record) <= set(after) and [n for n, t in after if (n, t) not in before_record] == NEWER
        assert query(db_url, "SELECT run_id, kind, feedback, backfilled FROM incidents") == incident
        assert sorted(query(db_url, "SELECT term, docs FROM incident_terms")) == terms
        assert [m.incident.run_id for m in memory.search_incidents(ledger, "web-03 disk", channel="C9")] == [
            incident[0][0]
        ]
        run_id = incident[0][0]
        assert ledger.record_feedback(
            click="c2", run_id=run_id, user="U2", value=FeedbackValue.NEGATIVE, channel="C1", message_ts="2.0"
        )
        assert query(db_url, "SELECT feedback FROM incidents") == [("not_helpful",)]  # memory's hook, on the old rows
    finally:
        ledger.close()
    Ledger(fresh, TABLES).close()
    assert schema(fresh) == schema(db_url) >= {r for r in before_schema if not WIDENED & set(map(str, r[:2]))}


def test_an_older_database_without_the_word_counts_gets_only_them(db_url: str) -> None:
    """An opsloop from before m018: memory's m018 runs (counting the stored record's words), nothing else does."""
    load_old(
        db_url,
        drop="DROP TABLE incident_terms; DROP INDEX IF EXISTS idx_incidents_ranked; "
        "DELETE FROM _sqlite_migrations WHERE name = 'm018_incident_terms';"
        if not is_postgres(db_url)
        else "DROP TABLE incident_terms; DELETE FROM opsloop_migrations WHERE name = 'm018_incident_terms';",
    )
    before = record(db_url)
    Ledger(db_url, TABLES).close()
    after = record(db_url)
    assert [name for name, _ in after if (name, _) not in before] == ["m018_incident_terms", *NEWER]
    assert ("disk", 1) in query(db_url, "SELECT term, docs FROM incident_terms")


def test_a_store_opened_without_the_reaches_tables_leaves_them_alone(db_url: str) -> None:
    load_old(db_url)
    before = record(db_url)
    ledger = Ledger(db_url)
    try:
        assert ledger.schema.ok  # the reaches' migrations in the core's record are not "unknown"
    finally:
        ledger.close()
    assert [n for n, t in record(db_url) if (n, t) not in before] == CORE_NEWER
