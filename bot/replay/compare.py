"""The original run and its replay side by side: as text for the terminal, and as one HTML page in the style of
the postmortem page (bot/app/timeline.py: inline CSS, no scripts, every value redacted then escaped).

Per step, each call is paired with the call at the same place in the other run: `same` (tool and canonical
arguments), `different`, `new` (only the replay made it) or `missing` (only the original did). Then the
approvals each run asked, whether the replay reached the same final change (the approved changes that ran,
in order), the stop reasons, tokens, cost and time, where each replayed result came from, and where each
reply reached the replay.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.app.timeline import CSS
from bot.app.timeline import t as _t
from bot.core.redact import redact, redact_value
from bot.replay.record import Incident, RecordedCall
from bot.replay.runner import Replayed
from bot.replay.world import CallLog, Source
from bot.run.summary import TOOL_NAME as SUMMARY_TOOL

MARKS = {"same": "=", "different": "≠", "new": "+", "missing": "−"}
ARGS_CHARS = 70


def label(tool: str, args: dict[str, Any]) -> str:
    shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in redact_value(args).items())
    shown = shown if len(shown) <= ARGS_CHARS else shown[: ARGS_CHARS - 1] + "…"
    return redact(f"{tool}({shown})")


@dataclass(frozen=True, kw_only=True)
class Pair:
    mark: str  # same | different | new | missing
    original: str | None
    replay: str | None
    source: str = ""  # where the replay's result came from


@dataclass(frozen=True, kw_only=True)
class StepRow:
    step: int
    pairs: tuple[Pair, ...]
    original_text: str = ""
    replay_text: str = ""

    @property
    def same(self) -> bool:
        return all(p.mark == "same" for p in self.pairs)


@dataclass(frozen=True, kw_only=True)
class Approval:
    call: str
    outcome: str  # "approved by U…", "superseded by U…", "would ask approval → denied (replay)", …


@dataclass(frozen=True, kw_only=True)
class ReplyRow:
    user: str
    text: str
    original: str
    replay: str


@dataclass(frozen=True, kw_only=True)
class Comparison:
    name: str
    model: str
    original: Incident
    replay: Incident
    rows: tuple[StepRow, ...]
    approvals_original: tuple[Approval, ...]
    approvals_replay: tuple[Approval, ...]
    replies: tuple[ReplyRow, ...]
    sources: dict[str, int]
    replay_wall_seconds: float
    model_failure: str = ""  # why the replay's model gave no usable answer ("": it answered)

    @property
    def diverged_at(self) -> int | None:
        return next((r.step for r in self.rows if not r.same), None)

    @property
    def identical(self) -> bool:
        return self.diverged_at is None and self.same_change and self.same_stop

    @property
    def same_change(self) -> bool:
        return self.original.changes == self.replay.changes

    @property
    def same_stop(self) -> bool:
        return self.original.stop_reason == self.replay.stop_reason

    @property
    def same_hypotheses(self) -> bool:
        """Both runs ended believing the same: the same hypotheses (by id) with the same status and confidence."""
        return _beliefs(self.original) == _beliefs(self.replay)

    @property
    def model_failed(self) -> bool:
        """The replay's model call failed (its run stopped on `model_error`) or was refused: the replay shows
        nothing of what the model would do, so it is neither a pass nor a regression."""
        return bool(self.model_failure)

    @property
    def regression(self) -> bool:
        """The original succeeded and the replay, its model answering, reached no change or a different one."""
        return self.original.succeeded and not self.same_change and not self.model_failed


REGRESSION_STATUS = 1  # `opsloop replay` exits so when a replay regressed
MODEL_FAILED_STATUS = 3  # ... and so when none regressed but a replay's model call failed or was refused


def exit_status(comparisons: Sequence[Comparison]) -> int:
    """0 when every replay ran and none regressed; a regression outranks a model failure."""
    if any(c.regression for c in comparisons):
        return REGRESSION_STATUS
    return MODEL_FAILED_STATUS if any(c.model_failed for c in comparisons) else 0


def compare(result: Replayed, *, name: str = "", model_label: str = "") -> Comparison:
    o, r, world = result.original, result.replay, result.world
    log = list(world.log)  # entries are claimed (popped) as replay calls are paired with them
    rows = tuple(_row(k, o, r, log) for k in range(1, max(o.steps, r.steps, _last_step(o), _last_step(r)) + 1))
    replies = []
    for i, reply in enumerate(o.replies):
        where = (
            f"with the decision on {o.calls[reply.superseded].tool}"
            if reply.superseded is not None
            else f"after {reply.after_step} steps"
            + (f", after {o.calls[reply.after_call].tool}" if reply.after_call is not None else "")
        )
        got = world.delivered.get(i)
        replies.append(
            ReplyRow(
                user=reply.user,
                text=reply.text,
                original=where,
                replay=f"step {got.step} ({got.how})" if got else "never reached the replay",
            )
        )
    return Comparison(
        name=name or o.run_id,
        model=model_label or result.model,
        original=o,
        replay=r,
        rows=rows,
        approvals_original=tuple(_approval_of(c) for c in o.calls if _asks_approval(c)),
        approvals_replay=tuple(
            Approval(call=label(e.tool, e.args), outcome=_replay_outcome(e))
            for e in world.log
            if e.source in (Source.DECISION, Source.WOULD_ASK)
        ),
        replies=tuple(replies),
        sources={s.value: sum(e.source == s for e in world.log) for s in Source},
        replay_wall_seconds=result.wall_seconds,
        model_failure=result.model_failure,
    )


def _beliefs(i: Incident) -> frozenset[tuple[str, str, str]] | None:
    s = i.final_summary
    return None if s is None else frozenset((h.id, str(h.status), str(h.confidence)) for h in s.hypotheses)


def hypotheses(i: Incident) -> str:
    """A run's final hypotheses in one line, in the summary's display order: `logs supported/high; db open/low`."""
    s = i.final_summary
    if s is None:
        return "no summary"
    return "; ".join(f"{h.id} {h.status}/{h.confidence}" for h in s.ordered()) or "not known yet"


def _last_step(i: Incident) -> int:
    return max((c.step or 0 for c in i.calls), default=0)


def _row(step: int, o: Incident, r: Incident, log: list[CallLog]) -> StepRow:
    a, b = o.step_calls(step), r.step_calls(step)
    pairs = []
    for j in range(max(len(a), len(b))):
        x, y = (a[j] if j < len(a) else None), (b[j] if j < len(b) else None)
        mark = "same" if x and y and x.key == y.key else "different" if x and y else "new" if y else "missing"
        pairs.append(
            Pair(
                mark=mark,
                original=label(x.tool, x.args) if x else None,
                replay=label(y.tool, y.args) if y else None,
                source=_source(y, log) if y else "",
            )
        )
    return StepRow(step=step, pairs=tuple(pairs), original_text=_text(o, step), replay_text=_text(r, step))


def _text(i: Incident, step: int) -> str:
    return i.answer_texts[step - 1] if 0 < step <= len(i.answer_texts) else ""


def _source(call: RecordedCall, log: list[CallLog]) -> str:
    """The world's log entry for a replay call (first unclaimed one with its key), claimed."""
    for n, entry in enumerate(log):
        if entry.key == call.key and entry.step == call.step:
            log.pop(n)
            return entry.source.value
    return "invalid" if call.is_error else ""


