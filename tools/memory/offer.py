"""At a run's start: the past incidents like this one, for the model's first turn and one thread line.

The threshold. bm25 (SQLite, negative-and-unbounded, flipped) and ts_rank (Postgres, 0..1, length-normalised)
score on different scales, so no absolute number means "similar" on both. A match is offered when
  - it shares at least MIN_WORDS distinct query words with the record (all of them when the query has fewer):
    one common word ("disk", "error") is not similarity, and this count is the same on both backends, since
    both index the same lexemes (tools.memory.incidents.terms); and
  - its score is at least RELATIVE of the best match's: what ranks far below the best is noise next to it.
At most OFFERED go to the model. The search is the only wait: one indexed query, no model call."""

from __future__ import annotations

from collections.abc import Mapping

from bot.store import Store
from tools.api import Offer, RunScope
from tools.memory.incidents import Incident, IncidentMatch, index_text, query_tokens
from tools.memory.render import offer_block, thread_line
from tools.memory.store import search_incidents

OFFERED, CANDIDATES = 3, 10
MIN_WORDS = 2
RELATIVE = 0.5


def offer_query(scope: RunScope) -> str:
    return " ".join((scope.task, scope.alertname or "", *scope.labels.values()))


def shared_words(match: IncidentMatch, tokens: list[str]) -> int:
    i = match.incident
    words = set(
        index_text(
            " ".join(
                (
                    i.title,
                    i.task,
                    i.targets.text(),
                    *i.labels.values(),
                    i.answer,
                    *(f"{c.tool} {c.args}" for c in i.changes),
                )
            ),
            limit=40_000,
        ).split()
    )
    return sum(1 for t in tokens if t in words)


def similar(matches: list[IncidentMatch], tokens: list[str]) -> list[IncidentMatch]:
    if not matches:
        return []
    best = max(m.score for m in matches)
    need = min(MIN_WORDS, len(tokens))
    kept = [m for m in matches if shared_words(m, tokens) >= need and (best <= 0 or m.score >= RELATIVE * best)]
    return kept[:OFFERED]  # the store's order: best first, not-helpful ones last


def same_thread(incident: Incident, scope: RunScope) -> bool:
    """The run itself, or an earlier run of its own thread: the thread already shows it, so it is never offered."""
    if incident.run_id == scope.run_id:
        return True
    return scope.thread_ts is not None and (incident.channel, incident.thread_ts) == (
        scope.conversation,
        scope.thread_ts,
    )


async def offer_for(resources: Mapping[type, object], scope: RunScope) -> Offer | None:
    store = resources.get(Store)
    if not isinstance(store, Store):
        return None
    query = offer_query(scope)
    tokens = query_tokens(query)
    if not tokens:
        return None
    # Visibility is in the store's WHERE: this run's conversation sees its own incidents and public ones.
    matches = await search_incidents(store, query, channel=scope.conversation, limit=CANDIDATES)
    found = [m for m in similar(matches, tokens) if not same_thread(m.incident, scope)]
    if not found:
        return None
    return Offer(source="memory", prompt=offer_block(found), thread_line=thread_line(found))
