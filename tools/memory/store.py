"""Incident memory's tables (docs/context.md, Incident memory): a record per ended run, searched with the store's own
full-text engine (FTS5 bm25 on SQLite, a weighted tsvector with ts_rank on Postgres), forgotten and swept; their
migrations on both backends (`TABLES`, which the store runs after the core's).

Visibility is part of every search's WHERE: a record from a private channel, a DM or a group DM is returned
only to a search asked from that same channel; a public channel's anywhere. Records marked *Not helpful* come
after every other match (still ranked among themselves) and say so. Whether memory is enabled is the caller's
concern: these calls do what they are asked. Each call is a store function (bot.store.lane): `fn(ledger, ...)`
on the store's thread, `await fn(store, ...)` from the bot.

A record is written in SQL both backends run (`?` placeholders), by the run end's call and by the migration that
backfills older runs, which runs before any Ledger exists and so gets plain `select`/`execute` functions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bot.core.types import RunStatus
from bot.store import Ledger
from bot.store.lane import lane
from bot.store.migrations import Migration, Tables, sql_calls
from bot.store.rows import _marks
from tools.memory.incidents import (
    DEFAULT_LIMIT,
    FOCUS_FROM,
    WEIGHTS,
    Incident,
    IncidentMatch,
    IncidentRow,
    SearchPlan,
    Targets,
    answer_of,
    build_record,
    changes_of_approvals,
    check_kind,
    check_limit,
    decode_incident,
    fts5_plan,
    latest_feedback,
    pg_plan,
    pg_tsquery,
    query_tokens,
    search_plans,
    targets_of_calls,
)

Select = Callable[[str, list[Any]], list[dict[str, Any]]]
Execute = Callable[[str, list[Any]], int]


def _upsert(columns: Sequence[str]) -> str:
    return (
        f"INSERT INTO incidents ({', '.join(columns)}) VALUES ({_marks(columns)}) ON CONFLICT (run_id) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in columns if c != "run_id")
    )


def write_record(select: Select, execute: Execute, row: IncidentRow, *, count: bool = True) -> None:
    """Insert or replace one record and its facets (a run end retried after a crash writes it again, whole),
    and count its words in incident_terms (`count=False`: m015's backfill, before that table exists; m018
    counts every record then)."""
    run_id = row.fields["run_id"]
    if count:
        before = select(f"SELECT {', '.join(SEARCH_COLUMNS)} FROM incidents WHERE run_id = ?", [run_id])
        delta = Counter(record_terms(row.fields))
        delta.subtract(record_terms(before[0]) if before else ())
        count_terms(execute, delta)
    execute(_upsert(list(row.fields)), list(row.fields.values()))
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


def _tally(records: Sequence[Mapping[str, Any]]) -> Counter[str]:
    """How many of `records` each word is in."""
    return Counter(term for r in records for term in record_terms(r))


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
            execute(f"DELETE FROM incident_terms WHERE docs <= 0 AND term IN ({_marks(gone)})", gone)


def uncount_records(select: Select, execute: Execute, run_ids: Sequence[str]) -> None:
    """Before records are deleted: their words are counted out of incident_terms."""
    if not run_ids:
        return
    columns = ", ".join(SEARCH_COLUMNS)
    rows = select(f"SELECT {columns} FROM incidents WHERE run_id IN ({_marks(run_ids)})", list(run_ids))
    count_terms(execute, {t: -n for t, n in _tally(rows).items()})


def count_all(select: Select, execute: Execute) -> int:
    """incident_terms from every stored record (m018, once): how many records were counted."""
    rows = select(f"SELECT {', '.join(SEARCH_COLUMNS)} FROM incidents", [])
    count_terms(execute, _tally(rows))
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


_READ = (
    "run_id, title, task, channel, kind, thread_ts, permalink, team, started_at, ended_at, stop_reason, "
    "targets, labels, changes, answer, feedback, backfilled"
)
# What ranking reads of each candidate (SQLite: all in idx_incidents_ranked); the records are read for the best.
_RANKED = "i.run_id, i.ended_at, (i.feedback = 'not_helpful') AS not_helpful"
# ts_rank's weights of D (body), C (unused), B (targets), A (title): WEIGHTS, scaled to ts_rank's 0..1.
_PG_WEIGHTS = f"'{{{WEIGHTS['body'] / 10}, 0.2, {WEIGHTS['targets'] / 10}, {WEIGHTS['title'] / 10}}}'"
# ts_rank's normalization 1 divides by 1 + log(length): like bm25, a match in a short record outranks one in a long
# record, so both backends order a corpus alike.
SWEEP_BATCH = 500


def _order(r: Mapping[str, Any]) -> tuple[bool, float, float, str]:
    """The SQL's ORDER BY, for merging passes: not-helpful last, best score, latest end, run id."""
    return bool(r["not_helpful"]), -float(r["score"]), -float(r["ended_at"]), str(r["run_id"])


