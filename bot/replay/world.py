"""The recorded world: the tools, the approvers and the people of one incident, answering from its record.

The runtime (bot/run/loop.py) talks to it through its usual Protocols: a Toolbox whose tools are
`RecordedTool`s, a confirm callback and an inject callback. Nothing here reaches a host, Slack or a person:

- a read-only call whose tool and canonical arguments match a recorded call *in the same world state* (the
  same recorded changes applied before it) gets the recorded result; the n-th such call gets the n-th
  recorded one (the last, once they run out). An unmatched one gets an "unrecorded in this incident" error,
  or with `live` it runs for real, when the live registry has it as read-only too;
- a mutating or destructive call is never run: the same decided call gets the recorded decision (and, if it
  was approved, the recorded result); any other is logged as "would ask approval" and denied, reason "replay";
- replies arrive after the same number of steps, or once the run has diverged, after the call they followed.

Every call is logged with where its result came from (`Source`), for the comparison.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bot import Toolbox
from bot.core.types import ConfirmRequest, Decision, Injected
from bot.replay.record import READ_ONLY, Incident, RecordedCall, call_key
from bot.run.summary import TOOL_NAME as SUMMARY_TOOL
from tools import Category, ToolError

REPLAY_REASON = "replay"


def unrecorded(tool: str) -> str:
    """The error result of a read-only call the incident has no record of (the model reads it)."""
    return (
        f"unrecorded in this incident: {tool} was not called with these arguments at this point of the "
        "original run, so this replay has no result for it. Continue with what you already know."
    )


def unknown_outcome(tool: str) -> str:
    return f"Outcome unknown: in the original run {tool} started but its result was never recorded."


class Source(enum.StrEnum):
    """Where a replayed call's result came from."""

    REPLAYED = "replayed"  # the recorded result
    UNRECORDED = "unrecorded"  # no record: an error result
    LIVE = "live"  # --live-readonly: the read-only tool really ran
    DECISION = "recorded decision"  # a change decided in the original: its decision (and result if approved)
    WOULD_ASK = "would ask approval"  # a change the original never decided: denied, reason "replay"


@dataclass(frozen=True, kw_only=True)
class CallLog:
    step: int
    tool: str
    args: dict[str, Any]
    source: Source
    detail: str = ""  # the decision (outcome and by whom), or the original call it matched

    @property
    def key(self) -> str:
        return call_key(self.tool, self.args)


@dataclass
class Delivery:
    """How a recorded reply reached the replay: at which step, and whether inside a decision."""

    step: int
    how: str  # "after N steps" | "after <call>" | "with the decision on <tool>"


class RecordedTool:
    """A tool of the record (its schema and category); every call goes to the world."""

    def __init__(self, world: RecordedWorld, schema: dict[str, Any], category: str) -> None:
        self.world, self.schema = world, schema
        self.name = str(schema["name"])
        self.category = Category(category) if category in Category._value2member_map_ else Category.DESTRUCTIVE
        self.parallel = self.category == Category.READ_ONLY
        self.has_dry_run = self.category == Category.DESTRUCTIVE

    def api_schema(self) -> dict[str, Any]:
        return self.schema

    def validate(self, args: Any) -> dict[str, Any]:
        if not isinstance(args, dict):
            raise ToolError(f"arguments must be an object, got {type(args).__name__}")
        self.world.proposed(self.name, args)
        return dict(args)

    async def run(self, args: Any, *, confirmed_by: str | None = None, approved_preview: str | None = None) -> str:
        return await self.world.run(self, args)

    async def dry_run(self, args: Any) -> str | None:
        return self.world.preview(self.name, args)

    async def check(self, args: Any) -> None:
        self.world.check(self.name, args)


