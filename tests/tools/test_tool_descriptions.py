"""Every tool's description is usable on its own: what it does, what it returns, its limits, when to use it.

Anthropic's guidance for tool use asks for three or four sentences; the Messages API sets no hard limit on a
description, but every tool's is sent in every request, so each stays under DESCRIPTION_MAX characters."""

from __future__ import annotations

import importlib
import re

import pytest

import tools.builtin
from bot.run.summary import DESCRIPTION as SUMMARY_DESCRIPTION
from bot.run.summary import TOOL_NAME as SUMMARY_TOOL
from tools.commands import CommandParam, RunbookCommand, command_tool
from tools.config import module_tools
from tools.reaches import REACHES
from tools.registry import Category

DESCRIPTION_MAX = 1_500
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")


def every_description() -> dict[str, str]:
    """Each tool opsloop registers, by name: the built-ins, every reach's, a runbook command and update_summary."""
    found = {t.name: t.description for t in module_tools(tools.builtin)}
    for reach in REACHES:
        for module in reach.modules:
            found.update({t.name: t.description for t in module_tools(importlib.import_module(module))})
    command = RunbookCommand(
        name="flush_cache",
        description="Flush the web cache.",
        argv=("cachectl", "flush", "{zone}"),
        params={"zone": CommandParam(pattern="[a-z]+")},
        category=Category.MUTATING,
    )
    found[command.name] = command_tool(command).description
    found[SUMMARY_TOOL] = SUMMARY_DESCRIPTION
    return found


def sentences(text: str) -> int:
    return len(_SENTENCE_END.findall(text.strip()))


DESCRIPTIONS = every_description()


@pytest.mark.parametrize("name", sorted(DESCRIPTIONS))
def test_every_tool_says_what_it_returns_in_three_sentences_at_least(name: str) -> None:
    description = DESCRIPTIONS[name]
    assert sentences(description) >= 3, f"{name}: {description!r}"
    assert "returns" in description.lower(), f"{name}: {description!r}"
    assert len(description) <= DESCRIPTION_MAX, f"{name}: {len(description)} characters"


def test_the_description_test_sees_every_reach_and_the_runtime_tools() -> None:
    assert {"check_disk", "k8s_get", "k8s_scale", "recent_changes", "search_incidents", "read_runbook"} <= set(
        DESCRIPTIONS
    )
    assert {"flush_cache", SUMMARY_TOOL} <= set(DESCRIPTIONS)


def test_a_runbook_commands_description_says_what_it_returns_and_its_limits() -> None:
    assert DESCRIPTIONS["flush_cache"] == (
        "Flush the web cache.\n\nRuns `cachectl flush {zone}` without a shell; each parameter must match its "
        "pattern. Returns the exit code, the command line and its stdout and stderr, each cut to 5,500 "
        "characters (head and tail kept). It is killed after 60 s and needs a person's approval."
    )
