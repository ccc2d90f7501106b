"""Thread replies stored for a run, and store-then-ack: a mention or a reply claimed and stored in one transaction."""

from __future__ import annotations

from bot.core.redact import redact
from bot.core.types import InboxItem, InboxState
from bot.store.lane import lane
from bot.store.rows import _decode, new_id
from bot.store.sql import LedgerBase


class Inbox(LedgerBase):
    """Thread replies for a run, and the one-transaction accept of a mention or a reply. The SQL, run on the store's
    thread."""

    @lane.normal
    def get_inbox(self, inbox_id: str) -> InboxItem:
        return _decode(InboxItem, self._rows("inbox", "id = ?", [inbox_id])[0])

    @lane.normal
    def add_inbox(self, *, run_id: str, channel: str, ts: str, user: str, text: str) -> str:
        inbox_id = new_id("msg")
        self._insert(
            "inbox",
            {
                "id": inbox_id,
                "run_id": run_id,
                "channel": channel,
                "ts": ts,
                "user": user,
                "text": redact(text),
                "state": InboxState.QUEUED.value,
                "created_at": self.sql.now(),
            },
        )
        return inbox_id

    @lane.normal
    def put_inbox_state(self, inbox_id: str, state: InboxState) -> None:
        self._write("UPDATE inbox SET state = ? WHERE id = ?", [state.value, inbox_id])

    @lane.normal
    def queued_inbox(self, run_id: str) -> list[InboxItem]:
        return [
            _decode(InboxItem, r)
            for r in self._rows("inbox", "run_id = ? AND state = 'queued'", [run_id], order_by="created_at")
        ]

    @lane.normal
    def inbox(self, run_id: str) -> list[InboxItem]:
        """Every thread reply stored for a run (queued, consumed or superseding), oldest first."""
        return [
            _decode(InboxItem, r)
            for r in self._select("SELECT * FROM inbox WHERE run_id = ? ORDER BY created_at", [run_id])
        ]
