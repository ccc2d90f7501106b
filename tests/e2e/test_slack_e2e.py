"""End to end: the real opsloop app over Socket Mode (and HTTP) against FakeSlack and FakeAnthropic.

Scenario: web-03's /var is full. alice asks opsloop in the incident channel; bob and
carol are on call and approve. One behaviour per test; every wait
watches the fakes' state with a timeout (see tests/support/harness.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bot.core.types import DecisionCause
from bot.run.report import STOP_WORDS
from handlers.blocks import APPROVE, DENY, STOP
from tests.support import incident_tools
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, block_action_payload, mention_event, message_event
from tests.support.harness import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL,
    SIGNING_SECRET,
    action_ids,
    answered,
    bot_env,
    card_state,
    is_status,
    result_text,
    sign,
    text_of,
    tool_results,
    user_turn,
)
from tests.support.incident_tools import CLEAN_PREVIEW, Execution, ran

TASK = "web-03 is paging: disk full on /var, please fix"
CLEAN = {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7}
RESTART = {"host": "web-03", "unit": "nginx.service"}


def clean_logs_script(final: str = "Freed 19.8 GB on web-03 (/var now 61%).") -> list[Any]:
    return [
        reply(text("Checking disk usage on web-03."), tool_use("check_disk", {"host": "web-03"})),
        reply(tool_use("list_large_files", {"host": "web-03", "path": "/var"})),
        reply(
            text("212 rotated nginx logs fill /var. Deleting the ones older than 7 days."),
            tool_use("clean_logs", CLEAN),
        ),
        *answered(reply(text(final))),
    ]


# --------------------------------------------------------------------------------------
# the incident, approved
# --------------------------------------------------------------------------------------


async def test_disk_full_incident_runs_clean_logs_after_approval(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(*clean_logs_script())
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        await env.wait_reaction(channel, ts)  # :eyes: on the mention once the run is stored

        card = await env.card(channel, ts)
        shown = text_of(card)
        assert "clean_logs" in shown and "/var/log/nginx" in shown and CLEAN_PREVIEW in shown
        assert action_ids(card) == [APPROVE, DENY]
        assert [e.tool for e in incident_tools.EXECUTIONS] == ["check_disk", "list_large_files"]

        await env.approve(card, BOB)
        final = await env.wait_final(channel, ts)
        assert "Freed 19.8 GB" in text_of(final)

        decided = await env.card(channel, ts, state="approved")
        assert action_ids(decided) == []
        assert f"<@{BOB}>" in text_of(decided)
        assert ran("clean_logs") == [Execution("clean_logs", CLEAN, BOB)]

        requests = await env.requests(4)
        # the model saw the disk table, and never the hidden confirmed_by parameter
        assert "/var   50G    49.8G  0.2G   100%" in result_text(tool_results(requests[1])[0])
        schemas = {t["name"]: t["input_schema"] for t in requests[0].body["tools"]}
        assert "confirmed_by" not in json.dumps(schemas["clean_logs"])
        (result,) = tool_results(requests[3])
        assert "deleted 212 files" in result_text(result) and not result.get("is_error")

        status = await env.status(channel, ts)
        assert STOP not in action_ids(status)  # finished: no Stop button left

        (row,) = env.audit()
        assert (row.approval.tool, row.approval.state, row.approval.decided_by) == ("clean_logs", "approved", BOB)
        assert (row.approval.requester, row.approval.cause) == (ALICE, DecisionCause.CLICK)
        assert row.approval.decided_name == "bob" and row.approval.preview == CLEAN_PREVIEW
        assert row.approval.args == CLEAN and "deleted 212 files" in row.result
        fake_anthropic.assert_complete()


# --------------------------------------------------------------------------------------
# decisions
# --------------------------------------------------------------------------------------


async def test_deny_reaches_the_model_as_an_error_and_nothing_runs(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(text("Restarting nginx to release deleted file handles."), tool_use("restart_service", RESTART)),
        reply(text("Not restarting nginx: bob denied it.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        await env.deny(card, BOB)

        denied = await env.card(channel, ts, state="denied")
        assert action_ids(denied) == [] and f"<@{BOB}>" in text_of(denied)
        await env.wait_final(channel, ts)
        requests = await env.requests(2)
        (result,) = tool_results(requests[1])
        assert result["is_error"] is True
        assert f"Denied by {BOB}" in result_text(result) and "NOT run" in result_text(result)
        assert ran("restart_service") == []
        (row,) = env.audit()
        assert (row.approval.state, row.approval.decided_by, row.result) == ("denied", BOB, result_text(result))


async def test_click_by_someone_not_allowed_gets_an_ephemeral_and_changes_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("nginx restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, f'[approvals]\napprovers = ["{BOB}"]') as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        await env.approve(card, CAROL)
        note = await env.wait_ephemeral(CAROL)
        assert "can't approve" in note["text"] and f"<@{BOB}>" in note["text"]
        await env.wait_idle()
        assert card.edited is None and card_state(card) == "pending"  # the card was not touched
        assert env.audit()[0].approval.approvals == () and ran("restart_service") == []

        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        assert ran("restart_service") == [Execution("restart_service", RESTART, BOB)]


async def test_a_second_click_changes_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("restart_service", RESTART)), reply(text("nginx restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        # Two deliveries of a click on the same (not yet updated) card: a double click.
        payload = block_action_payload(
            BOB, channel, card.ts, APPROVE, env.audit()[0].approval.id, message=card.to_api(), user_name="bob"
        )
        await fake_slack.send_interactive(payload)
        await fake_slack.send_interactive(payload)
        await env.wait_final(channel, ts)
        await env.wait_idle()

        assert ran("restart_service") == [Execution("restart_service", RESTART, BOB)]
        (row,) = env.audit()
        assert (row.approval.state, row.approval.approvals) == ("approved", (BOB,))
        (note,) = [e for e in fake_slack.ephemerals if e["user"] == BOB]
        assert "already approved" in note["text"]
        updates = fake_slack.calls_to("chat.update")
        assert len([c for c in updates if c.args["ts"] == card.ts]) == 1  # the card changed once


async def test_the_requester_cannot_approve_a_destructive_call(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)), reply(text("Cleaned.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        card = await env.card(channel, ts)
        await env.approve(card, ALICE)
        note = await env.wait_ephemeral(ALICE)
        assert "started this run" in note["text"]
        await env.wait_idle()
        assert card_state(card) == "pending" and ran("clean_logs") == []

        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        assert ran("clean_logs") == [Execution("clean_logs", CLEAN, BOB)]


async def test_two_approvals_required_runs_only_after_the_second_approver(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)), reply(text("Cleaned with two approvals.")))
    config = "[approvals]\ndestructive_required_approvals = 2"
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        assert "0 of 2 approvals" in text_of(card)

        await env.approve(card, BOB)
        progress = await env.card(channel, ts, where=lambda m: "1 of 2 approvals" in text_of(m))
        assert f"<@{BOB}>" in text_of(progress) and action_ids(progress) == [APPROVE, DENY]
        await env.approve(progress, BOB)  # the same person twice is still one approval
        assert "already approved" in (await env.wait_ephemeral(BOB))["text"]
        await env.wait_idle()
        assert ran("clean_logs") == [] and env.audit()[0].approval.state == "pending"

        await env.approve(progress, CAROL)
        await env.wait_final(channel, ts)
        approved = await env.card(channel, ts, state="approved")
        assert f"<@{BOB}>" in text_of(approved) and f"<@{CAROL}>" in text_of(approved)
        assert ran("clean_logs") == [Execution("clean_logs", CLEAN, CAROL)]
        assert env.audit()[0].approval.approvals == (BOB, CAROL)


async def test_an_expired_approval_is_no_consent(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)), reply(text("Nobody approved; logs left alone.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[approvals]\nexpire_minutes = 0.005") as env:
        channel, ts = await env.mention(TASK)
        expired = await env.card(channel, ts, state="expired")
        assert action_ids(expired) == [] and "Expired" in text_of(expired)
        await env.wait_final(channel, ts)
        (result,) = tool_results((await env.requests(2))[1])
        assert result["is_error"] is True and "No consent" in result_text(result)
        assert ran("clean_logs") == [] and env.audit()[0].approval.state == "expired"
        assert env.audit()[0].approval.cause == DecisionCause.EXPIRY


# --------------------------------------------------------------------------------------
# thread replies
# --------------------------------------------------------------------------------------


async def test_a_thread_reply_during_the_run_reaches_the_model_after_the_tool_results(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("check_disk", {"host": "web-03"})), reply(text("Focusing on nginx logs.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        gate = incident_tools.hold("check_disk")
        channel, ts = await env.mention(TASK)
        await gate.wait_entered()  # the run is busy inside check_disk
        reply_ts = await env.reply(channel, ts, "it's only the nginx logs, leave postgres alone", user=ALICE)
        await env.wait_reaction(channel, reply_ts)  # stored, then :eyes:
        gate.release()

        await env.wait_final(channel, ts)
        turn = user_turn((await env.requests(2))[1])
        assert [b["type"] for b in turn] == ["tool_result", "text"]
        assert turn[1]["text"] == f"[thread reply from {ALICE}] it's only the nginx logs, leave postgres alone"


async def test_a_reply_supersedes_a_pending_approval(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)), reply(text("Not deleting; restarting nginx instead.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        reply_ts = await env.reply(channel, ts, "don't delete anything, just restart nginx", user=CAROL)

        superseded = await env.card(channel, ts, state="superseded")
        assert action_ids(superseded) == [] and f"<@{CAROL}>" in text_of(superseded)
        await env.wait_reaction(channel, reply_ts)
        await env.wait_final(channel, ts)
        turn = user_turn((await env.requests(2))[1])
        assert [b["type"] for b in turn] == ["tool_result"]  # the reply arrives inside the decline, once
        assert turn[0]["is_error"] is True
        assert f'{CAROL} replied in the thread: "don\'t delete anything, just restart nginx"' in result_text(turn[0])
        assert ran("clean_logs") == []
        assert card.ts == superseded.ts


async def test_the_stop_button_cancels_the_run_and_reports_who(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Cleaning nginx logs."), tool_use("clean_logs", CLEAN)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        await env.card(channel, ts)
        status = await env.status(channel, ts)
        await env.stop(status, ALICE)

        report = text_of(await env.wait_final(channel, ts))
        assert "cancelled" in report and f"Stopped by <@{ALICE}>" in report
        assert card_state(env.cards(channel, ts)[-1]) == "superseded"  # nobody is asked anymore
        (run,) = env.runs()
        assert (run.status, run.stop_reason, run.stopped_by) == ("finished", "cancelled", ALICE)
        assert [e.approval.cause for e in env.audit()] == [DecisionCause.STOP]
        assert ran("clean_logs") == []


async def test_stop_by_someone_who_may_not_approve_changes_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Cleaning nginx logs."), tool_use("clean_logs", CLEAN)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, f'[approvals]\napprovers = ["{BOB}"]\n') as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        await env.card(channel, ts)
        status = await env.status(channel, ts)
        await env.stop(status, CAROL)
        assert "stop" in (await env.wait_ephemeral(CAROL))["text"].lower()
        await env.wait_idle()
        assert [r.status for r in env.runs()] == ["waiting_approval"]
        await env.stop(status, BOB)  # an approver may stop it
        assert "cancelled" in text_of(await env.wait_final(channel, ts))


# --------------------------------------------------------------------------------------
# delivery
# --------------------------------------------------------------------------------------


async def test_duplicate_deliveries_start_exactly_one_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("/var on web-03 is at 100%.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        root = fake_slack.add_message(CHANNEL, "U9", "ALERT web-03 disk /var 100%")
        mention = mention_event(CHANNEL, ALICE, TASK, thread_ts=root.ts)
        await env.send(mention, event_id="Ev0MENTION")
        await env.send(mention, event_id="Ev0MENTION", retry_attempt=1)  # Slack's redelivery
        # The same message as a `message` event (the app also subscribes to message.channels)
        twin = message_event(CHANNEL, ALICE, mention["text"], ts=mention["ts"], thread_ts=root.ts)
        await env.send(twin, event_id="Ev0TWIN")

        await env.wait_final(CHANNEL, root.ts)
        await env.wait_idle()
        assert len(env.runs()) == 1
        assert len(fake_anthropic.requests) == 1
        assert len([m for m in env.thread(CHANNEL, root.ts) if is_status(m)]) == 1
        assert len(env.finals(CHANNEL, root.ts)) == 1
        assert fake_slack.reactions.count((CHANNEL, mention["ts"], "eyes")) == 1


async def test_a_rate_limited_answer_is_still_posted(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    def answer_after_arming_429(body: dict[str, Any]) -> Any:
        fake_slack.fail_next("chat.postMessage", error="ratelimited", retry_after=1)  # hits the answer's post
        return reply(text("web-03: /var is full of rotated nginx logs."))

    fake_anthropic.script(reply(tool_use("check_disk", {"host": "web-03"})), answer_after_arming_429)
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        final = await env.wait_final(channel, ts, timeout=15)
        assert "rotated nginx logs" in text_of(final)
        limited = [c for c in fake_slack.calls_to("chat.postMessage") if c.error == "ratelimited"]
        assert len(limited) == 1 and limited[0].status == 429
        assert len(env.finals(channel, ts)) == 1


async def test_iteration_limit_posts_a_handoff_report(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(text("Checking web-01."), tool_use("check_disk", {"host": "web-01"})),
        reply(text("Checking web-02."), tool_use("check_disk", {"host": "web-02"})),
        reply(text("Both disks are healthy; web-03 is unchecked.")),  # the wrap-up turn
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[limits]\nmax_iterations = 2") as env:
        channel, ts = await env.mention(TASK)
        report = text_of(await env.wait_final(channel, ts))
        assert "iteration_limit" in report
        assert STOP_WORDS["iteration_limit"] in report  # the reason in words, not only its name
        assert "2/2" in report and "check_disk" in report
        assert len(fake_anthropic.requests) == 3
        fake_anthropic.assert_complete()
        assert env.runs()[0].stop_reason == "iteration_limit"


async def test_a_permission_denied_tool_stops_the_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("read_secret", {"name": "db-password"})))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        report = text_of(await env.wait_final(channel, ts))
        assert "permission_denied" in report and "policy forbids" in report
        assert len(fake_anthropic.requests) == 1  # never handed to the model to work around


async def test_bot_messages_are_ignored(tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(reply(tool_use("check_disk", {"host": "web-03"})), reply(text("/var is full.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        gate = incident_tools.hold("check_disk")
        channel, ts = await env.mention(TASK)
        await gate.wait_entered()  # the run is active: a human reply now would be injected
        others = [
            message_event(
                channel, None, "PagerDuty: web-03 still firing", thread_ts=ts, bot_id="B0PAGER", subtype="bot_message"
            ),
            message_event(channel, "U0GRAFANA", "Grafana: disk 100%", thread_ts=ts, bot_id="B0GRAFANA"),
            message_event(
                channel, fake_slack.bot_user_id, "opsloop's own words", thread_ts=ts, bot_id=fake_slack.bot_id
            ),
        ]
        for event in others:
            await env.send(event)
        await env.wait_idle()
        gate.release()

        await env.wait_final(channel, ts)
        turn = user_turn((await env.requests(2))[1])
        assert [b["type"] for b in turn] == ["tool_result"]
        assert not any(env.reacted(channel, e["ts"]) for e in others)


async def test_http_mode_accepts_a_signed_request_and_rejects_a_forged_one(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Looking at web-03 over HTTP mode: /var is full.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, http=True) as env:

        def callback(event: dict[str, Any], event_id: str) -> bytes:
            fake_slack.add_message(CHANNEL, event["user"], event["text"], ts=event["ts"])
            return json.dumps(
                {
                    "token": "unused",
                    "team_id": fake_slack.team_id,
                    "api_app_id": fake_slack.app_id,
                    "event": event,
                    "type": "event_callback",
                    "event_id": event_id,
                    "event_time": int(time.time()),
                    "authorizations": [
                        {"team_id": fake_slack.team_id, "user_id": fake_slack.bot_user_id, "is_bot": True}
                    ],
                }
            ).encode()

        forged_event = mention_event(CHANNEL, CAROL, "delete everything on web-03")
        forged = callback(forged_event, "Ev0FORGED")
        status, _ = await env.post_http(forged, sign(forged, secret="not-" + SIGNING_SECRET))
        assert status == 401
        stale = sign(forged, timestamp=int(time.time()) - 3600)  # a replayed request: right key, old timestamp
        assert (await env.post_http(forged, stale))[0] == 401

        event = mention_event(CHANNEL, ALICE, TASK)
        body = callback(event, "Ev0SIGNED")
        status, _ = await env.post_http(body, sign(body))
        assert status == 200
        final = await env.wait_final(CHANNEL, event["ts"])
        assert "HTTP mode" in text_of(final)
        await env.wait_reaction(CHANNEL, event["ts"])
        await env.wait_idle()
        assert [r.requester for r in env.runs()] == [ALICE]
        assert not env.reacted(CHANNEL, forged_event["ts"])


# --------------------------------------------------------------------------------------
# durability
# --------------------------------------------------------------------------------------


async def test_a_pending_approval_survives_a_restart(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(text("Cleaning rotated nginx logs."), tool_use("clean_logs", CLEAN)),
        *answered(reply(text("Freed 19.8 GB after the restart."))),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        # The process stops with the approval pending -- possibly even before it stored the card's ts,
        # in which case the resumed run posts the card again. Either way one click decides it.
        await env.restart()

        await env.approve(card, BOB)  # on the card posted by the old process
        final = await env.wait_final(channel, ts)
        assert "after the restart" in text_of(final)
        assert ran("clean_logs") == [Execution("clean_logs", CLEAN, BOB)]
        await fake_slack.wait_for_message(channel, lambda m: m.ts == card.ts and card_state(m) == "approved")
        await env.wait_idle()
        assert {card_state(c) for c in env.cards(channel, ts)} == {"approved"}  # no card left asking
        assert [action_ids(c) for c in env.cards(channel, ts)] == [[]] * len(env.cards(channel, ts))
        assert len([m for m in env.thread(channel, ts) if is_status(m)]) == 1  # the resumed run kept its status
        assert len(fake_anthropic.requests) == 3  # the call, the answer, the answer again when asked for the summary
        fake_anthropic.assert_complete()


async def test_a_changed_dry_run_after_a_restart_voids_the_old_approval(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)), reply(text("Freed 21.1 GB.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        old = await env.card(channel, ts)
        await env.wait_idle()
        incident_tools.PREVIEW["clean_logs"] = "would delete 230 files, 21.1 GB"  # more logs by now
        await env.restart()

        new = await fake_slack.wait_for_message(channel, lambda m: m.ts != old.ts and "230 files" in text_of(m))
        assert card_state(new) == "pending"
        # Consent to the old preview is not consent to the new one: the old card says why and takes no clicks.
        voided = await fake_slack.wait_for_message(channel, lambda m: m.ts == old.ts and card_state(m) == "superseded")
        assert "the call changed" in text_of(voided) and action_ids(voided) == []
        assert ran("clean_logs") == []
        await env.approve(new, BOB)
        assert "21.1 GB" in text_of(await env.wait_final(channel, ts))
        assert ran("clean_logs") == [Execution("clean_logs", CLEAN, BOB)]


# --------------------------------------------------------------------------------------
# threads and channels
# --------------------------------------------------------------------------------------


async def test_a_new_mention_in_a_finished_thread_continues_its_history(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("/var on web-03 is at 100%.")), reply(text("Still 100%; nothing changed.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        await env.wait_final(channel, ts)
        await env.wait_idle()
        await env.mention("check again please", thread_ts=ts)
        await fake_anthropic.wait_for_requests(2)
        await env.wait_idle()
        second = (await env.requests(2))[1].body["messages"]
        assert [m["role"] for m in second] == ["user", "assistant", "user"]
        assert [b["text"] for b in second[1]["content"] if b["type"] == "text"] == ["/var on web-03 is at 100%."]
        assert "check again please" in second[2]["content"][0]["text"]
        assert len(env.runs()) == 2


async def test_channels_outside_the_configured_list_are_ignored(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    config = '[slack]\nchannels = ["C0ONLYTHIS"]\n'
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        channel, ts = await env.mention(TASK)  # the harness channel is not in the list
        await env.wait_idle()
        assert (env.runs(), fake_anthropic.requests, env.reacted(channel, ts)) == ([], [], False)


async def test_malformed_payloads_are_skipped_and_the_bot_keeps_working(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("/var on web-03 is at 100%.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        broken = mention_event(CHANNEL, ALICE, TASK)
        del broken["user"]
        await env.send(broken)
        await env.send({"type": "message", "channel": CHANNEL, "thread_ts": "1.0", "text": 42})
        await fake_slack.send_interactive({"type": "block_actions", "actions": [{"action_id": APPROVE}]})
        await fake_slack.send_interactive(block_action_payload(BOB, CHANNEL, "9.9", APPROVE, "apr_nope"))
        await env.wait_idle()
        assert env.runs() == []
        assert "approval" in (await env.wait_ephemeral(BOB))["text"].lower()
        channel, ts = await env.mention(TASK)  # still serving
        assert "100%" in text_of(await env.wait_final(channel, ts))


async def test_a_mention_mid_thread_gives_the_model_the_thread_so_far(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Looking at it.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        root = fake_slack.add_message(CHANNEL, "U0PAGER", "ALERT web-03 disk /var 100%")
        fake_slack.add_message(CHANNEL, CAROL, "nginx access logs look huge", thread_ts=root.ts)
        await env.mention("can you take this?", thread_ts=root.ts)
        await env.wait_final(CHANNEL, root.ts)
        first = (await env.requests(1))[0].body["messages"][0]["content"][0]["text"]
        assert "ALERT web-03 disk /var 100%" in first and "nginx access logs look huge" in first
        assert first.index("can you take this?") < first.index("[earlier messages in this thread]")


async def test_http_mode_answers_a_junk_timestamp_with_401_like_any_bad_signature(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    import structlog.testing

    async with bot_env(tmp_path, fake_slack, fake_anthropic, http=True) as env:
        body = json.dumps(
            {
                "type": "event_callback",
                "event_id": "Ev0JUNK",
                "event": mention_event(CHANNEL, CAROL, "delete everything on web-03"),
            }
        ).encode()
        with structlog.testing.capture_logs() as logs:
            for junk in ("1e9", "abc", "", " ", "１７００００００００", "-1", "1.5"):
                headers = {**sign(body), "X-Slack-Request-Timestamp": junk}
                assert (await env.post_http(body, headers))[0] == 401, junk
        assert not [e for e in logs if e["log_level"] == "error"]
        assert env.runs() == []


async def test_http_mode_answers_a_signed_payload_bolt_cannot_read_with_400_and_an_unsigned_one_with_401(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    import structlog.testing

    async with bot_env(tmp_path, fake_slack, fake_anthropic, http=True) as env:
        event = {**mention_event(CHANNEL, CAROL, "delete everything on web-03"), "user": 1.5}
        body = json.dumps({"type": "event_callback", "event_id": "Ev0BAD", "event": event}).encode()
        with structlog.testing.capture_logs() as logs:
            assert (await env.post_http(body, sign(body)))[0] == 400
            assert (await env.post_http(body, {**sign(body), "X-Slack-Signature": "v0=" + "0" * 64}))[0] == 401
        assert [e["problem"] for e in logs if e["event"] == "slack.payload_unreadable"] == [
            "bolt cannot read it (TypeError)"
        ]
        assert not [e for e in logs if e["log_level"] == "error"]
        assert env.runs() == []
