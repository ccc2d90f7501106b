"""End to end, a click belongs to its card: Approve/Deny count only from the message that approval's card was
posted as, and Stop only from the message that run's status line was posted as.

The button value alone (an approval id, a run id) is no proof: it is no secret, and a bug in rendering could put
one on the wrong message. The real opsloop app over Socket Mode against FakeSlack and FakeAnthropic
(tests/support/harness.py); forged clicks are block_actions payloads built by hand. alice starts runs; bob and carol are
on call. One behaviour per test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog
from slack_sdk.web.async_client import AsyncWebClient

from handlers import messages
from handlers.blocks import APPROVE, DENY, STOP
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, Message, block_action_payload, next_ts
from tests.support.harness import ALICE, BOB, CAROL, CHANNEL, BotEnv, bot_env, card_state, is_card, text_of
from tests.support.incident_tools import Execution, ran

TASK = "web-03 is paging: nginx is down, please fix"
RESTART = {"host": "web-03", "unit": "nginx.service"}
RESTART_04 = {"host": "web-04", "unit": "nginx.service"}
OTHER_CHANNEL = "C0RANDOM"


def forged(
    user: str, channel: str, msg: Message | None, action_id: str, value: str, *, ts: str | None = None
) -> dict[str, Any]:
    """A click payload carrying `value` on `msg` (as Slack would render `msg`), whatever buttons `msg` has."""
    message = msg.to_api() if msg is not None else None
    return block_action_payload(
        user, channel, ts or (msg.ts if msg else next_ts()), action_id, value, message=message, user_name=user.lower()
    )


def approval_id(env: BotEnv, thread_ts: str) -> str:
    (entry,) = [e for e in env.audit() if e.approval.thread_ts == thread_ts]
    return entry.approval.id


def run_id(env: BotEnv, thread_ts: str) -> str:
    (run,) = [r for r in env.runs() if r.thread_ts == thread_ts]
    return run.id


def refusals(logs: list[MutableMapping[str, Any]], event: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == event and e["log_level"] == "warning"]


async def two_pending_cards(env: BotEnv) -> tuple[tuple[str, Message], tuple[str, Message]]:
    """Two incidents in two threads, each paused on its own approval card: ((thread, card), (thread, card))."""
    channel, a = await env.mention(TASK)
    card_a = await env.card(channel, a)
    _, b = await env.mention("web-04 is paging too: nginx is down")
    card_b = await env.card(channel, b)
    return (a, card_a), (b, card_b)


def script_two_restarts(model: FakeAnthropic) -> None:
    model.script(
        reply(tool_use("restart_service", RESTART)),
        reply(tool_use("restart_service", RESTART_04)),
        reply(text("nginx restarted.")),
        reply(text("nginx restarted.")),
    )


# --------------------------------------------------------------------------------------
# the click that still works
# --------------------------------------------------------------------------------------


async def test_a_click_on_the_card_decides_it_without_asking_slack_anything(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("nginx restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        looked = len(fake_slack.calls_to("conversations.replies"))
        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        assert ran("restart_service") == [Execution("restart_service", RESTART, BOB)]
        assert card_state(card) == "approved" and fake_slack.ephemerals == []
        assert len(fake_slack.calls_to("conversations.replies")) == looked  # the card on record: no lookup


# --------------------------------------------------------------------------------------
# forged Approve/Deny clicks
# --------------------------------------------------------------------------------------


async def test_a_click_on_another_threads_card_carrying_this_approvals_id_changes_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    script_two_restarts(fake_anthropic)
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        (a, card_a), (_, card_b) = await two_pending_cards(env)
        with structlog.testing.capture_logs() as logs:
            await fake_slack.send_interactive(forged(BOB, CHANNEL, card_b, APPROVE, approval_id(env, a)))
            assert (await env.wait_ephemeral(BOB))["text"] == messages.CLICK_NOT_ON_ITS_CARD
            await env.wait_idle()
        assert [card_state(card_a), card_state(card_b)] == ["pending", "pending"]
        assert (card_a.edited, card_b.edited) == (None, None)
        assert [e.approval.state for e in env.audit()] == ["pending", "pending"] and ran("restart_service") == []
        (warning,) = refusals(logs, "approval.click_refused")
        assert {k: warning[k] for k in ("approval_id", "user", "channel", "ts")} == {
            "approval_id": approval_id(env, a),
            "user": BOB,
            "channel": CHANNEL,
            "ts": card_b.ts,
        }

        await env.approve(card_a, BOB)  # the real card still works
        await env.wait_final(CHANNEL, a)
        assert ran("restart_service") == [Execution("restart_service", RESTART, BOB)]
        assert card_state(card_b) == "pending"


async def test_a_deny_from_a_message_in_another_channel_changes_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("nginx restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        elsewhere = fake_slack.add_message(OTHER_CHANNEL, CAROL, "lunch?", ts=card.ts)  # even under the same ts
        await fake_slack.send_interactive(forged(CAROL, OTHER_CHANNEL, elsewhere, DENY, approval_id(env, ts)))
        assert (await env.wait_ephemeral(CAROL))["text"] == messages.CLICK_NOT_ON_ITS_CARD
        await env.wait_idle()
        assert card_state(card) == "pending" and env.audit()[0].approval.state == "pending"
        assert fake_slack.message(OTHER_CHANNEL, elsewhere.ts) == elsewhere and elsewhere.edited is None

        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        assert ran("restart_service") == [Execution("restart_service", RESTART, BOB)]


async def test_a_click_for_a_decided_approval_never_rewrites_another_card(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    script_two_restarts(fake_anthropic)
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        (a, card_a), (b, card_b) = await two_pending_cards(env)
        await env.approve(card_a, BOB)
        await env.wait_final(CHANNEL, a)
        await env.wait_idle()

        await fake_slack.send_interactive(forged(CAROL, CHANNEL, card_b, APPROVE, approval_id(env, a)))
        assert (await env.wait_ephemeral(CAROL))["text"] == messages.CLICK_NOT_ON_ITS_CARD
        await env.wait_idle()
        assert card_state(card_b) == "pending" and card_b.edited is None
        assert [c for c in fake_slack.calls_to("chat.update") if c.args["ts"] == card_b.ts] == []

        await env.approve(card_b, BOB)  # b's own card still decides b
        await env.wait_final(CHANNEL, b)
        assert ran("restart_service") == [
            Execution("restart_service", RESTART, BOB),
            Execution("restart_service", RESTART_04, BOB),
        ]


async def test_a_click_on_another_message_of_the_same_thread_changes_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(text("Restarting nginx."), tool_use("restart_service", RESTART)), reply(text("nginx restarted."))
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        status = await env.status(channel, ts)  # the bot's own message, in the same thread: still not the card
        await fake_slack.send_interactive(forged(BOB, channel, status, APPROVE, approval_id(env, ts)))
        assert (await env.wait_ephemeral(BOB))["text"] == messages.CLICK_NOT_ON_ITS_CARD
        await env.wait_idle()
        assert card_state(card) == "pending" and ran("restart_service") == []
        assert "approval_header" not in str(fake_slack.message(channel, status.ts).blocks)  # type: ignore[union-attr]


async def test_a_copy_of_the_card_the_outbox_never_posted_changes_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("nginx restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        # The bot's own message with the card's very blocks, but not a post of the card's outbox item (no metadata):
        # what a rendering bug would produce.
        client = AsyncWebClient(token=fake_slack.bot_token, base_url=fake_slack.api_url)
        copy = (await client.chat_postMessage(channel=channel, thread_ts=ts, text=card.text, blocks=card.blocks))["ts"]
        await env.approve(fake_slack.message(channel, copy), BOB)  # type: ignore[arg-type]
        assert (await env.wait_ephemeral(BOB))["text"] == messages.CLICK_NOT_ON_ITS_CARD
        await env.wait_idle()
        assert card_state(card) == "pending" and ran("restart_service") == []


@pytest.mark.parametrize(
    "strip",
    [("container", "message"), ("container", "message", "channel")],
    ids=["no-message", "no-message-no-channel"],
)
async def test_a_click_that_names_no_message_changes_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, strip: tuple[str, ...]
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("nginx restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        payload = forged(BOB, channel, card, APPROVE, approval_id(env, ts))
        for key in strip:
            del payload[key]
        with structlog.testing.capture_logs() as logs:
            await fake_slack.send_interactive(payload)
            if "channel" not in strip:  # somewhere to answer
                assert (await env.wait_ephemeral(BOB))["text"] == messages.CLICK_NOT_ON_ITS_CARD
            await env.wait_idle()
        assert len(refusals(logs, "approval.click_refused")) == 1
        assert card_state(card) == "pending" and env.audit()[0].approval.state == "pending"
        assert ran("restart_service") == []

        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        assert ran("restart_service") == [Execution("restart_service", RESTART, BOB)]


# --------------------------------------------------------------------------------------
# crash recovery: a copy of the card the outbox did post still counts
# --------------------------------------------------------------------------------------


def lose_the_first_card_response(slack: FakeSlack, then: Callable[[], None]) -> list[Message]:
    """The card's first chat.postMessage reaches Slack, but the bot gets a 500 (as when it dies mid-call): the
    message is in the thread, carrying the outbox's metadata, with its ts known to nobody. `then` runs right after.
    Returns the list the lost copy is put in."""
    lost: list[Message] = []
    armed = failed = False

    def watch() -> None:
        nonlocal armed, failed
        posts = slack.calls_to("chat.postMessage")
        if not armed and any(c.ok and "status" in str(c.args.get("blocks")) for c in posts):
            armed = True  # the next post is the card
            slack.fail_next("chat.postMessage", "internal_error")
        card_post = next((c for c in posts if c.error == "internal_error"), None)
        if armed and not failed and card_post is not None:
            failed = True
            msg = Message(
                channel=card_post.args["channel"],
                ts=next_ts(),
                text=card_post.args["text"],
                user=slack.bot_user_id,
                bot_id=slack.bot_id,
                thread_ts=card_post.args["thread_ts"],
                blocks=card_post.args["blocks"],
                team=slack.team_id,
                metadata=card_post.args["metadata"],
            )
            lost.append(msg)
            slack._add_message(msg)
            then()

    slack.watch(watch)
    return lost


@pytest.mark.slow
async def test_a_click_on_an_unrecorded_copy_the_outbox_posted_decides_and_closes_both_cards(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("nginx restarted.")))
    # The sender's look for its earlier attempt misses it (a non-transient answer), so it posts the card again.
    lost = lose_the_first_card_response(
        fake_slack, lambda: fake_slack.fail_next("conversations.replies", "thread_not_found")
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        recorded = await env.card(channel, ts, where=lambda m: bool(lost) and m.ts != lost[0].ts)
        async with asyncio.timeout(5):
            await env.ops.outbox.settle()  # the second post's ts is on record
        (copy,) = lost
        assert [m.ts for m in env.cards(channel, ts)] == [copy.ts, recorded.ts]
        assert env.audit()[0].approval.message_ts == recorded.ts

        await env.approve(copy, BOB)
        await env.wait_final(channel, ts)
        assert ran("restart_service") == [Execution("restart_service", RESTART, BOB)]
        await env.card(channel, ts, state="approved")
        await fake_slack.wait_for_message(channel, lambda m: m.ts == copy.ts and card_state(m) == "approved")
        assert [card_state(m) for m in env.cards(channel, ts)] == ["approved", "approved"]
        assert not [e for e in fake_slack.ephemerals if e["user"] == BOB]


async def test_a_click_on_the_card_before_its_ts_is_recorded_decides_it(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("nginx restarted.")))
    # The sender's look for its earlier attempt is rate limited for 30 s: no ts on record meanwhile.
    lost = lose_the_first_card_response(
        fake_slack, lambda: fake_slack.fail_next("conversations.replies", "ratelimited", retry_after=30)
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        await fake_slack.wait_for_call("conversations.replies", lambda c: c.error == "ratelimited")
        (card,) = lost
        assert env.cards(channel, ts) == [card] and env.audit()[0].approval.message_ts is None

        await env.approve(card, BOB)
        await fake_anthropic.wait_for_requests(2)  # the run went on: the call ran with bob's consent
        assert ran("restart_service") == [Execution("restart_service", RESTART, BOB)]
        (entry,) = env.audit()
        assert (entry.approval.state, entry.approval.decided_by, entry.approval.message_ts) == (
            "approved",
            BOB,
            card.ts,
        )
        assert not [e for e in fake_slack.ephemerals if e["user"] == BOB]


@pytest.mark.slow
async def test_a_click_on_an_unrecorded_copy_slack_could_not_show_changes_nothing_until_clicked_again(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("nginx restarted.")))
    lost = lose_the_first_card_response(
        fake_slack, lambda: fake_slack.fail_next("conversations.replies", "thread_not_found")
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        await env.card(channel, ts, where=lambda m: bool(lost) and m.ts != lost[0].ts)
        (copy,) = lost
        fake_slack.fail_next("conversations.replies", "internal_error")  # the check of the clicked copy fails
        await env.approve(copy, BOB)
        assert (await env.wait_ephemeral(BOB))["text"] == messages.CARD_NOT_CHECKED
        await env.wait_idle()
        assert env.audit()[0].approval.state == "pending" and ran("restart_service") == []

        await env.approve(copy, BOB)  # Slack answers this time
        await env.wait_final(channel, ts)
        assert ran("restart_service") == [Execution("restart_service", RESTART, BOB)]


# --------------------------------------------------------------------------------------
# Stop
# --------------------------------------------------------------------------------------


async def test_a_stop_from_another_threads_status_line_does_not_stop_this_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    script_two_restarts(fake_anthropic)
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        (a, card_a), (b, _) = await two_pending_cards(env)
        status_a, status_b = await env.status(CHANNEL, a), await env.status(CHANNEL, b)
        with structlog.testing.capture_logs() as logs:
            await fake_slack.send_interactive(forged(ALICE, CHANNEL, status_b, STOP, run_id(env, a)))
            assert (await env.wait_ephemeral(ALICE))["text"] == messages.STOP_NOT_ON_ITS_STATUS
            await env.wait_idle()
        assert [r.status for r in env.runs()] == ["waiting_approval", "waiting_approval"]
        assert [r.stop_requested_by for r in env.runs()] == [None, None] and card_state(card_a) == "pending"
        (warning,) = refusals(logs, "stop.click_refused")
        assert {k: warning[k] for k in ("run_id", "user", "channel", "ts")} == {
            "run_id": run_id(env, a),
            "user": ALICE,
            "channel": CHANNEL,
            "ts": status_b.ts,
        }

        await env.stop(status_a, ALICE)  # the run's own Stop still stops it
        report = text_of(await env.wait_final(CHANNEL, a))
        assert "cancelled" in report and card_state(card_a) == "superseded"
        assert {r.thread_ts: r.status for r in env.runs()} == {a: "finished", b: "waiting_approval"}


async def test_a_stop_that_names_no_message_does_not_stop_the_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("nginx restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        payload = forged(ALICE, channel, await env.status(channel, ts), STOP, run_id(env, ts))
        del payload["container"], payload["message"]
        await fake_slack.send_interactive(payload)
        assert (await env.wait_ephemeral(ALICE))["text"] == messages.STOP_NOT_ON_ITS_STATUS
        await env.wait_idle()
        assert [r.status for r in env.runs()] == ["waiting_approval"] and card_state(card) == "pending"
        assert sum(1 for m in env.thread(channel, ts) if is_card(m)) == 1


async def test_a_stop_on_a_status_line_whose_ts_was_never_stored_stops_the_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("nginx restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        status = await env.status(channel, ts)
        # An earlier drive's status line: posted by the bot in this thread, its ts never stored (the process died).
        client = AsyncWebClient(token=fake_slack.bot_token, base_url=fake_slack.api_url)
        orphan = (await client.chat_postMessage(channel=channel, thread_ts=ts, text=status.text, blocks=status.blocks))[
            "ts"
        ]
        await env.stop(fake_slack.message(channel, orphan), ALICE)  # type: ignore[arg-type]
        assert "cancelled" in text_of(await env.wait_final(channel, ts))
        assert card_state(card) == "superseded" and not fake_slack.ephemerals


async def test_a_stop_carrying_the_run_id_on_another_message_of_its_thread_does_not_stop_it(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("nginx restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)  # the bot's, in the thread, but with no Stop button naming the run
        await fake_slack.send_interactive(forged(ALICE, channel, card, STOP, run_id(env, ts)))
        assert (await env.wait_ephemeral(ALICE))["text"] == messages.STOP_NOT_ON_ITS_STATUS
        await env.wait_idle()
        assert [r.status for r in env.runs()] == ["waiting_approval"] and card_state(card) == "pending"
