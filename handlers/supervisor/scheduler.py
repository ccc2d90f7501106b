"""Drives this process's share of the runs: claims runnable ones with a lease, heartbeats it, resumes runs whose
approval was decided or whose driver died, hands them back when they pause or the process stops.

An approval is a row in the store: the waiting coroutine can die with the process and a resumed run finds the
same row again. The run's Slack side is handlers/supervisor/thread.py (callbacks), status.py (status line)
and answer.py (answer or report); which lease owners are dead is handlers/liveness.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from slack_sdk.web.async_client import AsyncWebClient

from bot import ModelClient
from bot.config.settings import Settings
from bot.core.pricing import Price
from bot.core.redact import redact
from bot.core.types import Run, RunResult, StopReason
from bot.run.guards import Pause
from bot.run.loop import AtEndWrites, RunConfig, run
from bot.store import Store, StoreUnavailable
from handlers import approvals
from handlers.after_ack import AfterAck
from handlers.approvals import ApprovalDesk
from handlers.links import permalink as thread_permalink
from handlers.liveness import dead_owners, owner_id
from handlers.membership import Membership
from handlers.names import SlackNames
from handlers.outbox import Cards, Outbox
from handlers.policy import ApprovalPolicy
from handlers.slack_out import SlackOut
from handlers.supervisor.thread import IncidentThread
from tools.api import AtEnd, RunFacts
from tools.registry import ToolRegistry

log = structlog.get_logger("opsloop.supervisor")


@dataclass
class Supervisor:
    """Drives this process's share of the runs: claims runnable ones with a lease, heartbeats it, hands them
    back when they pause or the process stops. Any number of processes can share one store."""

    settings: Settings
    store: Store
    client: AsyncWebClient
    tools: ToolRegistry
    model_for: Callable[[str], ModelClient]  # stored model name -> a fresh per-run client
    price_for: Callable[[str], Price]
    policy: ApprovalPolicy
    outbox: Outbox  # the approval card, its updates, the answer and the report: stored, then sent exactly once
    bot_user_id: str = ""
    lease_seconds: float = 10.0  # another host's dead driver: its runs are taken over this long after its heartbeat
    poll_seconds: float = 1.0  # how often the store is asked for runnable runs (decisions made elsewhere)
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
    grace_seconds: float = 8.0  # on shutdown, how long running runs get to reach a step boundary
    after_ack: AfterAck = dataclasses.field(default_factory=AfterAck)  # listeners' Slack calls, off the ack path

    def __post_init__(self) -> None:
        self.owner = owner_id()  # host:pid:pid-namespace:random (see handlers.liveness)
        self.tasks: dict[str, asyncio.Task[RunResult | None]] = {}
        # Runs whose lease this process holds, each with the drive that took it (a task may not have claimed yet).
        self.driving: dict[str, object] = {}
        self._nudged = asyncio.Event()
        self._scheduler: asyncio.Task[None] | None = None
        self._draining = False
        self._told_store_down: set[str] = set()  # runs whose thread heard that the store is down (once each)
        self.dead: list[str] = []  # lease owners known to be dead (crashed processes on this host)
        self.membership = Membership(self.client)  # who is in which conversation (App Home, the shortcut)
        self.names = SlackNames(self.client)  # display names and user-group handles (display only)
        self.cards = Cards(outbox=self.outbox, out=self.out, after_ack=self.after_ack)
        self.approval_desk = ApprovalDesk(
            store=self.store,
            settings=self.settings.approvals,
            policy=self.policy,
            cards=self.cards,
            names=self.names,
            nudge=self.nudge,
        )

    # --- run lifecycle ------------------------------------------------------
    async def open(self) -> list[str]:
        """Start: drive every active run nobody holds once (a paused one re-checks its pending approval
        against a fresh dry run: a deploy may have changed what the call would do), then keep looking: a run
        whose driver died, or whose approval was decided by another process, is picked up within a poll."""
        started = await self.tick()
        now = self.store.now()
        for row in await self.store.active_runs():
            if row.id not in self.tasks and (
                row.owner is None or row.owner in self.dead or (row.lease_until or 0.0) < now
            ):
                self.start(row.id)
                started.append(row.id)
        self._scheduler = asyncio.create_task(self._schedule(), name="opsloop-scheduler")
        return started

    def start(self, run_id: str, *, after_deliveries: bool = False) -> asyncio.Task[RunResult | None] | None:
        """Drive `run_id` here if its lease can be taken (a new run, a decided approval, a takeover); not while
        this process is shutting down (the run is stored: the next process takes it). `after_deliveries`: a run
        a Slack delivery just stored starts once the deliveries in hand are acked (`AfterAck.quiet`)."""
        if self._draining:
            return None
        if (task := self.tasks.get(run_id)) and not task.done():
            return task
        drive = self._drive(run_id, after_deliveries=after_deliveries)
        return self._track(run_id, asyncio.create_task(drive, name=f"run:{run_id}"))

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
        await approvals.expire_due(self.approval_desk)
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
        return dead_owners(await self.store.lease_owners(), me=self.owner)

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

    async def _drive(self, run_id: str, *, after_deliveries: bool = False) -> RunResult | None:
        if after_deliveries:
            await self.after_ack.quiet()
        now = self.store.now()
        if not await self.store.claim_run(run_id, self.owner, until=now + self.lease_seconds, now=now, dead=self.dead):
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
            await thread.load_alert()  # the scope's alert facts: the offers and the memory record read them
            cfg = self._config(row, thread, at_end=self._at_end(thread))
            try:
                await self._follow_kind(thread.channel)
                result = await run(cfg, run_id)
            except Pause as pause:
                thread.status.abandon()
                await thread.end_drive(paused=True)
                log.info("run.paused", why=str(pause))  # it waits in the store; a decision makes it runnable
                return None
            except asyncio.CancelledError:
                thread.status.abandon()
                thread.loading.leave()
                self.after_ack.spawn(thread.end_drive(paused=False), name=f"loading_clear:{run_id}")
                raise  # shutdown or a lost lease: the run stays active in the store for its next driver
            except StoreUnavailable as e:
                thread.status.abandon()
                await thread.end_drive(paused=False)
                await thread.store_unavailable(e)
                return None
            except Exception as e:
                log.exception("run.crashed")
                detail = f"internal error: {type(e).__name__}: {redact(str(e))}"
                await self.store.finish_run(
                    run_id,
                    stop_reason=StopReason.MODEL_ERROR,
                    stop_detail=detail,
                    at_end=await cfg.at_end() if cfg.at_end is not None else (),
                )
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

    async def _follow_kind(self, channel: str) -> None:
        """At a drive's start, when some reach keeps what runs saw (incident memory): a conversation that is no
        longer public, or that Slack can't place, has its records offered only in it from now on. A public answer
        changes nothing here (it may be cached): only a run's end, asking Slack afresh, widens."""
        if self.tools.at_end:
            await self.store.note_kind(channel, await self.membership.kind(channel))

    def _at_end(self, thread: IncidentThread) -> AtEndWrites | None:
        """The reaches' writes at this run's end (registry.at_end), bound to it and to what Slack says of its
        conversation when it ends (asked then, afresh); None when no reach writes one (then Slack isn't asked)."""
        if not self.tools.at_end:
            return None

        async def writes() -> tuple[Callable[[Any], None], ...]:
            scope = thread.scope
            facts = RunFacts(
                kind=await self.membership.kind(thread.channel, fresh=True),
                labels={**scope.labels, **({"alertname": scope.alertname} if scope.alertname else {})},
                permalink=thread_permalink(thread.channel, thread.thread_ts),
            )
            return tuple(_bound(write, thread.run_id, facts) for write in self.tools.at_end)

        return writes

    def _config(self, row: Run, thread: IncidentThread, *, at_end: AtEndWrites | None = None) -> RunConfig:
        s = self.settings
        return RunConfig(
            model=self.model_for(row.model),
            store=self.store,
            tools=self.tools,
            price_for=self.price_for,
            limits=s.limits,
            max_tokens=s.model.max_tokens,
            effort=s.model.effort,
            thinking_display=s.model.thinking_display,
            confirm=thread.confirm,
            inject=thread.inject,
            stop_requested=thread.stop_requested,
            news=thread.news,
            on_event=thread.on_event,
            answer_sink=thread.streams.for_step,
            context_budget_tokens=s.model.context_budget_tokens,
            hand_back=lambda: self._draining,
            scope=thread.scope,
            prelude=thread.prelude,
            at_end=at_end,
        )

    # --- Slack ----------------------------------------------------------------
    def first_store_outage(self, run_id: str) -> bool:
        """True the first time the store is found down for this run (its thread hears it once); False after."""
        if run_id in self._told_store_down:
            return False
        self._told_store_down.add(run_id)
        return True

    @property
    def out(self) -> SlackOut:
        """Everything opsloop sends to Slack goes through this gateway, which redacts it."""
        return SlackOut(self.client)


def _bound(write: AtEnd, run_id: str, facts: RunFacts) -> Callable[[Any], None]:
    """A reach's end-of-run write for one run: what the store calls with its ledger in the ending transaction."""
    return lambda ledger: write(ledger, run_id, facts)
