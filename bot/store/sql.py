"""The SQL plumbing every table group uses: one backend (SQLite or Postgres, see bot.store.backends), statements that
commit unless a transaction is open, transactions, durable writes and wake-ups for other replicas."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bot.store.backends import SqliteBackend, open_backend
from bot.store.lane import lane
from bot.store.migrations import Tables
from bot.store.rows import _marks, _no_nul


class LedgerBase:
    """Synchronous store on SQLite (a file path) or Postgres (a postgresql:// URL); use only from the thread
    that created it. Its SQL is written once for both (see bot.store.backends). `tables`: the reaches' tables,
    migrated after the core's, whose hooks its own transactions call."""

    def __init__(self, location: str | Path, tables: Sequence[Tables] = ()) -> None:
        self.tables = tuple(tables)
        self.sql = open_backend(location, self.tables)
        self.backend = self.sql.name
        self.schema = self.sql.version
        if isinstance(self.sql, SqliteBackend):
            self.db = self.sql.db  # the sqlite-utils Database (tests and the CLI's SQLite-only paths use it)

    def close(self) -> None:
        self.sql.close()

    def _write(self, sql: str, params: list[Any]) -> int:
        """Execute one statement; it commits unless a transaction is open."""
        return self.sql.execute(sql, _no_nul(params))

    def _select(self, sql: str, params: list[Any]) -> list[dict[str, Any]]:
        return self.sql.select(sql, _no_nul(params))

    def _insert(self, table: str, fields: dict[str, Any]) -> None:
        self._write(_insert_sql(table, fields), list(fields.values()))

    def _insert_returning(self, table: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Insert one row and read it back as stored (defaults filled in), in the same statement."""
        return self._select(_insert_sql(table, fields) + " RETURNING *", list(fields.values()))[0]

    def _rows(
        self, table: str, where: str, params: list[Any], order_by: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        sql = f"SELECT * FROM {table} WHERE {where}"
        if order_by:
            sql += f" ORDER BY {order_by}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return self._select(sql, params)

    def _skip_locked(self, of: str = "") -> str:
        """Postgres: a row another replica is claiming right now is skipped, not waited for (and retried)."""
        return f" FOR UPDATE{f' OF {of}' if of else ''} SKIP LOCKED" if self.backend == "postgres" else ""

    def _hooks(self, name: str, *args: Any) -> None:
        """Call each reach's `Tables.<name>` hook that is set (`on_feedback`, ...) with this ledger and `args`."""
        for tables in self.tables:
            if (hook := getattr(tables, name)) is not None:
                hook(self, *args)

    def _wake(self, payload: str) -> None:
        """Tell the other replicas, when this transaction commits (Postgres NOTIFY; SQLite: they poll)."""
        self.sql.notify(payload)

    def _atomic(self) -> contextlib.AbstractContextManager[Any]:
        return self.sql.atomic()

    def _durably(self) -> contextlib.AbstractContextManager[Any]:
        return self.sql.durably()

    @lane.normal
    def probe_write(self) -> None:
        """Raises when the database takes no writes (checked without writing anything)."""
        self.sql.probe_write()


def _insert_sql(table: str, fields: dict[str, Any]) -> str:
    columns = ", ".join(f'"{k}"' for k in fields)
    return f"INSERT INTO {table} ({columns}) VALUES ({_marks(list(fields))})"
