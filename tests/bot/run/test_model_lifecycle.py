"""opsloop owns its model lifecycle: current, deprecated (a warning) and retired (a start-up error), each with
its end of life and replacement, from its own table beside the prices. The SDK's private deprecation table
may add dates; nothing breaks when it is renamed, emptied or reshaped."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import date
from pathlib import Path

import anthropic._data
import pytest

from bot.app.settings import load_settings
from bot.config.settings import missing_for_run
from bot.core.pricing import LIFECYCLE, PRICES, Lifecycle, Status, lifecycle, model_problems, sdk_deprecations

ROOT = Path(__file__).resolve().parents[3]
DEC_1 = date(2026, 12, 1)


def test_a_current_model_is_current():
    assert lifecycle("claude-sonnet-5-5", today=DEC_1) == Lifecycle(status=Status.CURRENT)


def test_a_deprecated_model_names_its_end_of_life_and_replacement():
    assert lifecycle("claude-opus-4-5-20251101", today=DEC_1) == Lifecycle(
        status=Status.DEPRECATED, end_of_life=date(2027, 1, 22), replacement="claude-opus-5-5"
    )


def test_a_deprecated_model_is_retired_from_its_end_of_life_on_without_an_edit():
    assert lifecycle("claude-sonnet-4-5", today=date(2026, 11, 29)).status is Status.DEPRECATED
    assert lifecycle("claude-sonnet-4-5", today=date(2026, 11, 30)).status is Status.RETIRED
    assert lifecycle("claude-sonnet-4-5-20250929", today=DEC_1) == Lifecycle(
        status=Status.RETIRED, end_of_life=date(2026, 11, 30), replacement="claude-sonnet-5-5"
    )


def test_a_retired_family_member_says_nothing_about_its_siblings():
    assert lifecycle("claude-sonnet-4", today=DEC_1).status is Status.RETIRED
    assert lifecycle("claude-sonnet-4-6", today=DEC_1, sdk_table={}).status is Status.CURRENT


def test_every_model_in_the_lifecycle_table_has_a_price_and_a_priced_replacement():
    for model, life in LIFECYCLE.items():
        if model != "claude-mythos-preview":  # retired before opsloop priced it
            assert any(model.startswith(p) for p in PRICES), model
        assert life.replacement in PRICES, model


def test_model_problems_are_errors_for_retired_and_warnings_for_deprecated():
    errors, warnings = model_problems(["claude-sonnet-4-5", "claude-opus-4-5", "claude-haiku-5-5"], today=DEC_1)
    assert errors == [
        "model claude-sonnet-4-5 is retired (since 2026-11-30); replace it with claude-sonnet-5-5 in [model]"
    ]
    assert warnings == [
        "model claude-opus-4-5 is deprecated and retires on 2027-01-22; replace it with claude-opus-5-5 in [model]"
    ]


def test_the_sdk_table_adds_a_model_opsloop_does_not_list():
    table = {"claude-opus-4-6": "March 3rd, 2027"}
    assert lifecycle("claude-opus-4-6", today=DEC_1, sdk_table=table) == Lifecycle(
        status=Status.DEPRECATED, end_of_life=date(2027, 3, 3), replacement="claude-opus-5-5"
    )
    assert lifecycle("claude-opus-4-6", today=date(2027, 3, 3), sdk_table=table).status is Status.RETIRED


def test_the_sdk_table_never_overrides_opsloops_own():
    table = {"claude-sonnet-4-5": "December 31st, 2099", "claude-sonnet-5-5": "January 1st, 2000"}
    assert lifecycle("claude-sonnet-4-5", today=DEC_1, sdk_table=table).status is Status.RETIRED
    assert lifecycle("claude-sonnet-5-5", today=DEC_1, sdk_table={}).status is Status.CURRENT


def test_an_unparseable_sdk_date_is_ignored():
    assert lifecycle("claude-opus-4-6", today=DEC_1, sdk_table={"claude-opus-4-6": "soon-ish"}).status is Status.CURRENT


def test_an_sdk_without_its_private_table_breaks_nothing(monkeypatch):
    monkeypatch.delattr(anthropic._data, "DEPRECATED_MODELS")  # renamed or removed in a new SDK
    assert sdk_deprecations() == {}
    assert lifecycle("claude-sonnet-4-5", today=DEC_1).status is Status.RETIRED
    assert lifecycle("claude-opus-4-5", today=DEC_1).status is Status.DEPRECATED


def test_an_sdk_without_its_private_module_breaks_nothing(monkeypatch):
    monkeypatch.setitem(sys.modules, "anthropic._data", None)  # the module itself is gone: import fails
    assert sdk_deprecations() == {}
    assert model_problems(["claude-sonnet-4-5"], today=DEC_1)[0] != []


@pytest.mark.parametrize("table", [{}, [], None, "not a table"])
def test_an_sdk_whose_private_table_is_empty_or_reshaped_breaks_nothing(monkeypatch, table):
    monkeypatch.setattr(anthropic._data, "DEPRECATED_MODELS", table)
    assert sdk_deprecations() == {}
    assert lifecycle("claude-opus-4-5", today=DEC_1).status is Status.DEPRECATED
    assert lifecycle("claude-haiku-5-5", today=DEC_1).status is Status.CURRENT


def test_a_retired_model_anywhere_in_the_chain_stops_run_from_starting():
    env = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1", "ANTHROPIC_API_KEY": "sk-ant-1"}
    settings = load_settings(None, env=env)
    assert missing_for_run(settings) == []
    import dataclasses

    retired = dataclasses.replace(settings, model=dataclasses.replace(settings.model, fallbacks=["claude-opus-4-1"]))
    assert missing_for_run(retired) == [
        "model claude-opus-4-1 is retired (since 2026-08-05); replace it with claude-opus-5-5 in [model]"
    ]


async def test_opsloop_run_refuses_a_retired_model_in_one_line(tmp_path):
    config = tmp_path / "opsloop.toml"
    config.write_text('[model]\nprimary = "claude-sonnet-4-5"\n')
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_", "OPSLOOP_"))},
        "SLACK_BOT_TOKEN": "xoxb-1",
        "SLACK_APP_TOKEN": "xapp-1",
        "ANTHROPIC_API_KEY": "sk-ant-1",
        "OPSLOOP_DB": str(tmp_path / "o.db"),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.app.cli",
        "run",
        "--config",
        str(config),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    logged = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    assert [e["event"] for e in logged] == ["config.loaded"]  # which config runs (a log line), then one problem
    assert [line for line in err.decode().splitlines() if not line.startswith("{")] == [
        "opsloop: model claude-sonnet-4-5 is retired (since 2026-11-30); replace it with claude-sonnet-5-5 in [model]"
    ]
