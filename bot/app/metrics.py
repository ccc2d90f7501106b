"""Prometheus metrics and the health check: `opsloop run --metrics-port N` serves /metrics and /healthz.

Every counter and histogram of a run comes from one place, the runtime's trace events
(`response`, `condense`, `thinking_only`, `tool`, `stop`), observed by a structlog processor
while the server runs. The gauges and the approval wait time are read from the store at
scrape time: an approval may be decided hours and a deploy later, and only the store saw
both ends. Event ack latency is timed by a Bolt middleware around the ack.

The server runs on the bot's own event loop (aiohttp), so /healthz also fails when that
loop is stuck, and the store probe goes through the store's one writer thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from bot.core.errors import OpsloopError
from bot.core.pricing import Price, price_for
from bot.core.types import ACTIVE_STATUSES, ApprovalState, FeedbackValue, RunStatus, StopReason, Usage
from bot.store import Store
from handlers.alerts.desk import OUTCOMES  # handlers.alerts.desk logs alert.<outcome>
from handlers.alerts.sources import SOURCES

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp

Health = Callable[[], Awaitable[tuple[bool, dict[str, str]]]]  # (healthy, {check: "ok" | what is wrong})

log = structlog.get_logger("opsloop.metrics")

DEFAULT_HOST = "0.0.0.0"  # kubelet probes and Prometheus reach a pod on its IP, never on its loopback
HEALTH_TIMEOUT_S = 2.0  # under a typical probe timeout; a store that needs longer is not healthy
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")
APPROVAL_OUTCOMES = tuple(s for s in ApprovalState if s != ApprovalState.PENDING)
ALERT_SOURCES = tuple(source.name for source in SOURCES)  # each plug-in, counted from zero

ACK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0)  # Slack wants an ack in 3 s
MODEL_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
TOOL_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
APPROVAL_BUCKETS = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 3 * 3600.0, 24 * 3600.0)


class StoreCollector(Collector):
    """Gauges and the approval wait histogram from what the store said at the last scrape (`refresh`)."""

    def __init__(self) -> None:
        self.active_runs: Mapping[RunStatus, int] = {}  # status -> runs
        self.pending_approvals = 0
        self.approval_waits: Sequence[tuple[ApprovalState, float]] = ()  # (outcome, seconds) per decided approval
        self.feedback: Mapping[FeedbackValue, int] = {}  # feedback clicks so far, by value

    async def refresh(self, store: Store) -> None:
        self.active_runs = await store.active_run_counts()
        self.pending_approvals = await store.pending_approval_count()
        self.approval_waits = tuple(await store.approval_waits())
        self.feedback = await store.feedback_counts()

    def collect(self) -> Iterable[Metric]:
        active = GaugeMetricFamily("opsloop_active_runs", "Runs not finished yet, by status.", labels=["status"])
        for status in ACTIVE_STATUSES:
            active.add_metric([status.value], self.active_runs.get(status, 0))
        yield active
        yield GaugeMetricFamily(
            "opsloop_pending_approvals", "Approval cards waiting for a click.", value=self.pending_approvals
        )
        waits = HistogramMetricFamily(
            "opsloop_approval_wait_seconds",
            "Time from an approval card to its decision, by outcome.",
            labels=["outcome"],
        )
        for outcome in APPROVAL_OUTCOMES:
            seconds = [w for o, w in self.approval_waits if o == outcome]
            buckets = [(repr(float(b)), float(sum(1 for w in seconds if w <= b))) for b in APPROVAL_BUCKETS]
            waits.add_metric([outcome.value], [*buckets, ("+Inf", float(len(seconds)))], sum_value=sum(seconds))
        yield waits
        # Counted from the store (clicks are rows, never rewritten): every replica reports the same totals and a
        # restart loses none of them.
        feedback = CounterMetricFamily(
            "opsloop_answer_feedback", "Feedback clicks on answers and handoff reports, by value.", labels=["value"]
        )
        for value in FeedbackValue:
            feedback.add_metric([value.value], self.feedback.get(value, 0))
        yield feedback


class Metrics:
    """The metric objects in a dedicated registry (never the global one: tests and embedders stay isolated)."""

    def __init__(self, price_for: Callable[[str], Price]) -> None:
        self.price_for = price_for
        self.registry = CollectorRegistry()
        r = self.registry

        def histogram(name: str, doc: str, label: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(name, doc, [label], buckets=buckets, registry=r)

        self.runs = Counter("opsloop_runs", "Runs finished, by stop reason.", ["stop_reason"], registry=r)
        tokens_doc = "Tokens the model used, by model and kind (input is uncached input)."
        self.tokens = Counter("opsloop_tokens", tokens_doc, ["model", "kind"], registry=r)
        self.cost = Counter("opsloop_cost_usd", "Model cost in USD, by model.", ["model"], registry=r)
        self.model_latency = histogram(
            "opsloop_model_latency_seconds", "Time for one model response, by model.", "model", MODEL_BUCKETS
        )
        self.tool_calls = Counter("opsloop_tool_calls", "Tool calls executed, by tool.", ["tool"], registry=r)
        self.tool_errors = Counter("opsloop_tool_errors", "Tool calls that failed, by tool.", ["tool"], registry=r)
        self.tool_latency = histogram(
            "opsloop_tool_latency_seconds", "Time a tool call took, by tool.", "tool", TOOL_BUCKETS
        )
        ack_doc = "Time from a Slack delivery reaching opsloop to its ack, by event type."
        self.event_ack = histogram("opsloop_event_ack_seconds", ack_doc, "type", ACK_BUCKETS)
        alerts_doc = (
            "Alerts (each alert source: Slack alert messages, Alertmanager, PagerDuty), by source "
            "and outcome: received, deduplicated, started, dropped (storm control)."
        )
        self.alerts = Counter("opsloop_alerts", alerts_doc, ["source", "outcome"], registry=r)
        for source in ALERT_SOURCES:
            for outcome in OUTCOMES:
                self.alerts.labels(source=source, outcome=outcome)
        for reason in StopReason:  # zero from the start, so rate() and alerts work before the first stop
            self.runs.labels(stop_reason=reason.value)
        self.store_view = StoreCollector()
        r.register(self.store_view)
        self._run_models: dict[str, str] = {}

    # --- the runtime's trace events -----------------------------------------------
    def processor(self, _logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        """structlog processor: count a run's trace event, pass every event on unchanged."""
        kind = event.get("event")
        if isinstance(kind, str) and kind.startswith("alert.") and kind[6:] in OUTCOMES:
            self.alerts.labels(source=str(event.get("source") or "unknown"), outcome=kind[6:]).inc()
            return event
        run_id = structlog.contextvars.get_contextvars().get("run_id")
        if run_id is not None and isinstance(kind, str) and kind in _OBSERVED:
            try:
                _OBSERVED[kind](self, str(run_id), event)
            except Exception:  # a metric must never cost a log line; stdlib logging does not come back here
                logging.getLogger("opsloop.metrics").exception("metrics.observe_failed")
        return event

    def observe_response(self, run_id: str, e: Mapping[str, Any]) -> None:
        model = str(e.get("model") or "unknown")
        self._run_models[run_id] = model
        self.charge(model, e.get("usage"))
        if isinstance(e.get("latency_ms"), int | float):
            self.model_latency.labels(model=model).observe(e["latency_ms"] / 1000)

    def observe_usage(self, run_id: str, e: Mapping[str, Any]) -> None:
        """A model call without a response step (condensation, a thinking-only retry)."""
        self.charge(str(e.get("model") or self._run_models.get(run_id, "unknown")), e.get("usage"))

    def charge(self, model: str, usage: Any) -> None:
        if (u := Usage.of(usage)) is None:
            return
        for kind, n in zip(TOKEN_KINDS, u.to_dict().values(), strict=True):
            self.tokens.labels(model=model, kind=kind).inc(n)
        self.cost.labels(model=model).inc(self.price_for(model).cost(u))

    def observe_tool(self, run_id: str, e: Mapping[str, Any]) -> None:
        tool = str(e.get("tool") or "unknown")
        self.tool_calls.labels(tool=tool).inc()
        if e.get("is_error") or e.get("error"):
            self.tool_errors.labels(tool=tool).inc()
        if isinstance(e.get("latency_ms"), int | float):
            self.tool_latency.labels(tool=tool).observe(e["latency_ms"] / 1000)

    def observe_stop(self, run_id: str, e: Mapping[str, Any]) -> None:
        self._run_models.pop(run_id, None)
        self.runs.labels(stop_reason=str(e.get("reason") or "unknown")).inc()

    def install(self) -> None:
        """Put the processor first in structlog's chain (it reads the bound run_id itself)."""
        processors = structlog.get_config()["processors"]
        if self.processor not in processors:
            structlog.configure(processors=[self.processor, *processors])

    def uninstall(self) -> None:
        structlog.configure(processors=[p for p in structlog.get_config()["processors"] if p != self.processor])

    # --- Slack acks ------------------------------------------------------------------
    async def ack_timer(self, body: dict[str, Any], next: Callable[[], Awaitable[Any]]) -> None:
        """Bolt middleware: Bolt returns the ack when the rest of the chain returns (events are acked
        before their listener runs; actions when the listener calls ack())."""
        began = time.monotonic()
        try:
            await next()
        finally:
            self.event_ack.labels(type=delivery_type(body)).observe(time.monotonic() - began)


