"""Alertmanager as an alert source ([alerts.webhook], docs/alerts.md): `POST /alertmanager` with a bearer token,
one thread per alert group (its groupKey), its firing fingerprints telling a repeat from an update."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from bot.config.reader import Reader
from handlers.alerts.alertmanager import payload
from handlers.alerts.source import RUNS_PER_10_MIN, read_listen, read_route
from handlers.alerts.threads import WebhookSource

# A group firing again this long after Alertmanager last sent it (once its run ended) opens a new thread: longer
# than Alertmanager's default repeat_interval (4 h) and group_interval (5 min), so a group still firing goes on.
REOPEN_AFTER_MINUTES = 300


@dataclass(frozen=True, kw_only=True)
class WebhookConfig:
    """[alerts.webhook]: Alertmanager's webhook receiver, on its own port."""

    channel: str  # the channel id (C…) or #name where each group's thread opens (required)
    host: str = "0.0.0.0"  # listen = "host:port"
    port: int = 9095
    token_env: str = "OPSLOOP_ALERT_TOKEN"  # the variable holding the bearer token Alertmanager sends
    token: str | None = field(default=None, repr=False)  # read from token_env; unset: every request is refused
    max_runs_per_10_min: int = RUNS_PER_10_MIN
    reopen_after_s: float = REOPEN_AFTER_MINUTES * 60.0  # reopen_after_minutes

    @classmethod
    def read(cls, r: Reader, env: Mapping[str, str]) -> WebhookConfig:
        keys = ("listen", "token_env", "channel", "max_runs_per_10_min", "reopen_after_minutes")
        channel, limit = read_route(r, keys)
        host, port = read_listen(r, cls.host, cls.port)
        token_env = r.str("token_env", cls.token_env)
        return cls(
            channel=channel,
            host=host,
            port=port,
            token_env=token_env,
            token=env.get(token_env, "").strip() or None,
            max_runs_per_10_min=limit,
            reopen_after_s=r.number("reopen_after_minutes", REOPEN_AFTER_MINUTES, low=0) * 60.0,
        )


class Alertmanager(WebhookSource):
    name, sender, path = "webhook", "Alertmanager", "/alertmanager"
    config_type, secret_what = WebhookConfig, "the bearer token [alerts.webhook] expects from Alertmanager"

    def routes(self, config: WebhookConfig) -> list[tuple[str, str]]:
        return [("alerts.webhook.channel", config.channel)]

    def with_channels(self, config: WebhookConfig, resolve: Callable[[str, str], str]) -> WebhookConfig:
        return replace(config, channel=resolve("alerts.webhook.channel", config.channel))

    def verify(self, config: WebhookConfig, headers: Mapping[str, str], body: bytes) -> bool:
        if config.token is None:
            return False  # no token configured: nobody is let in
        given = headers.get("Authorization", "").encode("utf-8", "replace")
        return hmac.compare_digest(given, f"Bearer {config.token}".encode())

    def channel(self, config: WebhookConfig, payload: dict[str, Any]) -> str:
        return config.channel


SOURCE = Alertmanager(payload)
