"""Feedback on answers and handoff reports: one row per person per answer message (who, which way, when), the
latest click replacing the earlier one."""

from __future__ import annotations

from bot.core.types import Feedback, FeedbackValue
from bot.store.lane import lane
from bot.store.rows import _decode, new_id
from bot.store.sql import LedgerBase


class FeedbackRows(LedgerBase):
    """The feedback table. The SQL, run on the store's thread."""

    @lane.urgent
    def record_feedback(
        self, *, click: str, run_id: str, user: str, value: FeedbackValue, channel: str, message_ts: str
    ) -> bool:
        """Store one click as `user`'s say on the answer message (`channel`, `message_ts`): it replaces their earlier
        click there (the latest counts, once), and in the same transaction let each reach's tables take it
        (`Tables.on_feedback`: incident memory's record takes the latest click). False when this click (`click`:
        Slack's id for it) is the one stored already (a redelivery)."""
        with self._atomic():
            stored = (
                self._write(
                    'INSERT INTO feedback (id, click, run_id, "user", value, channel, message_ts, at) '
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                    'ON CONFLICT (channel, message_ts, "user") DO UPDATE SET click = excluded.click, '
                    "run_id = excluded.run_id, value = excluded.value, at = excluded.at "
                    "WHERE feedback.click <> excluded.click",
                    [new_id("fb"), click, run_id, user, value.value, channel, message_ts, self.sql.now()],
                )
                == 1
            )
            if stored:
                self._hooks("on_feedback", run_id)
        return stored

    @lane.normal
    def feedback(self, run_id: str | None = None) -> list[Feedback]:
        """Each person's say on each answer, oldest first (one run's, with `run_id`)."""
        where, params = ("run_id = ?", [run_id]) if run_id is not None else ("1 = 1", [])
        return [_decode(Feedback, r) for r in self._rows("feedback", where, params, order_by="at, id")]

    @lane.normal
    def feedback_counts(self) -> dict[FeedbackValue, int]:
        """People's says so far by value, once per person per answer (every value present, 0 when none)."""
        rows = self._select("SELECT value, COUNT(*) AS n FROM feedback GROUP BY value", [])
        counts = dict.fromkeys(FeedbackValue, 0)
        return counts | {FeedbackValue(r["value"]): int(r["n"]) for r in rows if r["value"] in counts}
