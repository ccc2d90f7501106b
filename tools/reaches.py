"""The reaches opsloop knows, in the order `opsloop check` reports them. A new reach is one line here."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bot.config.reader import Reader
from bot.store.migrations import Tables
from tools import changes, k8s, memory, pagerduty, remote, runbooks  # one line per reach (see CONTRIBUTING.md)
from tools.reach import Reach

REACHES: tuple[Reach, ...] = (remote.REACH, k8s.REACH, changes.REACH, memory.REACH, runbooks.REACH, pagerduty.REACH)
# The reaches' own tables (a reach's optional `tables`), in the list's order: what every store the app opens migrates.
TABLES: tuple[Tables, ...] = tuple(t for r in REACHES if (t := getattr(r, "tables", None)) is not None)


def parse_reaches(
    raw: Mapping[str, Any], *, base_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Each configured reach's parsed config by reach name (absent sections: no entry) from a parsed config file;
    ConfigError listing every problem."""
    config = Reader(raw, base_dir=base_dir)
    found = {reach.name: parsed for reach in REACHES if (parsed := reach.parse(config, env or {})) is not None}
    config.raise_if_problems()
    return found
