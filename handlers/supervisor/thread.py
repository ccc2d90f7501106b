"""The Slack side of one run: the runtime's callbacks (confirm, inject, stop, status events), its status line in
the thread (updated in place, at most once per interval) and its answer or handoff report (via the outbox)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Protocol

import structlog
from slack_sdk.errors import SlackApiError

from bot.core.types import (
    ConfirmRequest,
    Decision,
    Injected,
    OutboxPost,
    Run,
    RunNews,
    RunResult,
    RunStatus,
    StopReason,
)
from bot.run.events import (
    ApprovalDecided,
    Iteration,
    Reasoning,
    RunEvent,
    Summarized,
    ToolDone,
    ToolsAnnounced,
    ToolStarted,
    WaitingApproval,
)
from bot.run.report import handoff_report
from bot.run.summary import TOOL_NAME as SUMMARY_TOOL
from bot.run.summary import Summary
from bot.store import StoreUnavailable
from handlers import approvals, blocks, messages
from handlers.outbox import answer_key, report_key
from handlers.stream import AnswerStreams
from handlers.supervisor.alert_facts import AlertFacts, alert_facts
from handlers.supervisor.loading import LoadingStatus
from tools.api import RunScope

if TYPE_CHECKING:
    from bot.config.settings import Settings
    from bot.store import Store
    from handlers.approvals import ApprovalDesk
    from handlers.names import SlackNames
    from handlers.outbox import Cards, Outbox
    from handlers.slack_out import SlackOut
    from tools.registry import ToolRegistry

log = structlog.get_logger("opsloop.supervisor")


class Driver(Protocol):
    """What a run's Slack side uses of the Supervisor driving it (typed here, so this module never imports it)."""

    settings: Settings
    store: Store
    outbox: Outbox
    cards: Cards
    approval_desk: ApprovalDesk
    plan_blocks: bool  # False once Slack refused a plan block: every status message is one line from then on
    stream_answers: bool
    tools: ToolRegistry
    loading_refresh_seconds: float
    loading_show_after_seconds: float
    loading_min_interval_seconds: float
    names: SlackNames

    @property
    def out(self) -> SlackOut: ...

    def first_store_outage(self, run_id: str) -> bool: ...