def _asks_approval(c: RecordedCall) -> bool:
    """A call that needs a person's approval: not read-only, and not the living summary's update_summary (the
    runtime answers it itself; a record with no category for it calls it destructive)."""
    return not c.read_only and c.tool != SUMMARY_TOOL


def _approval_of(c: RecordedCall) -> Approval:
    d = c.decision
    if d is None:
        return Approval(call=label(c.tool, c.args), outcome="refused before any approval" if c.is_error else "-")
    return Approval(call=label(c.tool, c.args), outcome=f"{d.outcome} by {d.by or '-'}")


# --- text -------------------------------------------------------------------------------------------------
def _lines(row: StepRow, answer: Callable[[str], str]) -> Iterator[tuple[str, Pair, str, str]]:
    """A step's lines: (the step on the first line only, the pair, original, replay); a step without calls shows
    each run's answer as `answer` writes it."""
    for j, p in enumerate(row.pairs or (Pair(mark="same", original=None, replay=None),)):
        left = p.original or (answer(row.original_text) if not row.pairs and row.original_text else "-")
        right = p.replay or (answer(row.replay_text) if not row.pairs and row.replay_text else "-")
        yield (str(row.step) if j == 0 else ""), p, left, right


def _replay_outcome(e: CallLog) -> str:
    return "would ask approval → denied (replay)" if e.source == Source.WOULD_ASK else f"recorded decision: {e.detail}"


