"""A running bot: the pieces `opsloop run` (and the end-to-end tests) hold on to, and the order they close in."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.app.metrics import MetricsServer
from bot.config.settings import Settings
from bot.run.scheduler import Supervisor
from bot.store import Store
from handlers.alerts import sources as alert_sources
from handlers.alerts.desk import AlertDesk
from handlers.outbox import Outbox
from handlers.socket_mode import SocketMode
from handlers.supervisor import Slack
from tools import ToolRegistry


@dataclass
class Opsloop:
    """A running bot: the pieces `opsloop run` (and the end-to-end tests) hold on to."""

    settings: Settings
    store: Store
    tools: ToolRegistry
    client: AsyncWebClient
    app: AsyncApp
    supervisor: Supervisor
    slack: Slack  # the Slack side of the runs: what the supervisor asks of Slack, and what the listeners share
    outbox: Outbox
    socket: SocketMode | None = None
    http: web.AppRunner | None = None
    # The model clients build() created (not one the caller passed): closed with the bot, or their
    # connection pools are left for the garbage collector to close on a loop that may be gone.
    owned_llms: tuple[Any, ...] = ()
    # The client of each provider the model chain names, as runs use them (none: a scripted model)
    models: dict[str, Any] = field(default_factory=dict)
    metrics: MetricsServer | None = None  # /metrics and /healthz, when started with a metrics port
    housekeeping: asyncio.Task[None] | None = None  # prunes the events dedupe table
    # Dependencies out of reach right now ({"slack": "cannot connect to slack.com:443 (…); retrying (attempt 3)"}):
    # start-up keeps trying them with backoff, one log line per attempt, and /healthz says why.
    down: dict[str, str] = field(default_factory=dict)
    reached: set[str] = field(default_factory=set)  # the providers of `models` that have answered start-up's probe
    watcher: asyncio.Task[None] | None = None  # start-up's reachability probe of the model providers
    alerts: AlertDesk | None = None  # [alerts]: the alert sources, and what they share

    def use(self, settings: Settings) -> None:
        """The settings with the config's `#name` channels resolved to ids (start-up), for every listener."""
        self.settings = self.supervisor.settings = self.slack.settings = settings
        if self.alerts is not None:
            alert_sources.use(settings.alerts, self.alerts)

    async def close(self) -> None:
        """Stop taking deliveries, finish what listeners started, hand runs back, send what is due, close."""
        if self.metrics is not None:
            await self.metrics.close()
        if self.alerts is not None:
            await self.alerts.close()  # no new alert deliveries (a webhook's sender retries what gets no 200)
        for service in self.tools.services:  # the reaches' (POST /changes: no 200, the sender retries)
            await service.close()
        for task in (self.watcher, self.housekeeping):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self.socket is not None:
            await self.socket.close_async()
        if self.http is not None:
            await self.http.cleanup()
        await self.supervisor.close()
        await self.slack.after_ack.close()  # after the runs: they spawn card-copy updates too
        await self.outbox.close()
        await self.tools.aclose()
        for llm in self.owned_llms:
            await llm.close()
        if self.client.session is not None:
            await self.client.session.close()
        await self.store.close()
