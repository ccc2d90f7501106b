"""Channels named `#incident` in the config: resolved to their ids at start-up (conversations.list, every page),
so the channel filter and the alert routes compare ids; an unknown name stops start-up in one line; a mention
the filter ignores is a warning the first time per channel."""

from __future__ import annotations

import pytest
import structlog

from bot.core.errors import ConfigError
from tests.e2e.test_alerts_slack_e2e import ALERT, SENDER, post_incoming
from tests.support.fakes.anthropic import reply, text
from tests.support.harness import ALICE, CHANNEL, bot_env


async def test_a_channel_given_by_name_is_where_the_bot_answers(tmp_path, fake_slack, fake_anthropic):
    for n in range(250):  # more than one page of conversations.list before the incident channel
        fake_slack.add_channel(f"C0FILL{n:04d}", f"fill-{n:04d}")
    fake_slack.add_channel(CHANNEL, "incident", members=[ALICE])
    fake_anthropic.script(reply(text("web-03: /var is full of rotated logs.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, '[slack]\nchannels = ["#incident"]\n') as env:
        assert env.ops.settings.channels == (CHANNEL,)
        _, ts = await env.mention("web-03 is out of disk", channel=CHANNEL)
        final = await env.wait_final(CHANNEL, ts)
        assert "rotated logs" in (final.text or "")
    pages = [c for c in fake_slack.calls if c.method == "conversations.list"]
    assert len(pages) == 2


async def test_an_alert_channel_given_by_name_starts_runs_from_its_alerts(tmp_path, fake_slack, fake_anthropic):
    fake_slack.add_channel("C0ALERTS", "alerts")
    fake_anthropic.script(reply(text("Looked at it: /var on web-03 is full.")))
    config = f'[[alerts.slack]]\nchannel = "#alerts"\nsenders = ["{SENDER}"]\nmatch = "FIRING"\n'
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        assert [s.channel for s in env.ops.settings.alerts["slack"]] == ["C0ALERTS"]
        await post_incoming(fake_slack.add_incoming_webhook("C0ALERTS", bot_id=SENDER), ALERT)
        await fake_slack._wait(
            lambda: [m.ts for m in fake_slack.messages["C0ALERTS"] if m.bot_id == SENDER] or None, 5.0, lambda: "alert"
        )
        [ts] = [m.ts for m in fake_slack.messages["C0ALERTS"] if m.bot_id == SENDER]
        final = await env.wait_final("C0ALERTS", ts)
        assert "/var on web-03 is full" in (final.text or "")


async def test_an_unknown_channel_name_stops_start_up_in_one_line(tmp_path, fake_slack, fake_anthropic):
    with pytest.raises(ConfigError) as e:
        async with bot_env(tmp_path, fake_slack, fake_anthropic, '[slack]\nchannels = ["#incident", "#nope"]\n'):
            pass
    assert e.value.problems == [
        "slack.channels: no channel #nope that the bot can see (misspelt, archived, or private without the bot)"
    ]


async def test_a_mention_outside_the_configured_channels_is_a_warning_once_per_channel(
    tmp_path, fake_slack, fake_anthropic
):
    fake_slack.add_channel("C0ELSEWHERE", "elsewhere", members=[ALICE])
    async with bot_env(tmp_path, fake_slack, fake_anthropic, f'[slack]\nchannels = ["{CHANNEL}"]\n') as env:
        with structlog.testing.capture_logs() as logs:
            for n in range(2):
                await env.mention(f"web-03 is out of disk ({n})", channel="C0ELSEWHERE")
            await env.wait_idle()
        ignored = [(e["log_level"], e["channel"]) for e in logs if e["event"] == "event.ignored_channel"]
        assert ignored == [("warning", "C0ELSEWHERE"), ("info", "C0ELSEWHERE")]
        assert env.runs() == []
