"""PagerDuty as an alert source ([alerts.pagerduty], docs/alerts.md): `POST /pagerduty` receives a v3 webhook
subscription's events, signed (`X-PagerDuty-Signature`, HMAC-SHA256 of the exact body); `incident.triggered` opens
one thread per incident (`pd:<incident id>`) in the channel its service or escalation policy routes to, and the
incident's later events (acknowledged, reassigned, priority changed, annotated, resolved, ...) update it."""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from bot.config.reader import Reader
from handlers.alerts.pagerduty import payload
from handlers.alerts.source import RUNS_PER_10_MIN, read_listen
from handlers.alerts.threads import WebhookSource

SIGNATURES_MAX = 8  # `v1=` values read from one header (PagerDuty sends two during a secret rotation)
DEFAULT_ROUTE = "*"


@dataclass(frozen=True, kw_only=True)
class PagerDutyConfig:
    """[alerts.pagerduty]: a PagerDuty v3 webhook subscription's receiver, on its own port."""

    routes: Mapping[str, str]  # a service id, escalation policy id or "*" -> the channel id (C…) or #name
    host: str = "0.0.0.0"  # listen = "host:port"
    port: int = 9096
    secret_env: str = "OPSLOOP_PAGERDUTY_WEBHOOK_SECRET"  # the variable holding the subscription's signing secret
    secret: str | None = field(default=None, repr=False)  # read from secret_env; unset: every request is refused
    max_runs_per_10_min: int = RUNS_PER_10_MIN
    reopen_after_s: float = math.inf  # an incident is one occurrence: only `incident.reopened` fires it again

    @classmethod
    def read(cls, r: Reader, env: Mapping[str, str]) -> PagerDutyConfig:
        r.only(("listen", "secret_env", "routes", "max_runs_per_10_min"))
        host, port = read_listen(r, cls.host, cls.port)
        routes: dict[str, str] = {}
        table = r.at("routes")
        for key, value in table.entries():
            channel = value.str(empty_ok=False)
            if channel is not None:
                routes[key] = channel
        if not routes and isinstance(table.value, Mapping):
            r.problem('required: at least one `"<service or escalation policy id>" = "<channel>"` (or "*")', "routes")
        secret_env = r.env_name("secret_env", cls.secret_env)
        return cls(
            routes=routes,
            host=host,
            port=port,
            secret_env=secret_env,
            secret=env.get(secret_env, "").strip() or None,
            max_runs_per_10_min=r.int("max_runs_per_10_min", RUNS_PER_10_MIN, low=1),
        )


class PagerDuty(WebhookSource):
    name, sender, path = "pagerduty", "PagerDuty", "/pagerduty"
    config_type, secret_field = PagerDutyConfig, "secret"
    secret_what = "the signing secret of [alerts.pagerduty]'s subscription"

    def routes(self, config: PagerDutyConfig) -> list[tuple[str, str]]:
        return [(f"alerts.pagerduty.routes.{key}", channel) for key, channel in config.routes.items()]

    def with_channels(self, config: PagerDutyConfig, resolve: Callable[[str, str], str]) -> PagerDutyConfig:
        routes = {k: resolve(f"alerts.pagerduty.routes.{k}", c) for k, c in config.routes.items()}
        return replace(config, routes=routes)

    def check_lines(self, config: PagerDutyConfig) -> list[str]:
        return [f"{line}, {len(config.routes)} route(s)" for line in super().check_lines(config)]

    def verify(self, config: PagerDutyConfig, headers: Mapping[str, str], body: bytes) -> bool:
        """Any `v1=<hex>` of X-PagerDuty-Signature is HMAC-SHA256(secret, body), compared in constant time."""
        if config.secret is None:
            return False  # no secret configured: nobody is let in
        expected = hmac.new(config.secret.encode(), body, hashlib.sha256).hexdigest().encode()
        ok = False
        for part in headers.get("X-PagerDuty-Signature", "").split(",")[:SIGNATURES_MAX]:
            version, _, value = part.strip().partition("=")
            ok |= version == "v1" and hmac.compare_digest(value.encode("utf-8", "replace"), expected)
        return ok

    def channel(self, config: PagerDutyConfig, event: dict[str, Any]) -> str | None:
        """The channel of the incident's service, else of its escalation policy, else "*"'s; None (dropped) for
        an event that neither opens nor updates a thread, or an incident no route takes."""
        if not payload.handled(event):
            return None
        service, policy = payload.service_ids(event)
        found = config.routes.get(service) or config.routes.get(policy) or config.routes.get(DEFAULT_ROUTE)
        if found is None and event["event"]["event_type"] not in (payload.TRIGGERED, "incident.reopened"):
            return ""  # an update never opens a thread: it finds its incident's, wherever that is
        return found


SOURCE = PagerDuty(payload)
