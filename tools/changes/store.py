"""The change events table (docs/context.md, What changed): events POSTed to `/changes`, stored once per id (the first
copy wins), a list all or nothing, read back by time for recent_changes, swept after `[changes] retention_days`;
its migration on both backends (`TABLES`, which the store runs after the core's).

The store takes plain rows (tools.changes.events checks them first), redacts their text at this boundary and
writes them durably: the webhook answers 200 only once this call returned. Each call is a store function
(bot.store.lane): `fn(ledger, ...)` on the store's thread, `await fn(store, ...)` from the bot."""

from __future__ import annotations

import dataclasses
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
# One row per ConfigMap opsloop has read: its resourceVersion, each data key's keyed hash (never a value), the
# hash key's id, and the key changes against the row it replaced (JSON; NULL on the first read).
_CONFIGMAP_KEYS = (
    "CREATE TABLE configmap_keys (cluster TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, "
    "resource_version TEXT NOT NULL, key_id TEXT NOT NULL, hashes TEXT NOT NULL, diff TEXT, "
    "seen_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (cluster, namespace, name))",
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


@dataclass(frozen=True)
class KeyDiff:
    """A ConfigMap's data keys added, removed and changed since `since` (epoch seconds, opsloop's earlier read);
    `changed` None when the values could not be compared (the earlier read used another hash key)."""

    since: float
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] | None = ()


@dataclass(frozen=True)
class KeySnapshot:
    """One ConfigMap as opsloop last read it: key → keyed hash of the value, and its key changes before that."""

    name: str
    resource_version: str
    key_id: str
    hashes: Mapping[str, str]
    seen_at: float
    diff: KeyDiff | None = None  # None: the first read, nothing to compare with


@lane.normal
def configmap_snapshots(ledger: Ledger, cluster: str, namespace: str) -> dict[str, KeySnapshot]:
    """The stored snapshots of one namespace's ConfigMaps, by name."""
    rows = ledger._rows("configmap_keys", "cluster = ? AND namespace = ?", [cluster, namespace])
    out = {}
    for r in rows:
        d = json.loads(r["diff"]) if r["diff"] else None
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in (d or {}).items()}
        diff = KeyDiff(**fields) if d else None
        out[r["name"]] = KeySnapshot(
            r["name"], r["resource_version"], r["key_id"], json.loads(r["hashes"]), float(r["seen_at"]), diff
        )
    return out


@lane.background
def save_configmap_snapshots(ledger: Ledger, cluster: str, namespace: str, snapshots: Sequence[KeySnapshot]) -> None:
    """Store (replace) each snapshot, in one transaction."""
    with ledger._atomic():
        for s in snapshots:
            diff = json.dumps(dataclasses.asdict(s.diff)) if s.diff is not None else None
            ledger._write(
                "INSERT INTO configmap_keys (cluster, namespace, name, resource_version, key_id, hashes, diff, "
                "seen_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (cluster, namespace, name) DO UPDATE SET "
                "resource_version = excluded.resource_version, key_id = excluded.key_id, hashes = excluded.hashes, "
                "diff = excluded.diff, seen_at = excluded.seen_at",
                [cluster, namespace, s.name, s.resource_version, s.key_id, json.dumps(dict(s.hashes)), diff, s.seen_at],
            )


def _row(r: Mapping[str, Any]) -> StoredChange:
    return _decode(StoredChange, r, labels=json.loads(r["labels"] or "{}"))


TABLES = Tables(
    name="changes",
    migrations=(
        Migration("m016_change_events", sqlite=_CHANGE_EVENTS, postgres=_CHANGE_EVENTS),
        Migration("m020_configmap_keys", sqlite=_CONFIGMAP_KEYS, postgres=_CONFIGMAP_KEYS),
    ),
)
