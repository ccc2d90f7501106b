"""The one base of every error opsloop raises on purpose, so a caller can catch "anything opsloop raised".

Imports nothing: every module of bot/, handlers/ and tools/ may derive from it. The errors themselves live
where they are raised (ToolError in tools.api, StoreUnavailable in bot.store, ...); config errors live here,
since the bot's config and the tools' config both raise them.
"""

from __future__ import annotations


class OpsloopError(Exception):
    """Something opsloop raised on purpose: a refused tool call, a store that stays down, a config problem, ..."""


class ConfigError(OpsloopError):
    """Every problem found, one per line, each with its location."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
