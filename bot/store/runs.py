"""Runs and their leases: a run's row, its status and counters, who drives it (one driver per run)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from bot.core.redact import redact, redact_value
from bot.core.types import ApprovalState, Run, RunStatus, StopReason, Totals
from bot.store.backends import WAKE_RUNS
from bot.store.lane import lane
from bot.store.rows import _EXACT_RUN_FIELDS, ACTIVE_STATES, _decode_run, _marks
from bot.store.sql import LedgerBase


class Runs(LedgerBase):
    """A run's row, its status and counters, and its lease. The SQL, run on the store's thread."""

    @lane.normal
    def get_run(self, run_id: str) -> Run:
        run = self.find_run(run_id)
        if run is None:
            raise KeyError(f"no run {run_id!r}")
        return run

    @lane.urgent
    def find_run(self, run_id: str) -> Run | None:
        rows = self._select("SELECT * FROM runs WHERE id = ?", [run_id])
        return _decode_run(rows[0]) if rows else None

    @lane.normal
    def fix_prompt(self, run_id: str, *, system: str, tools: list[dict[str, Any]]) -> None:
        """Store the system prompt and tool schemas a run starts with (exactly, never redacted)."""
        self._update_run(run_id, system=system, tools=tools)

    @lane.normal
    def record_settings(self, run_id: str, settings: dict[str, Any]) -> None:
        """Store what a run runs under (limits, effort, tool categories …), once: the first drive's stays."""
        self._write(
            "UPDATE runs SET settings = ? WHERE id = ? AND settings IS NULL",
            [json.dumps(redact_value(settings), sort_keys=True), run_id],
        )

    @lane.normal
    def set_status(self, run_id: str, status: RunStatus) -> None:
        """Running <-> waiting_approval; `finish_run` ends a run."""
        self._update_run(run_id, status=status.value)

    @lane.normal
    def set_drop_block(self, run_id: str) -> None:
        """Every later request of this run asks the API to drop mismatched thinking blocks."""
        self._update_run(run_id, drop_block=1)

    @lane.normal
    def set_status_ts(self, run_id: str, ts: str) -> None:
        """The ts of the run's status message in the thread."""
        self._update_run(run_id, status_ts=ts)

    @lane.normal
    def save_totals(self, run_id: str, totals: Totals) -> None:
        """The run's counters so far."""
        extra = {"model": totals.model} if totals.model is not None else {}
        self._update_run(
            run_id,
            iterations=totals.iterations,
            cost_usd=totals.cost_usd,
            agent_seconds=totals.agent_seconds,
            tools_called=totals.tools_called,
            condensed=int(totals.condensed),
            **totals.usage.to_dict(),
            **extra,
        )

    @lane.normal
    def finish_run(
        self,
        run_id: str,
        *,
        stop_reason: StopReason,
        stop_detail: str,
        stopped_by: str | None = None,
        output: str | None = None,
        at_end: Sequence[Callable[[Any], None]] = (),
    ) -> None:
        """End a run, and in the same transaction call each of `at_end` with this ledger: what the configured
        reaches write when a run ends (incident memory's record, searchable as soon as the end is stored)."""
        with self._atomic():
            self._update_run(
                run_id,
                status=RunStatus.FINISHED.value,
                stop_reason=stop_reason.value,
                stop_detail=stop_detail,
                stopped_by=stopped_by,
                output=output,
            )
            for write in at_end:
                write(self)

    def _update_run(self, run_id: str, **fields: Any) -> None:
        # Plain SQL on the hot path: the loop calls this every step (sqlite-utils' update introspects the table).
        if "tools_called" in fields:
            fields["tools_called"] = json.dumps(list(fields["tools_called"]))
        if "tools" in fields:  # stored exactly as sent: never redacted, never re-serialised differently
            fields["tools"] = json.dumps(fields["tools"])
        fields = {k: redact(v) if isinstance(v, str) and k not in _EXACT_RUN_FIELDS else v for k, v in fields.items()}
        fields["updated_at"] = self.sql.now()
        self._write(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?", [*fields.values(), run_id])

    @lane.normal
    def stop_requested_by(self, run_id: str) -> str | None:
        """Who asked this run to stop, if anyone: asked twice a step, so one column, not the whole row."""
        rows = self._select("SELECT stop_requested_by FROM runs WHERE id = ?", [run_id])
        return str(rows[0]["stop_requested_by"]) if rows and rows[0]["stop_requested_by"] else None

    @lane.urgent
    def request_stop(self, run_id: str, user: str) -> bool:
        """Mark a run to stop; False when it is not active (already finished)."""
        marked = (
            self._write(
                "UPDATE runs SET stop_requested_by = ?, updated_at = ? "
                "WHERE id = ? AND status IN (?, ?) AND stop_requested_by IS NULL",
                [user, self.sql.now(), run_id, *ACTIVE_STATES],
            )
            == 1
        )
        if marked:
            self._wake(WAKE_RUNS)  # the replica driving it cancels the drive now, not at its next poll
        return marked

    @lane.normal
    def active_run(self, channel: str, thread_ts: str) -> Run | None:
        """The thread's going run (the newest, if an alert storm left several), or None."""
        run = self.thread_run(channel, thread_ts)
        return run if run is not None and run.active else None

    @lane.normal
    def thread_run(self, channel: str, thread_ts: str) -> Run | None:
        """The thread's going run if it has one (the newest), else its latest run, in one query: what a mention's
        accept (which Slack's ack waits on) needs, to join the going run or continue the latest one."""
        rows = self._rows(
            "runs",
            "channel = ? AND thread_ts = ?",
            [channel, thread_ts, *ACTIVE_STATES],
            order_by="status IN (?, ?) DESC, created_at DESC",
            limit=1,
        )
        return _decode_run(rows[0]) if rows else None

    @lane.normal
    def latest_run(self, channel: str, thread_ts: str) -> Run | None:
        rows = self._rows(
            "runs", "channel = ? AND thread_ts = ?", [channel, thread_ts], order_by="created_at desc", limit=1
        )
        return _decode_run(rows[0]) if rows else None

    @lane.normal
    def active_runs(self) -> list[Run]:
        return [
            _decode_run(r) for r in self._rows("runs", "status IN (?, ?)", list(ACTIVE_STATES), order_by="created_at")
        ]

    @lane.normal
    def list_runs(self, limit: int = 50) -> list[Run]:
        return [_decode_run(r) for r in self._rows("runs", "1 = 1", [], order_by="created_at desc", limit=limit)]

    @lane.normal
    def runs_starting(self, prefix: str, limit: int) -> list[Run]:
        """The runs whose id starts with `prefix` (a short id, as people type it), newest first."""
        where = "substr(id, 1, ?) = ?"  # not LIKE: `_` in every run id is a LIKE wildcard
        return [_decode_run(r) for r in self._rows("runs", where, [len(prefix), prefix], "created_at desc", limit)]

    @lane.normal
    def thread_runs(self, channel: str, thread_ts: str) -> list[Run]:
        """Every run of a thread, oldest first."""
        return [
            _decode_run(r)
            for r in self._rows("runs", "channel = ? AND thread_ts = ?", [channel, thread_ts], order_by="created_at")
        ]

    @lane.normal
    def active_run_counts(self) -> dict[RunStatus, int]:
        """How many runs are in each active state (a state with no run is absent)."""
        rows = self._select(
            "SELECT status, COUNT(*) AS n FROM runs WHERE status IN (?, ?) GROUP BY status", list(ACTIVE_STATES)
        )
        return {RunStatus(r["status"]): int(r["n"]) for r in rows}

    @lane.normal
    def claim_run(self, run_id: str, owner: str, *, until: float, now: float, dead: Sequence[str] = ()) -> bool:
        """Take (or keep) an active run's lease: free, already ours, lapsed, or held by an owner known to be
        dead (a crashed process on this host). Compare-and-set."""
        return (
            self._write(
                "UPDATE runs SET owner = ?, lease_until = ? WHERE id = (SELECT id FROM runs WHERE id = ? "
                "AND status IN (?, ?) "
                f"AND (owner IS NULL OR owner = ? OR lease_until < ? OR owner IN ({_marks(dead)})){self._skip_locked()})",  # noqa: E501
                [owner, until, run_id, *ACTIVE_STATES, owner, now, *dead],
            )
            == 1
        )

    @lane.normal
    def lease_owners(self) -> list[str]:
        """Who holds the leases of active runs (to spot a crashed process on this host)."""
        rows = self._select(
            "SELECT DISTINCT owner FROM runs WHERE owner IS NOT NULL AND status IN (?, ?)", list(ACTIVE_STATES)
        )
        return [str(r["owner"]) for r in rows]

    @lane.urgent
    def renew_leases(self, owner: str, run_ids: Sequence[str], *, until: float) -> list[str]:
        """Extend this owner's leases on `run_ids` (the heartbeat); returns the ids it still holds."""
        sql = "UPDATE runs SET lease_until = ? WHERE id = ? AND owner = ?"
        return [run_id for run_id in run_ids if self._write(sql, [until, run_id, owner])]

    @lane.urgent
    def stop_requested_among(self, run_ids: Sequence[str]) -> list[str]:
        """Which of these runs someone asked to stop (a Stop received by any process)."""
        rows = self._select(
            f"SELECT id FROM runs WHERE id IN ({_marks(run_ids)}) AND stop_requested_by IS NOT NULL", list(run_ids)
        )
        return [str(r["id"]) for r in rows]

    @lane.normal
    def release_run(self, run_id: str, owner: str) -> None:
        """Give a run back (paused, finished, or this process is stopping): the next driver takes it at once."""
        if self._write("UPDATE runs SET owner = NULL, lease_until = NULL WHERE id = ? AND owner = ?", [run_id, owner]):
            self._wake(WAKE_RUNS)

    @lane.normal
    def runnable_runs(self, *, now: float, dead: Sequence[str] = ()) -> list[Run]:
        """Active runs nobody drives that have something to do: running ones (a dead driver's included),
        and paused ones whose approval was decided (anywhere) or whose stop was requested."""
        rows = self._select(
            "SELECT * FROM runs WHERE status IN (?, ?) "
            f"AND (owner IS NULL OR lease_until < ? OR owner IN ({_marks(dead)})) "
            "AND (status = ? OR stop_requested_by IS NOT NULL OR NOT EXISTS "
            "(SELECT 1 FROM approvals a WHERE a.run_id = runs.id AND a.state = ?)) ORDER BY created_at",
            [*ACTIVE_STATES, now, *dead, RunStatus.RUNNING.value, ApprovalState.PENDING.value],
        )
        return [_decode_run(r) for r in rows]
