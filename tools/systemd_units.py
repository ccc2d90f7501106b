"""The systemd unit-name grammar, shared by the service tools, [tools.services] and [[hosts]] restart_allowlist
(a module of its own, so the inventory can check names without importing the tools that use it)."""

from __future__ import annotations

import re
from typing import Any

UNIT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9@._-]*")  # no leading "-": a unit name is never an option


def unit_names(units: tuple[str, ...], r: Any, key: str) -> tuple[str, ...]:
    """A config check (bot.config.reader.setting): each of `units` a unit name, else a problem at its index."""
    for i, unit in enumerate(units):
        if not UNIT_RE.fullmatch(unit):
            r.problem(f"{unit!r} is not a unit name", f"{key}[{i}]")
    return units
