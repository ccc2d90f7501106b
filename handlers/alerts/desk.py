"""The desk every alert source hands its alerts to: the counts /metrics reads, storm control, starting runs, and
the sources' live parts (handlers.alerts.sources lists them)."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog

from bot.core.types import OutboxKind, OutboxState
from bot.store import Store
from handlers import messages
from handlers.after_ack import AfterAck
from handlers.outbox import Cards, Outbox
from handlers.slack_out import SlackOut

log = structlog.get_logger("opsloop.alerts")

OUTCOMES = ("received", "deduplicated", "started", "dropped")  # what /metrics counts, per source


class Inbound(Protocol):
    """A source's live part: a Slack message listener's first look, or a server of its own."""

    def use(self, config: Any) -> None:
        """Its config again, once start-up resolved the channel names."""
        ...

    async def on_message(self, body: dict[str, Any], event: dict[str, Any]) -> bool:
        """True when a Slack message event is this source's alert (handled); False: not for it."""
        ...

    async def serve(self) -> None: ...

    async def close(self) -> None: ...


class AlertDesk:
    """Turns alerts into runs for one bot, whichever source they come in by: the counts, storm control, starting."""

    def __init__(
        self,
        *,
        store: Store,
        outbox: Outbox,
        out: SlackOut,
        after_ack: AfterAck,
        start: Callable[[str], object],
        nudge: Callable[[], None],
        model: str,
    ) -> None:
        """`start` drives a stored run, `nudge` wakes the Supervisor's scheduler, `model`: a new run's model."""
        self.store, self.outbox, self.out, self.after_ack = store, outbox, out, after_ack
        self.start, self.nudge, self.model = start, nudge, model
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.sources: dict[str, Inbound] = {}  # each configured source's live part, by its name

    async def on_message(self, body: dict[str, Any], event: dict[str, Any]) -> bool:
        """True when a Slack message is some source's alert (handled); False: for the reply listener."""
        for source in self.sources.values():
            if await source.on_message(body, event):
                return True
        return False

    async def close(self) -> None:
        for source in self.sources.values():
            await source.close()

    @staticmethod
    def prompt(how: str, task: str) -> str:
        """A run's first message for an alert (`how`: "from Alertmanager in <#C0…>")."""
        return f"[alert {how}; no person asked yet] Investigate this alert:\n{task}"

    def note(self, channel: str, thread_ts: str, text: str, key: str) -> None:
        """A line in an alert's thread, after the ack."""
        self.after_ack.spawn(
            self.out.post(channel=channel, thread_ts=thread_ts, text=text, what="alert_note"), name=f"alert_note:{key}"
        )

    def flag_cards(self, run_id: str, note: str, key: str) -> None:
        """Each card run `run_id` waits on says `note` (its alert resolved), after the ack; approving stays possible."""

        async def flag() -> None:
            cards = Cards(outbox=self.outbox, out=self.out, after_ack=self.after_ack)
            for approval in await self.store.note_pending_approvals(run_id, note):
                await cards.update_card(approval)

        self.after_ack.spawn(flag(), name=f"alert_cards:{key}")

    def storm_later(self, channel: str, key: str, summary: str, limit: int) -> None:
        self.after_ack.spawn(self.storm(channel, key, summary, limit), name=f"storm:{key}")

    def count(self, source: str, outcome: str, **context: Any) -> None:
        """One alert counted (and logged: bot.app.metrics counts these log events for /metrics)."""
        self.counts[(source, outcome)] += 1
        log.info(f"alert.{outcome}", source=source, **context)

    async def storm(self, channel: str, key: str, summary: str, limit: int) -> None:
        """List an alert that was not investigated in the channel's one alert-storm thread. The thread is claimed
        in the store (one row per channel and ten-minute window, compare-and-set), so replicas sharing the store
        in one storm open one; its root and every listing go through the outbox, each once by its key."""
        storm = await self.store.claim_storm_thread(channel, text=messages.alert_storm_root(limit))
        ts = storm.thread_ts or (await self.posted(storm.root_item) if storm.root_item else None)
        if ts is None:
            log.error("alert.storm_thread_not_opened", channel=channel)
            return
        await self.store.enqueue(
            kind=OutboxKind.POST,
            key=f"alert_storm_item:{key}",
            channel=channel,
            thread_ts=ts,
            text=messages.alert_not_investigated(summary),
        )
        self.outbox.wake()

    async def posted(
        self, item_id: str, *, renew: Callable[[], Awaitable[bool]] | None = None, renew_every_s: float = 0.0
    ) -> str | None:
        """The ts of outbox item `item_id` once the sender posted it; None when Slack refused it for good (or
        `renew`, called every `renew_every_s` (a third of the claim window), says the claim is lost). Polls the
        store: the sender may be another replica."""
        delay, renewed = 0.005, asyncio.get_running_loop().time()
        while True:
            item = await self.store.outbox_item(item_id)
            if item is None or item.state == OutboxState.FAILED:
                return None
            if item.state == OutboxState.SENT:
                return item.ts
            if renew is not None and asyncio.get_running_loop().time() - renewed > renew_every_s:
                if not await renew():
                    return None
                renewed = asyncio.get_running_loop().time()
            await asyncio.sleep(delay)  # the outbox row has no change notification across replicas
            delay = min(delay * 2, 0.5)
