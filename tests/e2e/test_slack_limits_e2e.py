"""End to end, what Slack takes: a message whose blocks hold more text in all than Slack accepts
(`msg_blocks_too_long`, FakeSlack refuses it over 12,000 characters as Slack does) is never sent, however long the
answer or a card's arguments; a run-start line with nothing to show is not posted; the past-incidents line is a
short list, a link per incident, and never offers an earlier run of the same thread.

The real app over Socket Mode against FakeSlack and FakeAnthropic (tests/support/harness.py); bot_env fails a test
in which Slack refused anything opsloop sent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import bot.app.settings
import tools.reaches
from bot.config.reader import Reader
from bot.playground.standin.blockkit import BLOCKS_TEXT_MAX as SLACK_BLOCKS_TEXT_MAX
from bot.playground.standin.blockkit import blocks_text_length as blocks_text
from handlers.blocks import APPROVE, DENY
from tests.e2e.test_slack_e2e import CLEAN, TASK, clean_logs_script
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, Message
from tests.support.harness import CAROL, CHANNEL, BotEnv, action_ids, bot_env, is_offer, text_of
from tools.api import Link, Offer, RunScope


def bot_messages(env: BotEnv, channel: str, ts: str) -> list[Message]:
    return [m for m in env.thread(channel, ts) if m.user == env.slack.bot_user_id and m.ts != ts]


async def test_a_long_answer_arrives_whole_in_messages_slack_takes(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    paragraphs = [f"Finding {n}: " + " ".join(f"log-{n}-{i}.gz" for i in range(200)) for n in range(15)]
    fake_anthropic.script(reply(text("\n\n".join(paragraphs))))  # about 40,000 characters
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        await fake_slack.wait_for_message(
            channel, lambda m: m.thread_ts == ts and "log-14-199.gz" in text_of(m), timeout=15.0
        )
        await env.wait_idle()
        shown = "\n".join(text_of(m) for m in bot_messages(env, channel, ts))
        assert all(f"log-{n}-{i}.gz" in shown for n in range(15) for i in (0, 199))
        assert all(blocks_text(m.blocks or []) <= SLACK_BLOCKS_TEXT_MAX for m in bot_messages(env, channel, ts))


async def test_a_card_with_arguments_longer_than_a_message_takes_is_posted_and_only_deny_is_offered(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    args = {**CLEAN, "path": "/var/log/" + "/".join(f"shard-{i:04}" for i in range(3000))}  # about 33,000
    fake_anthropic.script(reply(tool_use("clean_logs", args)), reply(text("Not cleaned: denied.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        assert blocks_text(card.blocks or []) <= SLACK_BLOCKS_TEXT_MAX
        assert action_ids(card) == [DENY] and "Approve is not offered" in text_of(card)
        await env.deny(card, CAROL)
        await env.wait_final(channel, ts)


async def test_a_card_whose_arguments_fit_shows_them_all_with_approve(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    args = {**CLEAN, "path": "/var/log/" + "/".join(f"shard-{i:04}" for i in range(700))}  # about 7,700
    fake_anthropic.script(reply(tool_use("clean_logs", args)), reply(text("Cleaned.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        assert action_ids(card) == [APPROVE, DENY] and "Approve is not offered" not in text_of(card)
        assert "shard-0699" in text_of(card)
        await env.approve(card, CAROL)
        await env.wait_final(channel, ts)


# --- the run-start line ----------------------------------------------------------------------------------------
class _Blank:
    """A reach whose run-start line is all empty parts (`[blank]` in the config)."""

    name, sections, hint, modules = "blank", ("blank",), "[blank]", ()

    def parse(self, config: Reader, env: Mapping[str, str]) -> Any | None:
        return {} if config.at("blank").is_table() else None

    def open(self, config: Any) -> Mapping[type, object]:
        return {}

    async def aclose(self, resources: Mapping[type, object]) -> None:
        return None

    async def check(self, config: Any) -> tuple[list[str], list[str]]:
        return [], []

    def bind_tools(self, config: Any, tools: list[Any]) -> list[Any]:
        return tools

    async def offer(self, config: Any, resources: Mapping[type, object], scope: RunScope) -> Offer:
        return Offer(source="blank", prompt="", thread_line=("", Link("https://wiki.example/x", ""), ""))


async def test_a_run_start_line_with_nothing_to_show_is_not_posted(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    reaches = (*tools.reaches.REACHES, _Blank())
    monkeypatch.setattr(tools.reaches, "REACHES", reaches)
    monkeypatch.setattr(bot.app.settings, "REACHES", reaches)
    fake_anthropic.script(reply(text("All good.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[blank]\n") as env:
        channel, ts = await env.mention(TASK)
        await env.wait_final(channel, ts)
        await env.wait_idle()
        assert [m for m in env.thread(channel, ts) if is_offer(m)] == []
        assert not [c for c in fake_slack.calls if c.method == "chat.postMessage" and not c.args.get("text")]


# --- the past-incidents line -----------------------------------------------------------------------------------
MEMORY = "[memory]\nenabled = true\n"


async def test_past_incidents_are_a_short_list_a_link_each_and_never_an_earlier_run_of_the_same_thread(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        *clean_logs_script("Freed 19.8 GB on web-03."),  # run A, in its own thread
        reply(text("web-03 /var is fine now.")),  # run B: A is offered
        reply(text("Still fine.")),  # run C, a second run in B's thread: A is offered, B is not
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, MEMORY) as env:
        channel, a_ts = await env.mention(TASK)
        await env.approve(await env.card(channel, a_ts), CAROL)
        await env.wait_final(channel, a_ts)
        channel, b_ts = await env.mention("web-03 disk full on /var again")
        await env.wait_final(channel, b_ts)
        await env.wait_idle()
        (line,) = [m for m in env.thread(channel, b_ts) if is_offer(m)]
        (section,) = line.blocks or []
        a_link = f"/archives/{CHANNEL}/p{a_ts.replace('.', '')}"
        head, *items = section["text"]["text"].split("\n")
        assert head == "Similar past incidents:"
        assert len(items) == 1 and a_link in items[0]
        assert re.fullmatch(
            r"• <https?://[^|<>]+\|\d{4}-\d\d-\d\d [^<>]*disk full[^<>]*> — clean_logs, approved by carol", items[0]
        )

        await env.mention("web-03 disk full on /var once more", thread_ts=b_ts)
        await fake_slack.wait_for_message(channel, lambda m: m.thread_ts == b_ts and "Still fine." in m.text)
        await env.wait_idle()
        offers = [text_of(m) for m in env.thread(channel, b_ts) if is_offer(m)]
        assert len(offers) == 2 and a_link in offers[1]
        assert f"p{b_ts.replace('.', '')}" not in offers[1]  # B, an earlier run of this thread, is not offered