class IncidentThread:
    """The Slack side of one run: its callbacks for the runtime and its messages in the thread."""

    def __init__(self, sup: Driver, row: Run) -> None:
        self.sup, self.run_id, self.row = sup, row.id, row
        self.channel, self.thread_ts, self.requester = row.channel, row.thread_ts, row.requester
        self.status = StatusMessage(sup, row)
        # A run an earlier drive started (a pause, a restart) may have left a status up: this drive clears it.
        self.loading = LoadingStatus(
            sup.out,
            row.channel,
            row.thread_ts,
            refresh_seconds=sup.loading_refresh_seconds,
            show_after=sup.loading_show_after_seconds,
            min_interval=sup.loading_min_interval_seconds,
            maybe_shown=row.system is not None,
        )
        self.waiting = False  # the drive ended in a pause for an approval (its loading status says so)
        self.alert: AlertFacts | None = None  # the alert that started the run, read once per drive (load_alert)
        self._state, self._activity = RunStatus.RUNNING, "starting"
        # Each step's text streamed as it is written (the answer's).
        self.streams = AnswerStreams(
            row, store=sup.store, out=sup.outbox.out, enabled=sup.stream_answers and sup.settings.stream_answers
        )

    async def load_alert(self) -> None:
        """Read the alert that started this run (its group's stored payload), once per drive; a run no alert
        started, or a store that fails here, has no alert facts (the run goes on)."""
        if self.alert is not None:
            return
        try:
            group = await self.sup.store.alert_group_of_run(self.run_id)
        except Exception as e:
            log.warning("run.alert_facts_unread", error=f"{type(e).__name__}: {e}")
            group = None
        self.alert = (alert_facts(group.payload) if group is not None else None) or AlertFacts()

    @property
    def scope(self) -> RunScope:
        """What the run's tools may know of it: where it runs (what a private conversation's memory may be shown
        in), when it started and what "before" means (the alert's earliest startsAt for an alert run), and for an
        alert run its name and the group's common labels (`load_alert` read them)."""
        facts = self.alert or AlertFacts()
        anchor = facts.started_at if facts.started_at is not None else self.row.created_at
        return RunScope(
            run_id=self.run_id,
            conversation=self.channel,
            thread_ts=self.thread_ts,
            started_at=self.row.created_at,
            anchor=anchor,
            task=self.row.task,
            alertname=facts.alertname,
            labels=dict(facts.labels),
        )

    async def prelude(self) -> list[str]:
        """At the run's first drive: what the reaches offer (past incidents, the team's runbook). Their prompts go
        to the model in the task's turn; each one's line goes in the thread once (keyed by run and source, so a
        drive that dies and comes back posts nothing twice)."""
        offers = await self.sup.tools.offers(self.scope)
        for offer in offers:
            if (line := blocks.offer_line(offer.thread_line)) is not None:
                await self.sup.cards.outbox.post(
                    run_id=self.run_id,
                    channel=self.channel,
                    thread_ts=self.thread_ts,
                    msg=line,
                    key=f"offer:{self.run_id}:{offer.source}",
                )
        return [offer.prompt for offer in offers if offer.prompt]

    async def confirm(self, req: ConfirmRequest) -> Decision:
        return await approvals.ask(self.sup.approval_desk, self, req)

    async def store_unavailable(self, error: StoreUnavailable) -> None:
        """The database keeps failing: the run waits (never marked finished); the thread hears it once."""
        log.error("run.store_unavailable", error=str(error), disk_full=error.disk_full)
        if not self.sup.first_store_outage(self.run_id):
            return
        for msg in blocks.text_messages(messages.store_unavailable(disk_full=error.disk_full)):
            await self.sup.cards.post(self.channel, self.thread_ts, msg)

    async def inject(self) -> list[Injected]:
        items = await self.sup.store.queued_inbox(self.run_id)
        return [Injected(id=i.id, user=i.user, text=i.text) for i in items]

    async def stop_requested(self) -> str | None:
        return await self.sup.store.stop_requested_by(self.run_id)

    async def news(self) -> RunNews:
        return await self.sup.store.run_news(self.run_id)  # the two above in one store call, once a step

    async def on_event(self, event: RunEvent) -> None:
        """The runtime's events (bot/run/events.py) shown in the thread: the loading status, the task list, the
        status message's activity and spend, the living summary."""
        names: dict[str, str] = {}
        if isinstance(event, WaitingApproval):  # who may approve, by name (cached; the ids when Slack can't say)
            names = await self.sup.names.of(self._approvers(event.category))
        if isinstance(event, Summarized):  # shown with the next status update
            self.status.summary = event.summary
        elif getattr(event, "tool", None) == SUMMARY_TOOL:  # the summary is not a task, and "running" it no activity
            return
        self._show_loading(event, names)
        tasks_changed = self._track_task(event, names) or isinstance(event, Summarized)
        activity = None
        if isinstance(event, Iteration):
            activity = "thinking"
        elif isinstance(event, ToolStarted):
            activity = f"running {event.tool}"
        elif isinstance(event, Reasoning):
            activity = "thinking: " + " ".join(event.text.split())[:200]
        elif isinstance(event, WaitingApproval):
            activity = f"waiting for approval of {event.tool}"
        if activity is not None:
            self._state = RunStatus.WAITING_APPROVAL if isinstance(event, WaitingApproval) else RunStatus.RUNNING
            self._activity = activity
        elif not tasks_changed:
            return
        self.status.show(
            state=self._state,
            step=event.step,
            activity=self._activity,
            tokens=event.tokens,
            cost_usd=event.cost_usd,
        )

    def _approvers(self, category: str) -> tuple[str, ...]:
        return self.sup.settings.approvals.who_may_approve(category or "mutating")

    def _track_task(self, event: RunEvent, names: dict[str, str]) -> bool:
        """The task list follows the runtime's events: calls announced (pending), started (in progress),
        answered (complete / error, with a one-line result), and approval waits and decisions."""
        tasks = self.status.tasks
        if isinstance(event, ToolsAnnounced):
            for call in event.calls:
                if call.id and not tasks.has(call.id) and call.tool != SUMMARY_TOOL:
                    tasks.put(call.id, messages.task_title(call.tool, call.args), "pending")
            return True
        if isinstance(event, ToolStarted) and event.call_id:
            tasks.put(event.call_id, messages.task_title(event.tool, event.args), "in_progress", output="")
        elif isinstance(event, ToolDone) and event.call_id:
            result = blocks.task_output(event.result) or messages.TASK_NO_OUTPUT
            if tasks.refused(event.call_id):  # the model's note on the refusal is not the call's result
                result = messages.TASK_NOT_RUN
            tasks.put(event.call_id, None, "error" if event.is_error else "complete", output=result)
        elif isinstance(event, WaitingApproval) and event.call_id:
            tasks.put(
                approval_task_id(event.call_id),
                messages.task_approval_title(event.tool),
                "in_progress",
                output=messages.task_waiting(self._approvers(event.category), names),
                before=event.call_id,
            )
        elif isinstance(event, ApprovalDecided) and event.call_id:
            tasks.put(
                approval_task_id(event.call_id),
                messages.task_approval_title(event.tool),
                "complete" if event.approved else "error",
                before=event.call_id,
                output=messages.task_decided(approved=event.approved, outcome=event.outcome, by=event.by or None),
            )
            if not event.approved:
                tasks.put(event.call_id, None, "error", output=messages.TASK_NOT_RUN)
        else:
            return False
        return True

    def _show_loading(self, event: RunEvent, names: dict[str, str]) -> None:
        """The loading status under the thread: what this step does right now."""
        if isinstance(event, Iteration):
            self.loading.show(messages.LOADING_THINKING)
        elif isinstance(event, ToolStarted):
            self.loading.show(messages.loading_tool(event.tool, event.args))
        elif isinstance(event, WaitingApproval):
            self.waiting = True
            self.loading.show(messages.loading_approval(self._approvers(event.category), names))

    async def end_drive(self, *, paused: bool) -> None:
        """This drive ends without an answer: a pause for an approval leaves its "waiting for approval" status
        to lapse (nobody refreshes it); any other end clears it. Best effort: Slack may be down."""
        if paused:
            try:
                await self.status.settle()
            except Exception as e:
                log.warning("status_update_failed", error=f"{type(e).__name__}: {e}")
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
        await approvals.supersede_for_stop(
            self.sup.approval_desk, self.run_id, by=result.stopped_by, why=result.stop_reason.value
        )
        await self.sup.store.report(self.run_id, await self.final_posts(result))  # once, with the "reported" mark
        self.sup.outbox.wake()
        words = "done" if result.stop_reason == StopReason.COMPLETED else f"stopped: {result.stop_reason.value}"
        try:  # best effort, after what matters is stored: Slack may be down (the outbox rides that out)
            await self.status.close(
                step=result.iterations, activity=words, tokens=result.usage.paid_tokens, cost_usd=result.cost_usd
            )
        except Exception as e:
            log.warning("status_close_failed", error=f"{type(e).__name__}: {e}")

    async def last_summary(self) -> Summary | None:
        """The run's last accepted living summary (the status message's, else the stored one after a restart)."""
        return self.status.summary or await self.sup.store.last_summary(self.run_id)

    async def final_posts(self, result: RunResult) -> list[OutboxPost]:
        """The run's answer, or its handoff report, as outbox posts keyed by run and part (sent exactly once)."""
        if result.stop_reason == StopReason.COMPLETED and result.output:
            msgs, key = blocks.text_messages(result.output, summary=await self.last_summary()), answer_key
        else:
            report = handoff_report(result, await self.sup.store.history(self.run_id))
            r, u = report.result, report.result.usage
            msgs, key = (
                blocks.handoff_report(
                    stop_reason=r.stop_reason.value,
                    stop_words=f"{report.stop_words}. {r.stop_detail}".strip(),
                    iterations=r.iterations,
                    max_iterations=self.sup.settings.limits.max_iterations,
                    input_tokens=u.input_tokens,
                    output_tokens=u.output_tokens,
                    cache_read_tokens=u.cache_read_tokens,
                    cache_write_tokens=u.cache_write_tokens,
                    cost_usd=r.cost_usd,
                    wall_seconds=r.wall_seconds,
                    tools=[(t.name, t.calls, t.last_result) for t in report.tools],
                    last_reasoning=report.last_reasoning,
                    pending=report.pending,
                    stopped_by=r.stopped_by,
                    summary=await self.last_summary(),
                ),
                report_key,
            )
        msgs = blocks.with_feedback(msgs, self.run_id)  # the feedback buttons under the last part
        return [
            OutboxPost(
                key=key(self.run_id, i),
                channel=self.channel,
                thread_ts=self.thread_ts,
                text=m.text,
                blocks=m.blocks,
                run_id=self.run_id,
            )
            for i, m in enumerate(msgs)
        ]


