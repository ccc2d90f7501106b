"""Writing incident records, in SQL both backends run (`?` placeholders): shared by the store's run-end call
(bot/store/memory.py) and the migration that backfills older runs (bot/migrations.py m015_incidents), which
runs before any Ledger exists, so it gets plain `select`/`execute` functions rather than a store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.incidents import (
    IncidentRow,
    Targets,
    answer_of,
    build_record,
    changes_of_approvals,
    latest_feedback,
    targets_of_calls,
)

Select = Callable[[str, list[Any]], list[dict[str, Any]]]
Execute = Callable[[str, list[Any]], int]

COLUMNS = (
    "run_id",
    "title",
    "task",
    "channel",
    "kind",
    "thread_ts",
    "permalink",
    "team",
    "started_at",
    "ended_at",
    "stop_reason",
    "targets",
    "targets_text",
    "labels",
    "changes",
    "answer",
    "feedback",
    "backfilled",
    "search_title",
    "search_targets",
    "search_body",
)
_UPSERT = (
    f"INSERT INTO incidents ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)}) "
    f"ON CONFLICT (run_id) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c != "run_id")
)


def write_record(execute: Execute, row: IncidentRow) -> None:
    """Insert or replace one record and its facets (a run end retried after a crash writes it again, whole)."""
    execute(_UPSERT, [row.fields[c] for c in COLUMNS])
    execute("DELETE FROM incident_facets WHERE run_id = ?", [row.fields["run_id"]])
    for facet, value in row.facets:
        execute(
            "INSERT INTO incident_facets (run_id, facet, value) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            [row.fields["run_id"], facet, value],
        )


def record_of_run(
    select: Select,
    run: dict[str, Any],
    *,
    kind: str | None,
    title: str | None = None,
    labels: dict[str, str] | None = None,
    targets: Targets | None = None,
    answer: str | None = None,
    permalink: str | None = None,
    backfilled: bool = False,
) -> IncidentRow:
    """The record of an ended run from what the store holds of it: approved changes (approvals), targets
    (its calls' arguments, plus `targets`), the answer (`answer`, else its output, else what the model last
    said) and the latest feedback click."""
    run_id = run["id"]
    approvals = select(
        "SELECT tool, args, state, decided_by, decided_name, created_at FROM approvals WHERE run_id = ?", [run_id]
    )
    calls = select("SELECT tool, args FROM tool_results WHERE run_id = ? ORDER BY created_at", [run_id])
    feedback = select("SELECT id, value, at FROM feedback WHERE run_id = ?", [run_id])
    if answer is None:
        messages = (
            []
            if run.get("output")
            else select(
                "SELECT role, content FROM messages WHERE run_id = ? AND role = 'assistant' ORDER BY seq", [run_id]
            )
        )
        answer = answer_of(run, messages)
    found = targets_of_calls(calls)
    return build_record(
        run,
        kind=kind,
        answer=answer,
        changes=changes_of_approvals(approvals),
        targets=found.merged(targets) if targets is not None else found,
        feedback=latest_feedback(feedback),
        ended_at=float(run.get("updated_at") or run.get("created_at") or 0.0),
        title=title,
        labels=labels,
        permalink=permalink,
        backfilled=backfilled,
    )


def backfill(select: Select, execute: Execute) -> int:
    """Every finished run not yet remembered becomes a record. Its conversation's kind is unknown (nothing
    stored says whether the channel was public), so it FAILS CLOSED: a backfilled record is `private`, offered
    only in its own channel, until a later record of that channel's runs (or the integrator) says otherwise."""
    runs = select(
        "SELECT * FROM runs WHERE status = 'finished' AND id NOT IN (SELECT run_id FROM incidents) ORDER BY created_at",
        [],
    )
    for run in runs:
        write_record(execute, record_of_run(select, run, kind=None, backfilled=True))
    return len(runs)
