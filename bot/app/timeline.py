"""A run as one self-contained HTML page for the postmortem (`opsloop show RUN_ID --html FILE`), and as the
readable timeline `opsloop show RUN_ID` prints.

Who said what, every model step (model, tokens, cost, latency), every tool call with its
arguments and result, every approval (who, when, outcome), and why the run stopped, with
UTC timestamps. Read from the store alone. Every value is redacted, then HTML-escaped; the
page has inline CSS, no scripts and no external assets, so it can be attached anywhere.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bot.core.pricing import Price
from bot.core.redact import redact, redact_value
from bot.core.types import Approval, Feedback, FeedbackValue, InboxItem, InboxState, Run, Step, ToolResultRow, Usage
from bot.run.guards import canonical
from bot.run.history import final_text, reasoning
from bot.run.report import CONCLUSION, STOP_WORDS, is_conclusion
from bot.run.summary import without_handle
from bot.store import Ledger, SummaryRow

LONG_CHARS, LONG_LINES = 800, 15  # longer than this goes in a collapsed <details>
USAGE_STEPS = ("response", "condense", "thinking_only")  # steps that carry a model call's usage
NOBODY = '<span class="muted">-</span>'

CSS = """
body{font:14px/1.45 -apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#1d1d1f;margin:2em auto;max-width:1200px;
padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
dl.summary{display:grid;grid-template-columns:max-content 1fr;gap:.2em 1.2em}dl.summary dt{color:#666}
dl.summary dd{margin:0}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #eee;padding:.35em .5em;text-align:left;
vertical-align:top}th{background:#f6f6f6;font-weight:600}td.num{text-align:right;white-space:nowrap}
td.when{white-space:nowrap;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:.5em;border-radius:4px;margin:.3em 0;
font-size:.9em}
code{background:#f6f8fa;padding:0 .25em;border-radius:3px}
.kind{display:inline-block;padding:0 .45em;border-radius:3px;font-size:.85em;background:#eee;white-space:nowrap}
.k-mention,.k-reply{background:#e3f2fd}.k-response,.k-request{background:#f3e5f5}.k-tool{background:#e8f5e9}
.k-approval,.k-decision{background:#fff3e0}.k-stop{background:#fde2e1}.error{color:#b00020;font-weight:600}
.muted{color:#777}tr.total td{font-weight:600;border-top:2px solid #ccc}
"""


def t(value: Any) -> str:
    """Redacted, then escaped: the only way a stored value reaches the page."""
    return html.escape(redact("" if value is None else str(value)))


def as_json(value: Any) -> str:
    """Pretty JSON of a stored value (arguments, step data), redacted; escape it when rendering."""
    return redact(json.dumps(redact_value(value), indent=2, ensure_ascii=False, default=str))


def when(at: float | None) -> str:
    if not at:
        return NOBODY
    moment = datetime.fromtimestamp(at, UTC)
    exact = moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return f'<time datetime="{exact}">{moment.strftime("%Y-%m-%dT%H:%M:%SZ")}</time>'


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60}m {s % 60}s"
    return f"{s // 60}m {s % 60}s" if s >= 60 else f"{seconds:.1f}s"


def block(text: Any, label: str) -> str:
    """A <pre>, collapsed in a <details> when long."""
    body = redact("" if text is None else str(text))
    lines = body.count("\n") + 1
    pre = f"<pre>{html.escape(body)}</pre>"
    if len(body) <= LONG_CHARS and lines <= LONG_LINES:
        return pre
    return f"<details><summary>{t(label)} ({lines} lines, {len(body):,} chars)</summary>{pre}</details>"


def tokens(u: Usage | None) -> str:
    if u is None:
        return ""
    return (
        f"in {u.input_tokens:,}<br>out {u.output_tokens:,}<br>cache read {u.cache_read_tokens:,}<br>"
        f"cache write {u.cache_write_tokens:,}"
    )


def stop_words(reason: str) -> str:
    return f"<code>{t(reason)}</code> — {t(STOP_WORDS.get(reason, reason))}"


def outcome_of(data: Mapping[str, Any]) -> str:
    """A decision step's outcome (older traces only say whether it was approved)."""
    return str(data.get("outcome") or ("approved" if data.get("approved") else "denied"))


# --- what the store holds about one run ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    run: Run
    steps: list[Step]
    approvals: list[Approval]
    inbox: list[InboxItem]
    results: list[ToolResultRow]  # oldest first
    history: list[dict[str, Any]]
    feedback: list[Feedback] = field(default_factory=list)
    summaries: list[SummaryRow] = field(default_factory=list)  # the living summary's accepted updates, oldest first

    @property
    def names(self) -> dict[str, str]:
        """user id -> display name, for everyone whose name the store kept (an approver's, taken at the click)."""
        return {a.decided_by: a.decided_name for a in self.approvals if a.decided_by and a.decided_name}


def read_run(ledger: Ledger, run_id: str) -> RunRecord | None:
    run = ledger.find_run(run_id)
    if run is None:
        return None
    return RunRecord(
        run=run,
        steps=ledger.steps(run_id),
        approvals=ledger.run_approvals(run_id),
        inbox=ledger.inbox(run_id),
        results=sorted(ledger.tool_results(run_id).values(), key=lambda r: r.created_at or 0),
        history=ledger.history(run_id),
        feedback=ledger.feedback(run_id),
        summaries=ledger.summaries(run_id),
    )


# --- the timeline -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One row: `who` and `what` are HTML built only from t(), when() and block() output."""

    at: float
    order: int
    kind: str
    who: str
    what: str
    model: str = ""
    usage: Usage | None = None
    cost: float | None = None


@dataclass
class Timeline:
    """Builds the rows of one run, matching steps to the rows that hold their full detail."""

    record: RunRecord
    price_for: Callable[[str], Price]

    def __post_init__(self) -> None:
        self.names = self.record.names
        self._unused_approvals = list(self.record.approvals)
        self._unused_results = list(self.record.results)
        self.model = self.record.run.model or ""

    def person(self, user: str | None) -> str:
        if not user:
            return NOBODY
        name = self.names.get(user)
        return f"{t(name)} ({t(user)})" if name else t(user)

    def _assistant_turns(self) -> list[list[dict[str, Any]]]:
        """The last N assistant turns of the history, N = response steps (a thread's later run continues
        an earlier history, so count from the end). Empty when condensed: the turns were summarised."""
        n = sum(1 for s in self.record.steps if s.kind == "response")
        turns = [
            m["content"] for m in self.record.history if m["role"] == "assistant" and isinstance(m["content"], list)
        ]
        return turns[-n:] if n and len(turns) >= n and not self.record.run.condensed else []

    def entries(self) -> list[Entry]:
        run = self.record.run
        what = f"mentioned opsloop in <code>{t(run.channel)}</code>:{block(run.task, 'task')}"
        rows = [Entry(at=run.created_at, order=-1, kind="mention", who=self.person(run.requester), what=what)]
        responses = iter(self._assistant_turns())
        rows += [self.step_entry(i, step, responses) for i, step in enumerate(self.record.steps)]
        rows += [self.approval_requested(i, a) for i, a in enumerate(self.record.approvals)]
        # decided without a decision step (or still pending)
        rows += [self.approval_closed(i, a) for i, a in enumerate(self._unused_approvals) if a.decided_at]
        rows += [self.reply(i, m) for i, m in enumerate(self.record.inbox)]
        rows += [self.feedback(i, f) for i, f in enumerate(self.record.feedback)]
        return sorted(rows, key=lambda e: (e.at or 0, e.order))

    def step_entry(self, i: int, step: Step, responses: Iterator[list[dict[str, Any]]]) -> Entry:
        data, kind = step.data if isinstance(step.data, dict) else {}, step.kind
        base: dict[str, Any] = {"at": step.at, "order": i, "kind": kind}
        if kind in USAGE_STEPS:
            model = str(data.get("model") or self.model)
            usage = Usage.of(data.get("usage"))
            cost = self.price_for(model).cost(usage) if usage is not None else None
            what = self.response(data, next(responses, None)) if kind == "response" else self.other_call(kind, data)
            return Entry(**base, who="model", what=what, model=model, usage=usage, cost=cost)
        if kind == "request":
            what = f"step {t(data.get('iteration'))}: request to the model with {t(data.get('messages'))} messages"
        elif kind == "tool":
            what = self.tool(data)
        elif kind == "decision":
            return Entry(**base, who=self.person(data.get("by")), what=self.decision(data))
        elif kind == "inject":
            what = self.inject(data)
        elif kind == "stop":
            what = f"stopped: {stop_words(str(data.get('reason') or ''))}"
            what += f"<br>{t(data['detail'])}" if data.get("detail") else ""
            return Entry(**base, who=self.person(data["by"]) if data.get("by") else "opsloop", what=what)
        else:
            what = f"<code>{t(kind)}</code>{block(as_json(data), 'details')}"
        return Entry(**base, who="opsloop", what=what)

    def response(self, data: Mapping[str, Any], turn: list[dict[str, Any]] | None) -> str:
        said, thought = str(data.get("text") or ""), str(data.get("reasoning") or "")
        if turn is not None and redact(final_text(turn))[:500] == said and redact(reasoning(turn))[:500] == thought:
            said, thought = final_text(turn), reasoning(turn)  # the whole turn, not the trace's first 500 chars
        parts = [
            f"stop reason <code>{t(data.get('stop_reason'))}</code>"
            + (f", {t(data['latency_ms'])} ms" if data.get("latency_ms") is not None else "")
        ]
        if thought:
            parts.append(f'<span class="muted">reasoning:</span>{block(thought, "reasoning")}')
        if said:
            parts.append(block(said, "answer"))
        if calls := data.get("tool_calls"):
            parts.append("asked for: " + ", ".join(f"<code>{t(c)}</code>" for c in calls))
        return "<br>".join(parts)

    def other_call(self, kind: str, data: Mapping[str, Any]) -> str:
        if kind == "condense":
            return f"condensed the history ({t(data.get('why'))}); kept {t(data.get('kept_messages'))} messages"
        return f"<code>{t(kind)}</code>{block(as_json({k: v for k, v in data.items() if k != 'usage'}), 'details')}"

    def tool(self, data: Mapping[str, Any]) -> str:
        name, args = data.get("tool"), data.get("args") or {}
        shown = str(data.get("result") if data.get("result") is not None else data.get("error") or "")
        full = next(
            (
                r
                for r in self._unused_results
                if r.tool == str(name) and canonical(r.args) == canonical(redact_value(args))
            ),
            None,
        )
        if full is not None:
            self._unused_results.remove(full)
            content = full.content or ""
            if content and without_handle(content).startswith(
                shown
            ):  # the trace has the output without its handle line
                shown = content  # the whole output with its handle, not the trace's first 500 chars
        head = f"<code>{t(name)}</code>" + (' <span class="error">error</span>' if failed(data) else "")
        if data.get("confirmed_by"):
            head += f" · confirmed by {self.person(data['confirmed_by'])}"
        if data.get("latency_ms") is not None:
            head += f" · {t(data['latency_ms'])} ms"
        return f"{head}{block(as_json(args), 'arguments')}{block(shown, 'result')}"

    def decision(self, data: Mapping[str, Any]) -> str:
        outcome, by = outcome_of(data), data.get("by")
        what = f"<code>{t(data.get('tool'))}</code>: <b>{t(outcome)}</b>"
        candidates = [a for a in self._unused_approvals if a.tool == str(data.get("tool")) and a.state == outcome]
        if (a := next((a for a in candidates if not by or a.decided_by == by), None)) is not None:
            self._unused_approvals.remove(a)
            return what + self.outcome_detail(a)
        return what + (block(data["reason"], "reason") if data.get("reason") else "")

    def outcome_detail(self, a: Approval) -> str:
        what = f" by {self.person(a.decided_by)} at {when(a.decided_at)} after {duration(a.waited)}"
        if a.required > 1:
            who = ", ".join(self.person(u) for u in a.approvals)
            what += f"; approvals {len(a.approvals)} of {t(a.required)}: {who}"
        return what + (block(a.reason, "reason") if a.reason else "")

    def approval_requested(self, i: int, a: Approval) -> Entry:
        what = (
            f"asked for approval of <code>{t(a.tool)}</code> ({t(a.category)}), "
            f"{t(a.required)} approval(s) needed, expires {when(a.expires_at)}; "
            f"card outcome: <b>{t(a.state)}</b>{block(as_json(a.args), 'arguments')}"
        )
        what += "dry run:" + block(a.preview, "dry-run preview") if a.preview else ""
        return Entry(at=a.created_at, order=10_000 + i, kind="approval", who="opsloop", what=what)

    def approval_closed(self, i: int, a: Approval) -> Entry:
        what = f"approval of <code>{t(a.tool)}</code>: <b>{t(a.state)}</b>{self.outcome_detail(a)}"
        return Entry(
            at=a.decided_at or 0.0, order=20_000 + i, kind="approval", who=self.person(a.decided_by), what=what
        )

    def feedback(self, i: int, f: Feedback) -> Entry:
        what = f"rated the run's answer <b>{t(rating(f))}</b> (message {t(f.message_ts)})"
        return Entry(at=f.at, order=40_000 + i, kind="feedback", who=self.person(f.user), what=what)

    def reply(self, i: int, m: InboxItem) -> Entry:
        fate = {
            InboxState.CONSUMED: "seen by the model",
            InboxState.SUPERSEDING: "answered a pending approval in its place",
            InboxState.QUEUED: "not seen by the model: the run ended first",
        }.get(m.state, str(m.state))
        what = f"replied in the thread ({t(fate)}):{block(m.text, 'reply')}"
        return Entry(at=m.created_at, order=30_000 + i, kind="reply", who=self.person(m.user), what=what)

    def inject(self, data: Mapping[str, Any]) -> str:
        people = [self.person(m.get("user")) for m in data.get("messages") or [] if isinstance(m, Mapping)]
        what = "thread replies from " + ", ".join(people) + " entered the history" if people else ""
        for note in data.get("notes") or []:
            what += "opsloop note to the model:" + block(note, "note")
        return what or "entered the history"


def failed(data: Mapping[str, Any]) -> bool:
    """Whether a tool step's call failed."""
    return bool(data.get("is_error") or data.get("error"))


def rating(f: Feedback) -> str:
    return "helpful" if f.value == FeedbackValue.POSITIVE else "not helpful"


# --- the page -----------------------------------------------------------------------------------------------------


def render(record: RunRecord, *, price_for: Callable[[str], Price], generated_at: float) -> str:
    """The whole page."""
    line = Timeline(record, price_for)
    entries = line.entries()
    run = record.run
    title = t(f"opsloop run {run.id}")
    heading = CONCLUSION if is_conclusion(run.stop_reason) else "Answer"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            f'<head><meta charset="utf-8"><title>{title}</title><style>{CSS}</style></head>',
            "<body>",
            f"<h1>{title}</h1>",
            summary(line, run),
            *([f"<h2>{t(heading)}</h2>{block(run.output, 'answer')}"] if run.output else []),
            *([f"<h2>How the hypotheses changed</h2>{hypotheses_table(record.summaries)}"] if record.summaries else []),
            "<h2>Timeline (UTC)</h2>",
            timeline_table(entries),
            "<h2>Tokens and cost by model</h2>",
            totals_table(entries, run),
            "<h2>Approvals</h2>",
            approvals_table(line, record.approvals),
            f'<p class="muted">Generated by opsloop at {when(generated_at)}. Secrets are redacted.</p>',
            "</body>",
            "</html>",
            "",
        ]
    )


def summary(line: Timeline, run: Run) -> str:
    reason = run.stop_reason.value if run.stop_reason else ""
    stop = stop_words(reason) + (f"<br>{t(run.stop_detail)}" if run.stop_detail else "") if reason else "still running"
    u = run.usage
    items = [
        ("task", block(run.task, "task")),
        ("requested by", line.person(run.requester)),
        ("channel · thread", f"<code>{t(run.channel)}</code> · <code>{t(run.thread_ts)}</code>"),
        ("status", t(run.status)),
        ("stop reason", stop),
        ("stopped by", line.person(run.stopped_by)),
        ("model", f"<code>{t(run.model)}</code>"),
        ("started", when(run.created_at)),
        ("last update", when(run.updated_at)),
        ("agent time", t(duration(run.agent_seconds))),
        ("steps", t(run.iterations)),
        (
            "tokens",
            f"input {u.input_tokens:,} · output {u.output_tokens:,} · cache read "
            f"{u.cache_read_tokens:,} · cache write {u.cache_write_tokens:,}",
        ),
        ("cost", f"${run.cost_usd:.4f}"),
        (
            "tools called",
            ", ".join(f"<code>{t(n)}</code> ×{c}" for n, c in Counter(run.tools_called).items()) or "none",
        ),
    ]
    return '<dl class="summary">' + "".join(f"<dt>{t(k)}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def table(columns: Sequence[str], rows: Iterable[str]) -> str:
    head = "".join(f"<th>{c}</th>" for c in columns)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def timeline_table(entries: Sequence[Entry]) -> str:
    rows = (
        f'<tr class="row-{t(e.kind)}"><td class="when">{when(e.at)}</td>'
        f'<td><span class="kind k-{t(e.kind)}">{t(e.kind)}</span></td><td>{e.who}</td><td>{e.what}</td>'
        f'<td>{f"<code>{t(e.model)}</code>" if e.model else ""}</td><td class="num">{tokens(e.usage)}</td>'
        f'<td class="num">{"" if e.cost is None else f"${e.cost:.4f}"}</td></tr>'
        for e in entries
    )
    return table(("time", "step", "who", "what", "model", "tokens", "cost"), rows)


def hypotheses_table(rows: Sequence[SummaryRow]) -> str:
    """Each accepted update_summary: when, at which step, what was going on, each hypothesis (display order) with
    its evidence in full (handle and quote)."""
    body = []
    for r in rows:
        causes = "<br>".join(
            f"<b>{t(h.status)}</b>, {t(h.confidence)}: {t(h.statement)} <code>{t(h.id)}</code>"
            + "".join(f'<br>&nbsp;&nbsp;<span class="evidence">{t(e.text())}</span>' for e in h.evidence)
            for h in r.summary.ordered()
        )
        steps = "<br>".join(t(s) for s in r.summary.next_steps)
        body.append(
            f'<tr class="row-summary"><td class="when">{when(r.at)}</td><td class="num">{r.step}</td>'
            f"<td>{t(r.summary.situation)}</td><td>{causes or 'not known yet'}</td><td>{steps}</td></tr>"
        )
    return table(("time", "step", "what's going on", "likely cause", "next"), body)


def totals_table(entries: Sequence[Entry], run: Run) -> str:
    by_model: dict[str, tuple[int, Usage, float]] = {}
    for e in entries:
        if e.usage is not None:
            calls, usage, cost = by_model.get(e.model, (0, Usage(), 0.0))
            by_model[e.model] = (calls + 1, usage + e.usage, cost + (e.cost or 0.0))

    def row(opening: str, model: str, calls: int, u: Usage, cost: float) -> str:
        cells = "".join(f'<td class="num">{n:,}</td>' for n in u.to_dict().values())
        return f'{opening}<td>{model}</td><td class="num">{calls}</td>{cells}<td class="num">${cost:.4f}</td></tr>'

    rows = [row("<tr>", f"<code>{t(m)}</code>", n, u, c) for m, (n, u, c) in by_model.items()]
    rows.append(
        row('<tr class="total">', "run total", sum(n for n, _, _ in by_model.values()), run.usage, run.cost_usd)
    )
    return table(("model", "calls", "input", "output", "cache read", "cache write", "cost"), rows)


def approvals_table(line: Timeline, approvals: Sequence[Approval]) -> str:
    if not approvals:
        return '<p class="muted">No approvals were asked for.</p>'
    rows = []
    for a in approvals:
        detail = block(as_json(a.args), "arguments")
        detail += "dry run:" + block(a.preview, "dry-run preview") if a.preview else ""
        detail += "reason:" + block(a.reason, "reason") if a.reason else ""
        rows.append(
            f'<tr><td><code>{t(a.tool)}</code> ({t(a.category)})</td><td class="when">'
            f'{when(a.created_at)}</td><td class="when">{when(a.decided_at)}</td>'
            f'<td class="num">{t(duration(a.waited))}</td><td><b>{t(a.state)}</b></td>'
            f"<td>{line.person(a.decided_by)}</td><td>{detail}</td></tr>"
        )
    return table(("tool", "asked", "decided", "waited", "outcome", "by", "arguments and preview"), rows)


# --- the timeline as text: `opsloop show RUN_ID` ------------------------------------------------------------------

QUOTE_CHARS = 80  # a quoted text or result is cut to this many characters, on one line
_MENTION = re.compile(r"<@([UW][A-Z0-9]{2,40})>|\b([UW][A-Z0-9]{2,40})\b")


def one_line(text: Any, limit: int = QUOTE_CHARS) -> str:
    """Redacted, each line's whitespace folded to single spaces, lines joined by " | ", cut with an ellipsis."""
    lines = (" ".join(line.split()) for line in redact("" if text is None else str(text)).splitlines())
    flat = " | ".join(line for line in lines if line)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def call_text(tool: Any, args: Any) -> str:
    shown = " ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in redact_value(args or {}).items())
    return one_line(f"{tool} {shown}".strip(), 60)


@dataclass
class TextTimeline:
    """One line per thing that happened: UTC time, the step it happened in, and what, with people's names
    where the store knows them (else their user ids)."""

    record: RunRecord

    def __post_init__(self) -> None:
        self.names = {uid: "@" + name.lstrip("@") for uid, name in self.record.names.items()}

    def who(self, user: Any) -> str:
        return self.names.get(str(user), str(user)) if user else "someone"

    def named(self, text: str) -> str:
        """`text` with each known user id (bare or as a <@U…> mention) written as the person's name."""
        return _MENTION.sub(lambda m: self.names.get(m[1] or m[2], m[0]), text)

    def lines(self) -> list[str]:
        events: list[tuple[float, int, str | int]] = []  # (at, order, line or a request's step number)
        for i, s in enumerate(self.record.steps):
            data = s.data if isinstance(s.data, dict) else {}
            if s.kind == "request":
                events.append((s.at, i, int(data.get("iteration") or 0)))
            else:
                events += [(s.at, i, what) for what in self.step(s.kind, data)]
        for i, a in enumerate(self.record.approvals):
            preview = f": {one_line(a.preview, 60)}" if a.preview else ""
            asked = f"asks approval for {call_text(a.tool, a.args)} ({a.category}){preview}"
            events.append((a.created_at, 10_000 + i, asked))
        for i, f in enumerate(self.record.feedback):
            events.append((f.at, 20_000 + i, f"{self.who(f.user)} rated the answer {rating(f)}"))
        out, step, day = ["time (UTC)  step  what happened"], 0, _day(self.record.run.created_at)
        for at, _, what in sorted(events, key=lambda e: (e[0] or 0, e[1])):
            if isinstance(what, int):
                step = what
                continue
            if _day(at) != day:
                day = _day(at)
                out.append(f"── {day} ──")
            clock = datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S") if at else "-"
            out.append(f"{clock:<10}  {step or '':>4}  {self.named(what)}")
        return out

    def step(self, kind: str, data: Mapping[str, Any]) -> list[str]:
        if kind == "inject":
            lines = [
                f'reply from {self.who(m.get("user"))} reaches the model: "{one_line(m.get("text"))}"'
                for m in data.get("messages") or []
                if isinstance(m, Mapping)
            ]
            return lines + [f'note to the model: "{one_line(n)}"' for n in data.get("notes") or []]
        return [self.step_line(kind, data)]

    def step_line(self, kind: str, data: Mapping[str, Any]) -> str:
        if kind == "response":
            said = data.get("text") or data.get("reasoning")
            quote = f': "{one_line(said)}"' if said else ""
            if calls := data.get("tool_calls"):
                return f"model calls {', '.join(map(str, calls))}{quote}"
            ended = data.get("stop_reason")
            return f"model answers{quote}" if ended == "end_turn" else f"model stops ({ended}){quote}"
        if kind == "tool":
            result = data.get("error") or data.get("result")
            by = f" (approved by {self.who(data['confirmed_by'])})" if data.get("confirmed_by") else ""
            outcome = "" if result is None else f" → {'error: ' if failed(data) else ''}{one_line(result)}"
            return f"{call_text(data.get('tool'), data.get('args'))}{by}{outcome}"
        if kind == "decision":
            why = f': "{one_line(data["reason"])}"' if data.get("reason") else ""
            return f"{data.get('tool')} {outcome_of(data)} by {self.who(data.get('by'))}{why}"
        if kind == "stop":
            reason = str(data.get("reason") or "")
            by = f" by {self.who(data['by'])}" if data.get("by") else ""
            detail = f": {one_line(data['detail'])}" if data.get("detail") else ""
            return f"stopped{by}: {reason} ({STOP_WORDS.get(reason, reason)}){detail}"
        if kind == "condense":
            return f"history condensed ({one_line(data.get('why'))}), kept {data.get('kept_messages')} messages"
        rest = {k: v for k, v in data.items() if k != "usage"}
        return f"{kind}: {one_line(json.dumps(rest, ensure_ascii=False, default=str))}"


def _day(at: float | None) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d") if at else "-"
