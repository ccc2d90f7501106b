"""Wiring: settings -> store, model, tools, the bolt app and the supervisor; `opsloop run`."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import anthropic
import structlog
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import send_async_response
from slack_bolt.adapter.socket_mode.internals import build_headers
from slack_bolt.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import AsyncSingleTeamAuthorization
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot import ModelClient
from bot.app import metrics
from bot.app.metrics import DEFAULT_HOST, MetricsServer, store_problem
from bot.app.startup import has_channel_names, resolve_channels
from bot.config.settings import Settings
from bot.core.errors import OpsloopError
from bot.core.pricing import model_problems, price_for
from bot.core.unreachable import is_unreachable, reason, unreachable
from bot.run.model import AnthropicModel, claude_client
from bot.store import Store
from bot.store.backends import WAKE_OUTBOX
from handlers import approvals, feedback, home, mentions, replies, shortcut, stop
from handlers.after_ack import AfterAck
from handlers.alerts import AlertDesk
from handlers.blocks import APPROVE, DENY, FEEDBACK, INVESTIGATE, STOP
from handlers.inbound import Inbound
from handlers.outbox import Outbox
from handlers.payload_shape import Unreadable, bolt_request
from handlers.policy import ApprovalPolicy
from handlers.supervisor import Supervisor
from tools import ToolRegistry
from tools.config import build_registry

log = structlog.get_logger("opsloop.app")
T = TypeVar("T")


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


EVENTS_KEPT_SECONDS = 24 * 3600  # the events dedupe table keeps a day (Slack redelivers within minutes)
PRUNE_EVERY_SECONDS = 3600

EVENTS = ("app_mention", "message", "app_home_opened")  # manifest.yml subscribes to exactly these (message.*)
ACTIONS = (APPROVE, DENY, STOP, FEEDBACK)
SHORTCUTS = (INVESTIGATE,)  # message shortcuts (manifest.yml features.shortcuts callback_id)


def register(app: AsyncApp, sup: Supervisor, desk: AlertDesk | None = None) -> None:
    """Thin listeners: dedupe, persist, then ack, and hand off. Model work never runs inside an ack.

    The app runs with process_before_response: Slack gets its ack when the listener returns, so a
    listener that raises (the store failed) sends no ack (Socket Mode) or a 500 (HTTP) and Slack
    delivers the event again. Listeners keep Slack calls out of that path (`sup.after_ack`)."""

    inbound = Inbound(
        store=sup.store,
        out=sup.out,
        after_ack=sup.after_ack,
        client=sup.client,
        membership=sup.membership,
        approvals=sup.approval_desk,
        channels=lambda: sup.settings.channels,  # ids once start-up resolved the config's `#name`s
        model=sup.settings.model.primary,
        start=lambda run_id: sup.start(run_id, after_deliveries=True),
        bot_user=lambda: sup.bot_user_id,  # set once auth.test answered, after registration
    )

    async def on_mention(body: dict[str, Any], event: dict[str, Any]) -> None:
        await mentions.on_mention(inbound, body, event)

    async def on_message(body: dict[str, Any], event: dict[str, Any]) -> None:
        if desk is None or not await desk.on_message(body, event):  # an alert starts a run; the rest as before
            await replies.on_message(inbound, body, event)

    home_desk = home.HomeDesk(
        store=sup.store,
        membership=sup.membership,
        policy=sup.policy,
        out=sup.out,
        after_ack=sup.after_ack,
        max_steps=sup.settings.limits.max_iterations,
    )

    async def on_home_opened(body: dict[str, Any], event: dict[str, Any]) -> None:
        await home.on_home_opened(home_desk, body, event)

    event_handlers = {"app_mention": on_mention, "message": on_message, "app_home_opened": on_home_opened}
    for name in EVENTS:
        app.event(name)(event_handlers[name])  # bolt acks once it returns
    stop_desk = stop.StopDesk(
        store=sup.store,
        outbox=sup.outbox,
        out=sup.out,
        after_ack=sup.after_ack,
        policy=sup.policy,
        approvals=sup.approval_desk,
        stop=sup.stop,
    )
    action_handlers = {
        APPROVE: lambda body: approvals.on_decision(sup.approval_desk, body, approve=True),
        DENY: lambda body: approvals.on_decision(sup.approval_desk, body, approve=False),
        STOP: lambda body: stop.on_stop(stop_desk, body),
        FEEDBACK: lambda body: feedback.on_feedback(sup.store, sup.outbox, body),
    }
    for action_id in ACTIONS:
        app.action(action_id)(_action_listener(action_handlers[action_id]))
    app.shortcut(INVESTIGATE)(_action_listener(lambda body: shortcut.on_investigate(inbound, body)))

    @app.error
    async def _error(error: Exception, body: dict[str, Any]) -> None:
        log.error("listener_failed", error=f"{type(error).__name__}: {error}", body_type=body.get("type"))


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
    socket: SocketMode | None = None
    http: web.AppRunner | None = None
    # The Anthropic client build() created (None when the caller passed its own): closed with the bot,
    # or its connection pool is left for the garbage collector to close on a loop that may be gone.
    owned_llm: anthropic.AsyncAnthropic | None = None
    llm: anthropic.AsyncAnthropic | None = None  # the client runs use (None: a scripted model)
    metrics: MetricsServer | None = None  # /metrics and /healthz, when started with a metrics port
    housekeeping: asyncio.Task[None] | None = None  # prunes the events dedupe table
    # Dependencies out of reach right now ({"slack": "cannot connect to slack.com:443 (…); retrying (attempt 3)"}):
    # start-up keeps trying them with backoff, one log line per attempt, and /healthz says why.
    down: dict[str, str] = field(default_factory=dict)
    llm_reachable: bool | None = None  # None: no Anthropic client (scripted model); else whether it answered yet
    watcher: asyncio.Task[None] | None = None  # start-up's Anthropic reachability probe
    alerts: AlertDesk | None = None  # [[alerts.slack]] and [alerts.webhook]: alerts that start runs

    def use(self, settings: Settings) -> None:
        """The settings with the config's `#name` channels resolved to ids (start-up), for every listener."""
        self.settings = self.supervisor.settings = settings
        if self.alerts is not None:
            self.alerts.use(settings.alerts)

    async def close(self) -> None:
        """Stop taking deliveries, finish what listeners started, hand runs back, send what is due, close."""
        if self.metrics is not None:
            await self.metrics.close()
        if self.alerts is not None:
            await self.alerts.close()  # no new alert deliveries (Alertmanager retries what gets no 200)
        for service in self.tools.services:  # the reaches' (POST /changes: no 200, the sender retries)
            await service.close()
        if self.watcher is not None:
            self.watcher.cancel()
            await asyncio.gather(self.watcher, return_exceptions=True)
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
        if self.client.session is not None:
            await self.client.session.close()
        await self.store.close()


