"""The agent loop: RunConfig + run(). Short enough to read in one sitting.

Each iteration: inject thread replies -> request -> record usage, check budgets ->
done? -> tools (allowlist, confirm gate, execute) -> stop predicate and limits.
Everything is persisted as it happens, so `run()` on a stored run resumes it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from bot import ModelClient, RunStore, Toolbox, living, prompts
from bot.guards import ErrorBreaker, Limits, LoopDetector, Pause, Stop, digest
from bot.history import (
    closing_results,
    final_text,
    keep_complete_calls,
    only_thinking,
    reasoning,
    recover_json_tool_calls,
    split_for_condensing,
    tool_calls,
    transcript,
    without_thinking,
)
from bot.pricing import Price
from bot.redact import redact
from bot.types import (
    AnswerSink,
    ConfirmRequest,
    ContextOverflow,
    Decision,
    Injected,
    ModelError,
    ModelRequest,
    ModelResponse,
    Run,
    RunResult,
    RunStatus,
    StopReason,
    ToolCall,
    Totals,
    Usage,
)
from tools.api import RunScope, run_scope
from tools.registry import Category, PermissionDenied, ToolError

log = structlog.get_logger("opsloop.run")

MAX_OUTPUT_TOKENS = 128_000  # the current models' output ceiling

Confirm = Callable[[ConfirmRequest], Awaitable[Decision]]
Inject = Callable[[], Awaitable[list[Injected]]]
StopRequested = Callable[[], Awaitable[str | None]]
OnEvent = Callable[[str, dict[str, Any]], Awaitable[None]]
AnswerSinkFor = Callable[[int], AnswerSink | None]  # step -> where its text streams (None: nowhere)


@dataclass(kw_only=True)
class RunConfig:
    """Everything one run needs; the loop imports none of it."""

    model: ModelClient
    store: RunStore
    tools: Toolbox
    price_for: Callable[[str], Price]  # each response is priced at the model that answered it
    system_prompt: str = prompts.SYSTEM_PROMPT  # a new run's; a stored run keeps the one it started with
    limits: Limits = field(default_factory=Limits)
    max_tokens: int = 16_000  # thinking counts toward it
    effort: str | None = None  # output_config.effort on models that think adaptively
    thinking_display: str | None = "summarized"
    confirm: Confirm | None = None  # None: confirm tools are refused, never run
    inject: Inject | None = None  # returns replies already stored in the inbox
    stop_requested: StopRequested | None = None  # returns who asked to stop, or None
    hand_back: Callable[[], bool] | None = None  # True: this process is stopping; pause at the next step
    on_event: OnEvent | None = None
    answer_sink: AnswerSinkFor | None = None  # streams each step's text as the model writes it (the answer's)
    condense: bool = True
    context_budget_tokens: int | None = None  # condense when a prompt grows past this
    scope: RunScope | None = None  # what the run's tools may know of it (tools.api.current_run)
    # Context offered at a run's first drive (past incidents, the team's runbook): text blocks appended to the
    # task's user turn before the first request, so the system prompt and tools stay the cached prefix.
    prelude: Callable[[], Awaitable[Sequence[str]]] | None = None


async def run(cfg: RunConfig, run_id: str) -> RunResult:
    """Run (or resume) a stored run until it completes or hits a boundary.

    Raises `Pause` when the run waits for a human decision (`confirm` raised it) or hands back to another
    process: the run is not over, and everything needed to resume it is in the store."""
    return await _Run.load(cfg, run_id)


def run_settings(cfg: RunConfig) -> dict[str, Any]:
    """What a run runs under, stored with it (bot/replay: a replay applies the same, a record says them)."""
    return {"limits": dataclasses.asdict(cfg.limits), "effort": cfg.effort, "max_tokens": cfg.max_tokens,
            "thinking_display": cfg.thinking_display, "model": cfg.model.model,
            "categories": {t.name: str(getattr(t.category, "value", t.category)) for t in cfg.tools}}


class _Run:
    def __init__(self, cfg: RunConfig, row: Run, history: list[dict[str, Any]]) -> None:
        self.cfg, self.id, self.history = cfg, row.id, history
        self.task = redact(row.task)
        # Fixed for the whole run and stored with it: current models bind thinking to system and tools,
        # and the prompt cache depends on them. A resumed run sends them byte-identical.
        self.system: str = row.system if row.system is not None else cfg.system_prompt
        self.tool_schemas: list[dict[str, Any]] = row.tools if row.tools is not None else [
            *cfg.tools.api_schemas(), living.schema()]
        self.fresh = row.system is None
        self.drop_block = row.drop_block
        self.notes: list[str] = tool_changes(self.tool_schemas, cfg.tools) if not self.fresh else []
        self.iterations: int = row.iterations
        self.usage = row.usage
        self.cost: float = row.cost_usd
        self.tools_called: list[str] = list(row.tools_called)
        self.condensed = row.condensed
        self.agent_seconds_before: float = row.agent_seconds
        self.started = time.monotonic()
        self.pending_condense = False
        self.paused = 0.0  # seconds spent waiting for humans: not the agent's deadline
        limits = cfg.limits
        self.loops = LoopDetector(window=limits.loop_window, warn_at=limits.loop_warn_at, stop_at=limits.loop_stop_at)
        self.breaker = ErrorBreaker(limits.max_consecutive_errors)

    @classmethod
    async def load(cls, cfg: RunConfig, run_id: str) -> RunResult:
        row = await cfg.store.get_run(run_id)
        self = cls(cfg, row, await cfg.store.history(run_id))
        if not row.active:
            return self.result(row.stop_reason or StopReason.MODEL_ERROR, row.stop_detail or "", row.output,
                               row.stopped_by)
        if self.fresh:
            await cfg.store.fix_prompt(run_id, system=self.system, tools=self.tool_schemas)
        if row.settings is None:  # a follow-up run inherits the prompt, not these: recorded at its first drive
            if cfg.prelude is not None:
                await self.offer_context(await cfg.prelude())
            await cfg.store.record_settings(run_id, run_settings(cfg))
        with structlog.contextvars.bound_contextvars(run_id=run_id), run_scope(cfg.scope):
            return await self.loop()

    async def offer_context(self, blocks: Sequence[str]) -> None:
        """Append `blocks` to the task's user turn (not sent yet: history stays append-only), once: a drive that
        died before its settings were recorded offers again, and a block already there is not added twice."""
        last = len(self.history) - 1
        if last < 0 or self.history[last]["role"] != "user":
            return
        message = self.history[last]
        content = message["content"]
        content = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        have = {b.get("text") for b in content if isinstance(b, dict)}
        new = [{"type": "text", "text": redact(b)} for b in blocks if b.strip() and redact(b) not in have]
        if new:
            self.history[last] = {**message, "content": [*content, *new]}
            await self.cfg.store.put_message(self.id, last, self.history[last])

    # --- the loop -----------------------------------------------------------
    async def loop(self) -> RunResult:
        try:
            try:
                if calls := self.pending_calls():  # resumed between a tool_use and its results
                    await self.execute(calls)
                elif self.history and self.history[-1]["role"] == "assistant":  # resumed after the answer
                    return await self.finish(StopReason.COMPLETED, output=final_text(self.history[-1]["content"]))
                while True:
                    output = await self.step()
                    if output is not None:
                        return await self.finish(StopReason.COMPLETED, output=output)
            except asyncio.CancelledError:
                by = await self.cfg.stop_requested() if self.cfg.stop_requested else None
                if by is None:
                    raise  # shutdown, not a Stop click: the stored run resumes on restart
                if task := asyncio.current_task():
                    task.uncancel()
                raise Stop(StopReason.CANCELLED, f"stopped by {by}", by=by) from None
        except Stop as stop:
            return await self.finish(stop.reason, stop.detail, by=stop.by)
        except ModelError as e:
            model = e.model or self.cfg.model.model
            for billed_model, usage in e.billed or ((model, e.usage),):  # failed attempts are billed too
                self.charge(usage, billed_model)
            await self.trace("model_error", model=model, usage=e.usage.to_dict(), error=str(e))
            return await self.finish(StopReason.MODEL_ERROR, redact(str(e)))
        except Pause:
            await self.save_totals()  # the stored run is where the next driver starts
            raise

    async def step(self) -> str | None:
        await self.check_stop_requested()
        if self.cfg.hand_back and self.cfg.hand_back():
            raise Pause("handing the run back: this process is stopping")
        if self.iterations >= self.cfg.limits.max_iterations:
            raise Stop(StopReason.ITERATION_LIMIT, f"{self.iterations} of {self.cfg.limits.max_iterations} steps used")
        self.iterations += 1
        await self.emit("iteration", step=self.iterations)
        await self.inject()
        sink = self.cfg.answer_sink(self.iterations) if self.cfg.answer_sink else None
        try:
            response = await self.request(sink)
        except Exception:
            await self.end_stream(sink, answer=False)
            raise
        calls = tool_calls(response.content)
        await self.end_stream(sink, answer=not calls)  # a step that calls tools never keeps a stream open
        if not calls:
            return final_text(response.content)
        await self.execute(calls)
        self.check_deadline()
        return None  # the next step starts by checking for a Stop

    # --- 1 inject -----------------------------------------------------------
    async def inject(self) -> None:
        """Thread replies (and opsloop's own notes) enter the history as new text at the end, redacted."""
        items = await self.cfg.inject() if self.cfg.inject else []
        notes, self.notes = self.notes, []
        if not items and not notes:
            return
        texts = [{"type": "text", "text": redact(t)} for t in (*notes, *(prompts.thread_reply(i.user, i.text)
                                                                          for i in items))]
        if self.history and self.history[-1]["role"] == "user":
            self.history[-1] = {"role": "user", "content": [*self.history[-1]["content"], *texts]}
        else:
            self.history.append({"role": "user", "content": texts})
        await self.cfg.store.put_message(self.id, len(self.history) - 1, self.history[-1],
                                         consumed_inbox=[i.id for i in items])
        await self.trace("inject", messages=[{"user": i.user, "text": i.text} for i in items], notes=notes)

    # --- 2-3 request, record, budgets ---------------------------------------
    async def request(self, sink: AnswerSink | None = None) -> ModelResponse:
        max_tokens = self.cfg.max_tokens
        while True:
            request = ModelRequest(system=self.system, tools=self.tool_schemas, messages=list(self.history),
                                   max_tokens=max_tokens, effort=self.cfg.effort,
                                   thinking_display=self.cfg.thinking_display, drop_block=self.drop_block)
            await self.trace("request", iteration=self.iterations, messages=len(self.history),
                             max_tokens=max_tokens)
            began = time.monotonic()
            try:
                async with self.deadline("waiting for the model"):
                    response = await self.cfg.model.complete(request, sink=sink)
            except ContextOverflow as e:
                for model, usage in e.billed:  # attempts before the overflow (empty replies) still cost
                    self.charge(usage, model)
                await self.condense(str(e))
                continue
            await self.note_drop_block(response)
            if response.stop_reason == "model_context_window_exceeded":
                self.charge_response(response)
                await self.trace("context_overflow", model=response.model, usage=response.usage.to_dict())
                await self.condense("model_context_window_exceeded")
                continue
            if response.stop_reason == "max_tokens" and only_thinking(keep_complete_calls(response.content,
                                                                                          response.stop_reason)):
                max_tokens = await self.more_room_to_think(response, max_tokens)
                continue
            content = await self.record(response, latency=time.monotonic() - began)
            return dataclasses.replace(response, content=content)

    async def more_room_to_think(self, response: ModelResponse, max_tokens: int) -> int:
        """The model spent all of max_tokens thinking: retry once with more room, within the token budget."""
        self.charge_response(response)
        await self.save_totals()
        self.check_budgets()
        room = min(2 * max_tokens, MAX_OUTPUT_TOKENS, self.cfg.limits.token_budget - self.usage.paid_tokens)
        if max_tokens > self.cfg.max_tokens or room <= max_tokens:
            why = (" even after a retry with more room" if max_tokens > self.cfg.max_tokens
                   else " at the models' output ceiling" if max_tokens >= MAX_OUTPUT_TOKENS
                   else "; not enough token budget left to retry with more room")
            raise Stop(StopReason.MODEL_ERROR, f"{response.model} used all {max_tokens:,} output tokens thinking "
                       f"without answering{why}")
        await self.trace("thinking_only", model=response.model, max_tokens=max_tokens, retry_max_tokens=room,
                         usage=response.usage.to_dict())
        return room

    async def note_drop_block(self, response: ModelResponse) -> None:
        """The adapter had to ask the API to drop mismatched thinking: every later request does the same."""
        if response.drop_block and not self.drop_block:
            self.drop_block = True
            await self.cfg.store.set_drop_block(self.id)
            await self.trace("thinking_prefix_mismatch", model=response.model, action="drop_block for this run")

    async def record(self, response: ModelResponse, *, latency: float) -> list[dict[str, Any]]:
        """Charge the usage, store the assistant turn exactly as received, check the budgets."""
        self.charge_response(response)
        content = recover_json_tool_calls(response.content, known=self.cfg.tools)
        content = keep_complete_calls(content, response.stop_reason)
        if only_thinking(content):  # nothing to act on: never stored as a turn with no answer and no call
            if response.stop_reason == "refusal":
                raise ModelError("the model refused the request (stop_reason refusal)")
            raise ModelError(f"the model's reply was cut off ({response.stop_reason}) before it said anything")
        self.history.append({"role": "assistant", "content": content})
        await self.cfg.store.put_message(self.id, len(self.history) - 1, self.history[-1],
                                         totals=self.totals(model=response.model))
        await self.trace("response", usage=response.usage.to_dict(), stop_reason=response.stop_reason,
                         model=response.model, latency_ms=round(latency * 1000),
                         text=final_text(content)[:500], reasoning=reasoning(content)[:500],
                         tool_calls=[c.name for c in tool_calls(content)])
        if thought := reasoning(content):
            await self.emit("reasoning", step=self.iterations, text=thought)
        self.check_budgets()
        prompt = response.bills[-1][1].prompt_tokens  # this request's prompt, not the sum over retries
        if (budget := self.cfg.context_budget_tokens) and prompt > budget and tool_calls(content):
            self.pending_condense = True
        return content

    def check_budgets(self) -> None:
        limits = self.cfg.limits
        if self.usage.paid_tokens >= limits.token_budget:
            raise Stop(StopReason.TOKEN_BUDGET, f"{self.usage.paid_tokens:,} paid tokens of {limits.token_budget:,}")
        if self.cost >= limits.cost_budget_usd:
            raise Stop(StopReason.COST_BUDGET, f"${self.cost:.4f} of ${limits.cost_budget_usd:.2f}")

    # --- 5 tools ------------------------------------------------------------
    def pending_calls(self) -> list[ToolCall]:
        if self.history and self.history[-1]["role"] == "assistant":
            return tool_calls(self.history[-1]["content"])
        return []

    async def execute(self, calls: list[ToolCall]) -> None:
        """Run the calls (parallel-safe ones concurrently), then answer them all in one user turn."""
        done = await self.cfg.store.tool_results(self.id, [c.id for c in calls])
        if fresh_calls := [c for c in calls if c.id not in done]:
            await self.emit("tools", step=self.iterations,
                            calls=[{"id": c.id, "tool": c.name, "args": c.args} for c in fresh_calls])
        results: dict[str, tuple[str, bool]] = {}
        for group in self.batches(calls):
            for call in (c for c in group if c.id in done):  # answered before a restart
                row = done[call.id]
                results[call.id] = ((row.content, row.is_error) if row.content is not None
                                    else (prompts.unknown_outcome(call.name, "opsloop restarted"), True))
            fresh = [c for c in group if c.id not in done]
            for call, outcome in zip(fresh, await self.run_group(fresh), strict=True):
                results[call.id] = await self.after_call(call, outcome)
        await self.answer(calls, results)

    def batches(self, calls: list[ToolCall]) -> list[list[ToolCall]]:
        """Consecutive read-only, parallel-safe calls form one batch; every other call is alone."""
        out: list[list[ToolCall]] = []
        for call in calls:
            if self.parallel_safe(call) and out and all(self.parallel_safe(c) for c in out[-1]):
                out[-1].append(call)
            else:
                out.append([call])
        return out

    def parallel_safe(self, call: ToolCall) -> bool:
        t = self.cfg.tools.get(call.name)
        return t is not None and t.category == Category.READ_ONLY and bool(t.parallel)

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
        await self.emit("tool_done", step=self.iterations, call_id=call.id, tool=call.name,
                        is_error=outcome.is_error, result=outcome.content)
        return outcome

    async def call_tool(self, call: ToolCall) -> Outcome:
        """One call through allowlist, validation and the confirm gate."""
        if call.name == living.TOOL_NAME and living.offered(self.tool_schemas):
            return await self.update_summary(call)
        tool = self.cfg.tools.get(call.name)
        if tool is None:
            known = ", ".join(t.name for t in self.cfg.tools)
            return Outcome(f"unknown tool {call.name!r}; available tools: {known}", is_error=True)
        try:
            args = tool.validate(call.args)
        except ToolError as e:
            return Outcome(f"invalid arguments for {call.name}: {e}", is_error=True)
        confirmed_by: str | None = None
        approved_preview: str | None = None
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
                if not await self.cfg.store.save_tool_result(self.id, tool_use_id=call.id, tool=call.name,
                                                             args=args, content=None, is_error=False,
                                                             confirmed_by=confirmed_by):
                    await self.check_stop_requested()  # refused because a Stop landed: the change is not made
                    raise Pause(f"another driver already started {call.name} ({call.id})")
            await self.emit("tool", step=self.iterations, call_id=call.id, tool=call.name, args=call.args)
            async with self.deadline(f"running {call.name}"):
                # A destructive tool executes what its approved preview listed (the card the human read),
                # even when a later dry run would list more.
                content = await tool.run(args, confirmed_by=confirmed_by, approved_preview=approved_preview)
            is_error = False
        except ToolError as e:
            content, is_error = str(e) or type(e).__name__, True
        except PermissionDenied as e:
            await self.trace("tool", tool=call.name, args=call.args, error=f"PermissionDenied: {e}")
            raise Stop(StopReason.PERMISSION_DENIED, f"{call.name}: {e}") from None
        await self.trace("tool", tool=call.name, args=call.args, confirmed_by=confirmed_by, is_error=is_error,
                         result=content[:500], latency_ms=round((time.monotonic() - began) * 1000))
        return Outcome(content, is_error=is_error, confirmed_by=confirmed_by)

    async def update_summary(self, call: ToolCall) -> Outcome:
        """The living summary (bot/living.py): checked against this run's calls, stored, shown; never an error
        toward the breaker (a refusal is the model's to fix)."""
        summary, text = await living.update(self.cfg.store, self.id, call, step=self.iterations,
                                            turn=self.pending_calls())
        if summary is not None:
            await self.emit("summary", step=self.iterations, summary=summary)
        return Outcome(text, is_error=summary is None, counts=False)

    async def confirm(self, call: ToolCall, tool: Any, args: dict[str, Any]) -> Decision:
        preview = None
        if tool.has_dry_run:  # every destructive tool has one; a mutating tool may (Kubernetes' server-side dry run)
            async with self.deadline(f"running the dry-run of {call.name}"):
                preview = await tool.dry_run(args)  # a ToolError here means: nothing to approve
            preview = redact(preview) if preview is not None else None
        if self.cfg.confirm is None:
            return Decision(approved=False, outcome="unavailable", reason="no approver is configured for this run")
        request = ConfirmRequest(run_id=self.id, call=ToolCall(id=call.id, name=call.name, args=args),
                                 category=tool.category.value, preview=preview, args_hash=digest(args),
                                 preview_hash=digest(preview) if preview is not None else None)
        await self.emit("waiting_approval", step=self.iterations, call_id=call.id, tool=call.name,
                        category=tool.category.value)
        await self.cfg.store.set_status(self.id, RunStatus.WAITING_APPROVAL)
        began = time.monotonic()
        try:
            decision = await self.cfg.confirm(request)
        finally:
            self.paused += time.monotonic() - began
        await self.cfg.store.set_status(self.id, RunStatus.RUNNING)  # not on cancel: the run stays paused
        await self.emit("approval_decided", step=self.iterations, call_id=call.id, tool=call.name,
                        approved=decision.approved, by=decision.confirmed_by, outcome=decision.outcome)
        await self.trace("decision", tool=call.name, approved=decision.approved, outcome=decision.outcome,
                         by=decision.confirmed_by, reason=decision.reason)
        return decision

    async def after_call(self, call: ToolCall, outcome: Outcome) -> tuple[str, bool]:
        """Persist one result, then apply the loop detector and the error breaker, in call order."""
        self.tools_called.append(call.name)  # here, not at the call: a paused call is counted once, when answered
        content, is_error, counts = outcome.content, outcome.is_error, outcome.counts
        seen = self.loops.observe(call.name, call.args, content)
        limits = self.cfg.limits
        if limits.loop_warn_at <= seen < limits.loop_stop_at:
            content, is_error, counts = prompts.loop_warning(call.name, seen), True, False
        # Saved before any stop below: the call ran, and the handoff report must say what it returned.
        await self.cfg.store.save_tool_result(self.id, tool_use_id=call.id, tool=call.name, args=call.args,
                                              content=content, is_error=is_error, confirmed_by=outcome.confirmed_by)
        if seen >= limits.loop_stop_at:
            raise Stop(StopReason.LOOP_DETECTED, f"{call.name} returned the same result {seen} times")
        if counts and self.breaker.observe(is_error):
            raise Stop(StopReason.CONSECUTIVE_ERRORS,
                       f"{self.breaker.streak} tool errors in a row; last: {content[:200]}")
        return content, is_error

    async def answer(self, calls: list[ToolCall], results: dict[str, tuple[str, bool]], missing: str = "") -> None:
        """Every call's result in one user turn, redacted as it enters the history."""
        results = {k: (redact(content), is_error) for k, (content, is_error) in results.items()}
        blocks = closing_results(calls, results, prompts.not_run(missing) if missing else "")
        self.history.append({"role": "user", "content": blocks})
        await self.cfg.store.put_message(self.id, len(self.history) - 1, self.history[-1], totals=self.totals())
        if self.pending_condense:  # a budget, not an overflow: condense once if there is something to condense
            self.pending_condense = False
            if not self.condensed and self.cfg.condense and split_for_condensing(self.history) is not None:
                await self.condense("context budget exceeded")

    # --- 6 stop predicate, limits ---------------------------------------------
    async def check_stop_requested(self) -> None:
        if self.cfg.stop_requested and (by := await self.cfg.stop_requested()):
            raise Stop(StopReason.CANCELLED, f"stopped by {by}", by=by)

    def agent_seconds(self) -> float:
        return self.agent_seconds_before + time.monotonic() - self.started - self.paused

    def check_deadline(self) -> None:
        if self.agent_seconds() >= self.cfg.limits.deadline_seconds:
            raise Stop(StopReason.DEADLINE, f"{self.cfg.limits.deadline_seconds:g}s of agent time used")

    def deadline(self, doing: str) -> _Deadline:
        return _Deadline(self.cfg.limits.deadline_seconds - self.agent_seconds(), doing)

    # --- context overflow ---------------------------------------------------
    async def condense(self, why: str) -> None:
        if self.condensed or not self.cfg.condense:
            raise Stop(StopReason.MODEL_ERROR, f"context window exceeded ({why}) and it was already condensed once"
                       if self.condensed else f"context window exceeded ({why}); condensation is off")
        split = split_for_condensing(self.history)
        if split is None:
            raise Stop(StopReason.MODEL_ERROR, f"context window exceeded ({why}) with nothing left to condense")
        self.condensed = True
        older = transcript(self.history[:split])
        request = ModelRequest(system=prompts.CONDENSE_SYSTEM, tools=[], max_tokens=self.cfg.max_tokens,
                               effort="low", thinking_display=None,
                               messages=[{"role": "user", "content": [{"type": "text", "text": older}]}])
        async with self.deadline("condensing the history"):
            summary = await self.cfg.model.complete(request)
        self.charge_response(summary)
        # No summary text (the model only thought): keep the newest part of the plain transcript instead.
        text = final_text(summary.content) or older[-8000:]
        head = {"role": "user", "content": [{"type": "text", "text": redact(
            f"{self.task}\n\n[Summary of the work so far, condensed to fit the context window]\n{text}")}]}
        # The kept turns lose their thinking blocks: they were bound to the history we just summarised,
        # and current models reject them (400) once their prefix changed. system and tools stay as they were.
        self.history = [head, *without_thinking(self.history[split:])]
        await self.cfg.store.replace_history(self.id, self.history)
        await self.save_totals()
        await self.trace("condense", why=why, kept_messages=len(self.history) - 1, model=summary.model,
                         usage=summary.usage.to_dict())
        self.check_budgets()

    # --- bookkeeping --------------------------------------------------------
    def charge_response(self, response: ModelResponse) -> None:
        for model, usage in response.bills:
            self.charge(usage, model)

    def charge(self, usage: Usage, model: str) -> None:
        self.usage = self.usage + usage
        self.cost += self.cfg.price_for(model).cost(usage)

    def totals(self, *, model: str | None = None) -> Totals:
        return Totals(iterations=self.iterations, usage=self.usage, cost_usd=self.cost,
                      agent_seconds=self.agent_seconds(), tools_called=tuple(self.tools_called),
                      condensed=self.condensed, model=model)

    async def save_totals(self) -> None:
        await self.cfg.store.save_totals(self.id, self.totals())

    async def trace(self, kind: str, **data: Any) -> None:
        log.info(kind, **data)
        await self.cfg.store.add_step(self.id, kind, data)

    async def end_stream(self, sink: AnswerSink | None, *, answer: bool) -> None:
        """The step's turn is known: its stream is kept for the answer, or stopped as it is."""
        if sink is None:
            return
        try:
            await sink.end(answer=answer)
        except Exception:  # streaming is a courtesy: the answer is still posted through the outbox
            log.exception("answer_sink_failed")

    async def emit(self, kind: str, **data: Any) -> None:
        if self.cfg.on_event is None:
            return
        try:
            await self.cfg.on_event(kind, {"run_id": self.id, "tokens": self.usage.paid_tokens,
                                           "cost_usd": self.cost, **data})
        except Exception:  # a status message must never break the run
            log.exception("event_callback_failed", kind=kind)

    async def finish(self, reason: StopReason, detail: str = "", *, by: str | None = None,
                     output: str | None = None) -> RunResult:
        self.pending_condense = False  # a stopping run answers its pending calls; it never asks the model again
        if calls := self.pending_calls():  # keep the stored history valid for a follow-up run
            done = await self.cfg.store.tool_results(self.id, [c.id for c in calls])
            why = f"the run stopped ({reason.value})"
            # A change that had started when the run stopped may or may not have happened: never "not run".
            results = {k: (v.content, v.is_error) if v.content is not None
                       else (prompts.unknown_outcome(v.tool, why), True) for k, v in done.items()}
            await self.answer(calls, results, missing=reason.value)
        await self.cfg.store.finish_run(self.id, stop_reason=reason, stop_detail=detail, stopped_by=by, output=output)
        await self.save_totals()
        await self.trace("stop", reason=reason.value, detail=detail, by=by, iterations=self.iterations,
                         usage=self.usage.to_dict(), cost_usd=round(self.cost, 6))
        result = self.result(reason, detail, output, by)
        await self.emit("finished", result=result)
        return result

    def result(self, reason: StopReason, detail: str, output: str | None, by: str | None) -> RunResult:
        return RunResult(run_id=self.id, output=output, stop_reason=reason, stop_detail=detail,
                         iterations=self.iterations, usage=self.usage, cost_usd=self.cost,
                         tools_called=tuple(self.tools_called), wall_seconds=self.agent_seconds(),
                         model=getattr(self.cfg.model, "model", ""), stopped_by=by)


def tool_changes(stored: list[dict[str, Any]], registry: Toolbox) -> list[str]:
    """A note for the model when the tools available differ from the run's fixed `tools` (a resumed run
    after a config change, an MCP server whose list changed). The `tools` sent never change mid-run."""
    offered = {t["name"] for t in stored} - {living.TOOL_NAME}  # the runtime's own, never the registry's
    present = {t.name for t in registry}
    gone, added = sorted(offered - present), sorted(present - offered)
    return [prompts.tools_changed(gone, added)] if gone or added else []


@dataclass
class Outcome:
    """One call's result before the loop detector and error breaker see it."""

    content: str
    is_error: bool = False
    counts: bool = True  # toward the consecutive-error breaker
    confirmed_by: str | None = None


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
