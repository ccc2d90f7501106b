"""The agent loop: RunConfig + run(). Short enough to read in one sitting.

Each iteration: inject thread replies -> request -> record usage, check budgets ->
done? -> tools (allowlist, confirm gate, execute) -> stop predicate and limits.
Everything is persisted as it happens, so `run()` on a stored run resumes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from bot import ModelClient, Toolbox
from bot.core.pricing import Price
from bot.core.redact import redact, redact_value
from bot.core.types import (
    AnswerSink,
    CallResult,
    ConfirmRequest,
    ContextOverflow,
    Decision,
    Injected,
    ModelError,
    ModelRequest,
    ModelResponse,
    Run,
    RunNews,
    RunResult,
    StepEntry,
    StopReason,
    ToolCall,
    Totals,
)
from bot.run import events, living, prompts
from bot.run.condense import Condenser
from bot.run.gate import Outcome, ToolGate
from bot.run.guards import WRAP_UP, ErrorBreaker, Limits, LoopDetector, Pause, Stop
from bot.run.history import (
    closing_results,
    final_text,
    keep_complete_calls,
    only_thinking,
    reasoning,
    recover_json_tool_calls,
    split_for_condensing,
    tool_calls,
)
from tools.api import RunScope, run_scope

if TYPE_CHECKING:
    from bot.store import Store

log = structlog.get_logger("opsloop.run")

MAX_OUTPUT_TOKENS = 128_000  # the current models' output ceiling
TURN_GRACE_S = 0.25  # a turn of read-only calls that end within this is stored with their results (`store_turn`)

Confirm = Callable[[ConfirmRequest], Awaitable[Decision]]
Inject = Callable[[], Awaitable[list[Injected]]]
StopRequested = Callable[[], Awaitable[str | None]]
News = Callable[[], Awaitable[RunNews]]
OnEvent = Callable[[events.RunEvent], Awaitable[None]]  # bot/run/events.py
AnswerSinkFor = Callable[[int], AnswerSink | None]  # step -> where its text streams (None: nowhere)
AtEndWrites = Callable[[], Awaitable[Sequence[Callable[[Any], None]]]]  # -> the writes, each called with the ledger


@dataclass(kw_only=True)
class RunConfig:
    """Everything one run needs; the loop imports none of it."""

    model: ModelClient
    store: Store
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
    # Both at once (one store read: `store.run_news`) at the start of each step, when given; after a tool step, the
    # news read in that step's last write (`answer_turn`) instead, so a read-only tool step takes one store round trip.
    news: News | None = None
    hand_back: Callable[[], bool] | None = None  # True: this process is stopping; pause at the next step
    on_event: OnEvent | None = None
    answer_sink: AnswerSinkFor | None = None  # streams each step's text as the model writes it (the answer's)
    condense: bool = True
    context_budget_tokens: int | None = None  # condense when a prompt grows past this
    scope: RunScope | None = None  # what the run's tools may know of it (tools.api.current_run)
    # Context offered at a run's first drive (past incidents, the team's runbook): text blocks appended to the
    # task's user turn before the first request, so the system prompt and tools stay the cached prefix.
    prelude: Callable[[], Awaitable[Sequence[str]]] | None = None
    # What the configured reaches write in the transaction that ends this run (each called with the ledger),
    # asked for as the run ends, so the writes reflect that moment (what Slack says of the conversation then).
    at_end: AtEndWrites | None = None


async def run(cfg: RunConfig, run_id: str) -> RunResult:
    """Run (or resume) a stored run until it completes or hits a boundary.

    Raises `Pause` when the run waits for a human decision (`confirm` raised it) or hands back to another
    process: the run is not over, and everything needed to resume it is in the store."""
    row = await cfg.store.get_run(run_id)
    r = _Run(cfg, row, await cfg.store.history(run_id))
    if not row.active:
        return r.result(row.stop_reason or StopReason.MODEL_ERROR, row.stop_detail or "", row.output, row.stopped_by)
    r.numbered = living.numbered(await cfg.store.tool_results(run_id), r.pending_calls())
    if r.fresh:
        await cfg.store.fix_prompt(run_id, system=r.system, tools=r.tool_schemas)
    if row.settings is None:  # a follow-up run inherits the prompt, not these: recorded at its first drive
        if cfg.prelude is not None:
            await r.offer_context(await cfg.prelude())
        await cfg.store.record_settings(run_id, run_settings(cfg))
    with structlog.contextvars.bound_contextvars(run_id=run_id), run_scope(cfg.scope):
        return await r.loop()


def run_settings(cfg: RunConfig) -> dict[str, Any]:
    """What a run runs under, stored with it (bot/replay: a replay applies the same, a record says them)."""
    return {
        "limits": dataclasses.asdict(cfg.limits),
        "effort": cfg.effort,
        "max_tokens": cfg.max_tokens,
        "thinking_display": cfg.thinking_display,
        "model": cfg.model.model,
        "categories": {t.name: str(getattr(t.category, "value", t.category)) for t in cfg.tools},
    }


class _Run(Condenser, ToolGate):
    cfg: RunConfig

    def __init__(self, cfg: RunConfig, row: Run, history: list[dict[str, Any]]) -> None:
        self.cfg, self.id, self.history = cfg, row.id, history
        self.task = redact(row.task)
        # Fixed for the whole run and stored with it: current models bind thinking to system and tools,
        # and the prompt cache depends on them. A resumed run sends them byte-identical.
        self.system: str = row.system if row.system is not None else cfg.system_prompt
        self.tool_schemas: list[dict[str, Any]] = (
            row.tools if row.tools is not None else [*cfg.tools.api_schemas(), living.schema()]
        )
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
        self.loops = LoopDetector(window=limits.loop_window)  # the loop applies warn_at and stop_at
        self.breaker = ErrorBreaker(limits.max_consecutive_errors)
        self.numbered = 0  # calls with a handle before the current turn (`living.numbered`, read at load)
        self.handles: dict[str, str] = {}  # the current turn's handles by tool_use id
        self.steps: list[StepEntry] = []  # trace rows logged, waiting for the step's next store write
        self.unsaved: list[CallResult] = []  # this turn's results that claimed no marker: stored with its answer
        self.news_ahead: RunNews | None = None  # read by the last step's answer_turn, for the next step
        # A turn whose calls are all read-only (see `store_turn`): its seq while it waits to be stored with their
        # results, the timer that stores it on its own if they take longer, and its write once that started.
        self.unstored: int | None = None
        self.turn_timer: asyncio.TimerHandle | None = None
        self.behind: asyncio.Future[None] | None = None

    async def offer_context(self, blocks: Sequence[str]) -> None:
        """Append `blocks` to the task's user turn (not sent yet: history stays append-only), once, with their
        markers quoted (a runbook, a past incident: opsloop did not write them): a drive that died before its
        settings were recorded offers again, and a block already there (by its first line: the run's context says
        a later time) is not added twice."""
        last = len(self.history) - 1
        if last < 0 or self.history[last]["role"] != "user":
            return
        message = self.history[last]
        content = message["content"]
        content = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return  # it answers a turn the model already has (a run stored before its settings were): it was sent
        have = {str(b.get("text")).partition("\n")[0] for b in content if isinstance(b, dict)}
        new = []
        # opsloop's own context block quotes its data itself (prompts.run_context); every other block is quoted whole.
        for text in (
            redact(b) if b.startswith(prompts.CONTEXT_START) else prompts.quoted_markers(redact(b))
            for b in blocks
            if b.strip()
        ):
            if (head := text.partition("\n")[0]) not in have:
                have.add(head)
                new.append({"type": "text", "text": text})
        if new:
            self.history[last] = {**message, "content": [*content, *new]}
            await self.cfg.store.put_message(self.id, last, self.history[last])

    # --- the loop -----------------------------------------------------------
    async def loop(self) -> RunResult:
        try:
            return await self._loop()
        finally:
            if self.steps or self.unsaved or self.behind or self.unstored is not None:  # ended before a write
                with contextlib.suppress(Exception):
                    await self.flush_steps()

    async def _loop(self) -> RunResult:
        try:
            try:
                if calls := self.pending_calls():  # resumed between a tool_use and its results
                    await self.execute(calls, resumed=True)
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
            output = await self.wrap_up(stop) if stop.reason in WRAP_UP else None
            return await self.finish(stop.reason, stop.detail, by=stop.by, output=output)
        except ModelError as e:
            model = e.model or self.cfg.model.model
            for billed_model, usage in e.billed or ((model, e.usage),):  # failed attempts are billed too
                self.charge(usage, billed_model)
            await self.trace("model_error", model=model, usage=e.usage.to_dict(), error=str(e))
            return await self.finish(StopReason.MODEL_ERROR, redact(str(e)))
        except Pause:
            await self.flush_steps()
            await self.save_totals()  # the stored run is where the next driver starts
            raise

    async def step(self) -> str | None:
        news, self.news_ahead = self.news_ahead, None
        if news is None and self.cfg.news:
            news = await self.cfg.news()
        await self.check_stop_requested(news)
        if self.cfg.hand_back and self.cfg.hand_back():
            raise Pause("handing the run back: this process is stopping")
        if self.iterations >= self.cfg.limits.max_iterations:
            raise Stop(StopReason.ITERATION_LIMIT, f"{self.iterations} of {self.cfg.limits.max_iterations} steps used")
        self.check_budgets()  # a run resumed after a budget stopped it, before its wrap-up ended it
        self.check_deadline()
        self.iterations += 1
        await self.emit(events.Iteration)
        await self.inject(news.inbox if news else None)
        # An answer given now would be sent back for the summary first: it isn't streamed, so Slack shows it once.
        # (An answer adds no call, so what this says before the request still holds after it.)
        due = self.summary_behind()
        sink = self.cfg.answer_sink(self.iterations) if self.cfg.answer_sink and not due else None
        try:
            response = await self.request(sink)
        except Exception:
            await self.end_stream(sink, answer=False)
            raise
        calls = tool_calls(response.content)
        ask = not calls and due
        await self.end_stream(sink, answer=not calls and not ask)  # a step that calls tools never keeps a stream open
        if ask:
            self.history.append({"role": "user", "content": [{"type": "text", "text": prompts.SUMMARY_BEHIND}]})
            await self.cfg.store.put_message(self.id, len(self.history) - 1, self.history[-1])
            return None
        if not calls:
            return final_text(response.content)
        await self.execute(calls)
        self.check_deadline()
        return None  # the next step starts by checking for a Stop

    def summary_behind(self) -> bool:
        """The answer comes with no summary, or one older than a successful call it could cite: ask once for the
        update before posting (not when the iteration limit leaves no room for it)."""
        return (
            living.offered(self.tool_schemas)
            and self.iterations < self.cfg.limits.max_iterations
            and not any(
                isinstance(m["content"], list) and {"type": "text", "text": prompts.SUMMARY_BEHIND} in m["content"]
                for m in self.history
                if m["role"] == "user"
            )
            and living.behind(self.history)
        )

    # --- 1 inject -----------------------------------------------------------
    async def inject(self, items: list[Injected] | None = None) -> None:
        """Thread replies (and opsloop's own notes) enter the history as new text at the end, redacted.
        `items`: the replies already read with the Stop flag (None: ask `inject`)."""
        if items is None:
            items = await self.cfg.inject() if self.cfg.inject else []
        notes, self.notes = self.notes, []
        if not items and not notes:
            return
        texts = [
            {"type": "text", "text": redact(t)}
            for t in (*notes, *(prompts.inbox_message(i.user, i.text) for i in items))
        ]
        if self.history and self.history[-1]["role"] == "user":
            self.history[-1] = {"role": "user", "content": [*self.history[-1]["content"], *texts]}
        else:
            self.history.append({"role": "user", "content": texts})
        self.trace_later("inject", messages=[{"user": i.user, "text": i.text} for i in items], notes=notes)
        await self.cfg.store.put_message(
            self.id,
            len(self.history) - 1,
            self.history[-1],
            consumed_inbox=[i.id for i in items],
            steps=self.take_steps(),
        )

    # --- 2-3 request, record, budgets ---------------------------------------
    async def request(self, sink: AnswerSink | None = None) -> ModelResponse:
        max_tokens = self.cfg.max_tokens
        while True:
            request = self.model_request(max_tokens)
            self.trace_later("request", iteration=self.iterations, messages=len(self.history), max_tokens=max_tokens)
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
            if response.stop_reason == "max_tokens" and only_thinking(
                keep_complete_calls(response.content, response.stop_reason)
            ):
                max_tokens = await self.more_room_to_think(response, max_tokens)
                continue
            content = await self.record(response, latency=time.monotonic() - began)
            return dataclasses.replace(response, content=content)

    def model_request(self, max_tokens: int, tool_choice: dict[str, Any] | None = None) -> ModelRequest:
        """The next request: the history as it stands, under the run's fixed system, tools and thinking settings."""
        return ModelRequest(
            system=self.system,
            tools=self.tool_schemas,
            messages=list(self.history),
            max_tokens=max_tokens,
            effort=self.cfg.effort,
            thinking_display=self.cfg.thinking_display,
            drop_block=self.drop_block,
            tool_choice=tool_choice,
        )

    async def more_room_to_think(self, response: ModelResponse, max_tokens: int) -> int:
        """The model spent all of max_tokens thinking: retry once with more room, within the token budget."""
        self.charge_response(response)
        await self.save_totals()
        self.check_budgets()
        room = min(2 * max_tokens, MAX_OUTPUT_TOKENS, self.cfg.limits.token_budget - self.usage.paid_tokens)
        if max_tokens > self.cfg.max_tokens or room <= max_tokens:
            why = (
                " even after a retry with more room"
                if max_tokens > self.cfg.max_tokens
                else " at the models' output ceiling"
                if max_tokens >= MAX_OUTPUT_TOKENS
                else "; not enough token budget left to retry with more room"
            )
            raise Stop(
                StopReason.MODEL_ERROR,
                f"{response.model} used all {max_tokens:,} output tokens thinking without answering{why}",
            )
        await self.trace(
            "thinking_only",
            model=response.model,
            max_tokens=max_tokens,
            retry_max_tokens=room,
            usage=response.usage.to_dict(),
        )
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
        self.trace_later(
            "response",
            usage=response.usage.to_dict(),
            stop_reason=response.stop_reason,
            model=response.model,
            latency_ms=round(latency * 1000),
            text=final_text(content)[:500],
            reasoning=reasoning(content)[:500],
            tool_calls=[c.name for c in tool_calls(content)],
        )
        await self.store_turn(tool_calls(content), totals=self.totals(model=response.model), steps=self.take_steps())
        if thought := reasoning(content):
            await self.emit(events.Reasoning, text=thought)
        self.check_budgets()
        prompt = response.bills[-1][1].prompt_tokens  # this request's prompt, not the sum over retries
        if (budget := self.cfg.context_budget_tokens) and prompt > budget and tool_calls(content):
            self.pending_condense = True
        return content

    async def store_turn(self, calls: list[ToolCall], *, totals: Totals, steps: list[StepEntry]) -> None:
        """Store the model's turn just appended; an answer, or a turn with any call that is not read-only (a
        started marker, an approval), before anything else happens.

        A turn whose calls are all read-only is stored with their results, in one transaction (`answer`), when
        they end within `TURN_GRACE_S`; past that it is written on its own while they go on (`settle` waits for
        it before anything else of the run is stored). Nothing they do needs it stored first, and a process that
        dies before it lands resumes as if the model had not answered yet: it asks again, as after a crash
        while the reply was streaming, which is where nearly all of that window already is."""
        if calls and all(self.read_only(c) for c in calls):
            self.steps[:0] = steps  # the turn's trace rows go with whichever write stores it
            self.unstored = len(self.history) - 1
            self.turn_timer = asyncio.get_running_loop().call_later(TURN_GRACE_S, self.write_turn)
            return
        await self.cfg.store.put_message(self.id, len(self.history) - 1, self.history[-1], totals=totals, steps=steps)

    def write_turn(self) -> None:
        """Start storing the waiting turn of read-only calls on its own (they are taking a while)."""
        if (seq := self.take_unstored()) is not None:
            self.behind = asyncio.ensure_future(
                self.cfg.store.put_message(
                    self.id, seq, self.history[seq], totals=self.totals(), steps=self.take_steps()
                )
            )

    def take_unstored(self) -> int | None:
        """The seq of the waiting turn of read-only calls, for the caller to store (its timer is no longer needed)."""
        if self.turn_timer is not None:
            self.turn_timer.cancel()
            self.turn_timer = None
        seq, self.unstored = self.unstored, None
        return seq

    def read_only(self, call: ToolCall) -> bool:
        """The gate's rule, and the living summary (the run's own tool, which changes nothing outside the run)."""
        if call.name == living.TOOL_NAME:
            return living.offered(self.tool_schemas)
        return super().read_only(call)

    async def settle(self) -> None:
        """The model's turn is stored (see `store_turn`); its write's error, if any, is raised here."""
        self.write_turn()
        if self.behind is not None:
            await asyncio.shield(self.behind)  # a Stop or shutdown cancelling us must not cancel the write
            self.behind = None

    # --- 5 tools ------------------------------------------------------------
    def pending_calls(self) -> list[ToolCall]:
        if self.history and self.history[-1]["role"] == "assistant":
            return tool_calls(self.history[-1]["content"])
        return []

    async def execute(self, calls: list[ToolCall], *, resumed: bool = False) -> None:
        """Run the calls (parallel-safe ones concurrently), then answer them all in one user turn. Only calls
        of a turn an earlier drive stored (`resumed`) can have stored results: this drive's fresh ones have none."""
        done = await self.cfg.store.tool_results(self.id, [c.id for c in calls]) if resumed else {}
        self.handles = living.handles(self.tool_schemas, calls, self.numbered)
        if fresh_calls := [c for c in calls if c.id not in done]:
            announced = tuple(events.Announced(id=c.id, tool=c.name, args=c.args) for c in fresh_calls)
            await self.emit(events.ToolsAnnounced, calls=announced)
        results: dict[str, tuple[str, bool]] = {}
        for group in self.batches(calls):
            for call in (c for c in group if c.id in done):  # answered before a restart
                row = done[call.id]
                results[call.id] = (
                    (row.content, row.is_error)
                    if row.content is not None
                    else (prompts.unknown_outcome(call.name, "opsloop restarted"), True)
                )
            fresh = [c for c in group if c.id not in done]
            for call, outcome in zip(fresh, await self.run_group(fresh), strict=True):
                results[call.id] = await self.after_call(call, outcome)
        self.numbered += len(self.handles)
        if self.breaker.end_turn():
            raise Stop(
                StopReason.CONSECUTIVE_ERRORS,
                f"{self.breaker.streak} turns of tool errors in a row; last: {self.breaker.last_error[:200]}",
            )
        await self.answer(calls, results)

    async def call_tool(self, call: ToolCall) -> Outcome:
        """The living summary is the run's own tool (bot/run/living.py); every other call goes through the gate."""
        if call.name == living.TOOL_NAME and living.offered(self.tool_schemas):
            return await self.update_summary(call)
        return await super().call_tool(call)

    async def update_summary(self, call: ToolCall) -> Outcome:
        """The living summary (bot/run/living.py): checked against this run's calls, stored, shown; never an error
        toward the breaker (a refusal is the model's to fix)."""
        summary, text = await living.update(
            self.cfg.store, self.id, call, step=self.iterations, turn=self.pending_calls(), answered=self.unsaved
        )
        if summary is not None:
            await self.emit(events.Summarized, summary=summary)
        return Outcome(text, is_error=summary is None, counts=False)

    async def after_call(self, call: ToolCall, outcome: Outcome) -> tuple[str, bool]:
        """Persist one result, then apply the loop detector, in call order, and tell the error breaker."""
        self.tools_called.append(call.name)  # here, not at the call: a paused call is counted once, when answered
        content, is_error, counts = outcome.content, outcome.is_error, outcome.counts
        seen = self.loops.observe(call.name, call.args, content)
        limits = self.cfg.limits
        if limits.loop_warn_at <= seen < limits.loop_stop_at:
            content, is_error, counts = prompts.loop_warning(call.name, seen), True, False
        if call.id in self.handles:  # after the loop detector: the handle's number differs on every call
            content = f"{self.handles[call.id]}\n{content}"
        result = CallResult(
            tool_use_id=call.id,
            tool=call.name,
            args=call.args,
            content=content,
            is_error=is_error,
            confirmed_by=outcome.confirmed_by,
        )
        if outcome.marked:  # a change that ran: its outcome replaces its started marker now
            await self.settle()
            await self.cfg.store.save_tool_results(self.id, [result], steps=self.take_steps())
        else:  # stored with the turn that answers it (or by finish, first, if a stop below ends the run)
            self.unsaved.append(result)
        if seen >= limits.loop_stop_at:
            raise Stop(StopReason.LOOP_DETECTED, f"{call.name} returned the same result {seen} times")
        if counts:
            self.breaker.observe(is_error, content)  # the turn is judged as a whole, in `execute`
        return content, is_error

    async def answer(self, calls: list[ToolCall], results: dict[str, tuple[str, bool]], missing: str = "") -> None:
        """Every call's result in one user turn, redacted and its markers quoted as it enters the history."""
        results = {k: (prompts.quoted_markers(redact(content)), is_error) for k, (content, is_error) in results.items()}
        blocks = closing_results(calls, results, prompts.not_run(missing) if missing else "")
        turn = self.take_unstored()  # stored below, with the results, when its own write has not started
        await self.settle()
        self.history.append({"role": "user", "content": blocks})
        unsaved, self.unsaved = self.unsaved, []
        news = await self.cfg.store.answer_turn(
            self.id,
            len(self.history) - 1,
            self.history[-1],
            calls=self.history[turn] if turn is not None else None,
            results=unsaved,
            totals=self.totals(),
            steps=self.take_steps(),
        )
        self.news_ahead = news if self.cfg.news is not None else None
        if self.pending_condense:  # a budget, not an overflow: condense if there is something to condense
            self.pending_condense = False
            if self.cfg.condense and split_for_condensing(self.history) is not None:
                self.news_ahead = None  # condensing asks the model: read the news again after it
                await self.condense("context budget exceeded")

    # --- 6 stop predicate, limits ---------------------------------------------
    async def check_stop_requested(self, news: RunNews | None = None) -> None:
        """`news`: the flag as read at the start of the step (None: ask `stop_requested` now)."""
        if news is not None:
            by = news.stop_requested_by
        else:
            by = await self.cfg.stop_requested() if self.cfg.stop_requested else None
        if by:
            raise Stop(StopReason.CANCELLED, f"stopped by {by}", by=by)

    # --- bookkeeping --------------------------------------------------------
    async def trace(self, kind: str, **data: Any) -> None:
        """Log and store a trace row now (with any rows still waiting, in one transaction)."""
        self.trace_later(kind, **data)
        await self.flush_steps()

    def trace_later(self, kind: str, **data: Any) -> None:
        """Log a trace row now; it is stored with the step's next write (`take_steps`), in its transaction.
        Redacted once here: the log's processor and the store find it already redacted (bot.core.redact.Redacted)."""
        safe: dict[str, Any] = redact_value(data)
        log.info(kind, **safe)
        self.steps.append((kind, safe))

    def take_steps(self) -> list[StepEntry]:
        steps, self.steps = self.steps, []
        return steps

    async def flush_steps(self) -> None:
        """Store the trace rows and results still waiting for a write, in one transaction."""
        await self.settle()
        unsaved, self.unsaved = self.unsaved, []
        if unsaved:
            await self.cfg.store.save_tool_results(self.id, unsaved, steps=self.take_steps())
        elif steps := self.take_steps():
            await self.cfg.store.add_steps(self.id, steps)

    async def end_stream(self, sink: AnswerSink | None, *, answer: bool) -> None:
        """The step's turn is known: its stream is kept for the answer, or stopped as it is."""
        if sink is None:
            return
        try:
            await sink.end(answer=answer)
        except Exception:  # streaming is a courtesy: the answer is still posted through the outbox
            log.exception("answer_sink_failed")

    async def emit(self, kind: type[events.RunEvent], call: ToolCall | None = None, **data: Any) -> None:
        """Tell the watchers (`on_event`): an event of this step, with what the run spent so far; `call`: the call
        it is about."""
        if self.cfg.on_event is None:
            return
        if call is not None:
            data.update(call_id=call.id, tool=call.name)
        try:
            tokens, cost = self.usage.paid_tokens, self.cost
            await self.cfg.on_event(kind(run_id=self.id, step=self.iterations, tokens=tokens, cost_usd=cost, **data))
        except Exception:  # a status message must never break the run
            log.exception("event_callback_failed", kind=kind.__name__)

    async def close_pending(self, reason: StopReason) -> None:
        """Answer the calls the stop left without a result, so the stored history stays valid (a wrap-up turn,
        a follow-up run). A stopping run never condenses."""
        self.pending_condense = False
        await self.settle()
        if self.unsaved:  # results of calls that ran before the stop: stored, so the answer below has them
            await self.flush_steps()
        if calls := self.pending_calls():
            done = await self.cfg.store.tool_results(self.id, [c.id for c in calls])
            why = f"the run stopped ({reason.value})"
            # A change that had started when the run stopped may or may not have happened: never "not run".
            results = {
                k: (v.content, v.is_error) if v.content is not None else (prompts.unknown_outcome(v.tool, why), True)
                for k, v in done.items()
            }
            await self.answer(calls, results, missing=reason.value)

    async def wrap_up(self, stop: Stop) -> str | None:
        """A budget ended the run (`WRAP_UP`): one more call, in opsloop's words, with no tool allowed (`tool_choice`
        none; the tools are still sent, as the history holds calls), so the handoff report carries the model's
        conclusion and not only the limit. The one call past the budget, never more, under its own deadline.
        Returns the conclusion; None when there is none (the call failed, or a person stopped the run meanwhile)."""
        last = self.history[-1] if self.history else None
        if last is not None and last["role"] == "assistant" and not tool_calls(last["content"]):
            return final_text(last["content"]) or None  # it had answered as the budget ran out
        try:
            await self.close_pending(stop.reason)
            note = {"type": "text", "text": prompts.wrap_up(stop.detail or stop.reason.value)}
            turn = self.history[-1]
            content = (
                [{"type": "text", "text": turn["content"]}] if isinstance(turn["content"], str) else turn["content"]
            )
            if content[-1:] != [note]:  # a drive that died during its wrap-up asks once, not twice
                self.history[-1] = {"role": "user", "content": [*content, note]}
                await self.cfg.store.put_message(self.id, len(self.history) - 1, self.history[-1])
            request = self.model_request(self.cfg.max_tokens, tool_choice={"type": "none"})
            async with self.grace(f"wrapping up ({stop.reason.value})"):
                response = await self.cfg.model.complete(request)
            self.charge_response(response)
            kept = [
                b for b in keep_complete_calls(response.content, response.stop_reason) if b.get("type") != "tool_use"
            ]
            if not only_thinking(kept):
                self.history.append({"role": "assistant", "content": kept})
                await self.cfg.store.put_message(self.id, len(self.history) - 1, self.history[-1], totals=self.totals())
            await self.trace("wrap_up", reason=stop.reason.value, model=response.model, usage=response.usage.to_dict())
            return final_text(kept) or None
        except (Stop, ModelError) as e:
            if isinstance(e, ModelError):  # failed attempts are billed too
                for model, usage in e.billed or ((e.model or self.cfg.model.model, e.usage),):
                    self.charge(usage, model)
            await self.trace("wrap_up_failed", reason=stop.reason.value, error=str(e))
            return None
        except asyncio.CancelledError:
            if not (self.cfg.stop_requested and await self.cfg.stop_requested()):
                raise  # shutdown: the stored run resumes, and wraps up, on restart
            if task := asyncio.current_task():
                task.uncancel()
            return None

    async def finish(
        self, reason: StopReason, detail: str = "", *, by: str | None = None, output: str | None = None
    ) -> RunResult:
        await self.close_pending(reason)
        at_end = await self.cfg.at_end() if self.cfg.at_end is not None else ()
        await self.cfg.store.finish_run(
            self.id, stop_reason=reason, stop_detail=detail, stopped_by=by, output=output, at_end=at_end
        )
        await self.save_totals()
        await self.trace(
            "stop",
            reason=reason.value,
            detail=detail,
            by=by,
            iterations=self.iterations,
            usage=self.usage.to_dict(),
            cost_usd=round(self.cost, 6),
        )
        result = self.result(reason, detail, output, by)
        await self.emit(events.Finished, result=result)
        return result


def tool_changes(stored: list[dict[str, Any]], registry: Toolbox) -> list[str]:
    """A note for the model when the tools available differ from the run's fixed `tools` (a resumed run
    after a config change, an MCP server whose list changed). The `tools` sent never change mid-run."""
    offered = {t["name"] for t in stored} - {living.TOOL_NAME}  # the runtime's own, never the registry's
    present = {t.name for t in registry}
    gone, added = sorted(offered - present), sorted(present - offered)
    return [prompts.tools_changed(gone, added)] if gone or added else []