def approval_task_id(call_id: str) -> str:
    return f"{call_id}:approval"


class TaskList:
    """The run's tasks in order: one per tool call, and one per approval wait just before its call."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.items: dict[str, blocks.Task] = {}

    def has(self, task_id: str) -> bool:
        return task_id in self.items

    def put(
        self, task_id: str, title: str | None, status: str, *, output: str | None = None, before: str | None = None
    ) -> None:
        """Add or change a task (`title`/`output` None: keep them); a new one goes before `before` if listed."""
        old = self.items.get(task_id)
        self.items[task_id] = blocks.Task(
            task_id=task_id,
            title=title or (old.title if old else task_id),
            status=status,
            output=output if output is not None else (old.output if old else ""),
        )
        if old is None:
            at = self.order.index(before) if before in self.order else len(self.order)
            self.order.insert(at, task_id)

    def refused(self, call_id: str) -> bool:
        """The call's approval ended without a yes (denied, expired, superseded): the call never ran."""
        approval = self.items.get(approval_task_id(call_id))
        return approval is not None and approval.status == "error"

    def all(self) -> list[blocks.Task]:
        return [self.items[i] for i in self.order]


class StatusMessage:
    """The run's status line in the thread, updated in place at most once per interval, with its live task
    list (a plan block of task cards) under the line."""

    def __init__(self, sup: Driver, row: Run) -> None:
        self.sup, self.row = sup, row
        self.ts: str | None = row.status_ts
        self.interval = sup.settings.status_update_seconds
        self.tasks = TaskList()
        self.summary: Summary | None = None  # the run's last accepted update_summary (shown above the tasks)
        self._latest: dict[str, Any] | None = None
        self._last_push = 0.0
        self._flusher: asyncio.Task[None] | None = None
        self._wanted: dict[str, Any] | None = None  # the newest state asked for
        self._shown: dict[str, Any] | None = None  # the newest state Slack took
        self._left: dict[str, Any] | None = None  # what a drive that ended (a pause) had not shown yet
        self._loaded = False  # the tasks of earlier drives were read from the store

    def _message(
        self, *, state: RunStatus, step: int, activity: str, tokens: int, cost_usd: float
    ) -> blocks.SlackMessage:
        tasks = self.tasks.all() if self.sup.plan_blocks else ()
        return blocks.status_message(
            state=state,
            step=step,
            activity=activity,
            tokens=tokens,
            cost_usd=cost_usd,
            run_id=self.row.id,
            max_iterations=self.sup.settings.limits.max_iterations,
            tasks=tasks,
            summary=self.summary,
        )

    async def open(self) -> None:
        try:  # a drive after a pause or a restart shows the tasks so far, from the store
            await self._load_tasks()
        except Exception as e:
            log.warning("status_tasks_load_failed", error=f"{type(e).__name__}: {e}")
        if self.ts:
            return
        msg = blocks.status_message(
            state=RunStatus.RUNNING,
            step=self.row.iterations,
            activity="starting",
            tokens=0,
            cost_usd=self.row.cost_usd,
            run_id=self.row.id,
            max_iterations=self.sup.settings.limits.max_iterations,
        )
        self.ts = await self.sup.cards.post(self.row.channel, self.row.thread_ts, msg)
        if self.ts:
            await self.sup.store.set_status_ts(self.row.id, self.ts)

    async def _load_tasks(self) -> None:
        """The tasks of earlier drives: stored tool results (redacted) and approvals, oldest first."""
        results = await self.sup.store.tool_results(self.row.id)
        approvals = await self.sup.store.run_approvals(self.row.id)
        self.summary = self.summary or await self.sup.store.last_summary(self.row.id)  # a restart shows it again
        self._loaded = True
        events: list[tuple[float, int, Any]] = [(a.created_at, 0, a) for a in approvals]
        events += [(r.created_at, 1, r) for r in results.values()]
        for _, kind, item in sorted(events, key=lambda e: (e[0], e[1])):
            if kind == 0:
                a = item
                if a.pending:
                    who = self.sup.settings.approvals.who_may_approve(a.category)
                    status, output = "in_progress", messages.task_waiting(who, await self.sup.names.of(who))
                else:
                    approved = a.state.value == "approved"
                    status = "complete" if approved else "error"
                    output = messages.task_decided(approved=approved, outcome=a.state.value, by=a.decided_by)
                self.tasks.put(
                    approval_task_id(a.tool_use_id),
                    messages.task_approval_title(a.tool),
                    status,
                    output=output,
                    before=a.tool_use_id,
                )
            elif item.tool != SUMMARY_TOOL:
                r = item
                if r.content is None:
                    status, output = "error", messages.TASK_UNKNOWN
                else:
                    status = "error" if r.is_error else "complete"
                    output = blocks.task_output(r.content) or messages.TASK_NO_OUTPUT
                    if self.tasks.refused(r.tool_use_id):
                        output = messages.TASK_NOT_RUN
                self.tasks.put(r.tool_use_id, messages.task_title(r.tool, r.args), status, output=output)

    def show(self, **fields: Any) -> None:
        self._latest = self._wanted = fields
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        while self._latest is not None:
            wait = self._last_push + self.interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # rate limit, not a wait for state
            fields, self._latest = self._latest, None
            if fields is not None:
                await self._push(self._message(**fields), fields)
                self._shown = fields

    async def _push(self, msg: blocks.SlackMessage, fields: dict[str, Any] | None = None) -> None:
        self._last_push = time.monotonic()
        if not self.ts:
            return
        try:
            await self.sup.out.update_or_raise(channel=self.row.channel, ts=self.ts, text=msg.text, blocks=msg.blocks)
        except SlackApiError as e:
            error = e.response.get("error")
            log.warning("status_update_failed", channel=self.row.channel, ts=self.ts, error=error)
            has_plan = any(b.get("type") == "plan" for b in msg.blocks)
            if error == "invalid_blocks" and has_plan and fields is not None and self.sup.plan_blocks:
                self.sup.plan_blocks = False  # this workspace has no plan block: today's section status, once
                log.info("status_tasks_unsupported")
                await self._push(self._message(**fields))

    def abandon(self) -> None:
        """This drive ends without finishing the run (a pause, a hand-back): stop pushing updates."""
        if self._flusher and not self._flusher.done():
            self._flusher.cancel()
        self._latest = None
        self._left = self._wanted if self._wanted is not self._shown else None

    async def settle(self) -> None:
        """After a pause: show the state the drive ended in (its approval task) if the throttle held it back.
        One update per pause, never per event."""
        fields, self._left = self._left, None
        if fields is not None:
            await self._push(self._message(**fields), fields)

    async def close(self, **fields: Any) -> None:
        if self._flusher and not self._flusher.done():
            self._flusher.cancel()
        self._latest = None
        if not self._loaded:  # a run finished by another path (a Stop that ended it in the store): its tasks
            try:
                await self._load_tasks()
            except Exception as e:
                log.warning("status_tasks_load_failed", error=f"{type(e).__name__}: {e}")
        for task in self.tasks.all():  # what never ran (a Stop, a limit) does not stay "in progress"
            if task.status in ("pending", "in_progress"):
                self.tasks.put(task.task_id, None, "error", output=messages.TASK_NOT_RUN)
        fields = {"state": RunStatus.FINISHED, **fields}
        await self._push(self._message(**fields), fields)