def figures(c: Comparison) -> list[tuple[str, str, str]]:
    o, r = c.original, c.replay
    return [
        ("model", o.model, c.model),
        ("effort", o.effort or "-", r.effort or "-"),
        ("limits", _limits(o), _limits(r)),
        ("steps", str(o.steps), str(r.steps)),
        ("stop reason", f"{o.stop_reason} {o.stop_detail}".strip(), f"{r.stop_reason} {r.stop_detail}".strip()),
        ("final change", "; ".join(o.changes) or "none", "; ".join(r.changes) or "none"),
        ("final hypotheses", hypotheses(o), hypotheses(r)),
        ("tokens (paid)", f"{o.usage.paid_tokens:,}", f"{r.usage.paid_tokens:,}"),
        (
            "tokens in/out",
            f"{o.usage.input_tokens:,}/{o.usage.output_tokens:,}",
            f"{r.usage.input_tokens:,}/{r.usage.output_tokens:,}",
        ),
        ("cost", f"${o.cost_usd:.4f}", f"${r.cost_usd:.4f}"),
        ("agent time", f"{o.agent_seconds:.2f}s", f"{r.agent_seconds:.2f}s"),
    ]


def _limits(i: Incident) -> str:
    lim = i.limits
    shown = (
        f"{lim.get('max_iterations', '?')} steps, {lim.get('token_budget', 0):,} tokens, "
        f"${lim.get('cost_budget_usd', 0):g}, {lim.get('deadline_seconds', 0):g}s"
    )
    return shown if i.limits_source == "run" else f"{shown} ({i.limits_source})"


def text(c: Comparison) -> str:
    o = c.original
    w = 44
    out = [
        f"replay of {c.name} (run {o.run_id}) · original {o.model} · replay {c.model}",
        f"task: {o.task}",
        "",
        f"{'step':<5} {'original':<{w}}   replay",
    ]
    for row in c.rows:
        for head, p, left, right in _lines(row, lambda _: "(answer)"):
            src = f"  [{p.source}]" if p.source else ""
            out.append(f"{head:<5} {left:<{w}} {MARKS[p.mark]} {right}{src}")
    out.append("")
    out.append(f"path: diverged at step {c.diverged_at}" if c.diverged_at else "path: identical")
    out.append("approvals asked:")
    out += [f"  original  {a.call}: {a.outcome}" for a in c.approvals_original] or ["  original  none"]
    out += [f"  replay    {a.call}: {a.outcome}" for a in c.approvals_replay] or ["  replay    none"]
    out.append(
        f"same final change: {'yes' if c.same_change else 'no'}"
        + (" · REGRESSION (the original succeeded)" if c.regression else "")
        + (f" · MODEL FAILED ({c.model_failure}), not a regression" if c.model_failed else "")
    )
    ho, hr = hypotheses(o), hypotheses(c.replay)
    out.append(f"final hypotheses: same ({ho})" if c.same_hypotheses else f"final hypotheses: different ({ho} → {hr})")
    out += [f"{name:<14} {a}  →  {b}" for name, a, b in figures(c)]
    out.append("results: " + " · ".join(f"{k} {v}" for k, v in c.sources.items()))
    out += [f"reply from {x.user} {x.text!r}: original {x.original}; replay {x.replay}" for x in c.replies]
    out.append(f"replay wall time {c.replay_wall_seconds:.2f}s · no Slack call, no change executed")
    return "\n".join(redact(line) for line in out)


