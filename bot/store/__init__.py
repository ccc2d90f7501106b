"""Everything a run knows, in SQLite (the embedded default) or Postgres (several replicas), owned by one
writer thread per process.

`Ledger` is the synchronous store bound to the thread that opened it (the CLI uses it directly); its SQL is
written once for both databases (bot/store/backends.py runs it, bot/store/migrations.py shapes the schema), one module
per table group: runs and leases (runs.py), trace (trace.py: messages, tool results, steps), events
(events.py), inbox and store-then-ack (inbox.py), approvals (approvals.py), outbox (outbox.py), feedback
(feedback.py), living summaries (summaries.py). A reach keeps its own tables in its folder (`Tables`: migrations
and store functions, bot/store/migrations.py and lane.py), handed to the store by whoever opens it. `Store` is
the async facade the bot uses, derived from Ledger (lane.py): every call runs on the store's own thread
(writer.py), so a connection never crosses threads, and on Postgres each call is one serializable
transaction, so replicas sharing the database get the same guarantees one process gets from SQLite's single
writer. The store persists and redacts (rows.py: what is written is redacted at this boundary).
"""

from __future__ import annotations

from bot.store.alerts import AcceptedAlert, AlertGroup, AlertOutcome
from bot.store.ledger import Ledger
from bot.store.migrations import Tables
from bot.store.rows import ACTIVE_STATES, new_id
from bot.store.summaries import SummaryRow
from bot.store.writer import StoreBase, StoreUnavailable

__all__ = [
    "ACTIVE_STATES",
    "AcceptedAlert",
    "AlertGroup",
    "AlertOutcome",
    "Ledger",
    "Store",
    "StoreUnavailable",
    "SummaryRow",
    "Tables",
    "new_id",
]


class Store(StoreBase, Ledger):  # type: ignore[misc]  # its close is async: it ends the writer thread too
    """Async facade over Ledger: every call runs on one dedicated writer thread (see bot.store.writer); its
    methods are the Ledger's marked with a lane (see bot.store.lane), awaited.

    `path` is a SQLite file path or a postgresql:// URL (then also `listen` for other replicas' news); `tables`
    the reaches' tables, migrated after the core's."""
