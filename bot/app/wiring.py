"""Wiring: settings -> store, model, tools, the bolt app and the supervisor; `opsloop run`."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import anthropic
import structlog
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import AsyncSingleTeamAuthorization
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot import ModelClient
from bot.app.health import serve_metrics
from bot.app.metrics import DEFAULT_HOST
from bot.app.opsloop import Opsloop
from bot.app.prune import prune_events, prune_events_once
from bot.app.reachable import until_reachable, watch_models
from bot.app.startup import has_channel_names, resolve_channels
from bot.config.settings import Settings
from bot.core.errors import OpsloopError
from bot.core.pricing import model_problems, price_for
from bot.core.providers import split
from bot.run.model import AnthropicModel, bedrock_client, claude_client, vertex_client
from bot.run.scheduler import Supervisor
from bot.store import Store
from bot.store.backends import WAKE_OUTBOX
from handlers.alerts import sources as alert_sources
from handlers.alerts.desk import AlertDesk
from handlers.http_mode import slack_doors
from handlers.listeners import register
from handlers.outbox import Outbox
from handlers.policy import ApprovalPolicy
from handlers.socket_mode import SocketMode
from handlers.supervisor import Slack
from tools.config import build_registry
from tools.reaches import TABLES

log = structlog.get_logger("opsloop.app")


def slack_client(
    settings: Settings, *, timeout_s: float = 30.0, retries: bool = True, session: aiohttp.ClientSession | None = None
) -> AsyncWebClient:
    """`retries=False` (opsloop check): one attempt, so an unreachable Slack is reported at once. `session`: one
    connection pool for every call (without it each call opens a session and a TCP/TLS connection of its own)."""
    return AsyncWebClient(
        token=settings.slack_bot_token,
        session=session,
        base_url=settings.slack_api_url,
        timeout=int(max(1, timeout_s)),
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
            AsyncRateLimitErrorRetryHandler(max_retry_count=3),  # honours Retry-After
            AsyncServerErrorRetryHandler(max_retry_count=2),
        ]
        if retries
        else [],
    )


def anthropic_client(settings: Settings, *, timeout_s: float = 600.0) -> anthropic.AsyncAnthropic:
    # An empty ANTHROPIC_BASE_URL is "not set" (compose passes empty variables): the default, not the SDK's own
    # read of the environment, which would take the empty string as the URL.
    return claude_client(
        settings.anthropic_api_key, settings.anthropic_base_url or "https://api.anthropic.com", timeout_s=timeout_s
    )


def model_clients(settings: Settings, *, timeout_s: float = 600.0) -> dict[str, Any]:
    """The SDK client of each provider the model chain names (each reads its own credentials when first used)."""
    providers = {split(label)[0] for label in settings.model.chain}
    m = settings.model
    makers: dict[str, Callable[[], Any]] = {
        "anthropic": lambda: anthropic_client(settings, timeout_s=timeout_s),
        "bedrock": lambda: bedrock_client(m.bedrock.region, settings.bedrock_base_url, timeout_s=timeout_s),
        "vertex": lambda: vertex_client(
            m.vertex.project, m.vertex.region, settings.vertex_base_url, timeout_s=timeout_s
        ),
    }
    try:
        return {provider: make() for provider, make in makers.items() if provider in providers}
    except ValueError as e:  # the SDK's: no region or project where one is needed
        raise OpsloopError(f"[model]: {e}") from e


def models_on(settings: Settings, clients: Mapping[str, Any]) -> Callable[[str], AnthropicModel]:
    """A run's model (by the name it starts at), walking the chain across `clients` (one per provider)."""

    def claude_for(model: str) -> AnthropicModel:
        m = AnthropicModel(clients, settings.model.chain, ids=settings.model.ids)
        m.start_at(model)
        return m

    return claude_for