@lane.normal
def record_incident(
    ledger: Ledger,
    run_id: str,
    *,
    kind: str | None,
    title: str | None = None,
    labels: Mapping[str, str] | None = None,
    targets: Targets | None = None,
    answer: str | None = None,
    permalink: str | None = None,
) -> Incident:
    """Remember an ended run: call it in the transaction that ends the run (after `finish_run`), so the
    record is searchable as soon as the end is stored. `kind` is the run's conversation as
    conversations.info says it now, asked at the end, never a cached answer (public/private/im/mpim; None:
    unknown, kept as private). A known kind is also what every earlier record of that channel is from now on
    (backfilled ones start private); an unknown one only narrows them (`narrow_incidents`). The rest
    comes from the store: task, times, stop reason, approved changes, targets named by its calls (plus
    `targets`), its answer (`answer`, else its output, else what the model last said), feedback."""
    checked = check_kind(kind)
    with ledger._atomic():
        rows = ledger._select("SELECT * FROM runs WHERE id = ?", [run_id])
        if not rows:
            raise KeyError(f"no run {run_id!r}")
        if rows[0]["status"] != RunStatus.FINISHED.value:
            raise ValueError(f"run {run_id} has not ended: only an ended run is remembered")
        record = record_of_run(
            ledger._select,
            rows[0],
            kind=kind,
            title=title,
            labels=dict(labels or {}),
            targets=targets,
            answer=answer,
            permalink=permalink,
        )
        write_record(ledger._select, ledger._write, record)
        if kind is not None:
            ledger._write(
                "UPDATE incidents SET kind = ? WHERE channel = ? AND kind != ?",
                [checked, record.fields["channel"], checked],
            )
        else:
            narrow_incidents(ledger, str(record.fields["channel"]), None)
        found = incident(ledger, run_id)
    assert found is not None
    return found


@lane.normal
def narrow_incidents(ledger: Ledger, channel: str, kind: str | None) -> int:
    """`channel` is `kind` now (None: Slack could not say, so private): unless that is public, its records
    still offered everywhere are offered only in it from now on. Never widens (a cached answer may be old);
    how many records changed."""
    checked = check_kind(kind)
    if checked == "public":
        return 0
    return ledger._write("UPDATE incidents SET kind = ? WHERE channel = ? AND kind = 'public'", [checked, channel])


@lane.normal
def incident(ledger: Ledger, run_id: str) -> Incident | None:
    rows = ledger._select(f"SELECT {_READ} FROM incidents WHERE run_id = ?", [run_id])
    return decode_incident(rows[0]) if rows else None


