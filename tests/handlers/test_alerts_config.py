"""[[alerts.slack]] and [alerts.webhook]: loading (every problem named, RE2 regexes), and `opsloop check`
(the token variable, each alert channel exists with the bot in it) against FakeSlack."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app.check import check
from bot.app.settings import load_settings
from bot.config.settings import ConfigError
from tests.bot.app.test_check import env_for
from tests.support.fakes.anthropic import reply, text

GOOD = """
[[alerts.slack]]
channel = "C0INCIDENT"
senders = ["B0ALERTMGR"]
match = "FIRING|CRITICAL"
ignore = "RESOLVED"

[alerts.webhook]
listen = "127.0.0.1:9095"
token_env = "OPSLOOP_ALERT_TOKEN"
channel = "C0OTHER"
max_runs_per_10_min = 4
"""


def test_the_contracts_example_loads(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(GOOD)
    s = load_settings(tmp_path / "c.toml", env={"OPSLOOP_ALERT_TOKEN": "t0ken"})
    [source] = s.alerts["slack"]
    assert (source.channel, source.senders, source.match, source.ignore) == (
        "C0INCIDENT",
        ("B0ALERTMGR",),
        "FIRING|CRITICAL",
        "RESOLVED",
    )
    assert s.alerts["webhook"] is not None
    wh = s.alerts["webhook"]
    assert (wh.host, wh.port, wh.max_runs_per_10_min) == ("127.0.0.1", 9095, 4)
    assert wh.reopen_after_s == 5 * 3600  # reopen_after_minutes' default: 300
    assert s.alerts["webhook"].token == "t0ken" and "t0ken" not in repr(s.alerts["webhook"])


def test_bad_alert_config_names_every_problem(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text("""
[[alerts.slack]]
channel = "C1"
senders = ["U0PERSON"]
match = "(a)\\\\1"
ignore = "(?<=x)y"
colour = "red"

[alerts.webhook]
listen = "nowhere"
channel = ""
reopen_after_minutes = -5
""")
    with pytest.raises(ConfigError) as e:
        load_settings(tmp_path / "c.toml", env={})
    said = "\n".join(e.value.problems)
    for part in (
        "senders: 'U0PERSON' is neither",
        "match: invalid regular expression",
        "ignore: invalid regular",
        "colour: unknown key",
        'listen: expected "host:port"',
        "alerts.webhook.channel: required",
        "alerts.webhook.reopen_after_minutes: ",
    ):
        assert part in said, said


async def test_check_validates_the_alert_token_and_channels(fake_slack, fake_anthropic, tmp_path, capsys) -> None:
    fake_anthropic.script(reply(text("pong")), reply(text("pong")))
    fake_slack.add_channel("C0INCIDENT", "incident")
    fake_slack.add_channel("C0OTHER", "other", is_member=False)
    (tmp_path / "c.toml").write_text(GOOD.replace(":9095", ":0") + "\n[model]\nfallbacks = []\n")
    assert await check(load_settings(tmp_path / "c.toml", env=env_for(fake_slack, fake_anthropic))) == 2
    err = capsys.readouterr().err
    assert "OPSLOOP_ALERT_TOKEN is not set" in err
    assert "channel C0OTHER (#other): the bot is not in it" in err
    assert "C0INCIDENT" not in err


def test_reopen_after_minutes_is_read_in_minutes(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(GOOD + "reopen_after_minutes = 90\n")
    s = load_settings(tmp_path / "c.toml", env={"OPSLOOP_ALERT_TOKEN": "t0ken"})
    assert s.alerts["webhook"] is not None and s.alerts["webhook"].reopen_after_s == 90 * 60
