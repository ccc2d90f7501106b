"""One error base: every exception class opsloop defines derives from OpsloopError."""

from __future__ import annotations

import importlib
import inspect

from bot import OpsloopError
from bot.config.settings import ConfigError
from tests.test_imports import modules
from tools import PermissionDenied, ToolConfigError, ToolError

# The Slack stand-in's own error speaks for a fake Slack, not for opsloop.
NOT_OURS = {"bot.playground.standin.records._SlackError"}


def defined_errors() -> list[str]:
    found = []
    for name in sorted(modules()):
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found.append(f"{name}.{attr}")
    return found


def test_every_error_opsloop_defines_is_an_opsloop_error() -> None:
    errors = [e for e in defined_errors() if e not in NOT_OURS]
    assert len(errors) >= 15
    module_of = {e: e.rpartition(".")[0] for e in errors}
    stray = [
        e
        for e in errors
        if not issubclass(getattr(importlib.import_module(module_of[e]), e.rpartition(".")[2]), OpsloopError)
    ]
    assert stray == []


def test_the_tools_config_error_is_a_config_error_with_one_problem() -> None:
    e = ToolConfigError("tools.commands[0].name: must not be empty")
    assert (isinstance(e, ConfigError), e.problems, str(e)) == (
        True,
        ["tools.commands[0].name: must not be empty"],
        "tools.commands[0].name: must not be empty",
    )


def test_tool_errors_are_opsloop_errors() -> None:
    assert issubclass(ToolError, OpsloopError) and issubclass(PermissionDenied, OpsloopError)
