"""[alerts]: each configured alert source's typed config, by the source's name. The sources themselves
(handlers/alerts/sources.py) are passed in by the roof, so the core reads the table without knowing any of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.config.reader import Reader


class SourceConfig(Protocol):
    """What the settings need of an alert source (the whole interface: handlers.alerts.source.AlertSource)."""

    name: str

    def read(self, alerts: Reader, env: Mapping[str, str]) -> Any: ...
    def routes(self, config: Any) -> list[tuple[str, str]]: ...
    def with_channels(self, config: Any, resolve: Callable[[str, str], str]) -> Any: ...


@dataclass(frozen=True)
class AlertSettings:
    """Each configured source's config by its name (`settings.alerts["webhook"]`), with the sources that read it."""

    configs: Mapping[str, Any] = field(default_factory=dict)
    sources: Sequence[SourceConfig] = field(default=(), compare=False, repr=False)

    def __getitem__(self, name: str) -> Any:
        return self.configs.get(name)

    def configured(self) -> list[tuple[Any, Any]]:
        """(source, config) of each configured source, in the sources' order."""
        return [(s, self.configs[s.name]) for s in self.sources if s.name in self.configs]

    def _each(self, method: str) -> list[Any]:
        """What each configured source's optional `method(config)` returns."""
        return [x for s, c in self.configured() for x in getattr(s, method, lambda _: [])(c)]

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
        return AlertSettings({s.name: s.with_channels(c, resolve) for s, c in self.configured()}, self.sources)


def read_alerts(config: Reader, env: Mapping[str, str], sources: Sequence[SourceConfig]) -> AlertSettings:
    """[alerts], each source reading its own key; every problem recorded on `config`."""
    alerts = config.child(config.table.get("alerts", {}), "alerts")  # one problem when not a table: this one
    if not alerts.is_table(f" (its keys: {', '.join(s.name for s in sources)})"):
        return AlertSettings(sources=sources)
    alerts.only([s.name for s in sources])
    return AlertSettings({s.name: c for s in sources if (c := s.read(alerts, env)) is not None}, sources)