_OBSERVED: dict[str, Callable[[Metrics, str, Mapping[str, Any]], None]] = {
    "response": Metrics.observe_response,
    "condense": Metrics.observe_usage,
    "thinking_only": Metrics.observe_usage,
    "context_overflow": Metrics.observe_usage,
    "model_error": Metrics.observe_usage,
    "tool": Metrics.observe_tool,
    "stop": Metrics.observe_stop,
}


def delivery_type(body: Mapping[str, Any]) -> str:
    """`app_mention`, `message`, `block_actions`…: a small, fixed set of label values."""
    event = body.get("event")
    if isinstance(event, Mapping) and isinstance(event.get("type"), str):
        return str(event["type"])
    return str(body.get("type") or "unknown")


# --- health -------------------------------------------------------------------------


async def store_problem(store: Store) -> str | None:
    """None when the store takes its write lock within HEALTH_TIMEOUT_S (through its writer thread)."""
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            await store.probe_write()
    except TimeoutError:
        return f"the store did not answer within {HEALTH_TIMEOUT_S:g}s"
    except Exception as e:
        return f"the store is not writable: {type(e).__name__}: {e}"
    return None


# --- the server ---------------------------------------------------------------------


class MetricsPortError(OpsloopError):
    """The metrics port cannot be listened on (in use, not allowed): `opsloop run` says so in one line."""


