"""The Slack side of the runs (`bot.SlackSide`): `Slack` holds what every run's thread shares (the gateway, the
outbox, the cards, names and membership) and checks approval clicks (handlers/approvals.py); `IncidentThread`
(`bot.RunThread`) is one drive of a run as its thread shows it: the loading status (loading.py), the status line
and its task list (status.py), the streamed answer, and at the end the answer or the handoff report."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import structlog
from slack_sdk.web.async_client import AsyncWebClient

from bot.config.settings import Settings
from bot.core.types import AnswerSink, OutboxPost, Run, RunResult, RunStatus, StopReason
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
from bot.store import Store
from handlers import blocks, messages
from handlers.after_ack import AfterAck
from handlers.approvals import ApprovalSlack
from handlers.links import permalink
from handlers.membership import Membership
from handlers.names import SlackNames
from handlers.outbox import Cards, Outbox, answer_key, report_key
from handlers.policy import ApprovalPolicy
from handlers.slack_out import SlackOut
from handlers.stream import AnswerStreams
from handlers.supervisor.alert_facts import AlertFacts, alert_facts
from handlers.supervisor.loading import LoadingStatus
from handlers.supervisor.status import StatusMessage, approval_task_id
from tools.api import Offer, RunFacts, RunScope

log = structlog.get_logger("opsloop.supervisor")


@dataclass
class Slack(ApprovalSlack):
    """The Slack side of the runs (see the module docstring)."""

    settings: Settings
    store: Store
    client: AsyncWebClient
    policy: ApprovalPolicy
    outbox: Outbox  # the approval card, its updates, the answer and the report: stored, then sent exactly once
    bot_user_id: str = ""
    # The loading status under a thread is set again this often during a long step (Slack drops it 2 min after
    # it was set): under the expiry, with room for a slow call.
    loading_refresh_seconds: float = 90.0
    # … shown only once a step's text has stood this long (a fast step sends nothing), and at most one update
    # per `loading_min_interval_seconds` (a 20-step run sent 42 calls, one per step and per tool).
    loading_show_after_seconds: float = 1.0
    loading_min_interval_seconds: float = 2.0
    # False once Slack refused a status message for its plan block (an older workspace): every run's status is
    # the one-line section from then on, after that one refused update.
    plan_blocks: bool = True
    stream_answers: bool = True  # stream answers as the model writes them (handlers/stream.py); False: post at the end
    after_ack: AfterAck = dataclasses.field(default_factory=AfterAck)  # listeners' Slack calls, off the ack path

    def __post_init__(self) -> None:
        self.membership = Membership(self.client)  # who is in which conversation (App Home, the shortcut)
        self.names = SlackNames(self.client)  # display names and user-group handles (display only)
        self.cards = Cards(outbox=self.outbox, out=self.out, after_ack=self.after_ack)

    @property
    def out(self) -> SlackOut:
        """Everything opsloop sends to Slack goes through this gateway, which redacts it."""
        return SlackOut(self.client)

    def thread(self, row: Run) -> IncidentThread:
        return IncidentThread(self, row)

    async def quiet(self) -> None:
        await self.after_ack.quiet()


class IncidentThread:
    """One drive of a run, as its thread shows it (`bot.RunThread`)."""

    def __init__(self, slack: Slack, row: Run) -> None:
        self.slack, self.row = slack, row
        self.status = StatusMessage(slack, row)
        self.loading = LoadingStatus(slack, row)
        self.waiting = False  # the drive ended in a pause for an approval (its loading status says so)
        self.alert = AlertFacts()  # the alert that started the run, read by `open`
        self._state, self._activity = RunStatus.RUNNING, "starting"
        # Each step's text streamed as it is written (the answer's).
        enabled = slack.stream_answers and slack.settings.stream_answers
        self.streams = AnswerStreams(row, store=slack.store, out=slack.outbox.out, enabled=enabled)

    async def open(self) -> RunScope:
        """The status line (best effort: a Slack outage must not end the run), and what the run's tools may know
        of it: where it runs (what a private conversation's memory may be shown in), when it started and what
        "before" means (the alert's earliest startsAt for an alert run), and for an alert run its name and the
        group's common labels, read from its group's stored payload (a store that fails here: no alert facts)."""
        try:
            await self.status.open()
        except Exception as e:
            log.warning("status_open_failed", error=f"{type(e).__name__}: {e}")
        try:
            group = await self.slack.store.alert_group_of_run(self.row.id)
        except Exception as e:
            log.warning("run.alert_facts_unread", error=f"{type(e).__name__}: {e}")
            group = None
        facts = self.alert = (alert_facts(group.source, group.payload) if group is not None else None) or AlertFacts()
        row = self.row
        return RunScope(
            run_id=row.id,
            conversation=row.channel,
            thread_ts=row.thread_ts,
            started_at=row.created_at,
            anchor=facts.started_at if facts.started_at is not None else row.created_at,
            task=row.task,
            alertname=facts.alertname,
            labels=dict(facts.labels),
        )

    async def follow_kind(self) -> None:
        """A conversation that is no longer public, or that Slack can't place, has its records offered only in it
        from now on. A public answer changes nothing here (it may be cached): only a run's end, asking Slack
        afresh, widens."""
        channel = self.row.channel
        await self.slack.store.note_kind(channel, await self.slack.membership.kind(channel))

    async def facts(self) -> RunFacts:
        a = self.alert
        return RunFacts(
            kind=await self.slack.membership.kind(self.row.channel, fresh=True),
            labels={**a.labels, **({"alertname": a.alertname} if a.alertname else {})},
            permalink=permalink(self.row.channel, self.row.thread_ts),
        )

    async def offered(self, offers: Sequence[Offer]) -> None:
        for offer in offers:
            if (line := blocks.offer_line(offer.thread_line)) is not None:
                await self.slack.outbox.post(
                    run_id=self.row.id,
                    channel=self.row.channel,
                    thread_ts=self.row.thread_ts,
                    msg=line,
                    key=f"offer:{self.row.id}:{offer.source}",
                )

    def answer_sink(self, step: int) -> AnswerSink | None:
        return self.streams.for_step(step)

    async def store_unavailable(self, *, disk_full: bool) -> None:
        for msg in blocks.text_messages(messages.store_unavailable(disk_full=disk_full)):
            await self.slack.cards.post(self.row.channel, self.row.thread_ts, msg)

    async def on_event(self, event: RunEvent) -> None:
        """The runtime's events (bot/run/events.py) shown in the thread: the loading status, the task list, the
        status message's activity and spend, the living summary."""
        names: dict[str, str] = {}
        if isinstance(event, WaitingApproval):  # who may approve, by name (cached; the ids when Slack can't say)
            names = await self.slack.names.of(self._approvers(event.category))
        if isinstance(event, Summarized):  # shown with the next status update
            self.status.summary = event.summary
        elif getattr(event, "tool", None) == SUMMARY_TOOL:  # the summary is not a task, and "running" it no activity
            return
        tasks_changed = self._track_task(event, names) or isinstance(event, Summarized)
        activity = None  # and the loading status under the thread: what this step does right now
        if isinstance(event, Iteration):
            activity = "thinking"
            self.loading.show(messages.LOADING_THINKING)
        elif isinstance(event, ToolStarted):
            activity = f"running {event.tool}"
            self.loading.show(messages.loading_tool(event.tool, event.args))
        elif isinstance(event, Reasoning):
            activity = "thinking: " + " ".join(event.text.split())[:200]
        elif isinstance(event, WaitingApproval):
            activity = f"waiting for approval of {event.tool}"
            self.waiting = True
            self.loading.show(messages.loading_approval(self._approvers(event.category), names))
        if activity is not None:
            self._state = RunStatus.WAITING_APPROVAL if isinstance(event, WaitingApproval) else RunStatus.RUNNING
            self._activity = activity
        elif not tasks_changed:
            return
        self.status.show(
            state=self._state, step=event.step, activity=self._activity, tokens=event.tokens, cost_usd=event.cost_usd
        )

    def _approvers(self, category: str) -> tuple[str, ...]:
        return self.slack.settings.approvals.who_may_approve(category or "mutating")

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
        elif isinstance(event, WaitingApproval | ApprovalDecided) and event.call_id:
            if isinstance(event, WaitingApproval):
                state, output = "in_progress", messages.task_waiting(self._approvers(event.category), names)
            else:
                state = "complete" if event.approved else "error"
                output = messages.task_decided(approved=event.approved, outcome=event.outcome, by=event.by or None)
            title = messages.task_approval_title(event.tool)
            tasks.put(approval_task_id(event.call_id), title, state, output=output, before=event.call_id)
            if isinstance(event, ApprovalDecided) and not event.approved:
                tasks.put(event.call_id, None, "error", output=messages.TASK_NOT_RUN)
        else:
            return False
        return True

    async def end_drive(self, *, paused: bool) -> None:
        """This drive ends without an answer: the status line stops updating (after a pause it shows the state
        the drive ended in, once); a pause for an approval leaves its "waiting for approval" loading status to
        lapse (nobody refreshes it); any other end clears it. Best effort: Slack may be down."""
        self.status.abandon()
        if paused:
            try:
                await self.status.settle()
            except Exception as e:
                log.warning("status_update_failed", error=f"{type(e).__name__}: {e}")
        await self._stop_showing(leave=paused and self.waiting)

    def cancelled(self) -> None:
        self.status.abandon()
        self.loading.leave()
        self.slack.after_ack.spawn(self._stop_showing(), name=f"loading_clear:{self.row.id}")

    async def _stop_showing(self, *, leave: bool = False) -> None:
        self.streams.abandon()  # a stream still live is finished by the run's answer, never appended to again
        if leave:
            self.loading.leave()
            return
        try:
            await self.loading.clear()
        except Exception as e:
            log.warning("loading_status_clear_failed", error=f"{type(e).__name__}: {e}")

    async def finish(self, result: RunResult) -> None:
        """The run's answer, or its handoff report, as outbox posts keyed by run and part (sent exactly once, with
        the "reported" mark), each with the run's last accepted living summary; the feedback buttons under the
        last part."""
        await self._stop_showing()  # the run answers (or reports): no loading status under it any more
        row, store = self.row, self.slack.store
        summary = self.status.summary or await store.last_summary(row.id)  # after a restart, the stored one
        if result.stop_reason == StopReason.COMPLETED and result.output:
            msgs, key = blocks.text_messages(result.output, summary=summary), answer_key
        else:
            history = await store.history(row.id)
            limit = self.slack.settings.limits.max_iterations
            msgs = blocks.stopped_run_report(result, history, max_iterations=limit, summary=summary)
            key = report_key
        posts = [
            OutboxPost(
                key=key(row.id, i),
                channel=row.channel,
                thread_ts=row.thread_ts,
                text=m.text,
                blocks=m.blocks,
                run_id=row.id,
            )
            for i, m in enumerate(blocks.with_feedback(msgs, row.id))
        ]
        await store.report(row.id, posts)
        self.slack.outbox.wake()
        words = "done" if result.stop_reason == StopReason.COMPLETED else f"stopped: {result.stop_reason.value}"
        try:  # best effort, after what matters is stored: Slack may be down (the outbox rides that out)
            await self.status.close(
                step=result.iterations, activity=words, tokens=result.usage.paid_tokens, cost_usd=result.cost_usd
            )
        except Exception as e:
            log.warning("status_close_failed", error=f"{type(e).__name__}: {e}")
