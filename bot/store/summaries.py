"""The living summary's record: every accepted update_summary of a run, with its step and time, oldest first."""

from __future__ import annotations

import json
from dataclasses import dataclass

from bot.core.redact import redact_value
from bot.run.summary import Summary
from bot.store.lane import lane
from bot.store.rows import _decode, new_id
from bot.store.sql import LedgerBase


@dataclass(frozen=True)
class SummaryRow:
    """One accepted update: the run step that made it, when, and the summary."""

    run_id: str
    step: int
    at: float
    summary: Summary


class SummaryRows(LedgerBase):
    """The summaries table. The SQL, run on the store's thread."""

    @lane.normal
    def add_summary(self, run_id: str, *, step: int, summary: Summary) -> None:
        """Store an accepted update; in the same transaction each reach's tables take it (`Tables.on_summary`)."""
        with self._atomic():
            self._write(
                "INSERT INTO summaries (id, run_id, step, summary, at) VALUES (?, ?, ?, ?, ?)",
                [new_id("sum"), run_id, step, json.dumps(redact_value(summary.to_json())), self.sql.now()],
            )
            self._hooks("on_summary", run_id, summary)

    @lane.normal
    def summaries(self, run_id: str) -> list[SummaryRow]:
        """The run's accepted updates, oldest first."""
        rows = self._rows("summaries", "run_id = ?", [run_id], order_by="at, step, id")
        return [_decode(SummaryRow, r, summary=Summary.from_json(json.loads(r["summary"]))) for r in rows]

    @lane.normal
    def last_summary(self, run_id: str) -> Summary | None:
        """The run's newest accepted summary (None: it has none)."""
        rows = self.summaries(run_id)
        return rows[-1].summary if rows else None
