"""A run's status line in its thread: updated in place at most once per interval, with its live task list."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import structlog
from slack_sdk.errors import SlackApiError

from bot.core.types import Run, RunStatus
from bot.run.summary import TOOL_NAME as SUMMARY_TOOL
from bot.run.summary import Summary
from handlers import blocks, messages

if TYPE_CHECKING:
    from handlers.supervisor.driver import Driver

log = structlog.get_logger("opsloop.supervisor")


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

    def _message(self, **fields: Any) -> blocks.SlackMessage:
        """The status message for `fields` (state, step, activity, tokens, cost_usd)."""
        return blocks.status_message(
            **fields,
            run_id=self.row.id,
            max_iterations=self.sup.settings.limits.max_iterations,
            tasks=self.tasks.all() if self.sup.plan_blocks else (),
            summary=self.summary,
        )

    async def open(self) -> None:
        await self._load_tasks()  # a drive after a pause or a restart shows the tasks so far
        if self.ts:
            return
        fields = {"step": self.row.iterations, "activity": "starting", "tokens": 0, "cost_usd": self.row.cost_usd}
        msg = self._message(state=RunStatus.RUNNING, **fields)
        self.ts = await self.sup.cards.post(self.row.channel, self.row.thread_ts, msg)
        if self.ts:
            await self.sup.store.set_status_ts(self.row.id, self.ts)

    async def _load_tasks(self) -> None:
        """The tasks of earlier drives: stored tool results (redacted) and approvals, oldest first (a store that
        fails leaves them out)."""
        try:
            results = await self.sup.store.tool_results(self.row.id)
            approvals = await self.sup.store.run_approvals(self.row.id)
            self.summary = self.summary or await self.sup.store.last_summary(self.row.id)  # a restart shows it again
        except Exception as e:
            log.warning("status_tasks_load_failed", error=f"{type(e).__name__}: {e}")
            return
        self._loaded = True
        events: list[tuple[float, int, Any]] = [(a.created_at, 0, a) for a in approvals]
        events += [(r.created_at, 1, r) for r in results.values() if r.tool != SUMMARY_TOOL]
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
            else:
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
            await self._push(fields)
            self._shown = fields

    async def _push(self, fields: dict[str, Any]) -> None:
        msg = self._message(**fields)
        self._last_push = time.monotonic()
        if not self.ts:
            return
        try:
            await self.sup.out.call(
                "chat_update", channel=self.row.channel, ts=self.ts, text=msg.text, blocks=msg.blocks
            )
        except SlackApiError as e:
            error = e.response.get("error")
            log.warning("status_update_failed", channel=self.row.channel, ts=self.ts, error=error)
            has_plan = any(b.get("type") == "plan" for b in msg.blocks)
            if error == "invalid_blocks" and has_plan and self.sup.plan_blocks:
                self.sup.plan_blocks = False  # this workspace has no plan block: today's section status, once
                log.info("status_tasks_unsupported")
                await self._push(fields)

    def abandon(self) -> None:
        """This drive ends without finishing the run (a pause, a hand-back): stop pushing updates."""
        self._halt()
        self._left = self._wanted if self._wanted is not self._shown else None

    async def settle(self) -> None:
        """After a pause: show the state the drive ended in (its approval task) if the throttle held it back.
        One update per pause, never per event."""
        fields, self._left = self._left, None
        if fields is not None:
            await self._push(fields)

    def _halt(self) -> None:
        if self._flusher and not self._flusher.done():
            self._flusher.cancel()
        self._latest = None

    async def close(self, **fields: Any) -> None:
        self._halt()
        if not self._loaded:  # a run finished by another path (a Stop that ended it in the store): its tasks
            await self._load_tasks()
        for task in self.tasks.all():  # what never ran (a Stop, a limit) does not stay "in progress"
            if task.status in ("pending", "in_progress"):
                self.tasks.put(task.task_id, None, "error", output=messages.TASK_NOT_RUN)
        await self._push({"state": RunStatus.FINISHED, **fields})
