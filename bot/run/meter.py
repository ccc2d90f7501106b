"""The run's meters: tokens and cost charged per response, agent time, the budgets and the deadline on them,
the totals stored with each write and the result a drive returns.

`Meter` is a mixin of the run (bot.run.loop._Run), as are condensation (bot.run.condense) and the gate
(bot.run.gate): they read the run's config through `RunView`, declared below, so they import nothing of the loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Protocol

from bot import ModelClient, Toolbox
from bot.core.types import ConfirmRequest, Decision, ModelResponse, RunResult, StopReason, Totals, Usage
from bot.run.guards import Limits, Stop

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from bot.core.pricing import Price
    from bot.store import Store


WRAP_UP_SECONDS = 120.0  # the one wrap-up call a budget's stop allows (bot.run.loop), past the agent's deadline


class RunView(Protocol):
    """What the run's mixins (the meters, condensation, the gate) read of a RunConfig."""

    @property
    def model(self) -> ModelClient: ...
    @property
    def store(self) -> Store: ...
    @property
    def limits(self) -> Limits: ...
    @property
    def price_for(self) -> Callable[[str], Price]: ...
    @property
    def tools(self) -> Toolbox: ...
    @property
    def confirm(self) -> Callable[[ConfirmRequest], Awaitable[Decision]] | None: ...
    @property
    def condense(self) -> bool: ...
    @property
    def max_tokens(self) -> int: ...


class Meter:
    """The run's usage, cost and agent time (see the module docstring)."""

    cfg: RunView
    id: str
    iterations: int
    usage: Usage
    cost: float
    tools_called: list[str]
    condensed: bool
    agent_seconds_before: float
    started: float
    paused: float

    def charge_response(self, response: ModelResponse) -> None:
        for model, usage in response.bills:
            self.charge(usage, model)

    def charge(self, usage: Usage, model: str) -> None:
        self.usage = self.usage + usage
        self.cost += self.cfg.price_for(model).cost(usage)

    def totals(self, *, model: str | None = None) -> Totals:
        return Totals(
            iterations=self.iterations,
            usage=self.usage,
            cost_usd=self.cost,
            agent_seconds=self.agent_seconds(),
            tools_called=tuple(self.tools_called),
            condensed=self.condensed,
            model=model,
        )

    async def save_totals(self) -> None:
        await self.cfg.store.save_totals(self.id, self.totals())

    def check_budgets(self) -> None:
        limits = self.cfg.limits
        if self.usage.paid_tokens >= limits.token_budget:
            raise Stop(StopReason.TOKEN_BUDGET, f"{self.usage.paid_tokens:,} paid tokens of {limits.token_budget:,}")
        if self.cost >= limits.cost_budget_usd:
            raise Stop(StopReason.COST_BUDGET, f"${self.cost:.4f} of ${limits.cost_budget_usd:.2f}")

    def agent_seconds(self) -> float:
        return self.agent_seconds_before + time.monotonic() - self.started - self.paused

    def check_deadline(self) -> None:
        if self.agent_seconds() >= self.cfg.limits.deadline_seconds:
            raise Stop(StopReason.DEADLINE, f"{self.cfg.limits.deadline_seconds:g}s of agent time used")

    def deadline(self, doing: str) -> _Deadline:
        return _Deadline(self.cfg.limits.deadline_seconds - self.agent_seconds(), doing)

    def grace(self, doing: str) -> _Deadline:
        """The wrap-up's deadline: the agent time left, if any, and `WRAP_UP_SECONDS` past it, never more."""
        return _Deadline(max(0.0, self.cfg.limits.deadline_seconds - self.agent_seconds()) + WRAP_UP_SECONDS, doing)

    def result(self, reason: StopReason, detail: str, output: str | None, by: str | None) -> RunResult:
        return RunResult(
            run_id=self.id,
            output=output,
            stop_reason=reason,
            stop_detail=detail,
            iterations=self.iterations,
            usage=self.usage,
            cost_usd=self.cost,
            tools_called=tuple(self.tools_called),
            wall_seconds=self.agent_seconds(),
            model=getattr(self.cfg.model, "model", ""),
            stopped_by=by,
        )


class _Deadline:
    """asyncio.timeout for the agent's remaining time; turns expiry into Stop(deadline)."""

    def __init__(self, remaining: float, doing: str) -> None:
        self.remaining, self.doing = remaining, doing
        self._timeout = asyncio.timeout(max(0.0, remaining))

    async def __aenter__(self) -> None:
        if self.remaining <= 0:
            raise Stop(StopReason.DEADLINE, f"deadline reached before {self.doing}")
        await self._timeout.__aenter__()

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self._timeout.__aexit__(*exc)
        except TimeoutError:
            raise Stop(StopReason.DEADLINE, f"deadline reached while {self.doing}") from None
