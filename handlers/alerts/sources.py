"""The alert sources opsloop knows (a new source is one line here; see CONTRIBUTING.md), and [alerts] read
through them: the settings hold each configured source's typed config, by its name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.config.reader import Reader
from handlers.alerts import alertmanager, slack
from handlers.alerts.desk import AlertDesk
from handlers.alerts.source import AlertSource

SOURCES: tuple[AlertSource, ...] = (slack.SOURCE, alertmanager.SOURCE)


@dataclass(frozen=True)
class AlertSettings:
    """[alerts]: each configured source's config by its name (`settings.alerts["webhook"]`)."""

    configs: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.configs.get(name)

    def _each(self, method: str) -> list[Any]:
        """What each configured source's optional `method(config)` returns, in SOURCES' order."""
        return [
            x for s in SOURCES if s.name in self.configs for x in getattr(s, method, lambda _: [])(self.configs[s.name])
        ]

    def routes(self) -> list[tuple[str, str]]:
        """(config key, channel) of every alert route, as problems name them: `alerts.slack[0].channel`."""
        return self._each("routes")

    def channels(self) -> list[str]:
        return [channel for _, channel in self.routes()]

    def missing(self) -> list[str]:
        """What `opsloop run` cannot start without (an unset token)."""
        return self._each("missing")

    def check_lines(self) -> list[str]:
        return self._each("check_lines")

    def listens(self) -> list[tuple[str, str, int]]:
        return self._each("listens")

    def with_channels(self, resolve: Callable[[str, str], str]) -> AlertSettings:
        return AlertSettings(
            {s.name: s.with_channels(self.configs[s.name], resolve) for s in SOURCES if s.name in self.configs}
        )

    def start(self, desk: AlertDesk) -> AlertDesk:
        """`desk` with every configured source's live part."""
        desk.sources = {s.name: s.start(desk, self.configs[s.name]) for s in SOURCES if s.name in self.configs}
        return desk

    def use(self, desk: AlertDesk) -> None:
        """The configs again (channel names resolved) for the live parts."""
        for name, live in desk.sources.items():
            live.use(self.configs[name])


def read_alerts(config: Reader, env: Mapping[str, str]) -> AlertSettings:
    """[alerts], each source reading its own key; every problem recorded on `config`."""
    if not config.has("alerts"):
        return AlertSettings()
    alerts = config.at("alerts")
    if not alerts.is_table(" ([[alerts.slack]], [alerts.webhook])"):
        return AlertSettings()
    alerts.only([s.name for s in SOURCES])
    found = {s.name: s.read(alerts, env) for s in SOURCES}
    return AlertSettings({name: c for name, c in found.items() if c is not None})
