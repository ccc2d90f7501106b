"""Config: every key optional, every problem reported with its location, secrets never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app.settings import load_settings
from bot.config.settings import ConfigError, Settings, missing_for_run
from bot.core.pricing import PRICES, Price, price_for
from bot.core.types import Usage


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "opsloop.toml"
    path.write_text(text)
    return path


def test_no_file_gives_the_documented_defaults():
    s = load_settings(None, env={})
    assert (
        s.model.primary,
        s.model.fallbacks,
        s.limits.max_iterations,
        s.limits.deadline_seconds,
        s.limits.token_budget,
        s.limits.cost_budget_usd,
        s.approvals.expire_minutes,
        s.db_path,
        s.slack_api_url,
        dict(s.tools),
    ) == (
        "claude-sonnet-5-5",
        ("claude-haiku-5-5",),
        20,
        3600.0,
        500_000,
        5.0,
        30.0,
        "opsloop.db",
        "https://slack.com/api/",
        {"modules": ["tools.builtin"]},
    )


def test_the_design_example_loads(tmp_path):
    s = load_settings(
        write(
            tmp_path,
            """
[model]
primary = "claude-sonnet-4-5"
fallbacks = ["claude-haiku-4-5"]
max_tokens = 4096
[limits]
max_iterations = 20
deadline_seconds = 3600
token_budget = 500000
cost_budget_usd = 5.0
[slack]
channels = ["C1"]
[approvals]
approvers = ["U1", "S2"]
destructive_approvers = ["U1"]
allow_self_approval = false
expire_minutes = 30
[tools]
modules = ["tools.builtin"]
""",
        ),
        env={},
    )
    assert (s.channels, s.approvals.who_may_approve("mutating"), s.approvals.who_may_approve("destructive")) == (
        ("C1",),
        ("U1", "S2"),
        ("U1",),
    )


def test_every_problem_is_reported_with_its_location(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_settings(
            write(
                tmp_path,
                """
