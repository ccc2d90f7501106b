"""An incident record: one stored run, self-contained and redacted, as `opsloop export RUN_ID` writes it.

It holds what a replay needs and what a comparison shows: the task and the turns before the run's first
request, the fixed system prompt and tool schemas (with each tool's category), every step's tool calls with
their results and decisions, the people's replies with where they arrived, the limits in force, and how the
run ended (answer, stop reason, steps, tokens, cost, agent time). The limits, effort and categories are the ones
stored with the run when it was first driven (`limits_source: "run"`); a run stored before they were kept
takes them from the config at export and says so (`limits_source: "config at export"`). Read from the store
alone (a `Ledger`); every value passes `redact_value` again on the way out, so the file redacts at least as
the store does.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.core.redact import redact_value
from bot.core.types import Approval, ApprovalState, Step, Usage
from bot.run.guards import Limits, canonical
from bot.run.history import final_text, tool_calls
from bot.run.summary import Summary, without_handle
from bot.store import Ledger

FORMAT = "opsloop-incident/1"
READ_ONLY = "read_only"
CONFIG_AT_EXPORT = "config at export"
UNKNOWN_CATEGORY = "destructive"  # a tool whose category the record cannot tell is never treated as read-only


def call_key(tool: str, args: Any) -> str:
    """A call's identity for matching: the tool and its canonical, redacted arguments."""
    return f"{tool} {canonical(redact_value(args))}"


@dataclass(frozen=True, kw_only=True)
class RecordedDecision:
    """A human decision on a change: approved, denied, expired or superseded (a reply declined it)."""

    outcome: str
    by: str | None = None
    reason: str = ""
    preview: str | None = None

    @property
    def approved(self) -> bool:
        return self.outcome == ApprovalState.APPROVED.value


@dataclass(frozen=True, kw_only=True)
class RecordedCall:
    """One tool call of the run, in call order. `result`: what the tool returned, without the handle line the run
    put first (a replay numbers its own calls); None: started, outcome unknown (or never answered)."""

    index: int
    step: int | None  # None: the turn was condensed away; the call is known from the tool_results table only
    id: str
    tool: str
    args: dict[str, Any]
    category: str
    result: str | None
    is_error: bool = False
    confirmed_by: str | None = None
    decision: RecordedDecision | None = None

    @property
    def key(self) -> str:
        return call_key(self.tool, self.args)

    @property
    def read_only(self) -> bool:
        return self.category == READ_ONLY

    @property
    def changed(self) -> bool:
        """An approved change that ran and reported success: part of the run's final change."""
        return not self.read_only and self.confirmed_by is not None and self.result is not None and not self.is_error


@dataclass(frozen=True, kw_only=True)
class RecordedReply:
    """A person's thread reply, and where it reached the model: after `after_step` steps, following call
    `after_call` (an index into `calls`; None: before any call). `superseded`: the call whose pending approval
    it declined (it reached the model inside that call's result)."""

    user: str
    text: str
    after_step: int
    after_call: int | None = None
    superseded: int | None = None


