"""Alerts that start runs (docs/alerts.md): alert groups claimed and stored before the ack, storm control per channel.

Every accept is one transaction: the dedupe (Slack's event id and the message ts, or Alertmanager's groupKey
with its firing fingerprints), the storm count and the new run or the group's row, so two deliveries racing
(two replicas, two retries) start one run.

An Alertmanager group that fires again once its occurrence is over (its run ended, and it was resolved or
Alertmanager was silent about it for the re-open window) is a new occurrence: the old row is kept under
`am:<groupKey>#<occurrence>` and a new `am:<groupKey>` row opens a new thread, linking the old one.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from bot.core.redact import redact
from bot.core.types import Run
from bot.store.lane import lane
from bot.store.rows import _decode
from bot.store.sql import LedgerBase

STORM_WINDOW_S = 600.0  # max_runs_per_10_min counts the runs alerts started in this window, per channel


class AlertOutcome(enum.Enum):
    """What one alert delivery did."""

    STARTED = "started"  # a run was created (Slack alerts), or a group's thread is to be opened (webhook)
    REOPENED = "reopened"  # a group fired again after its occurrence was over: a new thread is to be opened
    DUPLICATE = "duplicate"  # seen before and nothing new: nothing to do
    REPEAT = "repeat"  # the same firing set again: the thread hears it once (`note`)
    CHANGED = "changed"  # the firing set changed: noted in the thread, queued for the run
    RESOLVED = "resolved"  # the group resolved: posted in the thread, queued for the run
    DROPPED = "dropped"  # over max_runs_per_10_min in this channel: listed in the storm thread
    IGNORED = "ignored"  # a resolved notification of a group never seen: nothing to say


@dataclass(frozen=True)
class AlertGroup:
    key: str
    source: str
    channel: str
    thread_ts: str | None
    run_id: str | None
    state: str
    status: str
    fingerprints: tuple[str, ...]
    summary: str
    repeat_noted: bool
    created_at: float
    payload: str = ""  # webhook: the validated notification that opened it (redacted JSON), for recovery
    root_item: str | None = None  # the outbox item of its root post (webhook) or of the storm thread's root
    attempts: int = 0  # root posts enqueued (a new one only after Slack refused the last for good)
    owner: str | None = None  # who is opening it (compare-and-set claim, lapses at claimed_until)
    claimed_until: float | None = None
    occurrence: int = 1  # webhook: how many times the group has opened a thread, this one included
    previous: str | None = None  # webhook: the key of the group's previous occurrence (`am:<groupKey>#<n>`)
    seen_at: float = 0.0  # webhook: when Alertmanager last sent the group (the re-open window counts from it)


@dataclass(frozen=True)
class AcceptedAlert:
    outcome: AlertOutcome
    group: AlertGroup | None = None
    run: Run | None = None  # STARTED (Slack): the new run; CHANGED/RESOLVED: the active run it was queued for
    note: bool = False  # REPEAT: the first repeat, which the thread hears about
    previous: AlertGroup | None = None  # REOPENED (or DROPPED on a re-fire): the occurrence before


def _decode_group(row: dict[str, Any]) -> AlertGroup:
    maybe: dict[str, Any] = {k: row.get(k) or None for k in ("thread_ts", "run_id", "root_item", "owner", "previous")}
    seen_at = float(row.get("seen_at") or row.get("updated_at") or row["created_at"] or 0.0)
    return _decode(AlertGroup, row, **maybe, seen_at=seen_at)


class Alerts(LedgerBase):
    """The alert_groups table. The SQL, run on the store's thread; the accepts are in Ledger (they span tables)."""

    @lane.normal
    def alert_group(self, key: str) -> AlertGroup | None:
        rows = self._select("SELECT * FROM alert_groups WHERE key = ?", [key])
        return _decode_group(rows[0]) if rows else None

    @lane.normal
    def alert_group_of_run(self, run_id: str) -> AlertGroup | None:
        """The alert group that started run `run_id` (the first, should a run hold two), or None."""
        rows = self._select("SELECT * FROM alert_groups WHERE run_id = ? ORDER BY created_at LIMIT 1", [run_id])
        return _decode_group(rows[0]) if rows else None

    @lane.normal
    def alert_groups(self, channel: str | None = None) -> list[AlertGroup]:
        where, params = ("channel = ?", [channel]) if channel else ("1 = 1", [])
        return [_decode_group(r) for r in self._rows("alert_groups", where, params, order_by="created_at")]

    @lane.normal
    def stuck_alert_groups(self, now: float, source: str = "webhook") -> list[str]:
        """The keys of `source`'s groups still `opening` whose opener's claim lapsed (it died, or Slack refused
        the root post): a recovery pass claims and opens each."""
        rows = self._select(
            "SELECT key FROM alert_groups WHERE source = ? AND state = 'opening' AND "
            "(claimed_until IS NULL OR claimed_until < ?) ORDER BY created_at",
            [source, now],
        )
        return [str(r["key"]) for r in rows]

    @lane.normal
    def claim_alert_group(self, key: str, owner: str, *, now: float, until: float) -> AlertGroup | None:
        """Compare-and-set: `owner` opens the `opening` group `key` until `until` (its own claim is renewed).
        None: it is opened already, or another opener holds a live claim."""
        claimed = self._write(
            "UPDATE alert_groups SET owner = ?, claimed_until = ? WHERE key = ? AND state = 'opening' "
            "AND (owner = ? OR claimed_until IS NULL OR claimed_until < ?)",
            [owner, until, key, owner, now],
        )
        return self.alert_group(key) if claimed == 1 else None

    @lane.normal
    def release_alert_group(self, key: str, owner: str, *, until: float) -> None:
        """The opener gives the group back; nobody claims it before `until` (a refused root post backs off)."""
        self._write(
            "UPDATE alert_groups SET owner = NULL, claimed_until = ? WHERE key = ? AND owner = ? AND state = 'opening'",
            [until, key, owner],
        )

    def _put_group(self, *, key: str, source: str, channel: str, state: str, conflict: str = "", **given: Any) -> int:
        """Insert one group row (`given`: its other columns, each else empty or 0; `conflict`: " ON CONFLICT DO
        NOTHING" for a claim); rows written (1 or 0)."""
        now = self.sql.now()
        fields = {
            "key": key,
            "source": source,
            "channel": channel,
            "state": state,
            "status": "firing",
            "payload": "",
            "repeat_noted": 0,
            "attempts": 0,
            "occurrence": 1,
            "created_at": now,
            "updated_at": now,
            "seen_at": now,
            **given,
            "fingerprints": json.dumps(sorted(given.get("fingerprints", ()))),
            "summary": redact(given.get("summary", "")),
        }
        columns = ", ".join(f'"{k}"' for k in fields)
        return self._write(
            f"INSERT INTO alert_groups ({columns}) VALUES ({', '.join('?' for _ in fields)}){conflict}",
            list(fields.values()),
        )

    def _update_group(self, key: str, **fields: Any) -> None:
        if "fingerprints" in fields:
            fields["fingerprints"] = json.dumps(sorted(fields["fingerprints"]))
        fields["updated_at"] = self.sql.now()
        self._write(
            f"UPDATE alert_groups SET {', '.join(f'{k} = ?' for k in fields)} WHERE key = ?", [*fields.values(), key]
        )

    def _archive_group(self, group: AlertGroup) -> AlertGroup:
        """Keep an ended occurrence under a key of its own (`am:<groupKey>#<n>`), freeing the group's key."""
        archived = f"{group.key}#{group.occurrence}"
        self._write("UPDATE alert_groups SET key = ? WHERE key = ?", [archived, group.key])
        kept = self.alert_group(archived)
        assert kept is not None
        return kept

    def _over_storm_limit(self, channel: str, limit: int) -> bool:
        """Have `limit` alert runs started (or are opening) in `channel` in the storm window?"""
        rows = self._select(
            "SELECT COUNT(*) AS n FROM alert_groups WHERE channel = ? AND state IN (?, ?) AND created_at >= ?",
            [channel, "opening", "started", self.sql.now() - STORM_WINDOW_S],
        )
        return int(rows[0]["n"]) >= limit
