"""The Slack side of one run: the runtime's callbacks (confirm, inject, stop, status events), its status line in
the thread (updated in place, at most once per interval) and its answer or handoff report (via the outbox)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import structlog

from bot.report import handoff_report
from bot.store import StoreUnavailable
from bot.types import ConfirmRequest, Decision, Injected, OutboxPost, Run, RunResult, RunStatus, StopReason
from handlers import approvals, blocks, messages
from handlers.outbox import answer_key, report_key
from handlers.stream import AnswerStreams
from handlers.supervisor.loading import LoadingStatus

if TYPE_CHECKING:
    from handlers.supervisor.scheduler import Supervisor

log = structlog.get_logger("opsloop.supervisor")


class IncidentThread:
    """The Slack side of one run: its callbacks for the runtime and its messages in the thread."""

    def __init__(self, sup: Supervisor, row: Run) -> None:
        self.sup, self.run_id = sup, row.id
        self.channel, self.thread_ts, self.requester = row.channel, row.thread_ts, row.requester
        self.status = StatusMessage(sup, row)
        self.loading = LoadingStatus(sup, row.channel, row.thread_ts)
        self.waiting = False  # the drive ended in a pause for an approval (its loading status says so)
        self.streams = AnswerStreams(sup, row)  # each step's text streamed as it is written (the answer's)

    async def confirm(self, req: ConfirmRequest) -> Decision:
        return await approvals.ask(self.sup, self, req)

    async def store_unavailable(self, error: StoreUnavailable) -> None:
        """The database keeps failing: the run waits (never marked finished); the thread hears it once."""
        log.error("run.store_unavailable", error=str(error), disk_full=error.disk_full)
        if not self.sup.first_store_outage(self.run_id):
            return
        for msg in blocks.text_messages(messages.store_unavailable(disk_full=error.disk_full)):
            await self.sup.post(self.channel, self.thread_ts, msg)

    async def inject(self) -> list[Injected]:
        items = await self.sup.store.queued_inbox(self.run_id)
        return [Injected(id=i.id, user=i.user, text=i.text) for i in items]

    async def stop_requested(self) -> str | None:
        return await self.sup.store.stop_requested_by(self.run_id)

    async def on_event(self, kind: str, data: dict[str, Any]) -> None:
        self._show_loading(kind, data)
        activity = {"iteration": "thinking", "tool": f"running {data.get('tool')}",
                    "reasoning": "thinking: " + " ".join(str(data.get("text", "")).split())[:200],
                    "waiting_approval": f"waiting for approval of {data.get('tool')}"}.get(kind)
        if activity is None:
            return
        state = RunStatus.WAITING_APPROVAL if kind == "waiting_approval" else RunStatus.RUNNING
        self.status.show(state=state, step=data.get("step", 0), activity=activity, tokens=data["tokens"],
                         cost_usd=data["cost_usd"])

    def _show_loading(self, kind: str, data: dict[str, Any]) -> None:
        """The loading status under the thread: what this step does right now."""
        if kind == "iteration":
            self.loading.show(messages.LOADING_THINKING)
        elif kind == "tool":
            args = data.get("args")
            self.loading.show(messages.loading_tool(str(data.get("tool")), args if isinstance(args, dict) else {}))
        elif kind == "waiting_approval":
            self.waiting = True
            who = self.sup.settings.approvals.who_may_approve(str(data.get("category") or "mutating"))
            self.loading.show(messages.loading_approval(who))

    async def end_drive(self, *, paused: bool) -> None:
        """This drive ends without an answer: a pause for an approval leaves its "waiting for approval" status
        to lapse (nobody refreshes it); any other end clears it. Best effort: Slack may be down."""
        self.streams.abandon()  # a stream still live is finished by the run's answer, never appended to again
        if paused and self.waiting:
            self.loading.leave()
            return
        try:
            await self.loading.clear()
        except Exception as e:
            log.warning("loading_status_clear_failed", error=f"{type(e).__name__}: {e}")

    async def finish(self, result: RunResult) -> None:
        await self.end_drive(paused=False)  # the run answers (or reports): no loading status under it any more
        await approvals.supersede_for_stop(self.sup, self.run_id, by=result.stopped_by, why=result.stop_reason.value)
        await self.sup.store.report(self.run_id, await self.final_posts(result))  # once, with the "reported" mark
        self.sup.outbox.wake()
        words = "done" if result.stop_reason == StopReason.COMPLETED else f"stopped: {result.stop_reason.value}"
        try:  # best effort, after what matters is stored: Slack may be down (the outbox rides that out)
            await self.status.close(step=result.iterations, activity=words, tokens=result.usage.paid_tokens,
                                    cost_usd=result.cost_usd)
        except Exception as e:
            log.warning("status_close_failed", error=f"{type(e).__name__}: {e}")

    async def final_posts(self, result: RunResult) -> list[OutboxPost]:
        """The run's answer, or its handoff report, as outbox posts keyed by run and part (sent exactly once)."""
        if result.stop_reason == StopReason.COMPLETED and result.output:
            msgs, key = blocks.text_messages(result.output), answer_key
        else:
            report = handoff_report(result, await self.sup.store.history(self.run_id))
            r, u = report.result, report.result.usage
            msgs, key = blocks.handoff_report(
                stop_reason=r.stop_reason.value, stop_words=f"{report.stop_words}. {r.stop_detail}".strip(),
                iterations=r.iterations, max_iterations=self.sup.settings.limits.max_iterations,
                input_tokens=u.input_tokens, output_tokens=u.output_tokens, cache_read_tokens=u.cache_read_tokens,
                cache_write_tokens=u.cache_write_tokens, cost_usd=r.cost_usd, wall_seconds=r.wall_seconds,
                tools=[(t.name, t.calls, t.last_result) for t in report.tools],
                last_reasoning=report.last_reasoning, pending=report.pending, stopped_by=r.stopped_by,
            ), report_key
        msgs = blocks.with_feedback(msgs, self.run_id)  # the feedback buttons under the last part
        return [OutboxPost(key=key(self.run_id, i), channel=self.channel, thread_ts=self.thread_ts, text=m.text,
                           blocks=m.blocks, run_id=self.run_id) for i, m in enumerate(msgs)]


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

    def abandon(self) -> None:
        """This drive ends without finishing the run (a pause, a hand-back): stop pushing updates."""
        if self._flusher and not self._flusher.done():
            self._flusher.cancel()
        self._latest = None

    async def close(self, **fields: Any) -> None:
        if self._flusher and not self._flusher.done():
            self._flusher.cancel()
        self._latest = None
        await self._push(self._message(state=RunStatus.FINISHED, **fields))