# --- /metrics and /healthz (bot.app.metrics serves them; what "healthy" means for this bot is said here) ---------
async def slack_problem(ops: Opsloop) -> str | None:
    """None when Slack can reach us: Socket Mode connected, or HTTP mode listening."""
    if ops.down.get("slack"):
        return ops.down["slack"]  # start-up can't reach Slack: why, and that it keeps trying
    if ops.socket is not None:
        return None if await ops.socket.client.is_connected() else "Socket Mode is not connected"
    if ops.http is not None:
        return None if ops.http.addresses else "HTTP mode is not listening"
    return "not connected to Slack yet"


async def health(ops: Opsloop) -> tuple[bool, dict[str, str]]:
    """(healthy, {check: "ok" | what is wrong}) for /healthz. Anthropic out of reach is shown but not
    unhealthy: runs stop with model_error and say so in their threads, and a restart would not bring it back."""
    checks = {"slack": await slack_problem(ops), "store": await store_problem(ops.store)}
    healthy = all(v is None for v in checks.values())
    if ops.llm_reachable is not None:
        checks["anthropic"] = ops.down.get("anthropic") or (None if ops.llm_reachable else "not checked yet")
    return healthy, {k: v or "ok" for k, v in checks.items()}


async def serve_metrics(ops: Opsloop, *, host: str = DEFAULT_HOST, port: int) -> MetricsServer:
    """/metrics and /healthz for this bot on host:port (port 0: any free port)."""
    return await metrics.serve(
        store=ops.store, health=lambda: health(ops), prices=ops.settings.model.prices, app=ops.app, host=host, port=port
    )