@dataclass(frozen=True, kw_only=True)
class Incident:
    run_id: str
    task: str
    requester: str
    model: str
    created_at: float
    system: str
    tools: list[dict[str, Any]]
    categories: dict[str, str]
    prefix: list[dict[str, Any]]  # the history the run's first request started from (task, earlier runs' turns)
    calls: tuple[RecordedCall, ...]
    replies: tuple[RecordedReply, ...]
    limits: dict[str, Any]
    output: str | None
    stop_reason: str
    stop_detail: str = ""
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    agent_seconds: float = 0.0
    condensed: bool = False
    answer_texts: tuple[str, ...] = ()  # each step's text, for the comparison
    effort: str | None = None  # the output_config.effort it ran with (None: the model's default, or not recorded)
    max_tokens: int | None = None  # its max_tokens per response (thinking counts toward it); None: not recorded
    # Where `limits`, `effort` and `categories` come from: "run" (stored with the run when it was first driven)
    # or "config at export" (a run older than that record: the config `opsloop export` read, which may differ).
    limits_source: str = "run"
    # The living summary's accepted updates, oldest first: {"step", "at", "summary"} (docs/context.md).
    summary_history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def changes(self) -> list[str]:
        """The final change: every approved change that ran, in order, by call key."""
        return [c.key for c in self.calls if c.changed]

    @property
    def succeeded(self) -> bool:
        return self.stop_reason == "completed"

    @property
    def final_summary(self) -> Summary | None:
        """The run's last accepted living summary (None: it never had one)."""
        return Summary.from_json(self.summary_history[-1]["summary"]) if self.summary_history else None

    def step_calls(self, step: int) -> list[RecordedCall]:
        return [c for c in self.calls if c.step == step]

    def run_limits(self, default: Limits) -> Limits:
        known = {f.name for f in dataclasses.fields(Limits)}
        return dataclasses.replace(default, **{k: v for k, v in self.limits.items() if k in known})

    # --- JSON --------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        body = dataclasses.asdict(self)
        body["usage"] = self.usage.to_dict()
        return {"format": FORMAT, **redact_value(body)}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Incident:
        if body.get("format") != FORMAT:
            raise ValueError(f"not an opsloop incident record (format {body.get('format')!r}, expected {FORMAT!r})")
        data = dict(body)
        data.pop("format")
        data["usage"] = Usage(**data.get("usage", {}))
        data["calls"] = tuple(
            RecordedCall(**{**c, "decision": RecordedDecision(**c["decision"]) if c.get("decision") else None})
            for c in data.get("calls", [])
        )
        data["replies"] = tuple(RecordedReply(**r) for r in data.get("replies", []))
        data["answer_texts"] = tuple(data.get("answer_texts", ()))
        data.setdefault("limits_source", CONFIG_AT_EXPORT)  # a record written before the run kept them
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> Incident:
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


# --- export from the store ---------------------------------------------------------------------------------
def export_run(
    ledger: Ledger, run_id: str, *, categories: Mapping[str, str] | None = None, limits: Limits | None = None
) -> Incident | None:
    """The stored run as an Incident (None: no such run). Its limits, effort and tool categories are the ones
    stored with the run; a run stored without them (older than m011) takes `categories` (tool name ->
    category, from the configured registry) and `limits` (the config's) and its record says so. A tool missing
    from both takes its approvals' category, else counts as destructive."""
    run = ledger.find_run(run_id)
    if run is None:
        return None
    stored = run.settings or {}
    if run.settings is not None:
        source, categories, ran_under = "run", stored.get("categories") or {}, dict(stored.get("limits") or {})
    else:
        source, categories = CONFIG_AT_EXPORT, categories or {}
        ran_under = dataclasses.asdict(limits if limits is not None else Limits())
    history = ledger.history(run_id)
    steps = ledger.steps(run_id)
    results = ledger.tool_results(run_id)
    # each call's deciding approval, oldest first: a changed call asks again, and the newest one decided it
    decided = {a.tool_use_id: a for a in ledger.run_approvals(run_id) if a.state != ApprovalState.PENDING}
    cats = dict(categories)
    for a in decided.values():
        cats.setdefault(a.tool, a.category)
    prefix_len, step1_added = _prefix(history, steps)
    prefix = [dict(m) for m in history[:prefix_len]]
    if step1_added and prefix:  # texts the first step injected (replies, notes) are replayed, not part of the task
        last = prefix[-1]
        prefix[-1] = {"role": last["role"], "content": list(last["content"])[:-step1_added] or last["content"]}
    calls: list[RecordedCall] = []

    def add(step: int | None, call_id: str, tool: str, args: dict[str, Any]) -> None:
        """The call as it ran: the stored result's arguments and outcome, when there is one, and its decision."""
        row, a = results.get(call_id), decided.get(call_id)
        calls.append(
            RecordedCall(
                index=len(calls),
                step=step,
                id=call_id,
                tool=tool,
                args=row.args if row is not None else args,
                category=cats.get(tool, UNKNOWN_CATEGORY),
                result=without_handle(row.content) if row is not None and row.content is not None else None,
                is_error=row is not None and row.is_error,
                confirmed_by=row.confirmed_by if row is not None else None,
                decision=None
                if a is None
                else RecordedDecision(outcome=a.state.value, by=a.decided_by, reason=a.reason or "", preview=a.preview),
            )
        )

    texts: list[str] = []
    step = 0
    for message in history[prefix_len:]:
        if message["role"] != "assistant":
            continue
        step += 1
        texts.append(final_text(message["content"]) or "")
        for call in tool_calls(message["content"]):
            add(step, call.id, call.name, call.args)
    seen = {c.id for c in calls}
    for row in sorted(results.values(), key=lambda r: r.created_at):  # calls whose turns were condensed away
        if row.tool_use_id not in seen:
            add(None, row.tool_use_id, row.tool, row.args)
    replies = _replies(steps, calls, decided)
    named = [str(s.get("name")) for s in run.tools or []]
    return Incident(
        run_id=run.id,
        task=run.task,
        requester=run.requester,
        model=run.model,
        created_at=run.created_at,
        system=run.system or "",
        tools=run.tools or [],
        categories={n: cats.get(n, UNKNOWN_CATEGORY) for n in [*named, *sorted({c.tool for c in calls} - set(named))]},
        prefix=prefix,
        calls=tuple(calls),
        replies=tuple(replies),
        limits=ran_under,
        output=run.output,
        stop_reason=(run.stop_reason.value if run.stop_reason else run.status.value),
        stop_detail=run.stop_detail or "",
        steps=run.iterations,
        usage=run.usage,
        cost_usd=run.cost_usd,
        agent_seconds=run.agent_seconds,
        condensed=run.condensed,
        answer_texts=tuple(texts),
        effort=stored.get("effort"),
        max_tokens=stored.get("max_tokens"),
        limits_source=source,
        summary_history=[
            {"step": r.step, "at": r.at, "summary": r.summary.to_json()} for r in ledger.summaries(run_id)
        ],
    )


