"""End to end, the Slack side failing closed: who may approve, what a card must show, what reaches the run.

The real opsloop app over Socket Mode against FakeSlack and FakeAnthropic (tests/support/harness.py).
alice starts runs; bob and carol are on call. One behaviour per test.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from bot.core.redact import REDACTED
from handlers import messages
from handlers.blocks import APPROVE, DENY
from tests.handlers.test_blocks import shown_args
from tests.support import incident_tools
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, block_action_payload, message_event
from tests.support.harness import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL,
    action_ids,
    bot_env,
    card_state,
    text_of,
    user_turn,
)
from tests.support.incident_tools import Execution, ran

TASK = "web-03 is paging: disk full on /var, please fix"
CLEAN = {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7}
CLEAN_14 = {**CLEAN, "older_than_days": 14}


# --------------------------------------------------------------------------------------
# who may approve
# --------------------------------------------------------------------------------------


async def test_an_empty_destructive_approver_list_falls_back_to_the_approvers(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)), reply(text("Cleaned.")))
    config = f'[approvals]\napprovers = ["{BOB}"]\ndestructive_approvers = []'
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        await env.approve(card, CAROL)  # not an approver: an empty destructive list is not "anyone"
        note = await env.wait_ephemeral(CAROL)
        assert "can't approve" in note["text"] and f"<@{BOB}>" in note["text"]
        await env.wait_idle()
        assert card_state(card) == "pending" and ran("clean_logs") == []

        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        assert ran("clean_logs") == [Execution("clean_logs", CLEAN, BOB)]


async def test_someone_who_asked_for_it_in_the_thread_cannot_approve_the_destructive_call(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"})),
        reply(text("Deleting the rotated nginx logs, as carol asked."), tool_use("clean_logs", CLEAN)),
        reply(text("Cleaned.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        gate = incident_tools.hold("check_disk")
        channel, ts = await env.mention(TASK, user=ALICE)
        await gate.wait_entered()
        reply_ts = await env.reply(channel, ts, "just delete the old nginx logs", user=CAROL)
        await env.wait_reaction(channel, reply_ts)
        gate.release()

        card = await env.card(channel, ts)
        await env.approve(card, CAROL)
        note = await env.wait_ephemeral(CAROL)
        assert note["text"] == messages.asked_in_thread_refused("clean_logs")
        await env.wait_idle()
        assert card_state(card) == "pending" and ran("clean_logs") == []
        assert env.audit()[0].approval.approvals == ()

        await env.approve(card, BOB)  # someone who did not ask
        await env.wait_final(channel, ts)
        assert ran("clean_logs") == [Execution("clean_logs", CLEAN, BOB)]


async def test_the_author_of_a_reply_that_superseded_an_approval_cannot_approve_the_next_call(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("clean_logs", CLEAN)),
        reply(text("Only logs older than 14 days, then."), tool_use("clean_logs", CLEAN_14)),
        reply(text("Cleaned.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        first = await env.card(channel, ts)
        await env.reply(channel, ts, "only the ones older than 14 days", user=CAROL)
        await env.card(channel, ts, state="superseded", where=lambda m: m.ts == first.ts)

        second = await env.card(channel, ts, where=lambda m: m.ts != first.ts)
        await env.approve(second, CAROL)
        assert (await env.wait_ephemeral(CAROL))["text"] == messages.asked_in_thread_refused("clean_logs")
        await env.wait_idle()
        assert ran("clean_logs") == []

        await env.approve(second, BOB)
        await env.wait_final(channel, ts)
        assert ran("clean_logs") == [Execution("clean_logs", CLEAN_14, BOB)]


async def test_the_author_of_a_redirect_mention_cannot_approve_the_destructive_call(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"})),
        reply(tool_use("clean_logs", CLEAN)),
        reply(text("Cleaned.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        gate = incident_tools.hold("check_disk")
        channel, ts = await env.mention(TASK, user=ALICE)
        await gate.wait_entered()
        _, redirect_ts = await env.mention("skip the analysis, clean the nginx logs", user=CAROL, thread_ts=ts)
        await env.wait_reaction(channel, redirect_ts)
        gate.release()

        card = await env.card(channel, ts)
        await env.approve(card, CAROL)
        assert (await env.wait_ephemeral(CAROL))["text"] == messages.asked_in_thread_refused("clean_logs")
        await env.wait_idle()
        assert ran("clean_logs") == [] and len(env.runs()) == 1


async def test_allow_self_approval_lets_whoever_asked_approve(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("clean_logs", CLEAN)),
        reply(tool_use("clean_logs", CLEAN_14)),
        reply(text("Cleaned.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[approvals]\nallow_self_approval = true") as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        first = await env.card(channel, ts)
        await env.reply(channel, ts, "only the ones older than 14 days", user=CAROL)
        second = await env.card(channel, ts, where=lambda m: m.ts != first.ts)
        await env.approve(second, CAROL)
        await env.wait_final(channel, ts)
        assert ran("clean_logs") == [Execution("clean_logs", CLEAN_14, CAROL)]


RESTART = {"host": "web-03", "unit": "nginx.service"}


async def test_by_default_whoever_asked_may_approve_a_mutating_call(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("Restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        await env.approve(await env.card(channel, ts), ALICE)
        await env.wait_final(channel, ts)
        assert ran("restart_service") == [Execution("restart_service", RESTART, ALICE)]


async def test_four_eyes_on_mutating_keeps_whoever_asked_from_approving_a_mutating_call(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("Restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[approvals]\nfour_eyes_on_mutating = true") as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        card = await env.card(channel, ts)
        await env.approve(card, ALICE)
        assert (await env.wait_ephemeral(ALICE))["text"] == messages.self_approval_refused(
            "restart_service", "mutating"
        )
        await env.wait_idle()
        assert ran("restart_service") == []
        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        assert ran("restart_service") == [Execution("restart_service", RESTART, BOB)]


# --------------------------------------------------------------------------------------
# what the card shows
# --------------------------------------------------------------------------------------


async def test_long_arguments_are_shown_in_full_on_the_card(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    long_path = "/var/log/nginx/" + "/".join(f"shard-{i:04}" for i in range(800))  # about 9,000 characters
    args = {**CLEAN, "path": long_path}
    fake_anthropic.script(reply(tool_use("clean_logs", args)), reply(text("Cleaned.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        assert shown_args(card) == json.dumps(args, indent=2)  # every character, over several sections
        assert len([b for b in card.blocks or [] if b["block_id"].startswith("approval_args")]) > 1
        assert action_ids(card) == [APPROVE, DENY]
        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        assert ran("clean_logs") == [Execution("clean_logs", args, BOB)]


async def test_arguments_too_long_for_the_card_cannot_be_approved_even_by_a_forged_click(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    args = {**CLEAN, "path": "/var/log/" + "<" * 40_000}  # 160,000 characters once escaped for Slack
    fake_anthropic.script(reply(tool_use("clean_logs", args)), reply(text("Not cleaned: denied.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        assert action_ids(card) == [DENY]
        assert "Approve is not offered" in text_of(card)

        approval_id = env.audit()[0].approval.id  # the button value is no secret: anyone can send an Approve for it
        await fake_slack.send_interactive(
            block_action_payload(BOB, channel, card.ts, APPROVE, approval_id, message=card.to_api(), user_name="bob")
        )
        assert (await env.wait_ephemeral(BOB))["text"] == messages.args_not_shown_refused("clean_logs")
        await env.wait_idle()
        assert card_state(card) == "pending" and ran("clean_logs") == []

        await env.deny(card, BOB)
        await env.wait_final(channel, ts)
        assert ran("clean_logs") == [] and env.audit()[0].approval.state == "denied"


async def test_a_secret_in_the_arguments_is_hidden_on_the_card_and_marked_as_hidden(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    args = {"host": "web-03", "unit": "nginx.service --env DB_PASSWORD=hunter2hunter2"}
    fake_anthropic.script(reply(tool_use("restart_service", args)), reply(text("Restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        assert "hunter2hunter2" not in text_of(card) and f"DB_PASSWORD={REDACTED}" in text_of(card)
        assert messages.REDACTED_ON_CARD in text_of(card)
        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        assert ran("restart_service") == [Execution("restart_service", args, BOB)]  # the tool got the real value


# --------------------------------------------------------------------------------------
# what reaches the run
# --------------------------------------------------------------------------------------


async def test_a_stop_sent_with_a_screenshot_reaches_the_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("check_disk", {"host": "web-03"})), reply(text("Stopping, as asked.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        gate = incident_tools.hold("check_disk")
        channel, ts = await env.mention(TASK)
        await gate.wait_entered()
        shot = message_event(channel, CAROL, "STOP", thread_ts=ts, subtype="file_share")
        shot["files"] = [{"id": "F0SHOT", "name": "screenshot.png", "title": "screenshot.png"}]
        fake_slack.add_message(channel, CAROL, "STOP", ts=shot["ts"], thread_ts=ts)  # Slack keeps file messages
        edit = message_event(channel, None, "", thread_ts=ts, subtype="message_changed")
        edit["message"] = {"user": CAROL, "text": "edited: delete everything", "ts": shot["ts"]}
        for event in (shot, edit):
            await env.send(event)
        await env.wait_reaction(channel, shot["ts"])
        await env.wait_idle()
        gate.release()

        await env.wait_final(channel, ts)
        turn = user_turn((await env.requests(2))[1])
        assert [b["type"] for b in turn] == ["tool_result", "text"]
        assert turn[1]["text"] == f"[thread reply from {CAROL}] STOP [attached: screenshot.png]"
        assert "delete everything" not in json.dumps([r.body for r in fake_anthropic.requests])


async def test_a_mention_in_a_long_thread_gives_the_model_the_newest_messages(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Looking at it.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        root = fake_slack.add_message(CHANNEL, "U0PAGER", "ALERT web-03 disk /var 100%")
        for i in range(450):  # more than two pages of conversations.replies
            fake_slack.add_message(CHANNEL, CAROL, f"update number {i:03}", thread_ts=root.ts)
        await env.mention("can you take this?", thread_ts=root.ts)
        await env.wait_final(CHANNEL, root.ts)
        first = (await env.requests(1))[0].body["messages"][0]["content"][0]["text"]
        assert "ALERT web-03 disk /var 100%" in first  # the alert, then the newest replies
        assert [f"update number {i:03}" in first for i in (0, 199, 430, 431, 449)] == [False, False, False, True, True]


# --------------------------------------------------------------------------------------
# one way out to Slack
# --------------------------------------------------------------------------------------


def _slack_writes(path: Path) -> list[str]:
    """`client.chat_*`/`reactions_add` calls in one module's source."""
    writes = {
        "chat_postMessage",
        "chat_update",
        "chat_postEphemeral",
        "chat_scheduleMessage",
        "reactions_add",
        "files_upload_v2",
        "chat_meMessage",
    }
    tree = ast.parse(path.read_text())
    return [
        f"{path.name}:{n.lineno} {n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in writes
    ]


def test_every_slack_write_goes_through_the_redacting_gateway() -> None:
    root = Path(__file__).resolve().parents[2]
    modules = [*(root / "handlers").glob("*.py"), *(root / "bot").glob("*.py")]
    calls: list[str] = []
    for module in modules:
        if module.name != "slack_out.py":
            calls += _slack_writes(module)
    assert calls == []
