"""The alert sources opsloop knows (a new source is one line here; see CONTRIBUTING.md). The roof passes them to
the settings, which read [alerts] through them (bot.config.alerts), and starts each configured one's live part."""

from __future__ import annotations

from bot.config.alerts import AlertSettings
from handlers.alerts import alertmanager, pagerduty, slack
from handlers.alerts.desk import AlertDesk
from handlers.alerts.source import AlertSource

SOURCES: tuple[AlertSource, ...] = (slack.SOURCE, alertmanager.SOURCE, pagerduty.SOURCE)


def start(alerts: AlertSettings, desk: AlertDesk) -> AlertDesk:
    """`desk` with every configured source's live part."""
    desk.sources = {s.name: s.start(desk, config) for s, config in alerts.configured()}
    return desk


def use(alerts: AlertSettings, desk: AlertDesk) -> None:
    """The configs again (channel names resolved) for the live parts."""
    for name, live in desk.sources.items():
        live.use(alerts[name])
