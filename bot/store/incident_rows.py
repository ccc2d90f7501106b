"""Writing incident records, in SQL both backends run (`?` placeholders): shared by the store's run-end call
(bot/store/memory.py) and the migration that backfills older runs (bot/store/migrations.py m015_incidents), which
runs before any Ledger exists, so it gets plain `select`/`execute` functions rather than a store."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bot.store.incidents import (
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


def write_record(select: Select, execute: Execute, row: IncidentRow, *, count: bool = True) -> None:
    """Insert or replace one record and its facets (a run end retried after a crash writes it again, whole),
    and count its words in incident_terms (`count=False`: m015's backfill, before that table exists; m018
    counts every record then)."""
    run_id = row.fields["run_id"]
    if count:
        before = select(f"SELECT {', '.join(SEARCH_COLUMNS)} FROM incidents WHERE run_id = ?", [run_id])
        delta = dict.fromkeys(record_terms(before[0]), -1) if before else {}
        for term in record_terms(row.fields):
            delta[term] = delta.get(term, 0) + 1
        count_terms(execute, delta)
    execute(_UPSERT, [row.fields[c] for c in COLUMNS])
    execute("DELETE FROM incident_facets WHERE run_id = ?", [run_id])
    for facet, value in row.facets:
        execute(
            "INSERT INTO incident_facets (run_id, facet, value) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            [run_id, facet, value],
        )


# --------------------------------------------------------------------------- word counts (incident_terms)

SEARCH_COLUMNS = ("search_title", "search_targets", "search_body")
RECORDS = ""  # incident_terms' row for the number of records: no word is empty
_COUNT_BATCH = 400


def record_terms(fields: Mapping[str, Any]) -> set[str]:
    """The distinct words a record is indexed under (its search columns hold index_text's lexemes, space
    separated, which is what both full-text engines index), plus RECORDS: one record."""
    return {RECORDS, *" ".join(str(fields.get(c) or "") for c in SEARCH_COLUMNS).split()}


def count_terms(execute: Execute, delta: Mapping[str, int]) -> None:
    """Add `delta` to each word's record count, in word order (two replicas' run ends lock the rows they share
    in the same order, so they never deadlock); words whose count reaches 0 are deleted."""
    changed = sorted((t, n) for t, n in delta.items() if n)
    for start in range(0, len(changed), _COUNT_BATCH):
        batch = changed[start : start + _COUNT_BATCH]
        execute(
            f"INSERT INTO incident_terms (term, docs) VALUES {', '.join('(?, ?)' for _ in batch)} "
            "ON CONFLICT (term) DO UPDATE SET docs = incident_terms.docs + excluded.docs",
            [v for pair in batch for v in pair],
        )
        if gone := [t for t, n in batch if n < 0]:  # only words this call lowered can have reached 0
            execute(f"DELETE FROM incident_terms WHERE docs <= 0 AND term IN ({', '.join('?' for _ in gone)})", gone)


def uncount_records(select: Select, execute: Execute, run_ids: Sequence[str]) -> None:
    """Before records are deleted: their words are counted out of incident_terms."""
    if not run_ids:
        return
    marks = ", ".join("?" for _ in run_ids)
    rows = select(f"SELECT {', '.join(SEARCH_COLUMNS)} FROM incidents WHERE run_id IN ({marks})", list(run_ids))
    delta: dict[str, int] = {}
    for r in rows:
        for term in record_terms(r):
            delta[term] = delta.get(term, 0) - 1
    count_terms(execute, delta)


def count_all(select: Select, execute: Execute) -> int:
    """incident_terms from every stored record (m018, once): how many records were counted."""
    delta: dict[str, int] = {}
    rows = select(f"SELECT {', '.join(SEARCH_COLUMNS)} FROM incidents", [])
    for r in rows:
        for term in record_terms(r):
            delta[term] = delta.get(term, 0) + 1
    count_terms(execute, delta)
    return len(rows)


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
        write_record(select, execute, record_of_run(select, run, kind=None, backfilled=True), count=False)
    return len(runs)