@lane.normal
def search_incidents(
    ledger: Ledger,
    query: str,
    *,
    channel: str,
    host: str | None = None,
    service: str | None = None,
    alertname: str | None = None,
    limit: int = DEFAULT_LIMIT,
    focus_from: int = FOCUS_FROM,
) -> list[IncidentMatch]:
    """Records matching any of the query's words, best first, that a run in `channel` may see; filtered
    to those whose targets or labels name exactly `host`, `service`, `alertname`. Not-helpful ones last.
    From `focus_from` records on, a large memory is searched by its rare words first (search_plans)."""
    limit = check_limit(limit)
    tokens = query_tokens(query)
    if not tokens:
        return []
    counts = {
        str(r["term"]): int(r["docs"])
        for r in ledger._select(
            f"SELECT term, docs FROM incident_terms WHERE term IN ({_marks([RECORDS, *tokens])})",
            [RECORDS, *tokens],
        )
    }
    plans = search_plans(tokens, counts, counts.get(RECORDS, 0), focus_from=focus_from)
    where = ["(i.kind = 'public' OR i.channel = ?)"]
    params: list[Any] = [channel]
    for facet, value in (("host", host), ("service", service), ("alertname", alertname)):
        if value is not None:
            where.append(
                "EXISTS (SELECT 1 FROM incident_facets f WHERE f.run_id = i.run_id AND f.facet = ? AND f.value = ?)"
            )
            params += [facet, value]
    tail = (
        " AND ".join(where) + f" ORDER BY (i.feedback = 'not_helpful'), score DESC, i.ended_at DESC, "
        f"i.run_id LIMIT {limit}"
    )
    ranked: dict[str, dict[str, Any]] = {}
    shared: dict[str, int] = {}  # run_id: how many of the query's words the record holds
    wanted = set(tokens)
    for n, plan in enumerate(plans):
        for sql, match in _ranking(ledger, plan):
            for r in ledger._select(sql + tail, [*match, *params]):
                ranked[str(r["run_id"])] = r
        if n + 1 == len(plans):
            break
        if n + 2 == len(plans) and len(ranked) >= limit:
            break  # the last pass ranks every match: only when the narrower ones found fewer than asked
        best = sorted(ranked.values(), key=_order)[:limit]
        unknown = [str(r["run_id"]) for r in best if str(r["run_id"]) not in shared]
        if unknown:
            for r in ledger._select(
                f"SELECT run_id, {', '.join(SEARCH_COLUMNS)} FROM incidents WHERE run_id IN ({_marks(unknown)})",
                unknown,
            ):
                shared[str(r["run_id"])] = len(wanted & record_terms(r))
        # Enough found, each holding two of the query's words: a stray rare word ("again") found records
        # that share only it, and the common words' records are still to be ranked.
        if sum(shared.get(str(r["run_id"]), 0) >= min(2, len(wanted)) for r in best) >= limit:
            break
    best = sorted(ranked.values(), key=_order)[:limit]
    if not best:
        return []
    ids = [str(r["run_id"]) for r in best]
    full = {
        str(r["run_id"]): r
        for r in ledger._select(f"SELECT {_READ} FROM incidents WHERE run_id IN ({_marks(ids)})", ids)
    }
    return [
        IncidentMatch(
            incident=decode_incident(full[r["run_id"]]),
            score=float(r["score"]),
            not_helpful=bool(r["not_helpful"]),
        )
        for r in best
        if r["run_id"] in full
    ]


def _ranking(ledger: Ledger, plan: SearchPlan) -> list[tuple[str, list[str]]]:
    """One pass's queries (SQL up to its WHERE's filters, and the MATCH parameters): each answers its
    candidates' run_id, score, not-helpful flag and end, read from an index, not the records."""
    if ledger.backend == "postgres":
        return [
            (
                f"SELECT {_RANKED}, ts_rank({_PG_WEIGHTS}, i.search, q, 1) AS score FROM incidents i, "
                "to_tsquery('simple', ?) m, to_tsquery('simple', ?) q WHERE i.search @@ m AND ",
                [pg_plan(plan), pg_tsquery(plan.words + plan.rest)],
            )
        ]
    weights = ", ".join(str(WEIGHTS[c]) for c in ("title", "targets", "body"))
    sql = (
        f"SELECT {_RANKED}, -bm25(incidents_fts, {weights}) AS score FROM incidents_fts "
        "JOIN incidents i INDEXED BY idx_incidents_ranked ON i.id = incidents_fts.rowid "
        "WHERE incidents_fts MATCH ? AND "
    )
    return [(sql, [match]) for match in fts5_plan(plan)]


