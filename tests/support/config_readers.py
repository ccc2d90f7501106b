"""[tools] and [ssh]/[[hosts]] read as the app reads them, raising on the first table with problems: what the tests
build a ToolContext and an inventory from. (Only tests did this in one call; the app reads through a Reader that
collects every problem: tools.config.read_context, tools.remote.inventory.read_hosts.)"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bot.config.reader import Reader
from tools.api import ToolConfigError, ToolContext
from tools.config import read_context
from tools.remote.inventory import Host, HostsConfigError, SshSettings, read_hosts


def tool_context(table: Mapping[str, Any] | None = None, *, base_dir: Path | None = None) -> ToolContext:
    """The ToolContext the built-in tools get, from [tools.logs], [tools.journal], [tools.services],
    [tools.prometheus], [tools.http]."""
    config = Reader(table or {}, "tools", base_dir=base_dir)
    ctx = read_context(config)
    config.raise_if_problems(ToolConfigError)
    return ctx


def load_hosts(raw: Mapping[str, Any], *, base_dir: Path | None = None) -> tuple[SshSettings, tuple[Host, ...]]:
    """[ssh] and [[hosts]] from a parsed config file (other tables are ignored); HostsConfigError on problems.

    Relative key and known_hosts paths are relative to `base_dir` (default: the working directory); `~` works.
    """
    config = Reader(raw, base_dir=base_dir)
    found = read_hosts(config)
    config.raise_if_problems(HostsConfigError)
    return found