# --- HTML -------------------------------------------------------------------------------------------------
_EXTRA_CSS = (
    ".m-same{color:#2e7d32}.m-different,.m-missing{color:#b00020;font-weight:600}.m-new{color:#e65100;"
    "font-weight:600}tr.diverged td{background:#fff8e1}.src{font-size:.85em;color:#555}"
)


def html_page(c: Comparison, *, generated_at: float) -> str:
    title = f"opsloop replay · {c.name} · {c.model}"
    verdict = (
        (f"diverged at step {c.diverged_at}" if c.diverged_at else "identical path")
        + (" · same final change" if c.same_change else " · different final change")
        + (" · REGRESSION" if c.regression else "")
        + (f" · MODEL FAILED ({c.model_failure})" if c.model_failed else "")
        + (" · same final hypotheses" if c.same_hypotheses else " · different final hypotheses")
    )
    return page(
        title,
        _EXTRA_CSS,
        f'<p class="muted">run {_t(c.original.run_id)} · generated {stamp(generated_at)} · a replay never calls '
        "Slack and never runs a change</p>",
        f"<p><b>{_t(verdict)}</b></p>",
        f'<dl class="summary"><dt>task</dt><dd>{_t(c.original.task)}</dd></dl>',
        "<h2>Figures</h2>",
        _table(["", "original", "replay"], [[n, a, b] for n, a, b in figures(c)]),
        "<h2>Steps</h2>",
        _steps_table(c.rows),
        "<h2>Approvals asked</h2>",
        _table(
            ["run", "call", "outcome"],
            [["original", a.call, a.outcome] for a in c.approvals_original]
            + [["replay", a.call, a.outcome] for a in c.approvals_replay],
        ),
        "<h2>Replies</h2>",
        _table(["from", "text", "original", "replay"], [[x.user, x.text, x.original, x.replay] for x in c.replies]),
        "<h2>Where the replay's results came from</h2>",
        _table(["source", "calls"], [[k, str(v)] for k, v in c.sources.items()]),
    )


def page(title: str, css: str, *body: str) -> str:
    """One self-contained page in the postmortem page's style (its CSS, then `css`): `title`, then `body`."""
    head = f'<head><meta charset="utf-8"><title>{_t(title)}</title><style>{CSS}{css}</style></head><body>'
    return "\n".join(["<!doctype html>", '<html lang="en">', head, f"<h1>{_t(title)}</h1>", *body, "</body></html>\n"])


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    if not rows:
        return '<p class="muted">none</p>'
    h = "".join(f"<th>{_t(x)}</th>" for x in head)
    body = "".join("<tr>" + "".join(f"<td>{_t(x)}</td>" for x in row) + "</tr>" for row in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _steps_table(rows: Sequence[StepRow]) -> str:
    out = ["<table><tr><th>step</th><th>original</th><th></th><th>replay</th><th>result</th></tr>"]
    for row in rows:
        cls = "" if row.same else ' class="diverged"'
        for head, p, left, right in _lines(row, lambda answer: f"answer: {answer[:300]}"):
            out.append(
                f'<tr{cls}><td class="num">{head}</td><td><code>{_t(left)}</code></td>'
                f'<td class="m-{p.mark}">{_t(MARKS[p.mark] + " " + p.mark)}</td><td><code>{_t(right)}</code>'
                f'</td><td class="src">{_t(p.source)}</td></tr>'
            )
    out.append("</table>")
    return "".join(out)
