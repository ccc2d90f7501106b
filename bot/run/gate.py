"""The tool gate: how one model turn's calls are run. Allowlist, argument validation, policy, the confirm gate
(dry run, a stored approval) and the call itself, parallel-safe reads concurrently and everything else one at
a time. The loop (bot/run/loop.py) persists the outcomes and applies the loop detector and the error breaker.

`ToolGate` is a mixin of the run (bot.run.loop._Run): it uses the run's config (bot.run.meter.RunView), its trace
and events, its Stop check and its deadline, declared below so this module imports nothing of the loop.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.core.redact import redact
from bot.core.types import ConfirmRequest, Decision, RunStatus, StopReason, ToolCall
from bot.run import events, prompts
from bot.run.guards import Pause, Stop, digest
from bot.run.meter import RunView
from tools.api import BadCall
from tools.registry import Category, PermissionDenied, ToolError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextlib import AbstractAsyncContextManager


@dataclass
class Outcome:
    """One call's result before the loop detector and error breaker see it."""

    content: str
    is_error: bool = False
    counts: bool = True  # toward the consecutive-error breaker (not an error the model can fix from its message)
    confirmed_by: str | None = None
    marked: bool = False  # it claimed a started marker: its result is stored at once, over the marker


class ToolGate:
    """The run's calls through the gate (see the module docstring)."""

    cfg: RunView
    id: str
    iterations: int
    paused: float

    # The run's own (bot.run.loop._Run defines them): its status events, its trace, its Stop check, its deadline.
    emit: Callable[..., Awaitable[None]]
    trace: Callable[..., Awaitable[None]]
    trace_later: Callable[..., None]
    check_stop_requested: Callable[[], Awaitable[None]]
    deadline: Callable[[str], AbstractAsyncContextManager[None]]

    def batches(self, calls: list[ToolCall]) -> list[list[ToolCall]]:
        """Consecutive read-only, parallel-safe calls form one batch; every other call is alone."""
        out: list[list[ToolCall]] = []
        for call in calls:
            if self.parallel_safe(call) and out and all(self.parallel_safe(c) for c in out[-1]):
                out[-1].append(call)
            else:
                out.append([call])
        return out

    def read_only(self, call: ToolCall) -> bool:
        t = self.cfg.tools.get(call.name)
        return t is not None and t.category == Category.READ_ONLY

    def parallel_safe(self, call: ToolCall) -> bool:
        t = self.cfg.tools.get(call.name)
        return t is not None and self.read_only(call) and bool(t.parallel)

    async def run_group(self, group: list[ToolCall]) -> list[Outcome]:
        if len(group) <= 1:
            return [await self.call_and_tell(c) for c in group]
        gate = asyncio.Semaphore(self.cfg.limits.parallelism)

        async def bounded(call: ToolCall) -> Outcome:
            async with gate:
                return await self.call_and_tell(call)

        return list(await asyncio.gather(*(bounded(c) for c in group)))

    async def call_and_tell(self, call: ToolCall) -> Outcome:
        """One call, then a status event with its outcome (as soon as it has one, before its batch ends)."""
        outcome = await self.call_tool(call)
        await self.emit(events.ToolDone, call, is_error=outcome.is_error, result=outcome.content)
        return outcome

    async def call_tool(self, call: ToolCall) -> Outcome:
        """One call through allowlist, validation and the confirm gate."""
        tool = self.cfg.tools.get(call.name)
        if tool is None:
            known = ", ".join(t.name for t in self.cfg.tools)
            return Outcome(f"unknown tool {call.name!r}; available tools: {known}", is_error=True, counts=False)
        try:
            args = tool.validate(call.args)
        except ToolError as e:
            return Outcome(f"invalid arguments for {call.name}: {e}", is_error=True, counts=False)
        confirmed_by: str | None = None
        approved_preview: str | None = None
        marked = False
        began = time.monotonic()
        try:
            if tool.category != Category.READ_ONLY:
                await tool.check(args)  # policy first: never ask a human to approve what policy forbids
                # A Stop wins over a decision not yet acted on (one can land while the run waits in the store).
                await self.check_stop_requested()
                decision = await self.confirm(call, tool, args)
                if not decision.approved:
                    # A human "no" is not a malfunction: it does not count toward the error breaker.
                    return Outcome(prompts.decision_result(decision, call.name), is_error=True, counts=False)
                confirmed_by, approved_preview = decision.confirmed_by, decision.preview
                # Claim the started marker: only the driver that inserted it runs the change, and after a
                # crash nobody runs it again (its outcome is unknown). Losing the claim means another driver
                # has this run: leave it to them.
                if not await self.cfg.store.save_tool_result(
                    self.id,
                    tool_use_id=call.id,
                    tool=call.name,
                    args=args,
                    content=None,
                    is_error=False,
                    confirmed_by=confirmed_by,
                ):
                    await self.check_stop_requested()  # refused because a Stop landed: the change is not made
                    raise Pause(f"another driver already started {call.name} ({call.id})")
                marked = True
            await self.emit(events.ToolStarted, call, args=call.args)
            async with self.deadline(f"running {call.name}"):
                # A destructive tool executes what its approved preview listed (the card the human read),
                # even when a later dry run would list more.
                content = await tool.run(args, confirmed_by=confirmed_by, approved_preview=approved_preview)
            is_error, counts = False, True
        except ToolError as e:
            content, is_error = str(e) or type(e).__name__, True
            counts = not isinstance(e, BadCall)  # the model can fix the call from the message
        except PermissionDenied as e:
            await self.trace("tool", tool=call.name, args=call.args, error=f"PermissionDenied: {e}")
            raise Stop(StopReason.PERMISSION_DENIED, f"{call.name}: {e}") from None
        self.trace_later(
            "tool",
            tool=call.name,
            args=call.args,
            confirmed_by=confirmed_by,
            is_error=is_error,
            result=content[:500],
            latency_ms=round((time.monotonic() - began) * 1000),
        )
        return Outcome(content, is_error=is_error, counts=counts, confirmed_by=confirmed_by, marked=marked)

    async def confirm(self, call: ToolCall, tool: Any, args: dict[str, Any]) -> Decision:
        preview = None
        if tool.has_dry_run:  # every destructive tool has one; a mutating tool may (Kubernetes' server-side dry run)
            async with self.deadline(f"running the dry-run of {call.name}"):
                preview = await tool.dry_run(args)  # a ToolError here means: nothing to approve
            preview = redact(preview) if preview is not None else None
        if self.cfg.confirm is None:
            return Decision(approved=False, outcome="unavailable", reason="no approver is configured for this run")
        request = ConfirmRequest(
            run_id=self.id,
            call=ToolCall(id=call.id, name=call.name, args=args),
            category=tool.category.value,
            preview=preview,
            args_hash=digest(args),
            preview_hash=digest(preview) if preview is not None else None,
        )
        await self.emit(events.WaitingApproval, call, category=tool.category.value)
        await self.cfg.store.set_status(self.id, RunStatus.WAITING_APPROVAL)
        began = time.monotonic()
        try:
            decision = await self.cfg.confirm(request)
        finally:
            self.paused += time.monotonic() - began
        await self.cfg.store.set_status(self.id, RunStatus.RUNNING)  # not on cancel: the run stays paused
        await self.emit(
            events.ApprovalDecided, call, approved=decision.approved, by=decision.confirmed_by, outcome=decision.outcome
        )
        await self.trace(
            "decision",
            tool=call.name,
            approved=decision.approved,
            outcome=decision.outcome,
            by=decision.confirmed_by,
            reason=decision.reason,
        )
        return decision
