"""The Slack side of one run: the runtime's callbacks (confirm, inject, stop, status events) and what they show in
the thread (its loading status, its status line: status.py); its answer or handoff report (answer.py) at the end."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from bot.core.types import (
    ConfirmRequest,
    Decision,
    Injected,
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
from bot.run.summary import TOOL_NAME as SUMMARY_TOOL
from bot.run.summary import Summary
from bot.store import StoreUnavailable
from handlers import approvals, blocks, messages
from handlers.stream import AnswerStreams
from handlers.supervisor.alert_facts import AlertFacts, alert_facts
from handlers.supervisor.answer import final_posts
from handlers.supervisor.loading import LoadingStatus
from handlers.supervisor.status import StatusMessage, approval_task_id
from tools.api import RunScope

if TYPE_CHECKING:
    from handlers.supervisor.driver import Driver

log = structlog.get_logger("opsloop.supervisor")


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
        self.alert = (alert_facts(group.source, group.payload) if group is not None else None) or AlertFacts()

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
        posts = await final_posts(
            self.row,
            result,
            store=self.sup.store,
            max_iterations=self.sup.settings.limits.max_iterations,
            summary=await self.last_summary(),
        )
        await self.sup.store.report(self.run_id, posts)  # once, with the "reported" mark
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
