"""Alert messages posted in Slack by other bots as an alert source ([[alerts.slack]], docs/alerts.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from bot.config.reader import Reader
from handlers.alerts.desk import AlertDesk
from handlers.alerts.slack.config import SlackAlertConfig
from handlers.alerts.slack.listener import SlackAlerts

Config = tuple[SlackAlertConfig, ...]


class SlackMessages:
    name = "slack"

    def read(self, alerts: Reader, env: Mapping[str, str]) -> Config | None:
        return tuple(SlackAlertConfig.read(entry) for entry in alerts.items("slack")) or None

    def routes(self, config: Config) -> list[tuple[str, str]]:
        return [(f"alerts.slack[{i}].channel", s.channel) for i, s in enumerate(config)]

    def with_channels(self, config: Config, resolve: Callable[[str, str], str]) -> Config:
        return tuple(replace(s, channel=resolve(f"alerts.slack[{i}].channel", s.channel)) for i, s in enumerate(config))

    def start(self, desk: AlertDesk, config: Config) -> SlackAlerts:
        return SlackAlerts(desk, config)


SOURCE = SlackMessages()
