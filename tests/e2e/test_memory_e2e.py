"""Incident memory end to end (docs/context.md, Incident memory): the real app against FakeSlack and FakeAnthropic.

Run A (web-03's /var full, `clean_logs` approved by carol) ends; run B ("web-03 /var is full again") starts: its
first model request carries the `[past incidents` block naming A, its thread shows one `Similar past incidents`
line (carol by display name, no mention), and its `search_incidents` call returns A first. A private channel's
incident reaches none of that from another channel. Every wait watches the fakes' state.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.test_slack_e2e import TASK, clean_logs_script
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, Message
from tests.support.harness import (
    CAROL,
    CHANNEL,
    PEOPLE,
    BotEnv,
    answered,
    bot_env,
    result_text,
    text_of,
    tool_results,
    user_turn,
)
from tools.memory import store as memory

MEMORY = "[memory]\nenabled = true\n"
FREED = "Freed 19.8 GB on web-03 (/var now 61%)."
B_TASK = "web-03 /var is full again"
B_ANSWER = "Same as last time: cleaned the rotated nginx logs again."
PRIVATE = "G0PRIVATE"


def b_script() -> list[object]:
    return [reply(tool_use("search_incidents", {"query": "web-03 var full"})), *answered(reply(text(B_ANSWER)))]


async def answer(env: BotEnv, channel: str, ts: str, said: str) -> Message:
    """The bot's message in the thread that holds `said` (not the offer's line, which comes first)."""
    return await env.slack.wait_for_message(
        channel, lambda m: m.thread_ts == ts and m.user == env.slack.bot_user_id and said in text_of(m), timeout=10.0
    )


async def run_a(env: BotEnv, channel: str) -> None:
    where, ts = await env.mention(TASK, channel=channel)
    card = await env.card(where, ts)
    await env.approve(card, CAROL)
    await answer(env, where, ts, "Freed 19.8 GB")


def offer_lines(env: BotEnv, channel: str, ts: str) -> list[str]:
    return [text_of(m) for m in env.thread(channel, ts) if "Similar past incidents" in text_of(m)]


async def test_the_repeat_incident_is_offered_in_the_first_turn_and_the_thread_and_found_first(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(*clean_logs_script(FREED), *b_script())
    async with bot_env(tmp_path, fake_slack, fake_anthropic, MEMORY) as env:
        await run_a(env, CHANNEL)
        (a,) = env.runs()
        channel, ts = await env.mention(B_TASK)
        await answer(env, channel, ts, B_ANSWER)

        requests = await env.requests(7)  # A's five (its answer twice: asked once for the summary), then B's
        first = json.dumps(user_turn(requests[5], 0))
        assert "[past incidents" in first and "web-03 is paging: disk full on /var" in first
        assert "clean_logs" in first and "approved by carol" in first
        assert "[past incidents" not in json.dumps(requests[5].body["system"])  # the cached prefix is untouched

        (line,) = offer_lines(env, channel, ts)
        assert "approved by carol" in line and "<@" not in line and CAROL not in line
        assert f"/archives/{CHANNEL}/p{a.thread_ts.replace('.', '')}" in line  # A's permalink
        assert "disk full on /var" in line

        (result,) = tool_results(requests[6])
        handle, _, found = result_text(result).partition("\n")
        assert handle == "#1 search_incidents web-03 var full"  # the handle line, then what the tool found
        assert found.splitlines()[1].startswith("- ") and "web-03 is paging: disk full" in found.splitlines()[1]
        assert B_TASK not in found  # B itself is not ended yet: not a match
        fake_anthropic.assert_complete()


async def test_a_private_channel_s_incident_reaches_no_other_channel(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.add_channel(PRIVATE, "secret-room", members=PEOPLE, kind="private_channel")
    fake_anthropic.script(*clean_logs_script(FREED), *b_script())
    async with bot_env(tmp_path, fake_slack, fake_anthropic, MEMORY) as env:
        await run_a(env, PRIVATE)
        (a,) = env.runs()
        with env.ledger() as ledger:
            assert memory.incident(ledger, a.id) is not None  # A is remembered, as private
            assert memory.incident(ledger, a.id).kind == "private"  # type: ignore[union-attr]
        channel, ts = await env.mention(B_TASK)
        await answer(env, channel, ts, B_ANSWER)

        requests = await env.requests(8)  # A's five (its answer twice: asked once for the summary), then B's
        seen = "".join(json.dumps(r.body) for r in requests[5:])
        assert "[past incidents" not in seen and "disk full on /var" not in seen and PRIVATE not in seen
        assert "No past incident matches" in result_text(tool_results(requests[6])[0])
        assert offer_lines(env, channel, ts) == []
        assert not any(
            "disk full on /var" in text_of(m) or PRIVATE in text_of(m) for m in env.thread(channel, ts) if m.ts != ts
        )
        fake_anthropic.assert_complete()
