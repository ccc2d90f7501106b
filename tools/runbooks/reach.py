"""The runbooks reach: `[runbooks] dirs` read (paths relative to the config file), one RunbookLibrary for the
tools and the run-start offer, and the `opsloop check` listing of every runbook with what it matches."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bot.config.reader import Reader, setting
from tools.api import Offer, RunScope, some_names
from tools.reach import Reach
from tools.runbooks.library import Runbook, RunbookLibrary, backticked_tools
from tools.runbooks.match import best
from tools.runbooks.offer import offer_block, thread_line


def _some(dirs: tuple[Path, ...], r: Reader, key: str) -> tuple[Path, ...] | None:
    if not dirs:
        r.problem("must list at least one directory", key)
    return dirs or None


@dataclass(frozen=True)
class RunbookDirs:
    """[runbooks]: what the reach read."""

    dirs: tuple[Path, ...] = setting(
        doc="the directories the runbooks (*.md) are loaded from, absolute or relative to the config file",
        why=" (the directories of the team's runbooks, *.md)",
        check=_some,
    )


class RunbooksReach(Reach):
    name: str = "runbooks"
    sections: tuple[str, ...] = ("runbooks",)
    hint: str = "[runbooks] dirs"
    modules: tuple[str, ...] = ("tools.runbooks.tools",)
    settings = RunbookDirs
    check_stops_run: bool = True  # its check reads only local files: a problem stops `opsloop run` too

    def open(self, config: RunbookDirs) -> Mapping[type, object]:
        return {RunbookLibrary: RunbookLibrary(config.dirs)}

    async def offer(self, config: RunbookDirs, resources: Mapping[type, object], scope: RunScope) -> Offer | None:
        """The best match for the run (its alert's name and labels, keywords in its task), as the team's runbook in
        the first turn and `Following runbook: <title> (N steps)` in the thread; None when none matches."""
        library = resources.get(RunbookLibrary)
        if not isinstance(library, RunbookLibrary):
            return None
        runbooks = await asyncio.to_thread(library.current)
        found = best(runbooks, text=scope.task, alertname=scope.alertname, labels=scope.labels)
        if found is None:
            return None
        return Offer(source=self.name, prompt=offer_block(found), thread_line=(thread_line(found.runbook),))

    def environment(self, config: RunbookDirs) -> list[str]:
        return [f"Runbook directories (find_runbooks, read_runbook): {some_names([str(d) for d in config.dirs])}"]

    async def check(self, config: RunbookDirs) -> tuple[list[str], list[str]]:
        """One line per runbook (name, title, steps, what it matches); a broken file is one problem line."""
        runbooks = await asyncio.to_thread(RunbookLibrary(config.dirs).current)
        where = ", ".join(str(d) for d in config.dirs)
        lines = [f"runbooks: {len(runbooks.runbooks)} loaded from {where}"]
        lines += [f"  {rb.name}: {rb.title} ({rb.steps} steps) matches {matches(rb)}" for rb in runbooks.runbooks]
        return lines, [f"runbooks: {p}" for p in runbooks.problems]

    async def warnings(self, config: RunbookDirs, tool_names: Iterable[str]) -> list[str]:
        """A backticked tool name in a runbook's steps that no registry has (a typo, or a tool not configured)."""
        runbooks = await asyncio.to_thread(RunbookLibrary(config.dirs).current)
        known = set(tool_names)
        unknown = [(rb.path, sorted(backticked_tools(rb) - known)) for rb in runbooks.runbooks]
        return [
            f"runbooks: {path}: names tool(s) no registry has: {', '.join(names)}" for path, names in unknown if names
        ]


def matches(rb: Runbook) -> str:
    """What a runbook matches, as `opsloop check` says it: `alertname DiskFull|X; labels team=web; keywords ...`."""
    rule = rb.match
    parts = {
        "alertname ": " | ".join(rule.alertnames),
        "labels ": ", ".join(f"{k}={v}" for k, v in rule.labels),
        "keywords ": ", ".join(repr(k) for k in rule.keywords),
    }
    return "; ".join(what + said for what, said in parts.items() if said)


REACH = RunbooksReach()