@dataclass
class RecordedWorld:
    incident: Incident
    live: Toolbox | None = None  # --live-readonly: the configured registry, for unmatched read-only calls
    log: list[CallLog] = field(default_factory=list)
    step: int = 0
    diverged_at: int | None = None
    delivered: dict[int, Delivery] = field(default_factory=dict)  # reply index -> how it reached the replay
    _applied: tuple[int, ...] = ()  # recorded changes (call indices) the replay has "made"
    _consumed: set[int] = field(default_factory=set)  # decided calls already answered
    _reads: Counter[tuple[str, tuple[int, ...]]] = field(default_factory=Counter)
    _approved: dict[str, list[RecordedCall]] = field(default_factory=dict)  # key -> approved, not yet "run"
    _proposed: dict[int, list[str]] = field(default_factory=dict)  # step -> keys the replay called
    _answered: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        calls = self.incident.calls
        self._state_before = {c.index: tuple(p.index for p in calls if p.index < c.index and p.changed) for c in calls}
        # The replay's Toolbox is this world: the recorded schemas, exactly as the original run sent them; not
        # update_summary, which the runtime adds and answers itself (a second copy in the tools block is a 400,
        # and the replay's summary belongs in the replay's own store).
        cats = self.incident.categories
        self.tools = {
            str(s["name"]): RecordedTool(self, s, cats.get(str(s["name"]), "destructive"))
            for s in self.incident.tools
            if s.get("name") != SUMMARY_TOOL
        }

    def get(self, name: str) -> RecordedTool | None:
        return self.tools.get(name)

    def __iter__(self) -> Iterator[RecordedTool]:
        return iter(list(self.tools.values()))

    def api_schemas(self) -> list[dict[str, Any]]:
        return [t.schema for t in self.tools.values()]

    # --- what the replay did --------------------------------------------------------------------
    def proposed(self, tool: str, args: dict[str, Any]) -> None:
        self._proposed.setdefault(self.step, []).append(call_key(tool, args))

    def _record(self, tool: str, args: dict[str, Any], source: Source, detail: str = "") -> None:
        self.log.append(CallLog(step=self.step, tool=tool, args=dict(args), source=source, detail=detail))
        self._answered.add(call_key(tool, args))

    # --- read-only calls ------------------------------------------------------------------------
    async def run(self, tool: RecordedTool, args: dict[str, Any]) -> str:
        key = call_key(tool.name, args)
        if tool.category != Category.READ_ONLY:
            return self._recorded_change(tool.name, key)
        state = self._applied
        matches = [
            c
            for c in self.incident.calls
            if c.key == key and c.read_only and c.result is not None and self._state_before[c.index] == state
        ]
        if matches:
            n = self._reads[(key, state)]
            self._reads[(key, state)] += 1
            c = matches[min(n, len(matches) - 1)]
            self._record(tool.name, args, Source.REPLAYED, f"call {c.index + 1} of the original")
            if c.is_error:
                raise ToolError(c.result or "error")
            return c.result or ""
        live = self.live.get(tool.name) if self.live is not None else None
        if live is not None and live.category == Category.READ_ONLY and tool.category == Category.READ_ONLY:
            self._record(tool.name, args, Source.LIVE)
            return str(await live.run(live.validate(args)))
        self._record(tool.name, args, Source.UNRECORDED)
        raise ToolError(unrecorded(tool.name))

    # --- changes --------------------------------------------------------------------------------
    def _decided(self, key: str) -> RecordedCall | None:
        return next(
            (
                c
                for c in self.incident.calls
                if c.key == key
                and not c.read_only
                and c.index not in self._consumed
                and (c.decision is not None or c.is_error)
            ),
            None,
        )

    def check(self, tool: str, args: dict[str, Any]) -> None:
        """A change the original refused before any approval (policy): the same refusal."""
        c = self._decided(call_key(tool, args))
        if c is not None and c.decision is None:
            self._consumed.add(c.index)
            self._record(tool, args, Source.REPLAYED, f"refused in the original (call {c.index + 1})")
            raise ToolError(c.result or "refused")

    def preview(self, tool: str, args: dict[str, Any]) -> str | None:
        c = self._decided(call_key(tool, args))
        return c.decision.preview if c is not None and c.decision is not None else None

    async def confirm(self, request: ConfirmRequest) -> Decision:
        tool, args = request.call.name, request.call.args
        key = call_key(tool, args)
        c = self._decided(key)
        if c is None or c.decision is None:
            self._record(tool, args, Source.WOULD_ASK, "denied: replay")
            return Decision(approved=False, outcome="denied", reason=REPLAY_REASON)
        self._consumed.add(c.index)
        d = c.decision
        self._record(tool, args, Source.DECISION, f"{d.outcome} by {d.by or '-'}")
        if d.approved and d.by:
            self._approved.setdefault(key, []).append(c)
            return Decision(approved=True, confirmed_by=d.by, preview=d.preview)
        for i, r in enumerate(self.incident.replies):
            if r.superseded == c.index and i not in self.delivered:
                self.delivered[i] = Delivery(step=self.step, how=f"with the decision on {tool}")
        outcome = d.outcome if d.outcome in ("denied", "expired", "superseded") else "denied"
        return Decision(approved=False, confirmed_by=d.by, reason=d.reason, outcome=outcome, preview=d.preview)

    def _recorded_change(self, tool: str, key: str) -> str:
        """An approved change "runs": its recorded result, and the world moves to the state after it."""
        pending = self._approved.get(key) or []
        if not pending:
            raise ToolError(f"{tool} was not approved in this replay; a replay never runs a change")
        c = pending.pop(0)
        if c.changed:
            self._applied = (*self._applied, c.index)
        if c.result is None:
            raise ToolError(unknown_outcome(tool))
        if c.is_error:
            raise ToolError(c.result)
        return c.result

    # --- replies --------------------------------------------------------------------------------
    async def inject(self) -> list[Injected]:
        """Called once at the start of every step: notes divergence, then hands over the replies due."""
        done = self.step
        self.step += 1
        if done and self.diverged_at is None:
            original = sorted(c.key for c in self.incident.step_calls(done))
            if sorted(self._proposed.get(done, [])) != original:
                self.diverged_at = done
        out: list[Injected] = []
        for i, r in enumerate(self.incident.replies):
            if i in self.delivered:
                continue
            if self.diverged_at is None or r.after_call is None:
                due, how = r.after_step <= done, f"after {r.after_step} steps"
            else:
                followed = self.incident.calls[r.after_call]
                due, how = followed.key in self._answered, f"after {followed.tool}"
            if due:
                self.delivered[i] = Delivery(step=self.step, how=how)
                out.append(Injected(id=f"replay_reply_{i}", user=r.user, text=r.text))
        return out


__all__ = ["READ_ONLY", "CallLog", "Delivery", "RecordedTool", "RecordedWorld", "Source"]
