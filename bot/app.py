"""Wiring: settings -> store, model, tools, the bolt app and the supervisor; `opsloop run`."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import structlog
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot import ModelClient, metrics
from bot.backends import WAKE_OUTBOX
from bot.config import Settings
from bot.metrics import DEFAULT_HOST, MetricsServer, store_problem
from bot.model import AnthropicModel
from bot.pricing import price_for
from bot.store import Store
from handlers import approvals, mentions, replies, stop
from handlers.blocks import APPROVE, DENY, STOP
from handlers.outbox import Outbox
from handlers.policy import ApprovalPolicy
from handlers.supervisor import Supervisor
from tools import ToolRegistry
from tools.config import build_registry

log = structlog.get_logger("opsloop.app")


def slack_client(settings: Settings) -> AsyncWebClient:
    return AsyncWebClient(
        token=settings.slack_bot_token,
        base_url=settings.slack_api_url,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
            AsyncRateLimitErrorRetryHandler(max_retry_count=3),  # honours Retry-After
            AsyncServerErrorRetryHandler(max_retry_count=2),
        ],
    )


def anthropic_client(settings: Settings) -> anthropic.AsyncAnthropic:
    # max_retries=0: AnthropicModel retries itself, with a cap on Retry-After and the fallback chain.
    # An empty ANTHROPIC_BASE_URL is "not set" (compose passes empty variables): the default, not the SDK's own
    # read of the environment, which would take the empty string as the URL.
    return anthropic.AsyncAnthropic(api_key=settings.anthropic_api_key,
                                   base_url=settings.anthropic_base_url or "https://api.anthropic.com",
                                   max_retries=0, timeout=600.0)


EVENTS_KEPT_SECONDS = 24 * 3600  # the events dedupe table keeps a day (Slack redelivers within minutes)
PRUNE_EVERY_SECONDS = 3600

EVENTS = ("app_mention", "message")  # manifest.yml subscribes to exactly these (message.* = "message")
ACTIONS = (APPROVE, DENY, STOP)


def register(app: AsyncApp, sup: Supervisor) -> None:
    """Thin listeners: dedupe, persist, then ack, and hand off. Model work never runs inside an ack.

    The app runs with process_before_response: Slack gets its ack when the listener returns, so a
    listener that raises (the store failed) sends no ack (Socket Mode) or a 500 (HTTP) and Slack
    delivers the event again. Listeners keep Slack calls out of that path (`sup.after_ack`)."""
    event_handlers = {"app_mention": mentions.on_mention, "message": replies.on_message}
    for name in EVENTS:
        app.event(name)(_event_listener(sup, event_handlers[name]))
    action_handlers = {
        APPROVE: lambda body: approvals.on_decision(sup, body, approve=True),
        DENY: lambda body: approvals.on_decision(sup, body, approve=False),
        STOP: lambda body: stop.on_stop(sup, body),
    }
    for action_id in ACTIONS:
        app.action(action_id)(_action_listener(action_handlers[action_id]))

    @app.error
    async def _error(error: Exception, body: dict[str, Any]) -> None:
        log.error("listener_failed", error=f"{type(error).__name__}: {error}", body_type=body.get("type"))


def _event_listener(sup: Supervisor, handler: Any) -> Any:
    async def listener(body: dict[str, Any], event: dict[str, Any]) -> None:  # bolt acks once this returns
        await handler(sup, body, event)

    return listener


def _action_listener(handler: Any) -> Any:
    async def listener(ack: Any, body: dict[str, Any]) -> None:
        await ack()  # sent when this returns (process_before_response): the handler only decides and stores
        await handler(body)

    return listener


@dataclass
class Opsloop:
    """A running bot: the pieces `opsloop run` (and the end-to-end tests) hold on to."""

    settings: Settings
    store: Store
    tools: ToolRegistry
    client: AsyncWebClient
    app: AsyncApp
    supervisor: Supervisor
    outbox: Outbox
    socket: AsyncSocketModeHandler | None = None
    http: web.AppRunner | None = None
    # The Anthropic client build() created (None when the caller passed its own): closed with the bot,
    # or its connection pool is left for the garbage collector to close on a loop that may be gone.
    owned_llm: anthropic.AsyncAnthropic | None = None
    metrics: MetricsServer | None = None  # /metrics and /healthz, when started with a metrics port
    housekeeping: asyncio.Task[None] | None = None  # prunes the events dedupe table

    async def close(self) -> None:
        """Stop taking deliveries, finish what listeners started, hand runs back, send what is due, close."""
        if self.metrics is not None:
            await self.metrics.close()
        if self.housekeeping is not None:
            self.housekeeping.cancel()
            await asyncio.gather(self.housekeeping, return_exceptions=True)
        if self.socket is not None:
            await self.socket.close_async()
        if self.http is not None:
            await self.http.cleanup()
        await self.supervisor.close()
        await self.supervisor.after_ack.close()  # after the runs: they spawn card-copy updates too
        await self.outbox.close()
        await self.tools.aclose()
        if self.owned_llm is not None:
            await self.owned_llm.close()
        await self.store.close()


# --- /metrics and /healthz (bot.metrics serves them; what "healthy" means for this bot is said here) ---------
async def slack_problem(ops: Opsloop) -> str | None:
    """None when Slack can reach us: Socket Mode connected, or HTTP mode listening."""
    if ops.socket is not None:
        return None if await ops.socket.client.is_connected() else "Socket Mode is not connected"
    if ops.http is not None:
        return None if ops.http.addresses else "HTTP mode is not listening"
    return "not connected to Slack yet"


async def health(ops: Opsloop) -> tuple[bool, dict[str, str]]:
    """(healthy, {check: "ok" | what is wrong}) for /healthz."""
    checks = {"slack": await slack_problem(ops), "store": await store_problem(ops.store)}
    return all(v is None for v in checks.values()), {k: v or "ok" for k, v in checks.items()}


async def serve_metrics(ops: Opsloop, *, host: str = DEFAULT_HOST, port: int) -> MetricsServer:
    """/metrics and /healthz for this bot on host:port (port 0: any free port)."""
    return await metrics.serve(store=ops.store, health=lambda: health(ops), prices=ops.settings.model.prices,
                               app=ops.app, host=host, port=port)


async def build(settings: Settings, *, model_client: anthropic.AsyncAnthropic | None = None,
                model_for: Callable[[str], ModelClient] | None = None) -> Opsloop:
    """`model_for` (model name -> a run's ModelClient) replaces Claude, e.g. the demo's scripted model."""
    store = await Store(settings.db_path).open()
    log.info("store.opened", backend=store.backend, where=store.where)
    tools = await build_registry(settings.tools)
    client = slack_client(settings)
    auth = await client.auth_test()
    llm = None if model_for is not None else model_client or anthropic_client(settings)
    for model in settings.model.chain:
        if not price_for(model, settings.model.prices)[1]:
            log.warning("model.unknown_price", model=model,
                        note="priced like the most expensive known model; set [model.prices] to fix")

    def claude_for(model: str) -> AnthropicModel:
        assert llm is not None
        m = AnthropicModel(llm, settings.model.chain)
        m.start_at(model)
        return m

    # bolt reads SLACK_BOT_TOKEN itself and then warns that `client` wins; it does, by design.
    logging.getLogger("slack_bolt.AsyncApp").addFilter(
        lambda record: "`token` will be unused" not in record.getMessage())
    app = AsyncApp(
        client=client,
        signing_secret=settings.slack_signing_secret or "",
        request_verification_enabled=not settings.slack_app_token,
        raise_error_for_unhandled_request=False,
        process_before_response=True,  # store, then ack: see register()
    )
    outbox = Outbox(store=store, client=client)
    sup = Supervisor(settings=settings, store=store, client=client, tools=tools, model_for=model_for or claude_for,
                     price_for=lambda m: price_for(m, settings.model.prices)[0],
                     policy=ApprovalPolicy(settings.approvals, client), outbox=outbox,
                     bot_user_id=str(auth.get("user_id", "")))
    register(app, sup)
    return Opsloop(settings=settings, store=store, tools=tools, client=client, app=app, supervisor=sup, outbox=outbox,
                   owned_llm=None if model_client is not None else llm)


async def start(ops: Opsloop, *, port: int = 3000, host: str = "0.0.0.0", metrics_port: int | None = None,
                metrics_host: str = DEFAULT_HOST) -> None:
    """Connect (Socket Mode) or listen (HTTP mode), then resume every stored active run."""
    if metrics_port is not None:  # first: probes and scrapes see the start-up too
        ops.metrics = await serve_metrics(ops, host=metrics_host, port=metrics_port)
    await ops.outbox.start()  # what an earlier process stored but never sent goes out now
    ops.store.listen(lambda news: _wake(ops, news))  # Postgres: other replicas' decisions, replies, stops
    await _prune_events_once(ops.store)
    ops.housekeeping = asyncio.create_task(_prune_events(ops.store), name="opsloop-prune-events")
    if ops.settings.slack_app_token:
        ops.socket = AsyncSocketModeHandler(ops.app, ops.settings.slack_app_token)
        await ops.socket.connect_async()
        log.info("socket_mode.connected")
    else:
        ops.http = web.AppRunner(ops.app.web_app(path="/slack/events", port=port))
        await ops.http.setup()
        await web.TCPSite(ops.http, host, port).start()
        log.info("http_mode.listening", host=host, port=port, path="/slack/events")
    resumed = await ops.supervisor.open()  # resumes what is runnable, then keeps looking (leases, decisions)
    if resumed:
        log.info("runs.resumed", runs=resumed)


def _wake(ops: Opsloop, news: str) -> None:
    """Another replica committed something: a run to resume, a drive to stop, a post to send."""
    if news == WAKE_OUTBOX:
        ops.outbox.wake()
    else:
        ops.supervisor.nudge()


async def _prune_events_once(store: Store) -> None:
    """Forget event ids older than a day (Slack redelivers within minutes)."""
    try:
        pruned = await store.prune_events(time.time() - EVENTS_KEPT_SECONDS)
        if pruned:
            log.info("events.pruned", rows=pruned)
    except Exception as e:  # the store is down: try again at the next round
        log.warning("events.prune_failed", error=f"{type(e).__name__}: {e}")


async def _prune_events(store: Store) -> None:
    """Every hour after start-up (which prunes once itself)."""
    while True:
        await asyncio.sleep(PRUNE_EVERY_SECONDS)  # a timer, not a wait for state
        await _prune_events_once(store)


async def serve(settings: Settings, *, port: int = 3000, metrics_port: int | None = None,
                metrics_host: str = DEFAULT_HOST) -> None:
    """Run until SIGINT/SIGTERM; active runs stay in the store and resume on the next start."""
    ops = await build(settings)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    try:
        await start(ops, port=port, metrics_port=metrics_port, metrics_host=metrics_host)
        await stopping.wait()
        log.info("shutting_down")
    finally:
        await ops.close()
