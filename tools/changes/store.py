"""The change events table (docs/context.md, What changed): events POSTed to `/changes`, stored once per id (the first
copy wins), a list all or nothing, read back by time for recent_changes, swept after `[changes] retention_days`;
its migration on both backends (`TABLES`, which the store runs after the core's).

The store takes plain rows (tools.changes.events checks them first), redacts their text at this boundary and
writes them durably: the webhook answers 200 only once this call returned. Each call is a store function
(bot.store.lane): `fn(ledger, ...)` on the store's thread, `await fn(store, ...)` from the bot."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.core.redact import redact
from bot.store import Ledger
from bot.store.lane import lane
from bot.store.migrations import Migration, Tables
from bot.store.rows import _decode, _marks, new_id

SWEEP_BATCH = 1000
_CHANGE_EVENTS = (
    "CREATE TABLE change_events (id TEXT PRIMARY KEY, at DOUBLE PRECISION NOT NULL, source TEXT, service TEXT, "
    "environment TEXT, summary TEXT NOT NULL, url TEXT, labels TEXT, received_at DOUBLE PRECISION NOT NULL)",
    "CREATE INDEX idx_change_events_at ON change_events (at)",
    "CREATE INDEX idx_change_events_received_at ON change_events (received_at)",
)
READ_LIMIT = 2000  # events one read returns (newest first): a timeline shows far fewer


@dataclass(frozen=True)
class StoredChange:
    """One stored change event; `at` and `received_at` in epoch seconds."""

    id: str
    at: float
    summary: str
    source: str | None = None
    service: str | None = None
    environment: str | None = None
    url: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    received_at: float = 0.0


def _text(value: str | None) -> str | None:
    return None if value is None else redact(value)


@lane.background
def record_changes(ledger: Ledger, events: Sequence[StoredChange]) -> int:
    """Store `events` in one durable transaction (all or none); an event whose id is stored already is left
    as it was (the first copy wins). An event without an id gets one. How many were new."""
    now = ledger.sql.now()
    added = 0
    with ledger._durably(), ledger._atomic():
        for e in events:
            added += ledger._write(
                "INSERT INTO change_events (id, at, source, service, environment, summary, url, labels, "
                "received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                [
                    e.id or new_id("chg"),
                    e.at,
                    _text(e.source),
                    _text(e.service),
                    _text(e.environment),
                    redact(e.summary),
                    _text(e.url),
                    json.dumps({redact(k): redact(v) for k, v in e.labels.items()}, sort_keys=True),
                    now,
                ],
            )
    return added


@lane.normal
def changes_between(
    ledger: Ledger, since: float, until: float, *, service: str | None = None, limit: int = READ_LIMIT
) -> list[StoredChange]:
    """The stored events with `since <= at <= until` (one service's, with `service`), newest first."""
    where = "at >= ? AND at <= ?"
    params: list[Any] = [since, until]
    if service:
        where += " AND service = ?"
        params.append(service)
    return [_row(r) for r in ledger._rows("change_events", where, params, order_by="at DESC, id", limit=limit)]


@lane.normal
def change_event(ledger: Ledger, event_id: str) -> StoredChange | None:
    rows = ledger._rows("change_events", "id = ?", [event_id])
    return _row(rows[0]) if rows else None


@lane.background
def sweep_changes(ledger: Ledger, retention_days: float, *, now: float, batch: int = SWEEP_BATCH) -> int:
    """Delete up to `batch` events received more than `retention_days` ago (0: keep forever); how many went.
    Bounded and idempotent (replicas sweeping at once share the work); call until it returns less than
    `batch`."""
    if retention_days <= 0:
        return 0
    with ledger._atomic():
        rows = ledger._select(
            f"SELECT id FROM change_events WHERE received_at < ? ORDER BY received_at "
            f"LIMIT {int(batch)}{ledger._skip_locked()}",
            [now - retention_days * 86400],
        )
        ids = [str(r["id"]) for r in rows]
        if not ids:
            return 0
        return ledger._write(f"DELETE FROM change_events WHERE id IN ({_marks(ids)})", ids)


def _row(r: Mapping[str, Any]) -> StoredChange:
    return _decode(StoredChange, r, labels=json.loads(r["labels"] or "{}"))


TABLES = Tables(
    name="changes",
    migrations=(Migration("m016_change_events", sqlite=_CHANGE_EVENTS, postgres=_CHANGE_EVENTS),),
)
