"""What "healthy" means for this bot (/healthz), and serving /metrics and /healthz for it (bot.app.metrics serves)."""

from __future__ import annotations

from bot.app import metrics
from bot.app.metrics import DEFAULT_HOST, MetricsServer, store_problem
from bot.app.opsloop import Opsloop
from bot.core.redact import redact


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
    """(healthy, {check: "ok" | what is wrong}) for /healthz. Each model provider the chain names (anthropic,
    bedrock, vertex) out of reach is shown but not unhealthy: runs fall back along the chain or stop with
    model_error and say so in their threads, and a restart would not bring it back."""
    checks = {"slack": await slack_problem(ops), "store": await store_problem(ops.store)}
    healthy = all(v is None for v in checks.values())
    for provider in ops.models:
        checks[provider] = ops.down.get(provider) or (None if provider in ops.reached else "not checked yet")
    return healthy, {k: redact(v) if v else "ok" for k, v in checks.items()}  # an error's text is served: redacted


async def serve_metrics(ops: Opsloop, *, host: str = DEFAULT_HOST, port: int) -> MetricsServer:
    """/metrics and /healthz for this bot on host:port (port 0: any free port)."""
    return await metrics.serve(
        store=ops.store, health=lambda: health(ops), prices=ops.settings.model.prices, app=ops.app, host=host, port=port
    )