@lane.urgent
def note_incident_feedback(ledger: Ledger, run_id: str) -> bool:
    """The record takes its run's latest feedback click (call it with `record_feedback`, in its
    transaction); False when the run is not remembered."""
    with ledger._atomic():
        latest = latest_feedback(ledger._select("SELECT id, value, at FROM feedback WHERE run_id = ?", [run_id]))
        return ledger._write("UPDATE incidents SET feedback = ? WHERE run_id = ?", [latest.value, run_id]) == 1


@lane.normal
def forget(ledger: Ledger, run_id: str) -> bool:
    """Take a run out of memory (its record, facets and full-text entry); False when it was not there."""
    with ledger._atomic():
        uncount_records(ledger._select, ledger._write, [run_id])
        ledger._write("DELETE FROM incident_facets WHERE run_id = ?", [run_id])
        return ledger._write("DELETE FROM incidents WHERE run_id = ?", [run_id]) == 1


@lane.background
def sweep_incidents(ledger: Ledger, retention_days: float, *, now: float, batch: int = SWEEP_BATCH) -> int:
    """Delete up to `batch` records that ended more than `retention_days` ago (0: keep forever); how many
    went. Idempotent and bounded, so replicas sweeping at once only share the work: on Postgres the rows
    another replica is deleting are skipped, and each call is its own transaction. Call until it returns
    less than `batch`."""
    if retention_days <= 0:
        return 0
    with ledger._atomic():
        rows = ledger._select(
            f"SELECT run_id FROM incidents WHERE ended_at < ? ORDER BY ended_at LIMIT {int(batch)}"
            f"{ledger._skip_locked()}",
            [now - retention_days * 86400],
        )
        ids = [str(r["run_id"]) for r in rows]
        if not ids:
            return 0
        uncount_records(ledger._select, ledger._write, ids)
        ledger._write(f"DELETE FROM incident_facets WHERE run_id IN ({_marks(ids)})", ids)
        return ledger._write(f"DELETE FROM incidents WHERE run_id IN ({_marks(ids)})", ids)


@lane.normal
def incident_count(ledger: Ledger) -> int:
    return int(ledger._select("SELECT COUNT(*) AS n FROM incidents", [])[0]["n"])


# --------------------------------------------------------------------------- the tables, on both backends

_COLUMNS = """
    run_id TEXT NOT NULL {key}, title TEXT NOT NULL, task TEXT, channel TEXT NOT NULL, kind TEXT NOT NULL,
    thread_ts TEXT, permalink TEXT, team TEXT, started_at {real}, ended_at {real} NOT NULL, stop_reason TEXT,
    targets TEXT NOT NULL DEFAULT '{{}}', targets_text TEXT, labels TEXT NOT NULL DEFAULT '{{}}',
    changes TEXT NOT NULL DEFAULT '[]', answer TEXT, feedback TEXT NOT NULL DEFAULT 'none',
    backfilled INTEGER NOT NULL DEFAULT 0, search_title TEXT, search_targets TEXT, search_body TEXT"""
