"""The two databases the store runs on: SQLite (embedded, the default) and Postgres (several replicas).

`bot.store.Ledger` writes its SQL once, with `?` placeholders and the subset both engines share (ON CONFLICT,
RETURNING, IS NOT DISTINCT FROM); a backend runs it. What differs lives here: connecting, placeholders,
transactions and isolation, which errors are worth retrying, wake-ups between processes.

Postgres runs every Ledger call as one SERIALIZABLE transaction, retried whole on a serialization failure: the
outcome is as if the calls of every replica ran one at a time, which is exactly what SQLite's single writer
gives one machine. Replicas wake each other with NOTIFY, sent inside the transaction that made the news (so
it is delivered only if it commits) and heard by `PgListener` (`LISTEN`); polling stays the fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import sqlite_utils
import structlog

from bot.store.migrations import SchemaVersion, Tables, migrate_pg, migrate_sqlite, pg_version, sqlite_version

T = TypeVar("T")
log = structlog.get_logger("opsloop.store")

CHANNEL = "opsloop"  # the NOTIFY channel replicas listen on
WAKE_RUNS = "runs"  # payloads: something for the run schedulers (a decision, a reply, a stop, a released run)
WAKE_OUTBOX = "outbox"  # something for the Slack senders

_SQLITE_TRANSIENT = (
    "database is locked",
    "database is busy",
    "database table is locked",
    "disk i/o error",
    "database or disk is full",
    "disk is full",
)


def is_postgres(location: str) -> bool:
    """A postgresql:// (or postgres://) URL selects Postgres; anything else is a SQLite file path."""
    return location.startswith(("postgresql://", "postgres://"))


def unparsable(location: str) -> bool:
    """A Postgres URL cut short by an unescaped `/`, `?` or `#` in its password: the rest reads as a port or a
    path, and a driver's error about it would quote part of the password."""
    parts = urlsplit(location)
    if "@" in location.partition("://")[2] and "@" not in parts.netloc:
        return True
    try:
        _ = parts.port  # raises on a port that is no number
    except ValueError:
        return True
    return False


def describe(location: str) -> str:
    """The location without its password: safe for logs and `opsloop check`."""
    if not is_postgres(location):
        return location
    parts = urlsplit(location)
    if unparsable(location):
        return f"{parts.scheme}://(the URL, hidden: it does not parse as user@host/database)"
    host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    user = f"{parts.username}@" if parts.username else ""
    query = f"?{parts.query}" if parts.query and "password" not in parts.query.lower() else ""
    return f"{parts.scheme}://{user}{host}{parts.path}{query}"


@dataclass(frozen=True)
class Transient:
    """What a retryable failure was: the store retries it with backoff, then reports StoreUnavailable."""

    disk_full: bool


