"""Drives this process's share of the runs: claims runnable ones with a lease, heartbeats it, resumes runs whose
approval was decided or whose driver died, hands them back when they pause or the process stops. A terminal run
(`opsloop ask`) is driven only by its own process, started there with `start`: the scheduler never takes one
over (its conversation is no Slack channel), so a killed `opsloop ask` leaves its run interrupted, never posted.

An approval is a row in the store (bot/run/approvals.py): the waiting coroutine can die with the process and a
resumed run finds the same row again. What a run shows in Slack is the Slack side's (`bot.SlackSide`, one
`bot.RunThread` per drive); which lease owners are dead is bot/run/liveness.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from bot import ModelClient, RunThread, SlackSide
from bot.config.settings import Settings
from bot.core.pricing import Price
from bot.core.redact import redact
from bot.core.types import Run, RunResult, StopReason
from bot.run import approvals, prompts
from bot.run.guards import Pause
from bot.run.liveness import dead_owners, owner_id
from bot.run.loop import AtEndWrites, RunConfig, run
from bot.store import Store, StoreUnavailable
from tools.api import RunScope
from tools.registry import ToolRegistry

log = structlog.get_logger("opsloop.supervisor")


@dataclass
class Supervisor:
    """Drives this process's share of the runs (see the module docstring). Any number of processes can share one
    store."""

    settings: Settings
    store: Store
    tools: ToolRegistry
    model_for: Callable[[str], ModelClient]  # stored model name -> a fresh per-run client
    price_for: Callable[[str], Price]
    slack: SlackSide  # the threads, the cards, the answers
    lease_seconds: float = 10.0  # another host's dead driver: its runs are taken over this long after its heartbeat
    poll_seconds: float = 1.0  # how often the store is asked for runnable runs (decisions made elsewhere)
    grace_seconds: float = 8.0  # on shutdown, how long running runs get to reach a step boundary

    def __post_init__(self) -> None:
        self.owner = owner_id()  # host:pid:pid-namespace:random (see bot.run.liveness)
        self.tasks: dict[str, asyncio.Task[RunResult | None]] = {}
        # Runs whose lease this process holds, each with the drive that took it (a task may not have claimed yet).
        self.driving: dict[str, object] = {}
        self._nudged = asyncio.Event()
        self._scheduler: asyncio.Task[None] | None = None
        self._draining = False
        self._told_store_down: set[str] = set()  # runs whose thread heard that the store is down (once each)
        self.dead: list[str] = []  # lease owners known to be dead (crashed processes on this host)
        self.approvals = approvals.ApprovalDesk(
            store=self.store, settings=self.settings.approvals, cards=self.slack, nudge=self.nudge
        )

    # --- run lifecycle ------------------------------------------------------
    async def open(self) -> list[str]:
        """Start: drive every active run nobody holds once (a paused one re-checks its pending approval
        against a fresh dry run: a deploy may have changed what the call would do), then keep looking: a run
        whose driver died, or whose approval was decided by another process, is picked up within a poll."""
        started = await self.tick()
        now = self.store.now()
        for row in await self.store.active_runs():
            if (
                row.id not in self.tasks
                and not row.in_terminal
                and (row.owner is None or row.owner in self.dead or (row.lease_until or 0.0) < now)
            ):
                self.start(row.id)
                started.append(row.id)
        self._scheduler = asyncio.create_task(self._schedule(), name="opsloop-scheduler")
        return started

    def start(self, run_id: str, *, after_deliveries: bool = False) -> asyncio.Task[RunResult | None] | None:
        """Drive `run_id` here if its lease can be taken (a new run, a decided approval, a takeover); not while
        this process is shutting down (the run is stored: the next process takes it). `after_deliveries`: a run
        a Slack delivery just stored starts once the deliveries in hand are acked (`SlackSide.quiet`)."""
        if self._draining:
            return None
        if (task := self.tasks.get(run_id)) and not task.done():
            return task
        return self._track(run_id, self._drive(run_id, after_deliveries=after_deliveries), f"run:{run_id}")

    def _track(self, run_id: str, drive: Any, name: str) -> asyncio.Task[RunResult | None]:
        task = self.tasks[run_id] = asyncio.create_task(drive, name=name)
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
        await approvals.expire_due(self.approvals)
        if self._draining:
            return []
        for row in await self.store.unreported_runs():  # a driver died between finishing and reporting
            if row.id not in self.tasks and not row.in_terminal:
                self._track(row.id, self._report(row), f"report:{row.id}")
        # Lease holders that were processes on this host and are gone (SIGKILL, OOM): their runs need not wait
        # for the lease to lapse. Another host's process can't be checked; its lease lapses instead.
        self.dead = dead_owners(await self.store.lease_owners(), me=self.owner)
        started = []
        for row in await self.store.runnable_runs(now=now, dead=self.dead):
            if row.id not in self.tasks and not row.in_terminal:
                log.info("run.resume", run_id=row.id, status=row.status.value)
                self.start(row.id)
                started.append(row.id)
        return started

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

    async def stop(self, run_id: str, user: str) -> None:
        """A Stop click (vetted by the Slack side): recorded before the ack, so a paused run asks nobody anything
        any more, whichever process resumes it; the run ends where it is driven here, or wakes if it waits."""
        if not await self.store.request_stop(run_id, user):
            return
        await approvals.supersede_for_stop(self.approvals, run_id, by=user, why=StopReason.CANCELLED.value)
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
            await self.slack.quiet()
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
        thread = self.slack.thread(row)
        with structlog.contextvars.bound_contextvars(run_id=run_id, channel=row.channel, thread_ts=row.thread_ts):
            scope = await thread.open()  # the status line (best effort), the scope's alert facts
            cfg = self._config(row, thread, scope, at_end=self._at_end(run_id, thread))
            try:
                if self.tools.at_end:  # some reach keeps what runs saw: follow the conversation's kind
                    await thread.follow_kind()
                result = await run(cfg, run_id)
            except Pause as pause:
                await thread.end_drive(paused=True)
                log.info("run.paused", why=str(pause))  # it waits in the store; a decision makes it runnable
                return None
            except asyncio.CancelledError:
                thread.cancelled()
                raise  # shutdown or a lost lease: the run stays active in the store for its next driver
            except StoreUnavailable as e:
                # The database keeps failing: the run waits (never marked finished); the thread hears it once.
                await thread.end_drive(paused=False)
                log.error("run.store_unavailable", error=str(e), disk_full=e.disk_full)
                if run_id not in self._told_store_down:
                    self._told_store_down.add(run_id)
                    await thread.store_unavailable(disk_full=e.disk_full)
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
            await self._finish(thread, result)
            return result

    async def _report(self, row: Run) -> RunResult | None:
        """Post a finished run's answer or report that its driver never enqueued."""
        thread = self.slack.thread(row)
        with structlog.contextvars.bound_contextvars(run_id=row.id, channel=row.channel, thread_ts=row.thread_ts):
            # A finished run: its stored result, no request.
            result = await run(self._config(row, thread, None), row.id)
            log.info("run.report_recovered")
            await self._finish(thread, result)
            return result

    async def _finish(self, thread: RunThread, result: RunResult) -> None:
        """A stopped run asks nobody anything any more; then its answer or report, once."""
        why = result.stop_reason.value
        await approvals.supersede_for_stop(self.approvals, result.run_id, by=result.stopped_by, why=why)
        await thread.finish(result)

    def _at_end(self, run_id: str, thread: RunThread) -> AtEndWrites | None:
        """The reaches' writes at this run's end (registry.at_end), bound to it and to what Slack says of its
        conversation when it ends (asked then, afresh); None when no reach writes one (then Slack isn't asked)."""
        if not self.tools.at_end:
            return None

        async def writes() -> Sequence[Callable[[Any], None]]:
            facts = await thread.facts()

            def write_all(ledger: Any) -> None:
                for write in self.tools.at_end:
                    write(ledger, run_id, facts)

            return [write_all]

        return writes

    def _config(
        self, row: Run, thread: RunThread, scope: RunScope | None, *, at_end: AtEndWrites | None = None
    ) -> RunConfig:
        s, store, run_id = self.settings, self.store, row.id
        return RunConfig(
            model=self.model_for(row.model),
            store=store,
            tools=self.tools,
            price_for=self.price_for,
            limits=s.limits,
            max_tokens=s.model.max_tokens,
            effort=s.model.effort,
            thinking_display=s.model.thinking_display,
            confirm=lambda req: approvals.ask(self.approvals, row, req),
            stop_requested=lambda: store.stop_requested_by(run_id),
            news=lambda: store.run_news(run_id),  # the Stop flag and the queued replies, in one store call a step
            on_event=thread.on_event,
            answer_sink=thread.answer_sink,
            context_budget_tokens=s.model.context_budget_tokens,
            hand_back=lambda: self._draining,
            scope=scope,
            prelude=lambda: self._prelude(row, thread, scope),
            at_end=at_end,
        )

    async def _prelude(self, row: Run, thread: RunThread, scope: RunScope | None) -> list[str]:
        """At the run's first drive: the run's context (the time, the channel, what started it, what the reaches
        can reach), then what the reaches offer (past incidents, the team's runbook). They go to the model in the
        task's turn; each offer's line goes in the thread once (keyed by run and source, so a drive that dies and
        comes back posts nothing twice)."""
        assert scope is not None  # a drive of an active run has its scope
        context = prompts.run_context(
            now=time.time(),
            started=scope.started_at,
            channel=scope.conversation,
            requester=row.requester,
            alertname=scope.alertname,
            alert_start=scope.anchor if scope.anchor != scope.started_at else None,
            environment=self.tools.environment,
        )
        offers = await self.tools.offers(scope)
        await thread.offered(offers)
        return [context, *(offer.prompt for offer in offers if offer.prompt)]
