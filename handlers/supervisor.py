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
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from slack_sdk.web.async_client import AsyncWebClient

from bot import ModelClient, Toolbox
from bot.config import Settings
from bot.guards import Pause
from bot.pricing import Price
from bot.redact import redact
from bot.report import handoff_report
from bot.runtime import RunConfig, run
from bot.store import Store, StoreUnavailable
from bot.types import (
    Approval,
    ConfirmRequest,
    Decision,
    Injected,
    OutboxPost,
    Run,
    RunResult,
    RunStatus,
    StopReason,
)
from handlers import approvals, blocks, messages
from handlers.background import Background
from handlers.outbox import Outbox, answer_key, card_key, card_update_key, report_key
from handlers.policy import ApprovalPolicy
from handlers.slack_out import SlackOut

log = structlog.get_logger("opsloop.supervisor")


@dataclass
class Supervisor:
    """Drives this process's share of the runs: claims runnable ones with a lease, heartbeats it, hands them
    back when they pause or the process stops. Any number of processes can share one store."""

    settings: Settings
    store: Store
    client: AsyncWebClient
    tools: Toolbox
    model_for: Callable[[str], ModelClient]  # stored model name -> a fresh per-run client
    price_for: Callable[[str], Price]
    policy: ApprovalPolicy
    outbox: Outbox  # the approval card, its updates, the answer and the report: stored, then sent exactly once
    bot_user_id: str = ""
    lease_seconds: float = 10.0  # another host's dead driver: its runs are taken over this long after its heartbeat
    poll_seconds: float = 1.0  # how often the store is asked for runnable runs (decisions made elsewhere)
    grace_seconds: float = 8.0  # on shutdown, how long running runs get to reach a step boundary
    after_ack: Background = dataclasses.field(default_factory=Background)  # listeners' Slack calls, off the ack path

    def __post_init__(self) -> None:
        # host:pid:pid-namespace:random. The namespace tells two containers sharing a hostname apart, so a
        # pid is only ever checked for liveness where it means the same process.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{_pid_namespace()}:{secrets.token_hex(3)}"
        self.tasks: dict[str, asyncio.Task[RunResult | None]] = {}
        # Runs whose lease this process holds, each with the drive that took it (a task may not have claimed yet).
        self.driving: dict[str, object] = {}
        self._nudged = asyncio.Event()
        self._scheduler: asyncio.Task[None] | None = None
        self._draining = False
        self._told_store_down: set[str] = set()
        self.dead: list[str] = []  # lease owners known to be dead (crashed processes on this host)

    # --- run lifecycle ------------------------------------------------------
    async def open(self) -> list[str]:
        """Start: drive every active run nobody holds once (a paused one re-checks its pending approval
        against a fresh dry run: a deploy may have changed what the call would do), then keep looking: a run
        whose driver died, or whose approval was decided by another process, is picked up within a poll."""
        started = await self.tick()
        now = self.store.now()
        for row in await self.store.active_runs():
            if row.id not in self.tasks and (row.owner is None or row.owner in self.dead
                                             or (row.lease_until or 0.0) < now):
                self.start(row.id)
                started.append(row.id)
        self._scheduler = asyncio.create_task(self._schedule(), name="opsloop-scheduler")
        return started

    def start(self, run_id: str) -> asyncio.Task[RunResult | None] | None:
        """Drive `run_id` here if its lease can be taken (a new run, a decided approval, a takeover); not while
        this process is shutting down (the run is stored: the next process takes it)."""
        if self._draining:
            return None
        if (task := self.tasks.get(run_id)) and not task.done():
            return task
        return self._track(run_id, asyncio.create_task(self._drive(run_id), name=f"run:{run_id}"))

    def _track(self, run_id: str, task: asyncio.Task[RunResult | None]) -> asyncio.Task[RunResult | None]:
        self.tasks[run_id] = task
        task.add_done_callback(lambda _t: self.tasks.pop(run_id, None) if self.tasks.get(run_id) is _t else None)
        return task

    def nudge(self) -> None:
        """Something was decided here: look for runnable runs now rather than at the next poll."""
        self._nudged.set()

    async def tick(self) -> list[str]:
        """Heartbeat the leases held here, expire overdue approvals, start every runnable run nobody drives."""
        now = self.store.now()
        driving = dict(self.driving)
        held = set(await self.store.renew_leases(self.owner, list(driving), until=now + self.lease_seconds))
        for run_id, drive in driving.items():
            if run_id not in held and self.driving.get(run_id) is drive and (task := self.tasks.get(run_id)):
                log.warning("run.lease_lost", run_id=run_id)  # another process took it: never two drivers
                task.cancel()
        for run_id in await self.store.stop_requested_among(list(held)):  # a Stop received by another process
            if (task := self.tasks.get(run_id)) and run_id in self.driving:
                task.cancel()
        await approvals.expire_due(self)
        if self._draining:
            return []
        for row in await self.store.unreported_runs():  # a driver died between finishing and reporting
            if row.id not in self.tasks:
                self._track(row.id, asyncio.create_task(self._report(row), name=f"report:{row.id}"))
        self.dead = await self._dead_owners()
        started = []
        for row in await self.store.runnable_runs(now=now, dead=self.dead):
            if row.id not in self.tasks:
                log.info("run.resume", run_id=row.id, status=row.status.value)
                self.start(row.id)
                started.append(row.id)
        return started

    async def _dead_owners(self) -> list[str]:
        """Lease holders that were processes on this host and are gone (SIGKILL, OOM): their runs need not
        wait for the lease to lapse. Another host's process can't be checked; its lease lapses instead."""
        here = (socket.gethostname(), _pid_namespace())
        dead = []
        for owner in await self.store.lease_owners():
            host, pid, namespace, *_ = [*owner.split(":"), "", "", ""]
            if (host, namespace) == here and owner != self.owner and pid.isdigit() and not _alive(int(pid)):
                dead.append(owner)
        return dead

    async def _schedule(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_seconds):
                    await self._nudged.wait()
            self._nudged.clear()
            try:
                await self.tick()
            except StoreUnavailable as e:
                log.warning("scheduler.store_unavailable", error=str(e))
            except Exception:
                log.exception("scheduler.tick_failed")

    def stop(self, run_id: str) -> None:
        """A Stop was recorded: end the run where it is driven here, or wake it if it waits for a decision."""
        if task := self.tasks.get(run_id):
            task.cancel()
        else:
            self.nudge()

    async def close(self) -> None:
        """Shutdown: stop taking runs, let running ones reach a step boundary and hand back within the grace
        period, cancel the rest (each releases its lease), so the next process continues at once."""
        self._draining = True  # the scheduler keeps renewing the leases held here, and starts nothing new
        tasks = list(self.tasks.values())
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.grace_seconds)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._scheduler is not None:
            self._scheduler.cancel()
            await asyncio.gather(self._scheduler, return_exceptions=True)

    async def _drive(self, run_id: str) -> RunResult | None:
        now = self.store.now()
        if not await self.store.claim_run(run_id, self.owner, until=now + self.lease_seconds, now=now,
                                          dead=self.dead):
            return None  # another process drives it
        drive = self.driving[run_id] = object()
        try:
            return await self._run(run_id)
        finally:
            if self.driving.get(run_id) is drive:
                del self.driving[run_id]
            with contextlib.suppress(Exception):
                await asyncio.shield(self.store.release_run(run_id, self.owner))

    async def _run(self, run_id: str) -> RunResult | None:
        row = await self.store.get_run(run_id)
        if not row.active:
            return None
        thread = IncidentThread(self, row)
        with structlog.contextvars.bound_contextvars(run_id=run_id, channel=row.channel, thread_ts=row.thread_ts):
            try:
                await thread.status.open()
            except Exception as e:  # a status line is best effort: a Slack outage must not end the run
                log.warning("status_open_failed", error=f"{type(e).__name__}: {e}")
            cfg = self._config(row, thread)
            try:
                result = await run(cfg, run_id)
            except Pause as pause:
                thread.status.abandon()
                log.info("run.paused", why=str(pause))  # it waits in the store; a decision makes it runnable
                return None
            except asyncio.CancelledError:
                thread.status.abandon()
                raise  # shutdown or a lost lease: the run stays active in the store for its next driver
            except StoreUnavailable as e:
                thread.status.abandon()
                await thread.store_unavailable(e)
                return None
            except Exception as e:
                log.exception("run.crashed")
                detail = f"internal error: {type(e).__name__}: {redact(str(e))}"
                await self.store.finish_run(run_id, stop_reason=StopReason.MODEL_ERROR, stop_detail=detail)
                log.info("stop", reason=StopReason.MODEL_ERROR.value, detail=detail)  # the run's own trace ended
                result = await run(cfg, run_id)  # a finished run returns its stored result
            await thread.finish(result)
            return result

    async def _report(self, row: Run) -> RunResult | None:
        """Post a finished run's answer or report that its driver never enqueued."""
        thread = IncidentThread(self, row)
        with structlog.contextvars.bound_contextvars(run_id=row.id, channel=row.channel, thread_ts=row.thread_ts):
            result = await run(self._config(row, thread), row.id)  # a finished run: its stored result, no request
            log.info("run.report_recovered")
            await thread.finish(result)
            return result

    def _config(self, row: Run, thread: IncidentThread) -> RunConfig:
        s = self.settings
        return RunConfig(
            model=self.model_for(row.model), store=self.store, tools=self.tools,
            price_for=self.price_for, limits=s.limits, max_tokens=s.model.max_tokens,
            effort=s.model.effort, thinking_display=s.model.thinking_display,
            confirm=thread.confirm, inject=thread.inject, stop_requested=thread.stop_requested,
            on_event=thread.on_event, context_budget_tokens=s.model.context_budget_tokens,
            hand_back=lambda: self._draining,
        )

    # --- Slack ----------------------------------------------------------------
    @property
    def out(self) -> SlackOut:
        """Everything opsloop sends to Slack goes through this gateway, which redacts it."""
        return SlackOut(self.client)

    async def update_card(self, approval: Approval) -> None:
        """Show the approval's state on its card: an outbox update of the card's post (sent once it is posted).

        A card the outbox never posted (an older version's, or a copy clicked under another ts than
        the outbox's) is updated directly, best effort, off the caller's path."""
        if not approval.channel:
            return
        msg = blocks.approval_card(approval)
        card = await self.outbox.item_id(card_key(approval.id))
        posted = None
        if card is not None:
            await self.outbox.update(run_id=approval.run_id, channel=approval.channel, of=card, msg=msg,
                                     key=card_update_key(approval))
            posted = await self.outbox.posted_ts(card)
        if approval.message_ts and (card is None or (posted is not None and posted != approval.message_ts)):
            self.after_ack.spawn(self.out.update(channel=approval.channel, ts=approval.message_ts, text=msg.text,
                                                 blocks=msg.blocks, what="card_update", approval_id=approval.id),
                                 name=f"card_copy:{approval.id}")

    async def post(self, channel: str, thread_ts: str, msg: blocks.SlackMessage) -> str | None:
        """Post in a thread (redacted by the gateway); a final failure is logged, not raised."""
        return await self.out.post(channel=channel, thread_ts=thread_ts, text=msg.text, blocks=msg.blocks)


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "?"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


class IncidentThread:
    """The Slack side of one run: its callbacks for the runtime and its messages in the thread."""

    def __init__(self, sup: Supervisor, row: Run) -> None:
        self.sup, self.run_id = sup, row.id
        self.channel, self.thread_ts, self.requester = row.channel, row.thread_ts, row.requester
        self.status = StatusMessage(sup, row)

    async def confirm(self, req: ConfirmRequest) -> Decision:
        return await approvals.ask(self.sup, self, req)

    async def store_unavailable(self, error: StoreUnavailable) -> None:
        """The database keeps failing: the run waits (never marked finished); the thread hears it once."""
        log.error("run.store_unavailable", error=str(error), disk_full=error.disk_full)
        if self.run_id in self.sup._told_store_down:
            return
        self.sup._told_store_down.add(self.run_id)
        for msg in blocks.text_messages(messages.store_unavailable(disk_full=error.disk_full)):
            await self.sup.post(self.channel, self.thread_ts, msg)

    async def inject(self) -> list[Injected]:
        items = await self.sup.store.queued_inbox(self.run_id)
        return [Injected(id=i.id, user=i.user, text=i.text) for i in items]

    async def stop_requested(self) -> str | None:
        return await self.sup.store.stop_requested_by(self.run_id)

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
