"""Incident memory's record and query, with no store in sight (docs/context.md, Incident memory): what one ended run
becomes (redacted, built from the rows the store already holds), and how a person's words become a full-text query.

Both backends index the same lexemes: every searchable text is normalised here first (NFKD, diacritics and case
dropped, split into runs of letters and digits, stopwords and over-long tokens left out), so SQLite's FTS5 and
Postgres' `simple` configuration see identical words and a query matches the same records on either. The
record is built by `build_record` from raw rows (a dict per row), which both the live run end
and the migration's backfill of older runs (tools/memory/store.py) use.
"""

from __future__ import annotations

import enum
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.core.redact import redact, redact_value
from bot.store.rows import _decode

KINDS = ("public", "private", "im", "mpim")  # conversations.info: is_channel/is_private/is_im/is_mpim
DEFAULT_LIMIT, MAX_LIMIT = 5, 20
MAX_QUERY_TOKENS = 32
MAX_TOKEN_CHARS = 64  # longer runs are hashes and base64, never what someone types
TITLE_CHARS, ANSWER_CHARS, BODY_CHARS, ARGS_CHARS = 160, 20_000, 8_000, 200
WEIGHTS = {"title": 10.0, "targets": 5.0, "body": 1.0}  # FTS5 bm25 column weights; Postgres: A, B, D
# Words in nearly every task: they would match (and rank) every record, and cost the search its speed.
STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have how i if in into is it its "  # noqa: SIM905 (a word list reads best as words)
    "me my of on or our please should so than that the their them then there these this those to us was we "
    "were what when where which while who why will with would you your".split()
)
_TOKEN = re.compile(r"[^\W_]+")
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")  # DiskFull -> Disk, Full; HTTPError -> HTTP, Error
# Tool arguments that name what a run touched, by Targets field (bot's tools: host, cluster, namespace,
# unit/service; the Kubernetes tools name their workload `name`).
_TARGET_KEYS = {
    "hosts": ("host", "hosts", "hostname"),
    "clusters": ("cluster",),
    "namespaces": ("namespace",),
    "services": ("service", "unit"),
}


class IncidentFeedback(enum.StrEnum):
    """The latest feedback click on the run's answer or report."""

    HELPFUL = "helpful"
    NOT_HELPFUL = "not_helpful"
    NONE = "none"


FEEDBACK_OF_CLICK = {"positive": IncidentFeedback.HELPFUL, "negative": IncidentFeedback.NOT_HELPFUL}


