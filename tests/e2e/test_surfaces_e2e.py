"""End to end through the real bolt app: Slack's agent surfaces (the loading status under the thread, feedback
buttons, the message shortcut, App Home) against the stand-in, which implements each method as Slack does."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bot.core.types import FeedbackValue
from handlers import messages
from handlers.blocks import FEEDBACK, INVESTIGATE
from tests.support import incident_tools
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, app_home_opened_event
from tests.support.harness import ALICE, BOB, CAROL, bot_env, text_of

TASK = "web-03 is paging: disk full on /var, please fix"
CLEAN = {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7}
LISTING = "listing /var/log/nginx on web-03…"
ONCALL = "S0ONCALL"


def statuses(slack: FakeSlack) -> list[str]:
    return [str(c.args.get("status")) for c in slack.calls_to("assistant.threads.setStatus") if c.ok]


def feedback_block(msg) -> dict:
    return next(b for b in msg.blocks or [] if b.get("type") == "context_actions")


# --- loading status ----------------------------------------------------------------------------------------
@pytest.mark.slow
async def test_loading_status_is_refreshed_through_a_long_tool_call_and_cleared_when_the_run_answers(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.status_expiry_seconds = 0.6  # Slack's 2 minutes, shortened; the bot refreshes every 0.15 s
    fake_anthropic.script(
        reply(tool_use("list_large_files", {"host": "web-03", "path": "/var/log/nginx"})),
        reply(text("212 rotated nginx logs fill /var.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        gate = incident_tools.hold("list_large_files")
        env.ops.slack.loading_refresh_seconds = 0.15
        env.ops.slack.loading_show_after_seconds = 0.0
        env.ops.slack.loading_min_interval_seconds = 0.05
        channel, ts = await env.mention(TASK)
        await gate.wait_entered()
        began = time.monotonic()
        # A tool call three times as long as the status lives ("3 minutes" against Slack's 2): it stays up.
        await fake_slack._wait(
            lambda: (
                (
                    statuses(fake_slack).count(LISTING) >= 4
                    and time.monotonic() - began >= 3 * fake_slack.status_expiry_seconds
                )
                or None
            ),
            10.0,
            lambda: f"the status refreshed through the call: {statuses(fake_slack)}",
        )
        assert fake_slack.thread_status(channel, ts) == LISTING
        call = fake_slack.calls_to("assistant.threads.setStatus")[-1]
        assert (call.args["channel_id"], call.args["thread_ts"]) == (channel, ts)
        assert 0 < len(call.args["loading_messages"]) <= 10
        gate.release()
        final = await env.wait_final(channel, ts)
        assert "212 rotated nginx logs" in text_of(final)
        await fake_slack._wait(lambda: statuses(fake_slack)[-1:] == [""] or None, 5.0, lambda: "the status cleared")
        assert fake_slack.thread_status(channel, ts) is None
        assert fake_slack.status_lapses == []  # never dropped by Slack while the run worked
        assert statuses(fake_slack)[0] == messages.LOADING_THINKING
        assert await env.status(channel, ts)  # the status message with its Stop button is still there


async def test_a_fast_twenty_step_run_sends_far_fewer_loading_updates_than_steps(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    steps = [reply(tool_use("list_large_files", {"host": f"web-{i:02}", "path": "/var/log"})) for i in range(19)]
    fake_anthropic.script(*steps, reply(text("Nothing large anywhere.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:  # the shipped coalescing settings
        sup = env.ops.slack
        began = time.monotonic()
        channel, ts = await env.mention(TASK)
        await env.wait_final(channel, ts)
        elapsed = time.monotonic() - began
        calls = fake_slack.calls_to("assistant.threads.setStatus")
        # One update per step and per tool was 42; now at most one per interval, plus the first and the clear.
        assert len(calls) <= 2 + elapsed / sup.loading_min_interval_seconds, (elapsed, statuses(fake_slack))
        assert len(calls) < 42 // 4
        assert fake_slack.thread_status(channel, ts) is None
        assert statuses(fake_slack)[-1:] in ([], [""])


async def test_a_slow_steps_loading_status_is_still_shown_once_it_has_stood(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("list_large_files", {"host": "web-03", "path": "/var/log/nginx"})),
        reply(text("212 rotated nginx logs fill /var.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        env.ops.slack.loading_show_after_seconds = 0.2
        gate = incident_tools.hold("list_large_files")
        channel, ts = await env.mention(TASK)
        await gate.wait_entered()
        await fake_slack._wait(
            lambda: fake_slack.thread_status(channel, ts) == LISTING or None,
            10.0,
            lambda: f"the slow step's status: {statuses(fake_slack)}",
        )
        gate.release()
        await env.wait_final(channel, ts)
        await fake_slack._wait(lambda: statuses(fake_slack)[-1:] == [""] or None, 5.0, lambda: "the status cleared")
        assert statuses(fake_slack).count(LISTING) == 1  # set once: no refresh was due, nothing changed


async def test_loading_status_names_the_approver_while_the_run_waits(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)), reply(text("Freed 19.8 GB.")))
    fake_slack.add_usergroup(ONCALL, [BOB], handle="oncall")
    approvers = f'[approvals]\napprovers = ["{CAROL}", "{ONCALL}"]'
    async with bot_env(tmp_path, fake_slack, fake_anthropic, approvers) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        # Plain text renders no mention: the person by display name, the group by its handle, never an id.
        waiting = "waiting for approval from @carol, @oncall"
        await fake_slack._wait(
            lambda: fake_slack.thread_status(channel, ts) == waiting or None,
            5.0,
            lambda: f"the approval wait under the thread: {statuses(fake_slack)}",
        )
        # The task card's output is rich text: carol as a user element (a mention Slack renders), the group as
        # its handle (no raw <!subteam^…>, which rich text would show as written).
        status = await env.status(channel, ts)
        outputs = [t.get("output") for b in status.blocks or [] if b.get("type") == "plan" for t in b["tasks"]]
        assert {
            "type": "rich_text",
            "elements": [
                {
                    "type": "rich_text_section",
                    "elements": [
                        {"type": "text", "text": "waiting for approval from "},
                        {"type": "user", "user_id": CAROL},
                        {"type": "text", "text": ", @oncall"},
                    ],
                }
            ],
        } in outputs
        await env.approve(card, CAROL)
        await env.wait_final(channel, ts)
        await fake_slack._wait(lambda: statuses(fake_slack)[-1:] == [""] or None, 5.0, lambda: "the status cleared")
    sent = json.dumps([c.args for c in fake_slack.calls if c.method != "chat.postMessage"])
    assert "subteam" not in sent  # neither the status, the task list nor any update names the group raw
    # Cached: one look-up each, though the wait, the task list and carol's click all wanted her name.
    assert [c.args.get("user") for c in fake_slack.calls_to("users.info")] == [CAROL]
    assert len(fake_slack.calls_to("usergroups.list")) == 1


async def test_names_slack_cannot_give_are_shown_as_ids_and_change_nothing_else(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)), reply(text("Freed 19.8 GB.")))
    fake_slack.add_usergroup(ONCALL, [BOB], handle="oncall")
    fake_slack.fail_next("usergroups.list", "missing_scope")
    fake_slack.fail_next("users.info", "user_not_found")
    approvers = f'[approvals]\napprovers = ["{CAROL}", "{ONCALL}"]'
    async with bot_env(tmp_path, fake_slack, fake_anthropic, approvers) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        waiting = f"waiting for approval from @{CAROL}, @{ONCALL}"  # display only: the ids, not an error
        await fake_slack._wait(
            lambda: fake_slack.thread_status(channel, ts) == waiting or None,
            5.0,
            lambda: f"the approval wait under the thread: {statuses(fake_slack)}",
        )
        await env.approve(card, BOB)  # a member of the group: authorization never depended on its handle
        final = await env.wait_final(channel, ts)
        assert "Freed 19.8 GB" in text_of(final)


# --- feedback ------------------------------------------------------------------------------------------------
async def test_feedback_buttons_under_the_answer_record_a_click_after_a_restart(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Freed 19.8 GB on web-03.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        final = await env.wait_final(channel, ts)
        buttons = feedback_block(final)["elements"][0]
        assert (buttons["type"], buttons["action_id"]) == ("feedback_buttons", FEEDBACK)
        await env.restart()
        envelope = await fake_slack.feedback(BOB, channel, final.ts, positive=True)
        await fake_slack.wait_ack(envelope)
        await env.wait_idle()
        run = env.runs()[0]
        with env.ledger() as ledger:
            stored = ledger.feedback()
        assert [(f.run_id, f.user, f.value, f.message_ts) for f in stored] == [
            (run.id, BOB, FeedbackValue.POSITIVE, final.ts)
        ]
        assert abs(stored[0].at - time.time()) < 60


async def test_a_handoff_report_carries_feedback_buttons_and_a_redelivered_click_counts_once(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(*[reply(tool_use("check_disk", {"host": f"web-0{i}"})) for i in range(3)])
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[limits]\nmax_iterations = 2") as env:
        channel, ts = await env.mention(TASK)
        report = await env.wait_final(channel, ts)
        assert "iteration_limit" in text_of(report)
        envelope = await fake_slack.feedback(ALICE, channel, report.ts, positive=False)
        await fake_slack.wait_ack(envelope)
        payload = fake_slack.envelope(envelope)
        assert payload is not None
        await fake_slack.send_interactive(payload["payload"])  # Slack delivers the same click again
        await env.wait_idle()
        with env.ledger() as ledger:
            assert [(f.user, f.value) for f in ledger.feedback()] == [(ALICE, FeedbackValue.NEGATIVE)]
            assert ledger.feedback_counts() == {FeedbackValue.POSITIVE: 0, FeedbackValue.NEGATIVE: 1}


# --- the message shortcut -------------------------------------------------------------------------------------
async def test_the_shortcut_on_a_persons_message_starts_a_run_in_its_thread_for_the_clicker(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("nginx is out of worker connections.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        pasted = fake_slack.add_message(
            env.channel, ALICE, "2026-05-01 03:12 nginx: 768 worker_connections are not enough"
        )
        envelope = await fake_slack.shortcut(BOB, env.channel, pasted.ts, INVESTIGATE)
        await fake_slack.wait_ack(envelope)
        final = await env.wait_final(env.channel, pasted.ts)
        assert "worker connections" in text_of(final)
        [run] = env.runs()
        assert (run.requester, run.thread_ts, run.task) == (BOB, pasted.ts, pasted.text)
        first = (await env.requests(1))[0].body["messages"][0]["content"]
        assert pasted.text in str(first) and f"<@{BOB}>" in str(first)
        await env.wait_reaction(env.channel, pasted.ts)
        await fake_slack.send_interactive(fake_slack.envelope(envelope)["payload"])  # a redelivery
        await env.wait_idle()
        assert len(env.runs()) == 1


async def test_the_shortcut_on_a_bots_alert_starts_a_run_with_the_alert_as_the_task(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("The disk alert is real.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        alert = fake_slack.add_message(env.channel, "", "[FIRING:1] DiskFull web-03 /var 98%", bot_id="BALERTS")
        envelope = await fake_slack.shortcut(CAROL, env.channel, alert.ts, INVESTIGATE)
        await fake_slack.wait_ack(envelope)
        await env.wait_final(env.channel, alert.ts)
        [run] = env.runs()
        assert (run.requester, run.thread_ts, run.task) == (CAROL, alert.ts, alert.text)


# --- App Home --------------------------------------------------------------------------------------------------
def home_text(slack: FakeSlack, user: str) -> str:
    return "\n".join(text_of_blocks(slack.home_views[user]["blocks"]))


def text_of_blocks(blocks: list[dict]) -> list[str]:
    out = []
    for b in blocks:
        if isinstance(b.get("text"), dict):
            out.append(b["text"]["text"])
        out += [e["text"] for e in b.get("elements") or [] if isinstance(e, dict) and "text" in e]
    return out


async def test_app_home_shows_the_approval_to_an_approver_and_not_to_anyone_else(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, f'[approvals]\napprovers = ["{CAROL}"]') as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        for user in (CAROL, BOB):
            await env.send(app_home_opened_event(user))
            await fake_slack._wait(lambda u=user: fake_slack.home_views.get(u), 5.0, lambda: "the Home tab")
        carol, bob = home_text(fake_slack, CAROL), home_text(fake_slack, BOB)
        link = f"https://slack.com/archives/{channel}/p{ts.replace('.', '')}"
        assert link in carol and link in bob and "step" in bob  # the active run, with its thread link
        assert "`clean_logs`" in carol and f"p{card.ts.replace('.', '')}" in carol
        assert "`clean_logs`" not in bob and messages.HOME_NO_APPROVALS in bob


async def test_app_home_lists_finished_runs_with_their_stop_reasons(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("All good.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        await env.wait_final(channel, ts)
        await env.send(app_home_opened_event(BOB))
        await fake_slack._wait(lambda: fake_slack.home_views.get(BOB), 5.0, lambda: "the Home tab")
        shown = home_text(fake_slack, BOB)
        assert "`completed`" in shown and messages.HOME_NO_ACTIVE in shown


async def test_app_home_says_a_run_answered_after_a_failed_tool_call(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("list_large_files", {"host": "web-03", "path": "var/log"})),  # ToolError
        reply(text("I could not list the files.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        await env.wait_final(channel, ts)
        await env.send(app_home_opened_event(BOB))
        await fake_slack._wait(lambda: fake_slack.home_views.get(BOB), 5.0, lambda: "the Home tab")
        shown = home_text(fake_slack, BOB)
        assert "— `completed` after 1 failed tool call, $" in shown


async def test_app_home_links_never_wear_the_task_as_their_text(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    import re

    fake_anthropic.script(reply(text("All good.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention("status.example.com is down")  # a task that reads like a host name
        await env.wait_final(channel, ts)
        await env.send(app_home_opened_event(BOB))
        await fake_slack._wait(lambda: fake_slack.home_views.get(BOB), 5.0, lambda: "the Home tab")
        shown = home_text(fake_slack, BOB)
        labels = re.findall(r"<https?://[^|>]+\|([^>]*)>", shown)
        assert labels and set(labels) <= {"thread", "card"}
        assert "status.example.com is down (<https://slack.com/archives/" in shown


async def test_feedback_is_counted_in_metrics_and_shown_on_the_postmortem_page(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    from bot.app.timeline import read_run, render
    from tests.bot.app.test_metrics import scrape, value, with_metrics

    fake_anthropic.script(reply(text("Freed 19.8 GB on web-03.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        server = await with_metrics(env)
        channel, ts = await env.mention(TASK)
        final = await env.wait_final(channel, ts)
        for user, positive in ((BOB, True), (CAROL, True), (ALICE, False)):
            await fake_slack.wait_ack(await fake_slack.feedback(user, channel, final.ts, positive=positive))
        await env.wait_idle()
        body = await scrape(server)
        assert value(body, "opsloop_answer_feedback_total", value="positive") == 2
        assert value(body, "opsloop_answer_feedback_total", value="negative") == 1
        with env.ledger() as ledger:
            record = read_run(ledger, env.runs()[0].id)
        assert record is not None
        page = render(record, price_for=env.ops.supervisor.price_for, generated_at=time.time())
        assert page.count("rated the run") == 3 and "not helpful" in page