@dataclass
class MetricsServer:
    """/metrics and /healthz on their own port (not the Slack port: keep them off the public ingress)."""

    metrics: Metrics
    runner: web.AppRunner

    @property
    def port(self) -> int:
        return int(self.runner.addresses[0][1])

    async def close(self) -> None:
        self.metrics.uninstall()
        await self.runner.cleanup()


def metrics_app(metrics: Metrics, *, store: Store, health: Health) -> web.Application:
    render = make_aiohttp_handler(metrics.registry)

    async def scrape(request: web.Request) -> web.StreamResponse:
        try:
            await metrics.store_view.refresh(store)
        except Exception as e:  # the run metrics still count; the store's own gauges keep their last value
            log.warning("metrics.store_unavailable", error=f"{type(e).__name__}: {e}")
        return await render(request)

    async def healthz(request: web.Request) -> web.Response:
        ok, checks = await health()
        return web.json_response(
            {"status": "ok" if ok else "unhealthy", **checks}, status=200 if ok else 503, dumps=json.dumps
        )

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    app.router.add_get("/healthz", healthz)
    return app


async def serve(
    *, store: Store, health: Health, prices: Mapping[str, Price], app: AsyncApp, host: str = DEFAULT_HOST, port: int
) -> MetricsServer:
    """Start observing the bot and serve /metrics and /healthz on host:port (port 0: any free port).

    `health` answers /healthz; `app` gets the ack timer as a middleware; `store` is read at scrape time."""
    metrics = Metrics(lambda model: price_for(model, prices)[0])
    metrics.install()
    app.middleware(metrics.ack_timer)
    runner = web.AppRunner(metrics_app(metrics, store=store, health=health), access_log=None)
    await runner.setup()
    server = MetricsServer(metrics=metrics, runner=runner)
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as e:
        await server.close()
        raise MetricsPortError(f"cannot serve metrics on {host}:{port}: {e.strerror or e}") from e
    except BaseException:
        await server.close()
        raise
    log.info("metrics.listening", host=host, port=server.port, paths=["/metrics", "/healthz"])
    return server