def _prefix(history: list[dict[str, Any]], steps: Sequence[Step]) -> tuple[int, int]:
    """(messages the first request was sent with, text blocks the first step's inject appended to them)."""
    first = next((s for s in steps if s.kind == "request"), None)
    injected_first = next((s for s in steps if s.kind == "inject"), None)
    if first is None:
        return len(history), 0
    added = 0
    if injected_first is not None and injected_first.id < first.id:
        added = len(injected_first.data.get("messages") or []) + len(injected_first.data.get("notes") or [])
    return int(first.data.get("messages", len(history))), added


def _replies(
    steps: Sequence[Step], calls: Sequence[RecordedCall], decided: Mapping[str, Approval]
) -> list[RecordedReply]:
    """Replies in arrival order: each inject step's messages (after the steps before it), and each reply that
    superseded an approval (it arrived while that call waited)."""
    out: list[RecordedReply] = []
    done_steps = 0
    for s in steps:
        if s.kind == "request":
            done_steps = max(done_steps, int(s.data.get("iteration", 0)))  # the next inject follows this step
        elif s.kind == "inject":
            before = [c.index for c in calls if c.step is not None and c.step <= done_steps]
            for m in s.data.get("messages") or []:
                out.append(
                    RecordedReply(
                        user=str(m.get("user", "")),
                        text=str(m.get("text", "")),
                        after_step=done_steps,
                        after_call=before[-1] if before else None,
                    )
                )
    by_id = {c.id: c for c in calls}
    for tool_use_id, a in decided.items():
        if a.state == ApprovalState.SUPERSEDED and (c := by_id.get(tool_use_id)) is not None and c.step is not None:
            previous = [p.index for p in calls if p.index < c.index]
            out.append(
                RecordedReply(
                    user=a.decided_by or "",
                    text=a.reason or "",
                    after_step=c.step,
                    after_call=previous[-1] if previous else None,
                    superseded=c.index,
                )
            )
    return out
