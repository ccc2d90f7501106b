"""A case's world: the real tools (their schemas, categories and argument validation, from the registry the case's
config builds) answered from the case's fixtures, and the case's people.

The run loop talks to it through its usual Protocols (a Toolbox, a confirm callback, an inject callback), so the
real gate runs every call: validation, the confirm gate, the loop detector, the error breaker. Nothing reaches a
host, a cluster or a person:

- a call the gate lets through gets the first fixture that matches it (an error result when the fixture says
  `error`); a call no fixture matches gets a plain result, not an error (it counts toward no stop), saying there
  is no data for those arguments and what there is: the hosts, clusters and namespaces of the config and the
  arguments this tool has data for;
- a mutating or destructive call goes through the real approval lifecycle (bot.run.approvals: a stored approval,
  N of M) and the real policy of who may decide (handlers.approvals: approvers, no self-approval, four eyes),
  configured by the case's `config.approvals`: each of the case's people's decisions that matches it is a click
  on its card, in order; a click the policy refuses changes nothing, as in Slack, and a change nobody (allowed)
  decides expires, which is "no consent";
- replies arrive after the model's N-th step.

Every call is logged (`Call`) for the scoring.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.config.settings import ApprovalSettings
from bot.core.types import Approval, ConfirmRequest, Decision, Injected
from bot.eval.case import Case, Fixture
from bot.run import approvals
from bot.run.guards import Pause, canonical
from bot.store import Store
from handlers.approvals import ApprovalSlack
from handlers.policy import ApprovalPolicy
from tools import Category, ToolError
from tools.api import some_names
from tools.registry import Tool, ToolRegistry

KNOWN_NAMES_MAX = 12  # arguments with data named in a "no data" result


@dataclass(kw_only=True)
class Call:
    """One call the run made, as the world saw it."""

    step: int
    tool: str
    args: dict[str, Any]
    category: str
    fixture: int | None = None  # index of the fixture that answered it
    decided_by: str | None = None
    approved: bool | None = None  # None: read-only, or never reached a decision
    refused: list[str] = field(default_factory=list)  # clicks the approval policy refused, and why
    ran: bool = False  # it returned a result (a fixture, or "no data")


class FixtureTool:
    """A registry tool as the model sees it (schema, category, validation); its calls go to the world."""

    def __init__(self, world: FixtureWorld, real: Tool) -> None:
        self.world, self.real = world, real
        self.name, self.category, self.parallel = real.name, real.category, real.parallel
        self.has_dry_run = real.has_dry_run

    def api_schema(self) -> dict[str, Any]:
        return self.real.api_schema()

    def validate(self, args: Any) -> dict[str, Any]:
        valid = self.real.validate(args)  # ToolError for bad arguments, as the real tool says it
        self.world.log.append(
            Call(step=self.world.step, tool=self.name, args=dict(valid), category=self.category.value)
        )
        return valid

    async def check(self, args: Any) -> None:
        """The tool's own policy check needs its backend: a case has none, so nothing is refused here."""

    async def dry_run(self, args: Any) -> str | None:
        f = self.world.fixture(self.name, args)
        preview = f[1].preview if f is not None else None
        return preview or f"(eval) {self.name} would run with {canonical(args)}"

    async def run(self, args: Any, *, confirmed_by: str | None = None, approved_preview: str | None = None) -> str:
        return self.world.answer(self.name, args)


