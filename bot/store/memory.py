"""Incident memory's table group (docs/context.md, Incident memory): a record per ended run, searched with the store's
own full-text engine (FTS5 bm25 on SQLite, a weighted tsvector with ts_rank on Postgres), forgotten and swept.

Visibility is part of every search's WHERE: a record from a private channel, a DM or a group DM is returned
only to a search asked from that same channel; a public channel's anywhere. Records marked *Not helpful* come
after every other match (still ranked among themselves) and say so. Whether memory is enabled is the caller's
concern: these calls do what they are asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.core.types import RunStatus
from bot.store.incident_rows import (
    RECORDS,
    SEARCH_COLUMNS,
    record_of_run,
    record_terms,
    uncount_records,
    write_record,
)
from bot.store.incidents import (
    DEFAULT_LIMIT,
    FOCUS_FROM,
    WEIGHTS,
    Incident,
    IncidentMatch,
    SearchPlan,
    Targets,
    check_kind,
    check_limit,
    decode_incident,
    fts5_plan,
    latest_feedback,
    pg_plan,
    pg_tsquery,
    query_tokens,
    search_plans,
)
from bot.store.lane import lane
from bot.store.rows import _marks
from bot.store.sql import LedgerBase

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


class MemoryRows(LedgerBase):
    """The incidents and incident_facets tables (and SQLite's incidents_fts). The SQL, run on the store's thread."""

    @lane.normal
    def record_incident(
        self,
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
        with self._atomic():
            rows = self._select("SELECT * FROM runs WHERE id = ?", [run_id])
            if not rows:
                raise KeyError(f"no run {run_id!r}")
            if rows[0]["status"] != RunStatus.FINISHED.value:
                raise ValueError(f"run {run_id} has not ended: only an ended run is remembered")
            record = record_of_run(
                self._select,
                rows[0],
                kind=kind,
                title=title,
                labels=dict(labels or {}),
                targets=targets,
                answer=answer,
                permalink=permalink,
            )
            write_record(self._select, self._write, record)
            if kind is not None:
                self._write(
                    "UPDATE incidents SET kind = ? WHERE channel = ? AND kind != ?",
                    [checked, record.fields["channel"], checked],
                )
            else:
                self.narrow_incidents(str(record.fields["channel"]), None)
            found = self.incident(run_id)
        assert found is not None
        return found

    @lane.normal
    def narrow_incidents(self, channel: str, kind: str | None) -> int:
        """`channel` is `kind` now (None: Slack could not say, so private): unless that is public, its records
        still offered everywhere are offered only in it from now on. Never widens (a cached answer may be old);
        how many records changed."""
        checked = check_kind(kind)
        if checked == "public":
            return 0
        return self._write("UPDATE incidents SET kind = ? WHERE channel = ? AND kind = 'public'", [checked, channel])

    @lane.normal
    def incident(self, run_id: str) -> Incident | None:
        rows = self._select(f"SELECT {_READ} FROM incidents WHERE run_id = ?", [run_id])
        return decode_incident(rows[0]) if rows else None

    @lane.normal
    def search_incidents(
        self,
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
            for r in self._select(
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
            for sql, match in self._ranking(plan):
                for r in self._select(sql + tail, [*match, *params]):
                    ranked[str(r["run_id"])] = r
            if n + 1 == len(plans):
                break
            if n + 2 == len(plans) and len(ranked) >= limit:
                break  # the last pass ranks every match: only when the narrower ones found fewer than asked
            best = sorted(ranked.values(), key=_order)[:limit]
            unknown = [str(r["run_id"]) for r in best if str(r["run_id"]) not in shared]
            if unknown:
                for r in self._select(
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
            for r in self._select(f"SELECT {_READ} FROM incidents WHERE run_id IN ({_marks(ids)})", ids)
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

    def _ranking(self, plan: SearchPlan) -> list[tuple[str, list[str]]]:
        """One pass's queries (SQL up to its WHERE's filters, and the MATCH parameters): each answers its
        candidates' run_id, score, not-helpful flag and end, read from an index, not the records."""
        if self.backend == "postgres":
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
    def note_incident_feedback(self, run_id: str) -> bool:
        """The record takes its run's latest feedback click (call it with `record_feedback`, in its
        transaction); False when the run is not remembered."""
        with self._atomic():
            latest = latest_feedback(self._select("SELECT id, value, at FROM feedback WHERE run_id = ?", [run_id]))
            return self._write("UPDATE incidents SET feedback = ? WHERE run_id = ?", [latest.value, run_id]) == 1

    @lane.normal
    def forget(self, run_id: str) -> bool:
        """Take a run out of memory (its record, facets and full-text entry); False when it was not there."""
        with self._atomic():
            uncount_records(self._select, self._write, [run_id])
            self._write("DELETE FROM incident_facets WHERE run_id = ?", [run_id])
            return self._write("DELETE FROM incidents WHERE run_id = ?", [run_id]) == 1

    @lane.background
    def sweep_incidents(self, retention_days: float, *, now: float, batch: int = SWEEP_BATCH) -> int:
        """Delete up to `batch` records that ended more than `retention_days` ago (0: keep forever); how many
        went. Idempotent and bounded, so replicas sweeping at once only share the work: on Postgres the rows
        another replica is deleting are skipped, and each call is its own transaction. Call until it returns
        less than `batch`."""
        if retention_days <= 0:
            return 0
        with self._atomic():
            rows = self._select(
                f"SELECT run_id FROM incidents WHERE ended_at < ? ORDER BY ended_at LIMIT {int(batch)}"
                f"{self._skip_locked()}",
                [now - retention_days * 86400],
            )
            ids = [str(r["run_id"]) for r in rows]
            if not ids:
                return 0
            uncount_records(self._select, self._write, ids)
            self._write(f"DELETE FROM incident_facets WHERE run_id IN ({_marks(ids)})", ids)
            return self._write(f"DELETE FROM incidents WHERE run_id IN ({_marks(ids)})", ids)

    @lane.normal
    def incident_count(self) -> int:
        return int(self._select("SELECT COUNT(*) AS n FROM incidents", [])[0]["n"])
