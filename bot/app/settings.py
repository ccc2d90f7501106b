"""The app's settings: the config file and the environment read with every reach and every alert source (the core
reads neither list itself: bot.config.settings.load_settings is given them)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from bot.config import settings
from handlers.alerts.sources import SOURCES
from tools.reaches import REACHES


def load_settings(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> settings.Settings:
    """bot.config.settings.load_settings given REACHES and SOURCES: ConfigError listing every problem."""
    return settings.load_settings(path, env, reaches=REACHES, alert_sources=SOURCES)
