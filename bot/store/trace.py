"""A run's trace: its message history, its tool calls' results (so a resumed run never runs a call twice) and its
steps."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from bot.core.redact import redact, redact_value
from bot.core.types import CallResult, Step, StepEntry, ToolResultRow
from bot.store.lane import lane
from bot.store.rows import _decode, _marks
from bot.store.sql import LedgerBase

_STEPS_A_STATEMENT = 200  # well under both backends' limits on a statement's parameters
_RESULT_COLUMNS = "(run_id, tool_use_id, tool, args, content, is_error, confirmed_by, created_at)"


class Trace(LedgerBase):
    """A run's messages, tool results and steps. The SQL, run on the store's thread."""

    def _put_message(self, run_id: str, seq: int, message: dict[str, Any]) -> None:
        self._write(
            "INSERT INTO messages (run_id, seq, role, content, created_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id, seq) DO UPDATE SET role = excluded.role, content = excluded.content, "
            "created_at = excluded.created_at",
            [run_id, seq, message["role"], json.dumps(message["content"]), self.sql.now()],
        )

    @lane.normal
    def replace_history(self, run_id: str, history: list[dict[str, Any]]) -> None:
        """Swap the whole history (after condensation) in one transaction."""
        with self._atomic():
            self._write("DELETE FROM messages WHERE run_id = ?", [run_id])
            for seq, message in enumerate(history):
                self._put_message(run_id, seq, message)

    @lane.normal
    def failed_tool_calls(self, run_ids: Sequence[str]) -> dict[str, int]:
        """How many of each run's tool calls ended in an error (a person's denial is not a failure); a run with
        none is absent. One query for a page of runs."""
        if not run_ids:
            return {}
        marks = _marks(run_ids)
        rows = self._select(
            f"SELECT r.run_id, COUNT(*) AS n FROM tool_results r WHERE r.run_id IN ({marks}) AND r.is_error = 1 "
            "AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.run_id AND a.tool_use_id = r.tool_use_id "
            "AND a.state <> 'approved') GROUP BY r.run_id",
            list(run_ids),
        )
        return {str(r["run_id"]): int(r["n"]) for r in rows}

    @lane.normal
    def history(self, run_id: str) -> list[dict[str, Any]]:
        return [
            {"role": r["role"], "content": json.loads(r["content"])}
            for r in self._rows("messages", "run_id = ?", [run_id], order_by="seq")
        ]

    @lane.normal
    def save_tool_result(
        self,
        run_id: str,
        *,
        tool_use_id: str,
        tool: str,
        args: dict[str, Any],
        content: str | None,
        is_error: bool,
        confirmed_by: str | None,
        steps: Iterable[StepEntry] = (),
    ) -> bool:
        """A call's result. `content` None claims the call's "started" marker, compare-and-set and durably:
        True only for the one caller that inserted it, the only one that may run the call, and never once a
        Stop was recorded for the run (a Stop wins over an approval not yet acted on, in any process).
        `steps`: trace rows written in the same transaction (a claim takes none: it commits alone, durably)."""
        result = CallResult(
            tool_use_id=tool_use_id,
            tool=tool,
            args=args,
            content=content or "",
            is_error=is_error,
            confirmed_by=confirmed_by,
        )
        if content is None:
            with self._durably():
                return (
                    self._write(
                        f"INSERT INTO tool_results {_RESULT_COLUMNS} SELECT ?, ?, ?, ?, ?, ?, ?, ? "
                        "WHERE NOT EXISTS (SELECT 1 FROM runs WHERE id = ? AND stop_requested_by IS NOT NULL) "
                        "ON CONFLICT DO NOTHING",
                        [*self._result_row(run_id, result, started=True), run_id],
                    )
                    == 1
                )
        self.save_tool_results(run_id, [result], steps=steps)
        return True

    @lane.normal
    def save_tool_results(self, run_id: str, results: Iterable[CallResult], *, steps: Iterable[StepEntry] = ()) -> None:
        """Finished calls' results (each replacing its started marker, if it had one) and trace rows, in one
        transaction; an approved call's result is also given to each reach's `Tables.on_approved` in it."""
        with self._atomic():
            self._add_steps(run_id, steps)
            for r in results:
                self._write(
                    f"INSERT INTO tool_results {_RESULT_COLUMNS} VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (run_id, tool_use_id) DO UPDATE SET tool = excluded.tool, args = excluded.args, "
                    "content = excluded.content, is_error = excluded.is_error, "
                    "confirmed_by = excluded.confirmed_by, created_at = excluded.created_at",
                    self._result_row(run_id, r),
                )
                if r.confirmed_by:  # an approved call's outcome: each reach's tables take it (`Tables.on_approved`)
                    self._hooks("on_approved", run_id, r)

    def _result_row(self, run_id: str, r: CallResult, *, started: bool = False) -> list[Any]:
        """The row of `r` (`started`: its started marker, no content yet), redacted."""
        content = None if started else redact(r.content)
        return [
            run_id,
            r.tool_use_id,
            r.tool,
            json.dumps(redact_value(r.args)),
            content,
            int(r.is_error),
            r.confirmed_by,
            self.sql.now(),
        ]

    @lane.normal
    def tool_results(self, run_id: str, ids: Sequence[str] | None = None) -> dict[str, ToolResultRow]:
        """The run's stored results by tool_use_id (only those of `ids` when given: one turn's calls)."""
        where, params = "run_id = ?", [run_id]
        if ids is not None:
            where += f" AND tool_use_id IN ({_marks(ids)})"
            params += list(ids)
        rows = self._rows("tool_results", where, params)
        return {r["tool_use_id"]: _decode(ToolResultRow, r) for r in rows}

    @lane.normal
    def add_step(self, run_id: str, kind: str, data: dict[str, Any]) -> None:
        self._add_steps(run_id, [(kind, data)])

    @lane.normal
    def add_steps(self, run_id: str, steps: Iterable[StepEntry]) -> None:
        """Several trace rows in one transaction (a run's steps written since its last store write)."""
        with self._atomic():
            self._add_steps(run_id, steps)

    def _add_steps(self, run_id: str, steps: Iterable[StepEntry]) -> None:
        """Each step as (kind, data), redacted here like everything the store writes."""
        rows = [(run_id, kind, json.dumps(redact_value(data), default=str)) for kind, data in steps]
        now = self.sql.now() if rows else 0.0
        for start in range(0, len(rows), _STEPS_A_STATEMENT):  # a step's two or three rows: one statement
            chunk = rows[start : start + _STEPS_A_STATEMENT]
            self._write(
                f"INSERT INTO steps (run_id, kind, data, at) VALUES {', '.join(['(?, ?, ?, ?)'] * len(chunk))}",
                [value for row in chunk for value in (*row, now)],
            )

    @lane.normal
    def steps(self, run_id: str) -> list[Step]:
        return [_decode(Step, r) for r in self._rows("steps", "run_id = ?", [run_id], order_by="id")]