class SqliteBackend:
    """sqlite-utils on one file in WAL mode; bound to the thread that opened it."""

    name = "sqlite"

    def __init__(self, path: str | Path, tables: Sequence[Tables] = ()) -> None:
        self.location = str(path)
        self.db = sqlite_utils.Database(self.location)
        self._durable = False  # inside `durably`
        if self.location != ":memory:":
            self.db.enable_wal()
            # WAL + NORMAL: no corruption, and a process crash loses nothing; only a power cut can
            # lose the last commits. FULL would fsync every step of every run.
            self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute("PRAGMA busy_timeout = 5000")
        self.db.execute("PRAGMA foreign_keys = ON")
        self.version = migrate_sqlite(self.db, tables)

    def close(self) -> None:
        self.db.close()

    def execute(self, sql: str, params: list[Any]) -> int:
        """One statement; sqlite-utils commits it unless `atomic()` is open. Its rowcount."""
        return int(self.db.execute(sql, params).rowcount)

    def select(self, sql: str, params: list[Any]) -> list[dict[str, Any]]:
        cur = self.db.execute(sql, params)
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """One transaction. Inside one already open (a Ledger call within another, a group's part), part of it, as
        on Postgres: no Ledger call catches an error inside a transaction, so a savepoint of its own would never
        be rolled back to alone, and it cost two statements (a tool step ran four)."""
        if self.db.conn.in_transaction:
            yield
            return
        with self.db.atomic():
            yield

    @contextlib.contextmanager
    def durably(self) -> Iterator[None]:
        """synchronous=FULL for one write that guards a side effect (a started marker, a decision), so a power
        cut can't lose it; every other commit stays NORMAL (a process crash loses nothing under WAL either way).
        Inside a group (`call_group`) the group's commit is already FULL: nothing to change (SQLite refuses to
        change it inside a transaction)."""
        if self._durable:
            yield
            return
        self.db.execute("PRAGMA synchronous = FULL")
        self._durable = True
        try:
            yield
        finally:
            self._durable = False
            self.db.execute("PRAGMA synchronous = NORMAL")

    def call_group(self, parts: Sequence[Callable[[], T]]) -> list[tuple[T | None, Exception | None]]:
        """Several calls queued together (the urgent accepts of a burst) in one transaction and one durable
        commit, one fsync for all: each in its own savepoint, so one that fails rolls back alone and gets its
        own error. Raises when the group as a whole failed (its commit, or an error that ended the transaction):
        then nothing of it was written, and the caller runs each call alone."""
        outcomes: list[tuple[T | None, Exception | None]] = []
        with self.durably(), self.db.atomic():
            for part in parts:
                try:
                    with self.db.atomic():  # a savepoint
                        outcomes.append((part(), None))
                except Exception as e:
                    if not self.db.conn.in_transaction:  # the error took the whole transaction with it
                        raise
                    outcomes.append((None, e))
        return outcomes

    @staticmethod
    def now() -> float:
        return time.time()

    def call(self, fn: Callable[[], T]) -> T:
        """One Ledger call: SQLite's single writer thread already runs them one at a time."""
        return fn()

    def notify(self, payload: str) -> None:
        """Nothing to do: other processes on one SQLite file find the news by polling."""

    def probe_write(self) -> None:
        """Take the write lock and let it go again, writing nothing: raises when the db is not writable."""
        if self.db.conn.in_transaction:  # only on this thread: then the lock is already ours
            return
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("ROLLBACK")

    @staticmethod
    def transient(error: BaseException) -> Transient | None:
        if isinstance(error, sqlite3.OperationalError) and any(m in str(error).lower() for m in _SQLITE_TRANSIENT):
            return Transient(disk_full="full" in str(error).lower())
        return None


