"""One run per Slack thread: starts, resumes, wakes and stops runs, and speaks for them in Slack.

The Supervisor owns the run tasks; `IncidentThread` gives one run its Slack-side
callbacks (confirm, inject, stop, status) and posts the answer or the handoff report.
An approval is a row in the store: the waiting coroutine can die with the process and
a resumed run finds the same row again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from slack_sdk.web.async_client import AsyncWebClient

from bot import ModelClient, ToolRegistry
from bot.config import Settings
from bot.pricing import Price
from bot.redact import redact
from bot.report import handoff_report
from bot.runtime import RunConfig, run
from bot.store import Store
from bot.types import (
    Approval,
    ApprovalState,
    ConfirmRequest,
    Decision,
    DecisionCause,
    Injected,
    Run,
    RunResult,
    RunStatus,
    StopReason,
)
from handlers import blocks
from handlers.policy import ApprovalPolicy
from handlers.slack_out import SlackOut

log = structlog.get_logger("opsloop.supervisor")


@dataclass
class Supervisor:
    settings: Settings
    store: Store
    client: AsyncWebClient
    tools: ToolRegistry
    model_for: Callable[[str], ModelClient]  # stored model name -> a fresh per-run client
    price_for: Callable[[str], Price]
    policy: ApprovalPolicy
    bot_user_id: str = ""

    def __post_init__(self) -> None:
        self.tasks: dict[str, asyncio.Task[RunResult | None]] = {}
        self._wakeups: dict[str, asyncio.Event] = {}

    # --- run lifecycle ------------------------------------------------------
    def start(self, run_id: str) -> asyncio.Task[RunResult | None]:
        if (task := self.tasks.get(run_id)) and not task.done():
            return task
        task = asyncio.create_task(self._drive(run_id), name=f"run:{run_id}")
        self.tasks[run_id] = task
        task.add_done_callback(lambda _t: self.tasks.pop(run_id, None))
        return task

    async def resume_all(self) -> list[str]:
        """After a restart: every run the store says is active continues where it paused."""
        runs = await self.store.active_runs()
        for row in runs:
            log.info("run.resume", run_id=row.id, status=row.status.value)
            self.start(row.id)
        return [r.id for r in runs]

    def stop(self, run_id: str) -> None:
        if task := self.tasks.get(run_id):
            task.cancel()

    async def close(self) -> None:
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _drive(self, run_id: str) -> RunResult | None:
        row = await self.store.get_run(run_id)
        thread = IncidentThread(self, row)
        with structlog.contextvars.bound_contextvars(run_id=run_id, channel=row.channel, thread_ts=row.thread_ts):
            await thread.status.open()
            s = self.settings
            cfg = RunConfig(
                model=self.model_for(row.model), store=self.store, tools=self.tools,
                price_for=self.price_for, limits=s.limits, max_tokens=s.model.max_tokens,
                effort=s.model.effort, thinking_display=s.model.thinking_display,
                confirm=thread.confirm, inject=thread.inject, stop_requested=thread.stop_requested,
                on_event=thread.on_event, context_budget_tokens=s.model.context_budget_tokens,
            )
            try:
                result = await run(cfg, run_id)
            except asyncio.CancelledError:
                raise  # shutdown: the run stays active in the store and resumes on restart
            except Exception as e:
                log.exception("run.crashed")
                detail = f"internal error: {type(e).__name__}: {redact(str(e))}"
                await self.store.finish_run(run_id, stop_reason=StopReason.MODEL_ERROR, stop_detail=detail)
                log.info("stop", reason=StopReason.MODEL_ERROR.value, detail=detail)  # the run's own trace ended
                result = await run(cfg, run_id)  # a finished run returns its stored result
            await thread.finish(result)
            return result

    # --- approvals ----------------------------------------------------------
    def wake(self, approval_id: str) -> None:
        if event := self._wakeups.get(approval_id):
            event.set()

    def decision_signal(self, approval_id: str) -> asyncio.Event:
        """Get (and reset) the event a click sets; take it *before* reading the state so no wake-up is lost."""
        event = self._wakeups.setdefault(approval_id, asyncio.Event())
        event.clear()
        return event

    def forget(self, approval_id: str) -> None:
        self._wakeups.pop(approval_id, None)

    @property
    def out(self) -> SlackOut:
        """Everything opsloop sends to Slack goes through this gateway, which redacts it."""
        return SlackOut(self.client)

    async def update_card(self, approval: Approval) -> None:
        if not approval.message_ts or not approval.channel:
            return
        msg = blocks.approval_card(approval)
        await self.out.update(channel=approval.channel, ts=approval.message_ts, text=msg.text,
                              blocks=msg.blocks, what="card_update", approval_id=approval.id)

    async def post(self, channel: str, thread_ts: str, msg: blocks.SlackMessage) -> str | None:
        """Post in a thread (redacted by the gateway); a final failure is logged, not raised."""
        return await self.out.post(channel=channel, thread_ts=thread_ts, text=msg.text, blocks=msg.blocks)


class IncidentThread:
    """The Slack side of one run: its callbacks for the runtime and its messages in the thread."""

    def __init__(self, sup: Supervisor, row: Run) -> None:
        self.sup, self.run_id = sup, row.id
        self.channel, self.thread_ts, self.requester = row.channel, row.thread_ts, row.requester
        self.status = StatusMessage(sup, row)

    async def confirm(self, req: ConfirmRequest) -> Decision:
        store, settings = self.sup.store, self.sup.settings.approvals
        approval = await store.approval_for_call(req.run_id, req.call.id)
        bound = approval is not None and approval.args_hash == req.args_hash and (
            approval.preview_hash == req.preview_hash)
        if approval is None or not bound:
            if approval is not None and approval.pending and await store.decide_approval(
                    approval.id, state=ApprovalState.SUPERSEDED, cause=DecisionCause.CHANGED_CALL,
                    decided_at=time.time(),
                    reason="the call changed (arguments or dry-run preview); a new approval was requested"):
                await self.sup.update_card(await store.get_approval(approval.id))  # that consent is void
            run = await store.get_run(self.run_id)
            approval = await store.create_approval(
                run_id=req.run_id, tool_use_id=req.call.id, tool=req.call.name, category=req.category,
                args=req.call.args, args_hash=req.args_hash, preview=req.preview, preview_hash=req.preview_hash,
                requester=self.requester, channel=self.channel, thread_ts=self.thread_ts,
                required=settings.required(req.category), expires_at=time.time() + settings.expire_minutes * 60,
                run_tokens=run.paid_tokens, run_cost_usd=run.cost_usd,
            )
        if approval.pending and not approval.message_ts:
            ts = await self.sup.post(self.channel, self.thread_ts, blocks.approval_card(approval))
            if ts and not await store.set_card_ts(approval.id, ts, expect=ApprovalState.PENDING):
                # decided while this card was being posted (on it, or on a copy an earlier process posted)
                decided = await store.get_approval(approval.id)
                if decided.message_ts != ts:  # the click was on the copy: show the decision here too
                    await self.sup.update_card(dataclasses.replace(decided, message_ts=ts))
        try:
            while True:
                signal = self.sup.decision_signal(approval.id)
                approval = await store.get_approval(approval.id)
                if not approval.pending:
                    return decision_of(approval)
                left = (approval.expires_at or 0.0) - time.time()
                if left <= 0:
                    if await store.decide_approval(approval.id, state=ApprovalState.EXPIRED,
                                                   cause=DecisionCause.EXPIRY, decided_at=time.time()):
                        await self.sup.update_card(await store.get_approval(approval.id))
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await signal.wait()
        finally:
            self.sup.forget(approval.id)

    async def inject(self) -> list[Injected]:
        items = await self.sup.store.queued_inbox(self.run_id)
        return [Injected(id=i.id, user=i.user, text=i.text) for i in items]

    async def stop_requested(self) -> str | None:
        run = await self.sup.store.get_run(self.run_id)
        return run.stop_requested_by

    async def on_event(self, kind: str, data: dict[str, Any]) -> None:
        activity = {"iteration": "thinking", "tool": f"running {data.get('tool')}",
                    "reasoning": "thinking: " + " ".join(str(data.get("text", "")).split())[:200],
                    "waiting_approval": f"waiting for approval of {data.get('tool')}"}.get(kind)
        if activity is None:
            return
        state = RunStatus.WAITING_APPROVAL if kind == "waiting_approval" else RunStatus.RUNNING
        self.status.show(state=state, step=data.get("step", 0), activity=activity, tokens=data["tokens"],
                         cost_usd=data["cost_usd"])

    async def finish(self, result: RunResult) -> None:
        words = "done" if result.stop_reason == StopReason.COMPLETED else f"stopped: {result.stop_reason.value}"
        await self.status.close(step=result.iterations, activity=words, tokens=result.usage.paid_tokens,
                                cost_usd=result.cost_usd)
        store = self.sup.store
        for approval in await store.pending_approvals(self.run_id):  # a stopped run asks nobody anything
            if await store.decide_approval(approval.id, state=ApprovalState.SUPERSEDED, cause=DecisionCause.STOP,
                                           reason=f"run stopped ({result.stop_reason.value})",
                                           decided_by=result.stopped_by, decided_at=time.time()):
                await self.sup.update_card(await store.get_approval(approval.id))
        if result.stop_reason == StopReason.COMPLETED and result.output:
            for msg in blocks.text_messages(result.output):
                await self.sup.post(self.channel, self.thread_ts, msg)
            return
        report = handoff_report(result, await store.history(self.run_id))
        r, u = report.result, report.result.usage
        for msg in blocks.handoff_report(
            stop_reason=r.stop_reason.value, stop_words=f"{report.stop_words}. {r.stop_detail}".strip(),
            iterations=r.iterations, max_iterations=self.sup.settings.limits.max_iterations,
            input_tokens=u.input_tokens, output_tokens=u.output_tokens, cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_tokens, cost_usd=r.cost_usd, wall_seconds=r.wall_seconds,
            tools=[(t.name, t.calls, t.last_result) for t in report.tools], last_reasoning=report.last_reasoning,
            pending=report.pending, stopped_by=r.stopped_by,
        ):
            await self.sup.post(self.channel, self.thread_ts, msg)


def decision_of(approval: Approval) -> Decision:
    if approval.state == ApprovalState.APPROVED:
        return Decision(approved=True, confirmed_by=approval.decided_by)
    return Decision(approved=False, confirmed_by=approval.decided_by, reason=approval.reason or "",
                    outcome=approval.state.value)


class StatusMessage:
    """The run's status line in the thread, updated in place at most once per interval."""

    def __init__(self, sup: Supervisor, row: Run) -> None:
        self.sup, self.row = sup, row
        self.ts: str | None = row.status_ts
        self.interval = sup.settings.status_update_seconds
        self._latest: dict[str, Any] | None = None
        self._last_push = 0.0
        self._flusher: asyncio.Task[None] | None = None

    def _message(self, *, state: RunStatus, step: int, activity: str, tokens: int,
                 cost_usd: float) -> blocks.SlackMessage:
        return blocks.status_message(state=state, step=step, activity=activity, tokens=tokens, cost_usd=cost_usd,
                                     run_id=self.row.id, max_iterations=self.sup.settings.limits.max_iterations)

    async def open(self) -> None:
        if self.ts:
            return
        msg = self._message(state=RunStatus.RUNNING, step=self.row.iterations, activity="starting",
                            tokens=0, cost_usd=self.row.cost_usd)
        self.ts = await self.sup.post(self.row.channel, self.row.thread_ts, msg)
        if self.ts:
            await self.sup.store.set_status_ts(self.row.id, self.ts)

    def show(self, **fields: Any) -> None:
        self._latest = fields
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        while self._latest is not None:
            wait = self._last_push + self.interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # rate limit, not a wait for state
            fields, self._latest = self._latest, None
            if fields is not None:
                await self._push(self._message(**fields))

    async def _push(self, msg: blocks.SlackMessage) -> None:
        self._last_push = time.monotonic()
        if not self.ts:
            return
        await self.sup.out.update(channel=self.row.channel, ts=self.ts, text=msg.text, blocks=msg.blocks,
                                  what="status_update")

    async def close(self, **fields: Any) -> None:
        if self._flusher and not self._flusher.done():
            self._flusher.cancel()
        self._latest = None
        await self._push(self._message(state=RunStatus.FINISHED, **fields))
