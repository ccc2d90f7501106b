"""Slack event ids seen (deduplication: Slack redelivers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.store.entry import entry
from bot.store.sql import LedgerBase

if TYPE_CHECKING:
    pass


class Events(LedgerBase):
    """The events dedupe table. The SQL, run on the store's thread."""

    def claim_event(self, event_id: str) -> bool:
        """True the first time an event id is seen; Slack redelivers."""
        return (
            self._write(
                "INSERT INTO events (event_id, received_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                [event_id, self.sql.now()],
            )
            == 1
        )

    def prune_events(self, older_than: float) -> int:
        """Forget event ids received before `older_than` (Slack redelivers within minutes); how many went."""
        return self._write("DELETE FROM events WHERE received_at < ?", [older_than])


class EventsCalls:
    """The async entries of Events (see bot.store.entry: each runs its namesake on the writer thread)."""

    claim_event = entry(Events.claim_event, urgent=True)
    prune_events = entry(Events.prune_events)
