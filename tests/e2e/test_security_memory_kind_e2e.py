"""Security, fourth pass: incident memory follows a channel's kind as it is now, end to end through the real app
and the stand-in. A public channel made private keeps its incidents (earlier and new) out of other channels'
runs: not in their first turn, not in their thread line, not through search_incidents. A run's record takes
the kind Slack gives when the run ends, asked then (never a cached answer), and private when Slack can't say."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.test_slack_e2e import CLEAN
from tests.support import harness
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import (
    BOB,
    PEOPLE,
    BotEnv,
    bot_env,
    result_text,
    text_of,
    tool_results,
    user_turn,
)
from tools.memory import store as memory

MEMORY = "[memory]\nenabled = true\n"
ROOM = "C0PAYROLL"  # public when the story starts
A_TASK = "payroll-db on web-03: /var disk full"
A_ANSWER = "Rotated the payroll-db export logs on web-03."
B_TASK = "payroll-db on web-03: /var disk full again"
B_ANSWER = "Moved the payroll-db salary exports off /var."
C_TASK = "web-03 /var disk full"
C_ANSWER = "Nothing like this before."


async def answered(env: BotEnv, channel: str, ts: str, said: str) -> None:
    """The bot's answer holding `said` is in the thread: the run ended, and its record was written with the end."""
    await env.slack.wait_for_message(
        channel, lambda m: m.thread_ts == ts and m.user == env.slack.bot_user_id and said in text_of(m), timeout=10.0
    )


def kinds(env: BotEnv) -> dict[str, str]:
    """Each remembered run's task -> the kind its record is offered as."""
    with env.ledger() as ledger:
        out = {}
        for run in ledger.list_runs():
            if (found := memory.incident(ledger, run.id)) is not None:
                out[run.task] = found.kind
        return out


async def run_in_public_channel_sees_nothing_of(env: BotEnv, *leaks: str) -> None:
    """A run in CHANNEL (public) whose task matches the room's incidents: no offer, no line, no search hit."""
    channel, ts = await env.mention(C_TASK)
    await answered(env, channel, ts, C_ANSWER)
    first, second, again = env.model.requests[-3:]  # again: the answer once more, asked once for the summary
    seen = json.dumps(user_turn(first, 0)) + json.dumps(second.body) + json.dumps(again.body)
    assert "[past incidents" not in json.dumps(user_turn(first, 0))
    for leak in (*leaks, ROOM):
        assert leak not in seen
        assert not any(leak in text_of(m) for m in env.thread(channel, ts) if m.ts != ts)
    assert "No past incident matches" in result_text(tool_results(second)[0])
    assert not [m for m in env.thread(channel, ts) if "Similar past incidents" in text_of(m)]


def c_script() -> list[object]:
    return [
        reply(tool_use("search_incidents", {"query": "web-03 var disk full"})),
        *harness.answered(reply(text(C_ANSWER))),
    ]


async def test_a_channel_made_private_keeps_its_new_and_earlier_incidents_from_other_channels(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.add_channel(ROOM, "payroll-ops", members=PEOPLE)
    fake_anthropic.script(reply(text(A_ANSWER)), reply(text(B_ANSWER)), *c_script())
    async with bot_env(tmp_path, fake_slack, fake_anthropic, MEMORY) as env:
        _, a = await env.mention(A_TASK, channel=ROOM)
        await answered(env, ROOM, a, A_ANSWER)
        assert kinds(env) == {A_TASK: "public"}

        fake_slack.set_kind(ROOM, "private_channel")  # within the minute the bot's answer may be cached for
        _, b = await env.mention(B_TASK, channel=ROOM)
        await answered(env, ROOM, b, B_ANSWER)
        assert kinds(env) == {A_TASK: "private", B_TASK: "private"}  # B's end asked Slack afresh

        await run_in_public_channel_sees_nothing_of(env, "payroll", "salary", "export logs")
        fake_anthropic.assert_complete()


async def test_a_run_whose_end_slack_cant_place_is_remembered_as_private(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.add_channel(ROOM, "payroll-ops", members=PEOPLE)
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)), *harness.answered(reply(text(A_ANSWER))), *c_script())
    async with bot_env(tmp_path, fake_slack, fake_anthropic, MEMORY) as env:
        _, a = await env.mention(A_TASK, channel=ROOM)
        card = await env.card(ROOM, a)  # the run's start heard "public" from Slack
        fake_slack.fail_next("conversations.info", "missing_scope")  # ... and its end hears nothing
        await env.approve(card, BOB)
        await answered(env, ROOM, a, A_ANSWER)
        assert kinds(env) == {A_TASK: "private"}
        await run_in_public_channel_sees_nothing_of(env, "payroll", "export logs")
        fake_anthropic.assert_complete()


async def test_a_run_starting_in_a_channel_made_private_narrows_its_records_at_once(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.add_channel(ROOM, "payroll-ops", members=PEOPLE)
    fake_anthropic.script(reply(text(A_ANSWER)), reply(tool_use("clean_logs", CLEAN)), *c_script())
    async with bot_env(tmp_path, fake_slack, fake_anthropic, MEMORY) as env:
        _, a = await env.mention(A_TASK, channel=ROOM)
        await answered(env, ROOM, a, A_ANSWER)
        fake_slack.set_kind(ROOM, "private_channel")
        await env.restart()  # a new process: nothing cached
        _, b = await env.mention(B_TASK, channel=ROOM)
        await env.card(ROOM, b)  # B waits for an approval: it has started, it has not ended
        assert kinds(env) == {A_TASK: "private"}
        await run_in_public_channel_sees_nothing_of(env, "payroll", "export logs")
        fake_anthropic.assert_complete()