async def build(
    settings: Settings,
    *,
    model_client: anthropic.AsyncAnthropic | None = None,
    model_for: Callable[[str], ModelClient] | None = None,
) -> Opsloop:
    """`model_for` (model name -> a run's ModelClient) replaces Claude, e.g. the demo's scripted model."""
    store = await Store(settings.db_path).open()
    log.info("store.opened", backend=store.backend, where=store.where)
    try:
        tools = await build_registry(settings.tools, reaches=settings.reaches, shared={Store: store})
    except BaseException:  # a tool config error: `opsloop run` says it in one line, with the store closed
        await store.close()
        raise
    client = slack_client(settings, session=aiohttp.ClientSession())  # bolt's per-request clients share it
    llm = None if model_for is not None else model_client or anthropic_client(settings)
    for line in model_problems(settings.model.chain)[1]:
        log.warning("model.deprecated", problem=line)
    for model in settings.model.chain:
        if not price_for(model, settings.model.prices)[1]:
            log.warning(
                "model.unknown_price",
                model=model,
                note="priced like the most expensive known model; set [model.prices] to fix",
            )

    def claude_for(model: str) -> AnthropicModel:
        assert llm is not None
        m = AnthropicModel(llm, settings.model.chain)
        m.start_at(model)
        return m

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
    sup = Supervisor(
        settings=settings,
        store=store,
        client=client,
        tools=tools,
        model_for=model_for or claude_for,
        price_for=lambda m: price_for(m, settings.model.prices)[0],
        policy=ApprovalPolicy(settings.approvals, client),
        outbox=outbox,
    )
    desk = AlertDesk(
        settings.alerts,
        store=sup.store,
        outbox=sup.outbox,
        out=sup.out,
        after_ack=sup.after_ack,
        start=sup.start,
        nudge=sup.nudge,
        model=settings.model.primary,
    )
    register(app, sup, desk)
    return Opsloop(
        settings=settings,
        store=store,
        tools=tools,
        client=client,
        app=app,
        supervisor=sup,
        outbox=outbox,
        owned_llm=None if model_client is not None else llm,
        llm=llm,
        llm_reachable=None if llm is None else False,
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
    process's own start-up (`serve`), see `freeze_startup_heap`."""
    if metrics_port is not None:  # first: probes and scrapes see the start-up too
        ops.metrics = await serve_metrics(ops, host=metrics_host, port=metrics_port)
    # Slack first: nothing works without it. An unreachable Slack is retried with backoff (one log line per
    # attempt, /healthz says why), never a traceback; a wrong token is an answer, and stops start-up.
    if ops.llm is not None:
        ops.watcher = asyncio.create_task(_watch_anthropic(ops, ops.llm), name="opsloop-anthropic-reachable")
    url = ops.settings.slack_api_url
    auth = await until_reachable(ops, "slack", url, ops.client.auth_test)
    seed_authorization(ops.app, auth)
    if has_channel_names(ops.settings):  # before any delivery: the listeners compare channel ids
        resolved, _, _ = await until_reachable(ops, "slack", url, lambda: resolve_channels(ops.settings, ops.client))
        ops.use(resolved)
    ops.supervisor.bot_user_id = ops.outbox.bot_user_id = str(auth.get("user_id", ""))
    await ops.outbox.start()  # what an earlier process stored but never sent goes out now
    ops.store.listen(lambda news: _wake(ops, news))  # Postgres: other replicas' decisions, replies, stops
    await _prune_events_once(ops.store)
    ops.housekeeping = asyncio.create_task(_prune_events(ops.store), name="opsloop-prune-events")
    if freeze_heap:
        freeze_startup_heap()
    if ops.settings.slack_app_token:
        ops.socket = SocketMode(ops.app, ops.settings.slack_app_token, after_ack=ops.supervisor.after_ack)
        await until_reachable(ops, "slack", url, ops.socket.connect_async)
        log.info("socket_mode.connected")
    else:
        web_app = ops.app.web_app(path="/slack/events", port=port)
        web_app.middlewares.append(deliveries_in_hand(ops.supervisor.after_ack))
        web_app.middlewares.append(_junk_timestamp_is_a_bad_signature)
        web_app.middlewares.append(_unreadable_payloads(ops.settings.slack_signing_secret or ""))
        ops.http = web.AppRunner(web_app)
        await ops.http.setup()
        await _listening(f"HTTP mode (--port) on {host}:{port}", web.TCPSite(ops.http, host, port).start())
        log.info("http_mode.listening", host=host, port=port, path="/slack/events")
    resumed = await ops.supervisor.open()  # resumes what is runnable, then keeps looking (leases, decisions)
    if resumed:
        log.info("runs.resumed", runs=resumed)
    if ops.alerts is not None:
        where = (
            f"alerts.webhook on {ops.settings.alerts.webhook.host}:{ops.settings.alerts.webhook.port}"
            if ops.settings.alerts.webhook
            else "alerts.webhook"
        )
        await _listening(where, ops.alerts.serve())  # Alertmanager's webhook, once runs can start
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


@web.middleware
async def _junk_timestamp_is_a_bad_signature(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """A request whose X-Slack-Request-Timestamp is not a whole number (`1e9`, `abc`) fails the signature check
    like any other forgery: 401, not the verifier's int() blowing up into a 500 and an error-level log."""
    stamp = request.headers.get("X-Slack-Request-Timestamp", "").strip()
    if request.method == "POST" and not (stamp.isascii() and stamp.isdigit()):
        log.info("http.request_refused", why="X-Slack-Request-Timestamp is missing or not a number")
        return web.json_response({"error": "invalid request"}, status=401)
    return await handler(request)


def deliveries_in_hand(after_ack: AfterAck) -> Any:
    """HTTP mode's count of the deliveries in hand (`AfterAck.delivering`), as SocketMode keeps it: a request
    counts until its handler returns the response (the ack), so the reactions and run starts it causes wait."""

    @web.middleware
    async def counted(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        with after_ack.delivering():
            return await handler(request)

    return counted


def _unreadable_payloads(signing_secret: str) -> Any:
    """HTTP mode's door for payloads bolt can't read (handlers/payload_shape.py): a signed one is answered 400 and
    logged, an unsigned one 401 like any forgery; the rest go on to bolt, which checks the signature itself."""
    verifier = SignatureVerifier(signing_secret)

    @web.middleware
    async def door(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.method != "POST":
            return await handler(request)
        body = await request.text()  # aiohttp keeps the bytes: bolt reads them again
        try:
            bolt_request(body, mode="http", headers=dict(request.headers), query=request.query_string)
        except Unreadable as e:
            if not verifier.is_valid_request(body, dict(request.headers)):
                return web.json_response({"error": "invalid request"}, status=401)
            log.warning("slack.payload_unreadable", transport="http", problem=str(e))
            return web.json_response({"error": "malformed payload"}, status=400)
        return await handler(request)

    return door


class SocketMode(AsyncSocketModeHandler):
    """bolt's Socket Mode handler with a door: an envelope whose payload bolt can't read
    (handlers/payload_shape.py) is acked and logged, never dispatched (bolt would raise, leave it unacked and
    Slack would send it again). Each envelope counts as in hand (`AfterAck.delivering`) until its ack is sent,
    with those read and queued behind it: the reactions and run starts it causes wait for the burst's acks."""

    def __init__(self, app: AsyncApp, app_token: str, *, after_ack: AfterAck) -> None:
        super().__init__(app, app_token)
        self.after_ack = after_ack

    async def handle(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        with self.after_ack.delivering(client.message_queue.qsize):
            await self._handle(client, req)

    async def _handle(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        start = time.time()
        try:
            bolt_req = bolt_request(req.payload, mode="socket_mode", headers=build_headers(req))
        except Unreadable as e:
            log.warning("slack.payload_unreadable", transport="socket_mode", envelope=req.type, problem=str(e))
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return
        await send_async_response(client, req, await self.app.async_dispatch(bolt_req), start)

    async def close_async(self) -> None:
        await super().close_async()  # type: ignore[no-untyped-call]  # bolt leaves it untyped


START_TIMEOUT_S = 10.0  # one attempt to reach a dependency at start-up
BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)  # between attempts; then every 30 s, for as long as it takes


async def until_reachable(
    ops: Opsloop,
    name: str,
    url: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    timeout_s: float = START_TIMEOUT_S,
    backoff_s: Sequence[float] = BACKOFF_S,
) -> T:
    """`attempt()` until it gets an answer. While `name` can't be reached (refused, DNS, TLS, proxy, timeout),
    each failure is one warning line and `ops.down[name]` says why; any other error is raised as it is."""
    for n in itertools.count(1):
        try:
            async with asyncio.timeout(timeout_s):
                result = await attempt()
        except Exception as e:
            if not is_unreachable(e):
                raise
            problem = unreachable(e, url, proxy=ops.settings.proxy, timeout_s=timeout_s)
            delay = backoff_s[min(n, len(backoff_s)) - 1]
            ops.down[name] = f"{problem}; retrying (attempt {n})"
            log.warning(f"{name}.unreachable", attempt=n, problem=problem, retry_in_s=delay)
            await asyncio.sleep(delay)  # backoff between attempts: a timer, not a wait for state
            continue
        if ops.down.pop(name, None) is not None:
            log.info(f"{name}.reachable", attempts=n)
        return result
    raise AssertionError("unreachable")  # itertools.count never ends


async def _watch_anthropic(ops: Opsloop, llm: anthropic.AsyncAnthropic) -> None:
    """At start-up, learn whether the Messages API can be reached (a free GET of the models list; any HTTP
    answer counts), so /healthz and the log say so before the first incident rather than during it."""
    url = ops.settings.anthropic_base_url or "https://api.anthropic.com"

    async def probe() -> int:
        try:
            await llm.models.list(limit=1)
        except anthropic.APIStatusError as e:  # it answered: reachable (a wrong key is `opsloop check`'s to say)
            return e.status_code
        return 200

    try:
        status = await until_reachable(ops, "anthropic", url, probe)
        ops.llm_reachable = True
        log.info("anthropic.reachable", status=status)
    except Exception as e:  # never take the bot down for a probe
        log.warning("anthropic.probe_failed", error=f"{type(e).__name__}: {reason(e)}")


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


def freeze_startup_heap() -> None:
    """Collect once, then move every object start-up made (modules, the SDKs' models, the tools) to the
    collector's permanent generation, before Slack can deliver anything. A full collection walks every tracked
    object, start-up's hundreds of thousands included, and a burst of mentions triggers one every second or two:
    every ack waits behind it. Frozen, a full collection walks only what the process made since (the figures:
    bench/RESULTS.md, section 16's history)."""
    gc.collect()
    gc.freeze()
    log.info("gc.frozen", objects=gc.get_freeze_count())


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
