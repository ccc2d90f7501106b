"""The reaches opsloop knows, in the order `opsloop check` reports them. A new reach is one line here."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bot.config.reader import Reader
from bot.store.migrations import Tables
from tools import changes, k8s, memory, remote, runbooks  # one line per reach (see CONTRIBUTING.md)
from tools.reach import Reach

REACHES: tuple[Reach, ...] = (remote.REACH, k8s.REACH, changes.REACH, memory.REACH, runbooks.REACH)
# The reaches' own tables (a reach's optional `tables`), in the list's order: what every store the app opens migrates.
TABLES: tuple[Tables, ...] = tuple(t for r in REACHES if (t := getattr(r, "tables", None)) is not None)


def reach_sections() -> dict[str, Reach]:
    """Every top-level config table a reach owns, to the reach."""
    return {section: r for r in REACHES for section in r.sections}


def read_reaches(config: Reader, env: Mapping[str, str]) -> dict[str, Any]:
    """Each configured reach's parsed config by reach name (absent sections: no entry); problems go on `config`."""
    found = {}
    for reach in REACHES:
        parsed = reach.parse(config, env)
        if parsed is not None:
            found[reach.name] = parsed
    return found


def parse_reaches(
    raw: Mapping[str, Any], *, base_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """`read_reaches` over a parsed config file; ConfigError listing every problem."""
    config = Reader(raw, base_dir=base_dir)
    found = read_reaches(config, env or {})
    config.raise_if_problems()
    return found
