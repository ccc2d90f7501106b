"""Slack event ids seen (deduplication: Slack redelivers)."""

from __future__ import annotations

from bot.store.lane import lane
from bot.store.sql import LedgerBase


class Events(LedgerBase):
    """The events dedupe table. The SQL, run on the store's thread."""

    @lane.urgent
    def claim_event(self, event_id: str) -> bool:
        """True the first time an event id is seen; Slack redelivers."""
        return (
            self._write(
                "INSERT INTO events (event_id, received_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                [event_id, self.sql.now()],
            )
            == 1
        )

    @lane.normal
    def prune_events(self, older_than: float) -> int:
        """Forget event ids received before `older_than` (Slack redelivers within minutes); how many went."""
        return self._write("DELETE FROM events WHERE received_at < ?", [older_than])