[limits]
max_iterations = "twenty"
max_iteration = 3
[approvals]
approvers = ["bob"]
allow_self_approval = "yes"
[oops]
x = 1
""",
            ),
            env={},
        )
    assert e.value.problems == [
        "oops: unknown section (known: alerts, approvals, changes, hosts, kubernetes, limits, log, memory, model, "
        "pagerduty, runbooks, slack, ssh, store, tools)",
        "limits.max_iteration: unknown key (known: cost_budget_usd, deadline_seconds, max_consecutive_errors, "
        "max_iterations, parallelism, token_budget)",
        "limits.max_iterations: expected an integer, got a string",
        "approvals.approvers: 'bob' is neither a user id (U…/W…) nor a user group (S…)",
        "approvals.allow_self_approval: expected true or false, got a string",
    ]


def test_invalid_toml_is_one_clear_line(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_settings(write(tmp_path, "[limits\n"), env={})
    assert len(e.value.problems) == 1 and "invalid TOML" in e.value.problems[0]


def test_environment_supplies_secrets_and_endpoints_and_hides_them():
    s = load_settings(
        None,
        env={
            "SLACK_BOT_TOKEN": "xoxb-1-2-abc",
            "SLACK_API_URL": "http://127.0.0.1:9/api/",
            "OPSLOOP_DB": "/tmp/x.db",
            "ANTHROPIC_API_KEY": "sk-ant-abc",
        },
    )
    assert (s.slack_api_url, s.db_path, str(s.slack_bot_token)) == (
        "http://127.0.0.1:9/api/",
        "/tmp/x.db",
        "xoxb-1-2-abc",
    )
    assert "xoxb" not in repr(s) and "sk-ant" not in repr(s)


def test_run_needs_tokens_one_line_each():
    assert missing_for_run(load_settings(None, env={})) == [
        "SLACK_BOT_TOKEN is not set (the bot token, xoxb-…)",
        "set SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode)",
        "ANTHROPIC_API_KEY is not set",
    ]
    ok = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1", "ANTHROPIC_API_KEY": "sk-ant-1"}
    assert missing_for_run(load_settings(None, env=ok)) == []


def test_price_overrides_and_unknown_models_are_never_free(tmp_path):
    s = load_settings(write(tmp_path, '[model.prices."my-model"]\ninput = 1.0\noutput = 2.0\n'), env={})
    assert price_for("my-model", s.model.prices) == (Price(input=1.0, output=2.0), True)
    price, known = price_for("claude-unreleased-9")
    assert (known, price) == (False, max(PRICES.values(), key=lambda p: (p.output, p.input)))
    assert price_for("claude-opus-4-5-20251101")[0] == Price(input=5.0, output=25.0)  # longest prefix wins


def test_thinking_defaults_for_an_incident():
    s = load_settings(None, env={})
    assert (s.model.effort, s.model.thinking_display, s.model.max_tokens) == ("medium", "summarized", 16_000)


def test_effort_and_display_are_checked(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_settings(write(tmp_path, '[model]\neffort = "extreme"\nthinking_display = "full"\n'), env={})
    assert e.value.problems == [
        "model.effort: 'extreme' is not one of low, medium, high, xhigh, max",
        "model.thinking_display: 'full' is not one of summarized, omitted",
    ]


@pytest.mark.parametrize(
    "key",
    ["max_iterations", "deadline_seconds", "token_budget", "cost_budget_usd", "max_consecutive_errors", "parallelism"],
)
def test_limits_of_zero_are_refused(tmp_path, key):
    """`parallelism = 0` would hang every parallel batch forever; 0 budgets would stop every run at once."""
    with pytest.raises(ConfigError) as e:
        load_settings(write(tmp_path, f"[limits]\n{key} = 0\n"), env={})
    assert e.value.problems == [f"limits.{key}: must be greater than 0, got 0"]


def test_current_models_are_priced_with_their_own_cache_prices():
    sonnet = price_for("claude-sonnet-5-5")[0]
    usage = Usage(
        input_tokens=1_000_000, output_tokens=1_000_000, cache_read_tokens=1_000_000, cache_write_tokens=1_000_000
    )
    assert sonnet.cost(usage) == pytest.approx(2.0 + 10.0 + 0.10 + 2.50)
    assert price_for("claude-opus-5-5")[0].cost(usage) == pytest.approx(4.0 + 20.0 + 0.20 + 5.0)
    assert price_for("claude-fable-5-2")[0].cost(usage) == pytest.approx(8.0 + 40.0 + 0.20 + 10.0)


def test_haiku_5_5_is_priced_by_prompt_size():
    haiku = price_for("claude-haiku-5-5")[0]
    small = Usage(input_tokens=60_000, cache_read_tokens=40_000, output_tokens=1_000)  # 100K prompt: lower tier
    big = Usage(input_tokens=60_001, cache_read_tokens=40_000, output_tokens=1_000)  # past 100K: upper tier
    assert haiku.cost(small) == pytest.approx((60_000 * 0.10 + 40_000 * 0.01 + 1_000 * 0.50) / 1e6)
    assert haiku.cost(big) == pytest.approx((60_001 * 0.50 + 40_000 * 0.05 + 1_000 * 2.50) / 1e6)


def test_price_overrides_take_cache_prices(tmp_path):
    s = load_settings(
        write(tmp_path, '[model.prices."my-model"]\ninput = 1.0\noutput = 2.0\ncache_read = 0.01\n'), env={}
    )
    assert s.model.prices["my-model"] == Price(input=1.0, output=2.0, cache_read=0.01)


def test_four_eyes_on_mutating_and_allow_self_approval_are_refused_together(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_settings(
            write(tmp_path, "[approvals]\nfour_eyes_on_mutating = true\nallow_self_approval = true\n"), env={}
        )
    assert e.value.problems == [
        "approvals: four_eyes_on_mutating and allow_self_approval contradict each other (a second person for "
        "mutating calls, but not for destructive ones): set one"
    ]


def test_no_file_and_no_environment_is_exactly_the_dataclass_defaults():
    assert load_settings(None, env={}) == Settings()