@dataclass
class FixtureWorld:
    case: Case
    registry: ToolRegistry
    log: list[Call] = field(default_factory=list)
    step: int = 0
    delivered: set[int] = field(default_factory=set)
    answered: dict[int, int] = field(default_factory=dict)  # a fixture group's first index -> calls it answered
    desk: approvals.ApprovalDesk | None = None  # the approval lifecycle on the run's store (`attach`)

    def __post_init__(self) -> None:
        self.tools = {t.name: FixtureTool(self, t) for t in self.registry}

    def attach(self, store: Store) -> None:
        """The approval lifecycle on the run's store, with the case's policy."""
        cards = Cards(store, Policy(self.case.approvals))
        self.desk = approvals.ApprovalDesk(store=store, settings=self.case.approvals, cards=cards, nudge=lambda: None)

    # --- Toolbox ---------------------------------------------------------------------------------
    def get(self, name: str) -> FixtureTool | None:
        return self.tools.get(name)

    def __iter__(self) -> Iterator[FixtureTool]:
        return iter(list(self.tools.values()))

    def api_schemas(self) -> list[dict[str, Any]]:
        return [t.api_schema() for t in self.tools.values()]

    # --- answers ---------------------------------------------------------------------------------
    def fixture(self, tool: str, args: dict[str, Any], *, answering: bool = False) -> tuple[int, Fixture] | None:
        """The fixture that answers this call: the first that matches, or, when several fixtures have the same
        tool, args and match, the next of them in turn (the last one repeats). `answering`: count this call."""
        first = next((i for i, f in enumerate(self.case.fixtures) if f.matches(tool, args)), None)
        if first is None:
            return None
        head = self.case.fixtures[first]
        same = [
            i
            for i, f in enumerate(self.case.fixtures)
            if (f.tool, canonical(f.args), canonical(f.match))
            == (head.tool, canonical(head.args), canonical(head.match))
        ]
        n = self.answered.get(first, 0)
        if answering:
            self.answered[first] = n + 1
        i = same[min(n, len(same) - 1)]
        return i, self.case.fixtures[i]

    def _last(self, tool: str, args: dict[str, Any]) -> Call | None:
        key = canonical(args)
        return next((c for c in reversed(self.log) if c.tool == tool and canonical(c.args) == key), None)

    def answer(self, tool: str, args: dict[str, Any]) -> str:
        call = self._last(tool, args)
        found = self.fixture(tool, args, answering=True)
        if call is not None:
            call.ran = True
            call.fixture = found[0] if found else None
        if found is None:
            return self.no_data(tool, args)
        fixture: Fixture = found[1]
        if fixture.error:
            raise ToolError(fixture.result)
        return fixture.result

    def no_data(self, tool: str, args: dict[str, Any]) -> str:
        """What a call no fixture matches gets: no data for these arguments, and what there is."""
        shown = ", ".join(f"{k}={canonical(v)}" for k, v in sorted(args.items()) if v is not None) or "no arguments"
        lines = [f"No data for {tool} with {shown}: nothing matched these arguments."]
        with_data = [f.describe() for f in self.case.fixtures if f.tool == tool]
        if with_data:
            lines.append(f"{tool} has data for: {some_names(with_data, KNOWN_NAMES_MAX)}.")
        lines += [f"There is: {line}" for line in self.registry.environment]
        return "\n".join(lines)

    # --- people ----------------------------------------------------------------------------------
    async def confirm(self, request: ConfirmRequest) -> Decision:
        """The real lifecycle: ask (a stored approval and its card), the people's clicks through the real policy,
        then ask again for the decision; still pending after every click: it expires (no consent)."""
        assert self.desk is not None, "the runner attaches the approval desk before the run"
        desk, tool, args = self.desk, request.call.name, request.call.args
        run = await desk.store.get_run(request.run_id)
        call = self._last(tool, args)
        try:
            return await approvals.ask(desk, run, request)  # decided already: a resumed call
        except Pause:
            pass
        approval = await desk.store.approval_for_call(request.run_id, request.call.id)
        assert approval is not None
        for d in (d for d in self.case.decisions if d.matches(tool, args)):
            refusal = await approvals.decide(desk, approval.id, d.by, approve=d.approve, channel=None, ts=None)
            if refusal is not None and call is not None:
                call.refused.append(f"{d.by}: {refusal.words or refusal.why.value}")
        try:
            decision = await approvals.ask(desk, run, request)
        except Pause:
            await approvals.expire(desk, await desk.store.get_approval(approval.id))
            decision = await approvals.ask(desk, run, request)
        if call is not None:
            call.approved, call.decided_by = decision.approved, decision.confirmed_by
        return decision

    async def inject(self) -> list[Injected]:
        """Called at the start of every step: the replies due after the steps done so far."""
        done = self.step
        self.step += 1
        out = []
        for i, r in enumerate(self.case.replies):
            if i not in self.delivered and r.after_step <= done:
                self.delivered.add(i)
                out.append(Injected(id=f"eval_reply_{i}", user=r.user, text=r.text))
        return out


class Policy(ApprovalPolicy):
    """Slack's approval policy; with no Slack to ask, a user group has no members (fails closed)."""

    def __init__(self, settings: ApprovalSettings) -> None:
        super().__init__(settings, AsyncWebClient())

    async def _members(self, group: str) -> frozenset[str]:
        return frozenset()


class Cards(ApprovalSlack):
    """Slack's side of the approvals with Slack's own check of who may decide (`refusal`), and no Slack: a card
    is posted nowhere, and every click is on its card."""

    def __init__(self, store: Store, policy: ApprovalPolicy) -> None:
        self.store, self.policy = store, policy

    async def post_card(self, approval: Approval) -> None:
        pass

    async def show_card(self, approval: Approval, *, ts: str | None = None) -> None:
        pass

    async def off_its_card(self, a: Approval, *, channel: str | None, ts: str | None) -> str | None:
        return None

    async def name(self, user: str) -> str:
        return user


def ran_change(call: Call) -> bool:
    return call.category != Category.READ_ONLY.value and bool(call.approved) and call.ran