_FACETS = (
    "CREATE INDEX idx_incidents_ended_at ON incidents (ended_at)",
    "CREATE INDEX idx_incidents_channel ON incidents (channel)",
    "CREATE TABLE incident_facets (run_id TEXT NOT NULL REFERENCES incidents (run_id), facet TEXT NOT NULL, "
    "value TEXT NOT NULL, PRIMARY KEY (run_id, facet, value))",
    "CREATE INDEX idx_incident_facets_facet_value ON incident_facets (facet, value)",
)
# SQLite: `id` is the rowid the FTS5 index points at, declared so VACUUM keeps it (an implicit rowid of a table
# keyed by TEXT may be renumbered, silently detaching the index); `run_id` is the record's key everywhere else.
_FTS = "search_title, search_targets, search_body"
_FTS_ADD = (
    f"INSERT INTO incidents_fts (rowid, {_FTS}) VALUES (new.id, new.search_title, new.search_targets, new.search_body);"
)
_FTS_REMOVE = (
    f"INSERT INTO incidents_fts (incidents_fts, rowid, {_FTS}) VALUES ('delete', old.id, old.search_title, "
    "old.search_targets, old.search_body);"
)
_SQLITE_INCIDENTS = (
    f"CREATE TABLE incidents (id INTEGER PRIMARY KEY, {_COLUMNS.format(key='UNIQUE', real='REAL')})",
    *_FACETS,
    f"CREATE VIRTUAL TABLE incidents_fts USING fts5({_FTS}, content='incidents', content_rowid='id', "
    "tokenize='unicode61 remove_diacritics 0')",
    f"CREATE TRIGGER incidents_fts_insert AFTER INSERT ON incidents BEGIN {_FTS_ADD} END",
    f"CREATE TRIGGER incidents_fts_delete AFTER DELETE ON incidents BEGIN {_FTS_REMOVE} END",
    f"CREATE TRIGGER incidents_fts_update AFTER UPDATE OF {_FTS} ON incidents BEGIN {_FTS_REMOVE} {_FTS_ADD} END",
)
# Postgres: a generated, weighted tsvector and its GIN index.
_PG_INCIDENTS = (
    f"""CREATE TABLE incidents ({_COLUMNS.format(key="PRIMARY KEY", real="DOUBLE PRECISION")},
        search tsvector GENERATED ALWAYS AS (
            setweight(to_tsvector('simple', coalesce(search_title, '')), 'A')
            || setweight(to_tsvector('simple', coalesce(search_targets, '')), 'B')
            || setweight(to_tsvector('simple', coalesce(search_body, '')), 'D')) STORED)""",
    "CREATE INDEX idx_incidents_search ON incidents USING GIN (search)",
    *_FACETS,
)
# The word counts: how many records hold each word (the row '' counts the records), kept in the transaction that
# writes or deletes a record, read by the search to tell rare words from common ones.
_TERMS = "CREATE TABLE incident_terms (term TEXT PRIMARY KEY, docs INTEGER NOT NULL)"
# SQLite: what the search filters and orders by, so ranking thousands of matches reads no record (a record's
# answer spans overflow pages).
_RANKED_INDEX = "CREATE INDEX idx_incidents_ranked ON incidents (id, kind, channel, feedback, ended_at, run_id)"


def _then(statements: tuple[str, ...], fill: Callable[[Select, Execute], int]) -> Callable[[Any], None]:
    """A migration step: `statements`, then `fill` (rows Python writes: it redacts and splits words as the store
    does) on the same connection."""

    def step(conn: Any) -> None:
        select, execute = sql_calls(conn)
        for statement in statements:
            execute(statement, [])
        fill(select, execute)

    return step


TABLES = Tables(
    name="memory",
    migrations=(
        # One record per ended run, full-text indexed, with exact-match facets (host, service, alertname…); every
        # run finished so far is backfilled, as `private` (see backfill).
        Migration("m015_incidents", sqlite=_then(_SQLITE_INCIDENTS, backfill), postgres=_then(_PG_INCIDENTS, backfill)),
        # The word counts (search_plans reads them to search a large memory by its rare words first), counted from
        # every stored record.
        Migration(
            "m018_incident_terms",
            sqlite=_then((_TERMS, _RANKED_INDEX), count_all),
            postgres=_then((_TERMS,), count_all),
        ),
    ),
    on_feedback=note_incident_feedback,
    on_kind=narrow_incidents,
)