@dataclass(frozen=True, kw_only=True)
class Targets:
    """What a run touched."""

    hosts: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    services: tuple[str, ...] = ()

    def merged(self, other: Targets) -> Targets:
        return Targets(**{k: _unique((*getattr(self, k), *getattr(other, k))) for k in _TARGET_FIELDS})

    def to_dict(self) -> dict[str, list[str]]:
        return {k: list(getattr(self, k)) for k in _TARGET_FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Targets:
        return cls(**{k: tuple(str(v) for v in data.get(k) or ()) for k in _TARGET_FIELDS})

    def text(self) -> str:
        return " ".join(value for k in _TARGET_FIELDS for value in getattr(self, k))


_TARGET_FIELDS = tuple(_TARGET_KEYS)


@dataclass(frozen=True, kw_only=True)
class IncidentChange:
    """One approved change: the tool, its arguments in a line, who confirmed it (a user id) and their name."""

    tool: str
    args: str
    confirmed_by: str | None
    approver: str | None


@dataclass(frozen=True, kw_only=True)
class Incident:
    """One ended run as memory holds it (a row of `incidents`), every text redacted."""

    run_id: str
    title: str
    task: str
    channel: str
    kind: str  # public | private | im | mpim
    thread_ts: str | None
    permalink: str | None
    team: str | None
    started_at: float | None
    ended_at: float
    stop_reason: str | None
    targets: Targets
    labels: dict[str, str]
    changes: tuple[IncidentChange, ...]
    answer: str
    feedback: IncidentFeedback
    backfilled: bool = False


@dataclass(frozen=True, kw_only=True)
class IncidentMatch:
    """A search result: the record, its rank score (backend-specific) and whether it was marked not helpful."""

    incident: Incident
    score: float
    not_helpful: bool


@dataclass(frozen=True, kw_only=True)
class IncidentRow:
    """What one record writes: the `incidents` row and its exact-match facets (host, service, alertname …)."""

    fields: dict[str, Any]
    facets: tuple[tuple[str, str], ...] = field(default=())


# --------------------------------------------------------------------------- words


def terms(text: str) -> list[str]:
    """The lexemes both backends index and query: lower-cased letter/digit runs without diacritics, and a
    camel-cased name's parts after it (an alert's `DiskFull` is found by "disk full" too)."""
    folded = (  # ASCII has nothing to decompose: the per-character pass is most of a long text's cost
        text
        if text.isascii()
        else "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    )
    out: list[str] = []
    for token in _TOKEN.findall(folded):
        if len(token) > MAX_TOKEN_CHARS:
            continue
        out.append(token.lower())
        if not token.islower() and not token.isupper() and len(parts := _CAMEL.findall(token)) > 1:
            out.extend(p.lower() for p in parts)
    return out


def index_text(text: str, limit: int = BODY_CHARS) -> str:
    return " ".join(t for t in terms(text[:limit]) if t not in STOPWORDS)


def query_tokens(query: str) -> list[str]:
    """A person's words as distinct search tokens (first MAX_QUERY_TOKENS, stopwords dropped); [] for nothing."""
    out: list[str] = []
    for token in terms(query[:4000]):
        if token not in STOPWORDS and token not in out:
            out.append(token)
    return out[:MAX_QUERY_TOKENS]


def fts5_match(tokens: Sequence[str]) -> str:
    """FTS5 MATCH text: every token quoted (so `-`, `:`, `*`, `^`, NEAR are words), joined by OR."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in tokens)


def pg_tsquery(tokens: Sequence[str]) -> str:
    """to_tsquery('simple', …) text: every lexeme quoted, joined by | (the tokens hold no quote or operator)."""
    return " | ".join("'" + t.replace("'", "''") + "'" for t in tokens)


# --------------------------------------------------------------------------- searching a large memory

# Below FOCUS_FROM records a search ORs every word (exact bm25 / ts_rank order over every match: a few ms).
# Above, ranking every record that shares one common word ("disk", "web", the service's name) is what costs:
# at 100,000 records a task's words match 40,000 of them, and bm25 is ~1.5 µs a match. So a large memory is
# searched the way Lucene's common-terms query does it: a word in more than COMMON_SHARE of the records is
# common; the candidates are the records holding a rare word, or (no rare word) every common word, relaxed one
# common word at a time until enough are found; every candidate is still ranked by ALL the query's words,
# so a found record scores exactly as the plain OR search scores it. Only which records are considered
# changes: one that shares nothing but common words with the query is found only when the rare words' records
# are fewer than asked (a stray rare word, "again", can stand in front of them). A pass naming the rare words
# OR all the common ones in one MATCH would not do: FTS5 reports no instance of a phrase inside an AND that
# failed for the row, so those words would go unscored. Both backends plan from the same counts
# (incident_terms), so they consider the same records.
FOCUS_FROM = 20_000
COMMON_SHARE = 0.01


@dataclass(frozen=True)
class SearchPlan:
    """One pass of a search: the records holding any of `words` (`every`: all of them) are the candidates,
    ranked by `words` and `rest` together (every query word that some record holds)."""

    words: tuple[str, ...]
    every: bool = False
    rest: tuple[str, ...] = ()


def search_plans(
    tokens: Sequence[str], docs: Mapping[str, int], records: int, *, focus_from: int = FOCUS_FROM
) -> list[SearchPlan]:
    """The passes to run in order, stopping once they found the limit (a pass's matches join the earlier
    ones'). `docs`: how many records hold each word (absent: none); `records`: how many there are."""
    present = [t for t in tokens if docs.get(t, 0) > 0]  # a word no record holds scores nothing anywhere
    if not present:
        return []
    everything = SearchPlan(tuple(present))
    if records < focus_from:
        return [everything]
    cutoff = max(1.0, COMMON_SHARE * records)
    rare = tuple(t for t in present if docs[t] <= cutoff)
    common = sorted((t for t in present if docs[t] > cutoff), key=lambda t: (docs[t], present.index(t)))
    plans = [SearchPlan(rare, rest=tuple(common))] if rare else []
    for n in range(len(common), 1, -1):  # all the common words, then all but the commonest, …
        plans.append(SearchPlan(tuple(common[:n]), every=True, rest=rare + tuple(common[n:])))
    if common:
        plans.append(SearchPlan(tuple(common[:1]), rest=rare + tuple(common[1:])))
    if everything not in plans:  # nothing narrower found enough: every match, as below FOCUS_FROM
        plans.append(everything)
    return plans


def fts5_plan(plan: SearchPlan) -> list[str]:
    """The FTS5 MATCH texts of one pass. bm25 scores only the phrases its MATCH names, each once, so the words
    that rank but don't select (`rest`) go in as `(W) AND (rest)` and `(W) NOT (rest)`: two queries that
    together match W's records, every query word named exactly once in each."""
    words = fts5_match(plan.words) if not plan.every else " AND ".join(fts5_match([w]) for w in plan.words)
    if not plan.rest:
        return [words]
    rest = fts5_match(plan.rest)
    return [f"({words}) AND ({rest})", f"({words}) NOT ({rest})"]


def pg_plan(plan: SearchPlan) -> str:
    """The to_tsquery text that selects one pass's candidates (Postgres ranks them by a second, whole query)."""
    return pg_tsquery(plan.words) if not plan.every else " & ".join(pg_tsquery([w]) for w in plan.words)


def check_limit(limit: int) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"limit must be a whole number from 1 to {MAX_LIMIT}, not {limit!r}")
    return min(limit, MAX_LIMIT)


def check_kind(kind: str | None) -> str:
    """A conversation's kind; unknown (None) fails closed as private: offered only in its own channel."""
    if kind is None:
        return "private"
    if kind not in KINDS:
        raise ValueError(f"conversation kind must be one of {', '.join(KINDS)} (or None: unknown), not {kind!r}")
    return kind


# --------------------------------------------------------------------------- the record, from the store's rows


def targets_of_calls(tool_results: Iterable[Mapping[str, Any]]) -> Targets:
    """The hosts, clusters, namespaces and services a run's tool calls named in their arguments."""
    found: dict[str, list[str]] = {name: [] for name in _TARGET_FIELDS}
    for row in tool_results:
        args = _json(row.get("args"), {})
        if not isinstance(args, dict):
            continue
        for name, keys in _TARGET_KEYS.items():
            found[name] += [value for key in keys for value in _strings(args.get(key))]
        if str(row.get("tool") or "").startswith("k8s_"):
            found["services"] += _strings(args.get("name"))
    return Targets(**{name: _unique(values) for name, values in found.items()})


def changes_of_approvals(approvals: Iterable[Mapping[str, Any]]) -> tuple[IncidentChange, ...]:
    """Every approved change, in the order it was asked for."""
    rows = sorted((a for a in approvals if a.get("state") == "approved"), key=lambda a: a.get("created_at") or 0)
    return tuple(
        IncidentChange(
            tool=str(a.get("tool") or ""),
            args=args_line(_json(a.get("args"), {})),
            confirmed_by=a.get("decided_by"),
            approver=a.get("decided_name"),
        )
        for a in rows
    )


def args_line(args: Any) -> str:
    """Tool arguments in one short line (`host=web-03, path=/var/log`), redacted."""
    if not isinstance(args, dict):
        return redact(str(args))[:ARGS_CHARS]
    parts = [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in redact_value(args).items()]
    line = ", ".join(parts)
    return line if len(line) <= ARGS_CHARS else line[: ARGS_CHARS - 1] + "…"


def answer_of(run: Mapping[str, Any], messages: Iterable[Mapping[str, Any]]) -> str:
    """The run's answer (`output`), or else what the model last said (the handoff report's last reasoning)."""
    if run.get("output"):
        return str(run["output"])
    said = ""
    for message in messages:
        if message.get("role") != "assistant":
            continue
        content = _json(message.get("content"), [])
        for block in content if isinstance(content, list) else []:
            kind = block.get("type") if isinstance(block, dict) else None
            text = block.get("text") if kind == "text" else block.get("thinking") if kind == "thinking" else None
            if isinstance(text, str) and text.strip():
                said = text.strip()
    return said


def latest_feedback(feedback: Iterable[Mapping[str, Any]]) -> IncidentFeedback:
    rows = sorted(feedback, key=lambda f: (f.get("at") or 0, str(f.get("id") or "")))
    return FEEDBACK_OF_CLICK.get(str(rows[-1].get("value")), IncidentFeedback.NONE) if rows else IncidentFeedback.NONE


def build_record(
    run: Mapping[str, Any],
    *,
    kind: str | None,
    answer: str,
    changes: Sequence[IncidentChange],
    targets: Targets,
    feedback: IncidentFeedback,
    ended_at: float,
    title: str | None = None,
    labels: Mapping[str, str] | None = None,
    permalink: str | None = None,
    backfilled: bool = False,
) -> IncidentRow:
    """The `incidents` row and facets of one ended run (`run`: its row of `runs`), every text redacted here."""
    task = redact(str(run.get("task") or ""))
    labels = {redact(str(k)): redact(str(v)) for k, v in (labels or {}).items()}
    title = redact(title or _first_line(task) or "(no task)")[:TITLE_CHARS]
    targets = Targets.from_dict(redact_value(targets.to_dict()))
    answer = redact(answer)[:ANSWER_CHARS]
    changes = tuple(
        IncidentChange(
            tool=redact(c.tool),
            args=redact(c.args),
            confirmed_by=c.confirmed_by,
            approver=redact(c.approver) if c.approver else None,
        )
        for c in changes
    )
    changes_text = " ".join(f"{c.tool} {c.args}" for c in changes)
    target_text = " ".join((targets.text(), *labels.values()))
    fields: dict[str, Any] = {
        "run_id": run["id"],
        "title": title,
        "task": task,
        "channel": run["channel"],
        "kind": check_kind(kind),
        "thread_ts": run.get("thread_ts"),
        "permalink": redact(permalink) if permalink else None,
        "team": run.get("team_id"),
        "started_at": run.get("created_at"),
        "ended_at": ended_at,
        "stop_reason": run.get("stop_reason"),
        "targets": json.dumps(targets.to_dict()),
        "targets_text": target_text,
        "labels": json.dumps(labels, sort_keys=True),
        "changes": json.dumps([c.__dict__ for c in changes]),
        "answer": answer,
        "feedback": feedback.value,
        "backfilled": int(backfilled),
        "search_title": index_text(title),
        "search_targets": index_text(target_text),
        "search_body": index_text(" ".join((task, changes_text, answer))),
    }
    facets = {(name.removesuffix("s"), v) for name in _TARGET_FIELDS for v in getattr(targets, name)}  # ("host", …)
    facets |= {(key, labels[key]) for key in ("alertname", "host", "service") if labels.get(key)}
    if instance := labels.get("instance"):
        facets.add(("host", instance.rsplit(":", 1)[0]))
    return IncidentRow(fields=fields, facets=tuple(sorted(facets)))


def decode_incident(row: Mapping[str, Any]) -> Incident:
    return _decode(
        Incident,
        row,
        targets=Targets.from_dict(_json(row["targets"], {})),
        changes=tuple(IncidentChange(**c) for c in _json(row["changes"], [])),
    )


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str) and v.strip()]
    return []


def _unique(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


def _json(text: Any, default: Any) -> Any:
    if not isinstance(text, str):
        return text if text is not None else default
    try:
        return json.loads(text)
    except ValueError:
        return default