async def build(
    settings: Settings,
    *,
    model_client: anthropic.AsyncAnthropic | None = None,
    model_for: Callable[[str], ModelClient] | None = None,
) -> Opsloop:
    """`model_for` (model name -> a run's ModelClient) replaces Claude, e.g. the demo's scripted model."""
    store = await Store(settings.db_path, tables=TABLES).open()
    log.info("store.opened", backend=store.backend, where=store.where)
    try:
        tools = await build_registry(settings.tools, reaches=settings.reaches, shared={Store: store})
    except BaseException:  # a tool config error: `opsloop run` says it in one line, with the store closed
        await store.close()
        raise
    client = slack_client(settings, session=aiohttp.ClientSession())  # bolt's per-request clients share it
    owned = {} if model_for is not None else model_clients(settings)
    if model_client is not None:
        owned.pop("anthropic", None)
    clients = {**owned, **({"anthropic": model_client} if model_client is not None else {})}
    for line in model_problems(settings.model.chain)[1]:
        log.warning("model.deprecated", problem=line)
    for model in settings.model.chain:
        if not price_for(model, settings.model.prices)[1]:
            log.warning(
                "model.unknown_price",
                model=model,
                note="priced like the most expensive known model; set [model.prices] to fix",
            )

    # bolt reads SLACK_BOT_TOKEN itself and then warns that `client` wins; it does, by design.
    logging.getLogger("slack_bolt.AsyncApp").addFilter(
        lambda record: "`token` will be unused" not in record.getMessage()
    )
    app = AsyncApp(
        # The name bolt would find itself (this file's), given: it otherwise calls inspect.stack(), which reads the
        # source of every frame (a third of a second per app under pytest). Never "opsloop": bolt sets the level
        # of the logger it names, and ours are opsloop.*.
        name="app.py",
        client=client,
        signing_secret=settings.slack_signing_secret or "",
        request_verification_enabled=not settings.slack_app_token,
        raise_error_for_unhandled_request=False,
        process_before_response=True,  # store, then ack: see register()
    )
    outbox = Outbox(store=store, client=client)
    slack = Slack(
        settings=settings, store=store, client=client, policy=ApprovalPolicy(settings.approvals, client), outbox=outbox
    )
    sup = Supervisor(
        settings=settings,
        store=store,
        tools=tools,
        model_for=model_for or models_on(settings, clients),
        price_for=lambda m: price_for(m, settings.model.prices)[0],
        slack=slack,
    )
    desk = AlertDesk(
        store=sup.store,
        outbox=slack.outbox,
        out=slack.out,
        after_ack=slack.after_ack,
        start=sup.start,
        nudge=sup.nudge,
        model=settings.model.chain[0],
    )
    alert_sources.start(settings.alerts, desk)
    register(app, sup, slack, desk)
    return Opsloop(
        settings=settings,
        store=store,
        tools=tools,
        client=client,
        app=app,
        supervisor=sup,
        slack=slack,
        outbox=outbox,
        owned_llms=tuple(owned.values()),
        models=clients,
        alerts=desk,
    )


