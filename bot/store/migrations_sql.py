"""SQL that both backends' migrations run (bot.store.migrations for SQLite, bot.store.migrations_pg for Postgres):
written once so the two halves of a migration can't drift apart."""

from __future__ import annotations

import json
from typing import Any

from bot.core.titles import alert_title

# m003's backfill, the same SQL on both backends.
CAUSE_FROM_REASON = """
        UPDATE approvals SET cause = CASE
            WHEN state IN ('approved', 'denied') THEN 'click'
            WHEN state = 'expired' THEN 'expiry'
            WHEN reason LIKE 'run stopped%' THEN 'stop'
            WHEN reason LIKE 'the call changed%' THEN 'changed_call'
            ELSE 'reply' END
        WHERE state != 'pending'
"""


# m019's backfill: every group stored so far is its first occurrence, last sent when it last changed.
ALERT_OCCURRENCES = "UPDATE alert_groups SET occurrence = 1, seen_at = COALESCE(updated_at, created_at)"

ALERT_PAYLOADS = (
    "SELECT run_id, payload FROM alert_groups WHERE source = 'webhook' AND run_id IS NOT NULL "
    "AND payload IS NOT NULL AND payload != ''"
)


def alert_titles(rows: list[Any]) -> list[tuple[str, str]]:
    """(title, run id) for each (run id, stored payload) row; a payload that doesn't read as JSON is skipped."""
    titles = []
    for row in rows:
        run_id, payload = tuple(row.values()) if isinstance(row, dict) else tuple(row)
        try:
            parsed = json.loads(payload)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            titles.append((alert_title(parsed), str(run_id)))
    return titles


# Keep each person's latest click on each message (the highest `at`, then the highest id), on both backends.
FEEDBACK_LATEST = """DELETE FROM feedback WHERE EXISTS (
    SELECT 1 FROM feedback AS later WHERE later.channel IS NOT DISTINCT FROM feedback.channel
      AND later.message_ts IS NOT DISTINCT FROM feedback.message_ts AND later."user" = feedback."user"
      AND (later.at > feedback.at OR (later.at = feedback.at AND later.id > feedback.id)))"""


SUMMARIES = (
    "CREATE TABLE summaries (id TEXT PRIMARY KEY, run_id TEXT NOT NULL, step INTEGER NOT NULL, "
    "summary TEXT NOT NULL, at DOUBLE PRECISION NOT NULL)"
)
