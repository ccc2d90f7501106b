"""End to end through the real bolt app: what a start-up and its first burst of mentions cost at Slack (one
auth.test, one connection pool), against the stand-in."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import bot_env

TASK = "web-03 is paging: disk full on /var, please look"


async def test_a_burst_of_mentions_right_after_start_up_calls_auth_test_only_at_start_up(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    burst = 8
    fake_anthropic.script(*(reply(text(f"answer {i}")) for i in range(burst)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        mentions = await asyncio.gather(*(env.mention(f"{TASK} ({i})") for i in range(burst)))
        for channel, ts in mentions:
            await env.wait_final(channel, ts)
    # bolt's authorization was handed the start-up answer: it never asked again, per envelope or at all.
    assert len(fake_slack.calls_to("auth.test")) == 1


async def test_a_runs_slack_calls_share_a_few_connections(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        *(reply(tool_use("list_large_files", {"host": f"web-0{i}", "path": "/var"})) for i in range(4)),
        reply(text("Nothing large.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        await env.wait_final(channel, ts)
        web_calls = [c for c in fake_slack.calls if c.method != "apps.connections.open"]
        peers = {c.peer for c in web_calls}
    assert all(peers)
    assert len(web_calls) >= 8
    # One TCP connection per call was the old cost.
    assert len(peers) <= len(web_calls) // 3, (len(peers), len(web_calls))