async def start(
    ops: Opsloop,
    *,
    port: int = 3000,
    host: str = "0.0.0.0",
    metrics_port: int | None = None,
    metrics_host: str = DEFAULT_HOST,
    freeze_heap: bool = False,
) -> None:
    """Connect (Socket Mode) or listen (HTTP mode), then resume every stored active run. `freeze_heap`: the
    process's own start-up (`serve`): every object start-up made moves to the collector's permanent generation
    before Slack can deliver anything, so the full collections a burst of mentions triggers (every ack waits
    behind one) walk only what the process made since."""
    if metrics_port is not None:  # first: probes and scrapes see the start-up too
        ops.metrics = await serve_metrics(ops, host=metrics_host, port=metrics_port)
    # Slack first: nothing works without it. An unreachable Slack is retried with backoff (one log line per
    # attempt, /healthz says why), never a traceback; a wrong token is an answer, and stops start-up.
    if ops.models:
        ops.watcher = asyncio.create_task(watch_models(ops), name="opsloop-models-reachable")
    url = ops.settings.slack_api_url
    auth = await until_reachable(ops, "slack", url, ops.client.auth_test)
    seed_authorization(ops.app, auth)
    if has_channel_names(ops.settings):  # before any delivery: the listeners compare channel ids
        resolved, _, _ = await until_reachable(ops, "slack", url, lambda: resolve_channels(ops.settings, ops.client))
        ops.use(resolved)
    ops.slack.bot_user_id = ops.outbox.bot_user_id = str(auth.get("user_id", ""))
    await ops.outbox.start()  # what an earlier process stored but never sent goes out now
    ops.store.listen(lambda news: _wake(ops, news))  # Postgres: other replicas' decisions, replies, stops
    await prune_events_once(ops.store)
    ops.housekeeping = asyncio.create_task(prune_events(ops.store), name="opsloop-prune-events")
    if freeze_heap:
        gc.collect()
        gc.freeze()
        log.info("gc.frozen", objects=gc.get_freeze_count())
    if ops.settings.slack_app_token:
        ops.socket = SocketMode(ops.app, ops.settings.slack_app_token, after_ack=ops.slack.after_ack)
        await until_reachable(ops, "slack", url, ops.socket.connect_async)
        log.info("socket_mode.connected")
    else:
        web_app = ops.app.web_app(path="/slack/events", port=port)
        web_app.middlewares.append(slack_doors(ops.slack.after_ack, ops.settings.slack_signing_secret or ""))
        ops.http = web.AppRunner(web_app)
        await ops.http.setup()
        await _listening(f"HTTP mode (--port) on {host}:{port}", web.TCPSite(ops.http, host, port).start())
        log.info("http_mode.listening", host=host, port=port, path="/slack/events")
    resumed = await ops.supervisor.open()  # resumes what is runnable, then keeps looking (leases, decisions)
    if resumed:
        log.info("runs.resumed", runs=resumed)
    if ops.alerts is not None:  # the alert sources' servers (Alertmanager's webhook), once runs can start
        for name, live in ops.alerts.sources.items():
            await _listening(f"alerts.{name}", live.serve())
    for service in ops.tools.services:  # what the reaches run beside the runs: POST /changes, retention sweeps
        await _listening(service.name, service.start())


class ListenError(OpsloopError, OSError):
    """A port `opsloop run` must listen on is taken or not allowed: one line, not a traceback."""


async def _listening(where: str, bind: Awaitable[None]) -> None:
    try:
        await bind
    except OSError as e:
        raise ListenError(f"{where}: cannot listen: {e.strerror or e}") from e


def seed_authorization(app: AsyncApp, auth: AsyncSlackResponse) -> None:
    """Hand bolt's single-team authorization the start-up auth.test: without it, bolt calls auth.test for every
    envelope until its first call returns (a burst of mentions right after start-up waited on dozens of them).
    bolt keeps that middleware in a private list; if it ever moves, bolt just makes its own first call."""
    for middleware in getattr(app, "_async_middleware_list", []):
        if isinstance(middleware, AsyncSingleTeamAuthorization) and middleware.auth_test_result is None:
            middleware.auth_test_result = auth


def _wake(ops: Opsloop, news: str) -> None:
    """Another replica committed something: a run to resume, a drive to stop, a post to send."""
    if news == WAKE_OUTBOX:
        ops.outbox.wake()
    else:
        ops.supervisor.nudge()


async def serve(
    settings: Settings, *, port: int = 3000, metrics_port: int | None = None, metrics_host: str = DEFAULT_HOST
) -> None:
    """Run until SIGINT/SIGTERM; active runs stay in the store and resume on the next start."""
    ops = await build(settings)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    try:
        # Start-up may wait a long time for an unreachable Slack: a SIGTERM meanwhile stops it cleanly.
        starting = asyncio.ensure_future(
            start(ops, port=port, metrics_port=metrics_port, metrics_host=metrics_host, freeze_heap=True)
        )
        told_to_stop = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({starting, told_to_stop}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            if starting.exception() is not None:
                told_to_stop.cancel()
                starting.result()  # start-up's own errors (a revoked token, a store that is gone) end the process
            await told_to_stop
        else:
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
        log.info("shutting_down")
    finally:
        await ops.close()
