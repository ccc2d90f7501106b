"""A reach is a plug-in: one backend opsloop can reach (SSH hosts, Kubernetes clusters, ...), with its config
section, its tool modules, its `opsloop check` and the live resources its tools look up in their context.

A new reach is its own folder exporting one `REACH` (an instance of a `Reach` subclass), plus one line in
tools/reaches.py (see CONTRIBUTING.md). This module imports only the core layer: the tool API never knows any
backend.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from bot.config.reader import Check, Reader, read


class Reach:
    """What every reach offers, with the defaults most reaches keep; `config` is what `parse` returned (plain,
    picklable data), `resources` what `open` returned (live clients and pools, keyed by their type: a tool asks
    `ctx.resource(KubeClusters)`)."""

    name: str  # short, as settings and messages name it: "ssh", "kubernetes"
    sections: tuple[str, ...]  # the top-level config tables it owns: ("ssh", "hosts")
    hint: str  # how its section is written, for messages: "[[kubernetes.clusters]]"
    modules: tuple[str, ...]  # tool modules offered whenever its section is present (listing them stays accepted)
    settings: type | None = None  # the dataclass its first section is read into (bot.config.reader.read)
    # True when `check` reads only the configuration and local files (runbook directories, git repositories on disk,
    # a token variable): its problems then stop `opsloop run` as they fail `opsloop check` (bot.app.startup). False:
    # `check` connects to a backend, and only `opsloop check` runs it.
    check_stops_run: bool = False

    def parse(self, config: Reader, env: Mapping[str, str]) -> Any | None:
        """Its sections read from the whole config (`config.at(section)`), every problem recorded on `config`;
        None when none of its sections is present. By default: its first section read into `settings`."""
        if self.settings is None or not config.has(self.sections[0]):
            return None
        return read(self.settings, config.at(self.sections[0]))

    def open(self, config: Any) -> Mapping[type, object]:
        """The resources its tools get in their ToolContext; nothing connects until a tool needs it. By default:
        its config itself, found by its type."""
        return {type(config): config}

    async def aclose(self, resources: Mapping[type, object]) -> None:
        """Close what `open` made (with the registry); by default there is nothing to close."""
        return None

    async def check(self, config: Any) -> tuple[list[str], list[str]]:
        """`opsloop check`: the lines to print and the problems found (connecting, bounded in time)."""
        raise NotImplementedError

    # Optional: `async def offer(self, config, resources, scope: RunScope) -> Offer | None`: what the reach offers
    # a run at its start (tools.api.Offer); build_registry collects it from every configured reach that has one.
    # Optional: `def services(self, config, resources) -> list[tools.api.Service]`: what it runs beside the runs (a
    # webhook, a retention sweep), with the app's shared resources (its Store; absent in `opsloop check` and
    # replay, where a reach runs nothing); collected in `registry.services`, started and closed by the app.
    # Optional: `def environment(self, config) -> list[str]`: what a run can reach through it, as a few lines of
    # names from its config (hosts, clusters and their namespaces, directories, change sources), each list bounded
    # (tools.api.some_names); no connection. Collected in `registry.environment`; the run layer writes them into
    # the run's first turn, never the system prompt. They are configuration: data, never instructions.

    def bind_tools(self, config: Any, tools: Sequence[Any]) -> list[Any]:
        """The registry's tools as this reach wants them described (e.g. a small inventory's names listed); by
        default as they are."""
        return list(tools)


class Hidden(str):
    """A secret (a token, a passphrase) that never shows itself in a repr (as bot.config.settings.Secret, which
    this layer cannot import)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Secret('***')"


def secret(env: Mapping[str, str], name: str) -> Hidden | None:
    """The variable `name`'s value, stripped, hidden in a repr; None when unset or blank."""
    value = env.get(name, "").strip()
    return Hidden(value) if value else None


def unique_names(what: str) -> Check:
    """A setting's check on a `[[table]]` list: a `name` given twice is a problem at the later entry's name
    (`changes.git[1].name: duplicate repository name 'x'`)."""

    def check(entries: tuple[Any, ...], r: Reader, key: str) -> tuple[Any, ...]:
        names = [e.get("name") if isinstance(e, Mapping) else None for e in r.table[key]]
        for i, name in enumerate(names):
            if isinstance(name, str) and name in names[:i]:
                r.problem(f"duplicate {what} name {name!r}", f"{key}[{i}].name")
        return entries

    return check


def matching(pattern: re.Pattern[str], what: str) -> Check:
    """A setting's check: the text when `pattern` matches all of it, else a problem ("'x' <what>") and None; on a
    list, each text so (a problem at its index, and it is left out)."""

    def check(text: Any, r: Reader, key: str) -> Any:
        if isinstance(text, tuple):
            return tuple(t for i, t in enumerate(text) if check(t, r, f"{key}[{i}]") is not None)
        if pattern.fullmatch(text):
            return text
        r.problem(f"{text!r} {what}", key)
        return None

    return check
