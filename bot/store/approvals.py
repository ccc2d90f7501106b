"""Approvals: a pending call bound to its arguments and preview, decided once (compare-and-set)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from bot.core.redact import redact, redact_value
from bot.core.types import Approval, ApprovalState, AuditEntry, DecisionCause
from bot.store.backends import WAKE_RUNS
from bot.store.lane import lane
from bot.store.rows import _decode, new_id
from bot.store.sql import LedgerBase


class Approvals(LedgerBase):
    """Approval rows; every change is a compare-and-set on the state. The SQL, run on the store's thread."""

    @lane.normal
    def create_approval(
        self,
        *,
        run_id: str,
        tool_use_id: str,
        tool: str,
        category: str,
        args: dict[str, Any],
        requester: str | None,
        expires_at: float,
        args_hash: str | None = None,
        preview: str | None = None,
        preview_hash: str | None = None,
        channel: str | None = None,
        thread_ts: str | None = None,
        required: int = 1,
        run_tokens: int | None = None,
        run_cost_usd: float | None = None,
    ) -> Approval:
        """A new pending approval for one call, bound to its arguments (and preview) hash."""
        fields: dict[str, Any] = {
            "id": new_id("apr"),
            "run_id": run_id,
            "tool_use_id": tool_use_id,
            "tool": tool,
            "category": category,
            "args": json.dumps(redact_value(args or {})),
            "args_hash": args_hash,
            "preview": preview,
            "preview_hash": preview_hash,
            "requester": requester,
            "channel": channel,
            "thread_ts": thread_ts,
            "required": required,
            "expires_at": expires_at,
            "run_tokens": run_tokens,
            "run_cost_usd": run_cost_usd,
        }
        fields = {k: redact(v) if isinstance(v, str) else v for k, v in fields.items() if v is not None}
        fields.update(state=ApprovalState.PENDING.value, created_at=self.sql.now())
        self._insert("approvals", fields)
        return self.get_approval(fields["id"])

    @lane.urgent
    def get_approval(self, approval_id: str) -> Approval:
        approval = self.find_approval(approval_id)
        if approval is None:
            raise KeyError(f"no approval {approval_id!r}")
        return approval

    @lane.urgent
    def find_approval(self, approval_id: str) -> Approval | None:
        rows = self._rows("approvals", "id = ?", [approval_id])
        return _decode(Approval, rows[0]) if rows else None

    @lane.normal
    def approval_for_call(self, run_id: str, tool_use_id: str) -> Approval | None:
        """The newest approval asked for this call."""
        rows = self._rows(
            "approvals", "run_id = ? AND tool_use_id = ?", [run_id, tool_use_id], order_by="created_at desc", limit=1
        )
        return _decode(Approval, rows[0]) if rows else None

    @lane.normal
    def pending_approvals(self, run_id: str | None = None) -> list[Approval]:
        where, params = (
            ("state = 'pending' AND run_id = ?", [run_id]) if run_id is not None else ("state = 'pending'", [])
        )
        return [_decode(Approval, r) for r in self._rows("approvals", where, params)]

    @lane.normal
    def note_pending_approvals(self, run_id: str, note: str) -> list[Approval]:
        """Mark each of run `run_id`'s waiting approvals with what its alert said (`note`); those marked."""
        sql = "UPDATE approvals SET alert_note = ? WHERE run_id = ? AND state = 'pending'"
        self._write(sql, [redact(note), run_id])
        return [a for a in self.pending_approvals(run_id) if a.alert_note]

    @lane.urgent
    def decide_approval(
        self,
        approval_id: str,
        *,
        state: ApprovalState,
        cause: DecisionCause,
        decided_at: float,
        decided_by: str | None = None,
        decided_name: str | None = None,
        reason: str | None = None,
    ) -> bool:
        """End a pending approval; False when it was no longer pending (a second click, one after expiry)."""
        with self._durably():
            decided = self.end_pending(
                approval_id,
                state=state,
                cause=cause,
                decided_at=decided_at,
                decided_by=decided_by,
                decided_name=decided_name,
                reason=reason,
            )
        if decided:
            self._wake(WAKE_RUNS)  # the paused run is runnable: any replica picks it up at once
        return decided

    @lane.normal
    def end_pending(
        self,
        approval_id: str,
        *,
        state: ApprovalState,
        cause: DecisionCause,
        decided_at: float,
        decided_by: str | None = None,
        decided_name: str | None = None,
        reason: str | None = None,
    ) -> bool:
        """The compare-and-set of `decide_approval`, inside the caller's transaction (which is already durable):
        for a rule that ends approvals as part of a larger write, e.g. a reply superseding them."""
        return self._transition_approval(
            approval_id,
            expect=ApprovalState.PENDING,
            state=state.value,
            cause=cause.value,
            decided_at=decided_at,
            decided_by=decided_by,
            decided_name=decided_name,
            reason=reason,
        )

    @lane.urgent
    def set_card_ts(self, approval_id: str, message_ts: str, *, expect: ApprovalState) -> bool:
        """Record the card's ts, if the approval is still in state `expect`."""
        return self._transition_approval(approval_id, expect=expect, message_ts=message_ts)

    def _transition_approval(self, approval_id: str, *, expect: ApprovalState, **fields: Any) -> bool:
        """Compare-and-set on state: a second click, or one after expiry, changes nothing. A field given as None
        is left as it is."""
        if "approvals" in fields:
            fields["approvals"] = json.dumps(fields["approvals"])
        fields = {k: redact(v) if isinstance(v, str) else v for k, v in fields.items() if v is not None}
        sets = ", ".join(f"{k} = ?" for k in fields)
        return (
            self._write(
                f"UPDATE approvals SET {sets} WHERE id = ? AND state = ?", [*fields.values(), approval_id, expect.value]
            )
            == 1
        )

    @lane.urgent
    def record_approvers(
        self,
        approval_id: str,
        approvals: Sequence[str],
        *,
        decided_by: str | None = None,
        decided_name: str | None = None,
        decided_at: float | None = None,
    ) -> bool:
        """Store who has approved a pending approval so far (compare-and-set on pending, durably); with `decided_by`,
        that click approves it. When a click is the last one required is decided in bot/run/approvals.py."""
        fields: dict[str, Any] = {"approvals": list(approvals)}
        if decided_by is not None:
            fields.update(
                state=ApprovalState.APPROVED.value,
                cause=DecisionCause.CLICK.value,
                decided_by=decided_by,
                decided_name=decided_name,
                decided_at=decided_at,
            )
        with self._durably():
            added = self._transition_approval(approval_id, expect=ApprovalState.PENDING, **fields)
        if added and fields.get("state"):
            self._wake(WAKE_RUNS)
        return added

    @lane.normal
    def audit(self) -> list[AuditEntry]:
        """Every approval decision with the result of the call it allowed."""
        sql = """
            SELECT a.*, r.content AS result, r.is_error AS result_is_error
            FROM approvals a LEFT JOIN tool_results r
              ON r.run_id = a.run_id AND r.tool_use_id = a.tool_use_id
            ORDER BY a.created_at
        """
        rows = self._select(sql, [])
        return [
            AuditEntry(
                approval=_decode(Approval, r),
                result=r["result"],
                result_is_error=bool(r["result_is_error"]) if r["result_is_error"] is not None else None,
            )
            for r in rows
        ]

    @lane.normal
    def run_approvals(self, run_id: str) -> list[Approval]:
        """Every approval a run asked for, oldest first."""
        rows = self._select("SELECT * FROM approvals WHERE run_id = ? ORDER BY created_at", [run_id])
        return [_decode(Approval, r) for r in rows]

    @lane.normal
    def pending_approval_count(self) -> int:
        return int(self._select("SELECT COUNT(*) AS n FROM approvals WHERE state = 'pending'", [])[0]["n"])

    @lane.normal
    def approval_waits(self) -> list[tuple[ApprovalState, float]]:
        """(outcome, seconds from the card to the decision) for every decided approval."""
        rows = self._select(
            "SELECT state, decided_at - created_at AS waited FROM approvals "
            "WHERE state != 'pending' AND decided_at IS NOT NULL",
            [],
        )
        return [(ApprovalState(r["state"]), max(0.0, float(r["waited"]))) for r in rows]

    @lane.normal
    def due_approvals(self, *, now: float) -> list[Approval]:
        """Pending approvals past their expiry: the sweeper expires them."""
        rows = self._select(
            "SELECT * FROM approvals WHERE state = ? AND expires_at <= ?", [ApprovalState.PENDING.value, now]
        )
        return [_decode(Approval, r) for r in rows]
