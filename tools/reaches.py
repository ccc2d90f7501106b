"""The reaches opsloop knows, in the order `opsloop check` reports them. A new reach is one line here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bot.config import settings
from bot.config.reader import Reader
from tools import changes, k8s, memory, remote, runbooks  # one line per reach (see CONTRIBUTING.md)
from tools.reach import Reach

REACHES: tuple[Reach, ...] = (remote.REACH, k8s.REACH, changes.REACH, memory.REACH, runbooks.REACH)


def load_settings(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> settings.Settings:
    """The app's settings with every reach's sections read (bot.config.settings.load_settings given REACHES)."""
    return settings.load_settings(path, env, reaches=REACHES)


def parse_reaches(
    raw: Mapping[str, Any], *, base_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Each configured reach's parsed config by reach name (absent sections: no entry) from a parsed config file;
    ConfigError listing every problem."""
    config = Reader(raw, base_dir=base_dir)
    found = {reach.name: parsed for reach in REACHES if (parsed := reach.parse(config, env or {})) is not None}
    config.raise_if_problems()
    return found