@functools.lru_cache(maxsize=512)
def _pg_sql(sql: str) -> str:
    """The Ledger's `?` placeholders as psycopg's `%s` (a literal % doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class PostgresBackend:
    """psycopg 3 on one connection, used from the store's writer thread; reconnects when the connection breaks."""

    name = "postgres"
    serialization_retries = 40

    def __init__(self, url: str, tables: Sequence[Tables] = (), *, connect_timeout: float = 5.0) -> None:
        import psycopg  # imported here: a SQLite-only install never loads libpq

        self._psycopg = psycopg
        self.location = url
        self.connect_timeout = connect_timeout
        self._conn: Any = None
        self._in_call = False
        self.clock_offset = 0.0  # the server's clock minus ours, measured at each connect
        with self._connection() as conn:
            self.version = migrate_pg(conn, tables)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        """The live connection (reconnecting when there is none); a broken one is dropped for the next try."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._drop()
            self._conn = self._connect()
        try:
            yield self._conn
        except self._psycopg.OperationalError:
            if self._conn is not None and (self._conn.broken or self._conn.closed):
                self._drop()
            raise

    def _connect(self) -> Any:
        from psycopg.rows import dict_row

        conn = self._psycopg.connect(
            self.location,
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=max(1, round(self.connect_timeout)),
            application_name="opsloop",
        )
        conn.isolation_level = self._psycopg.IsolationLevel.SERIALIZABLE  # for the transactions `call` opens
        conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        sent = time.time()
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8 AS t").fetchone()
        if row is not None:
            self.clock_offset = float(row["t"]) - (sent + time.time()) / 2
        return conn

    def now(self) -> float:
        """The database server's clock, the one clock all replicas share (leases, claims, expiries)."""
        return time.time() + self.clock_offset

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    def close(self) -> None:
        self._drop()

    def execute(self, sql: str, params: list[Any]) -> int:
        with self._connection() as conn:
            return int(conn.execute(_pg_sql(sql), params).rowcount)

    def select(self, sql: str, params: list[Any]) -> list[dict[str, Any]]:
        with self._connection() as conn:
            return list(conn.execute(_pg_sql(sql), params).fetchall())

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """Inside `call` the whole call is already one transaction; outside (the CLI) one is opened."""
        if self._in_call:
            yield
            return
        with self._connection() as conn, conn.transaction():
            yield

    @contextlib.contextmanager
    def durably(self) -> Iterator[None]:
        """Every Postgres commit is durable (synchronous_commit stays on): nothing extra for a guard write."""
        yield

    def call(self, fn: Callable[[], T]) -> T:
        """One Ledger call as one SERIALIZABLE transaction, retried whole (with jitter) when Postgres says it
        conflicted with another replica's: no partial effects, as if every call ran one at a time."""
        errors = self._psycopg.errors
        for attempt in range(1, self.serialization_retries + 1):
            try:
                with self._connection() as conn, conn.transaction():
                    self._in_call = True
                    try:
                        return fn()
                    finally:
                        self._in_call = False
            except (errors.SerializationFailure, errors.DeadlockDetected):
                if attempt == self.serialization_retries:
                    raise  # the caller's to handle: not transient, so it reaches the run as an error
                time.sleep(random.uniform(0, min(0.1, 0.002 * 2**attempt)))
        raise AssertionError("unreachable")

    def notify(self, payload: str) -> None:
        """Wake the other replicas when this transaction commits (Postgres delivers NOTIFY only on commit)."""
        self.select("SELECT pg_notify(?, ?) AS sent", [CHANNEL, payload])

    def probe_write(self) -> None:
        """Raises when this database takes no writes (down, or a read-only standby after a failover)."""
        sql = "SELECT pg_is_in_recovery() AS standby, current_setting('transaction_read_only') AS ro"
        row = self.select(sql, [])[0]
        if row["standby"] or row["ro"] == "on":
            raise self._psycopg.errors.ReadOnlySqlTransaction("the database is read-only (a standby?)")

    @staticmethod
    def transient(error: BaseException) -> Transient | None:
        """Connection loss, a restarting or failing-over server, a full disk, a read-only standby: wait and retry."""
        import psycopg

        if isinstance(error, psycopg.errors.DiskFull):
            return Transient(disk_full=True)
        if isinstance(error, psycopg.OperationalError | psycopg.errors.ReadOnlySqlTransaction):
            return Transient(disk_full=False)
        return None


def inspect_schema(location: str | Path, tables: Sequence[Tables] = ()) -> SchemaVersion:
    """Connect and read how far the database is migrated (the core and `tables`), changing nothing (`opsloop
    check`). Raises when it can't connect."""
    location = str(location)
    if is_postgres(location):
        import psycopg

        with psycopg.connect(location, connect_timeout=5, application_name="opsloop-check") as conn:
            return pg_version(conn, tables)
    if location != ":memory:" and not Path(location).exists():
        return sqlite_version(sqlite_utils.Database(memory=True), tables)  # a new file: created at the first start
    db = sqlite_utils.Database(location)
    try:
        return sqlite_version(db, tables)
    finally:
        db.close()


def open_backend(location: str | Path, tables: Sequence[Tables] = ()) -> SqliteBackend | PostgresBackend:
    location = str(location)
    return PostgresBackend(location, tables) if is_postgres(location) else SqliteBackend(location, tables)


class PgListener:
    """LISTEN on the replicas' channel and hand each payload to `on_wake`, reconnecting with backoff.

    On every (re)connect `on_wake` gets both payloads: anything sent while the connection was down is found
    by looking once, as the poll would."""

    def __init__(self, url: str, on_wake: Callable[[str], None]) -> None:
        self.url = url
        self.on_wake = on_wake
        self.connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="opsloop-store-listen")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _listen(self) -> None:
        import psycopg

        delay = 0.2
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True, application_name="opsloop")
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.connected.set()
                    delay = 0.2
                    for payload in (WAKE_RUNS, WAKE_OUTBOX):
                        self.on_wake(payload)
                    async for note in conn.notifies():
                        self.on_wake(note.payload)
            except psycopg.Error as e:
                log.warning("store.listen_lost", error=f"{type(e).__name__}: {e}", retry_s=delay)
            self.connected.clear()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
