"""Slack-native alerts, end to end: an integration posts an alert message in the incident channel and opsloop
starts one run in that message's thread (the real app over Socket Mode, FakeSlack, FakeAnthropic).

The alert arrives the way Slack delivers an integration's post: a `bot_message` with a `bot_id`, most of its
content in `attachments` (Alertmanager's Slack receiver), through FakeSlack's incoming-webhook endpoint.
"""

# ruff: noqa: ASYNC109  (the helpers take timeout= like the harness's waits)

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from handlers import messages
from tests.support import incident_tools, promserver
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, Message, message_event
from tests.support.harness import BOB, CHANNEL, bot_env, text_of, user_turn

SENDER = "B0ALERTMGR"
CONFIG = f"""
[[alerts.slack]]
channel = "{CHANNEL}"
senders = ["{SENDER}"]
match = "FIRING|CRITICAL"
ignore = "RESOLVED"
"""
ALERT = {
    "username": "Alertmanager",
    "attachments": [
        {
            "color": "danger",
            "fallback": "[FIRING:1] DiskFull web-03",
            "title": "[FIRING:1] DiskFull (web-03 critical)",
            "title_link": "http://127.0.0.1:9093/#/alerts",
            "text": "*Summary:* /var on web-03 is 97% full\n*runbook:* http://127.0.0.1/runbooks/disk",
            "mrkdwn_in": ["fallback", "pretext", "text"],
        }
    ],
}


async def post_incoming(url: str, body: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as r:
        assert r.status == 200, await r.text()


def alert_event(slack: FakeSlack) -> dict[str, Any]:
    """An alert message as the integration's post (stored in the channel), and its `message` event."""
    event = message_event(CHANNEL, None, "", bot_id=SENDER, subtype="bot_message")
    event["attachments"] = ALERT["attachments"]
    slack._add_message(
        Message(channel=CHANNEL, ts=event["ts"], bot_id=SENDER, subtype="bot_message", attachments=ALERT["attachments"])
    )
    return event


async def alert_root(slack: FakeSlack, n: int = 1, timeout: float = 5.0) -> list[str]:
    """The ts of the first `n` alert messages the integration posted (once they are in the channel)."""
    await slack._wait(
        lambda: len([m for m in slack.messages[CHANNEL] if m.bot_id == SENDER]) >= n or None,
        timeout,
        lambda: f"{n} alert message(s) in the channel",
    )
    return [m.ts for m in slack.messages[CHANNEL] if m.bot_id == SENDER]


async def test_an_alert_posted_by_a_configured_sender_starts_one_run_in_its_thread(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(text("Checking web-03."), tool_use("check_disk", {"host": "web-03"})),
        reply(text("/var on web-03 is full of rotated nginx logs.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG) as env:
        hook = fake_slack.add_incoming_webhook(CHANNEL, bot_id=SENDER)
        await post_incoming(hook, ALERT)
        [ts] = await alert_root(fake_slack)
        final = await env.wait_final(CHANNEL, ts)
        assert "rotated nginx logs" in text_of(final)
        await env.wait_reaction(CHANNEL, ts)
        [run] = env.runs()
        assert (run.channel, run.thread_ts, run.requester) == (CHANNEL, ts, "")
        first = user_turn((await env.requests(1))[0], 0)[0]["text"]
        assert first.startswith("[alert posted in")
        assert "DiskFull" in first and "/var on web-03 is 97% full" in first  # the attachment, rendered as text
        assert "[alert " in (await env.requests(1))[0].body["system"][0]["text"]  # type: ignore[index]
        assert env.ops.alerts is not None and env.ops.alerts.counts[("slack", "started")] == 1


async def test_a_redelivery_and_a_second_event_for_the_same_message_start_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Looked: /var is full.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG) as env:
        event = alert_event(fake_slack)
        await env.send(event, event_id="Ev0ALERT1")
        await env.send(event, event_id="Ev0ALERT1", retry_attempt=1)  # Slack redelivers the same event
        await env.send(event, event_id="Ev0ALERT2")  # another event id for the same message ts
        await env.wait_idle()
        await env.wait_final(CHANNEL, event["ts"])
        assert len(env.runs()) == 1
        assert env.ops.alerts is not None and env.ops.alerts.counts[("slack", "deduplicated")] == 2


async def test_a_sender_not_in_senders_and_an_ignore_match_start_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG) as env:
        other = fake_slack.add_incoming_webhook(CHANNEL, bot_id="B0GRAFANA")
        await post_incoming(other, ALERT)  # not a configured sender: ignored as every bot message is
        same = fake_slack.add_incoming_webhook(CHANNEL, bot_id=SENDER)
        resolved = {"attachments": [{**ALERT["attachments"][0], "title": "[RESOLVED] DiskFull (web-03 critical)"}]}
        await post_incoming(same, resolved)  # matches FIRING? no: "RESOLVED" is ignored
        await post_incoming(same, {"text": "weekly report: all quiet"})  # matches nothing
        await alert_root(fake_slack, 2)
        await fake_slack._wait(lambda: len(fake_slack.acks) >= 3 or None, 5.0, lambda: "3 acks")
        await env.wait_idle()
        assert env.runs() == []
        assert fake_anthropic.requests == []
        assert env.ops.alerts is not None and env.ops.alerts.counts[("slack", "received")] == 2


async def test_anyone_allowed_may_approve_an_alert_runs_destructive_call_but_not_who_asked_for_it(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """No human requester: the alert's sender blocks nobody, and whoever asked in the thread still may not."""
    clean = {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7}
    fake_anthropic.script(
        reply(text("Old nginx logs fill /var."), tool_use("clean_logs", clean)),
        reply(tool_use("clean_logs", clean)),  # asked again after alice's reply
        reply(text("Freed 19.8 GB.")),
    )
    config = CONFIG + '\n[approvals]\napprovers = ["U0ALICE", "U0BOB"]\n'
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        event = alert_event(fake_slack)
        await env.send(event)
        ts = event["ts"]
        card = await env.card(CHANNEL, ts)
        assert "Run started by" not in text_of(card)
        await env.reply(CHANNEL, ts, "yes please clean the nginx logs", user="U0ALICE")
        card = await env.card(CHANNEL, ts, state="superseded")  # a reply while pending supersedes the card
        # the model asks again after alice's reply: alice asked for it, bob may approve
        new = await env.card(CHANNEL, ts, where=lambda m: m.ts != card.ts)
        await env.approve(new, "U0ALICE")
        note = await env.wait_ephemeral("U0ALICE")
        assert note["text"] == messages.asked_in_thread_refused("clean_logs", "destructive")
        await env.approve(new, BOB)
        await env.card(CHANNEL, ts, state="approved")
        final = await env.wait_final(CHANNEL, ts)
        assert "Freed 19.8 GB" in text_of(final)
        assert [e.confirmed_by for e in incident_tools.EXECUTIONS if e.tool == "clean_logs"] == [BOB]


@pytest.mark.skipif(promserver.missing() is not None, reason=str(promserver.missing()))
async def test_alertmanagers_slack_receiver_posting_to_an_incoming_webhook_starts_one_run_in_its_thread(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("/var on web-03 is full of rotated nginx logs.")))
    target = await promserver.Target(value=0.99).start()
    try:
        async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG) as env:
            hook = fake_slack.add_incoming_webhook(CHANNEL, bot_id=SENDER)
            receivers = f"""- name: slack
  slack_configs:
  - api_url: {hook}
    channel: '#incident'
    send_resolved: false
"""
            async with promserver.prom_stack(target, receivers=receivers, receiver="slack", repeat_interval="1h"):
                [ts] = await alert_root(fake_slack, timeout=60)
                final = await env.wait_final(CHANNEL, ts, timeout=20)
                assert "rotated nginx logs" in text_of(final)
                [run] = env.runs()
                assert (run.thread_ts, run.requester) == (ts, "")
                first = user_turn((await env.requests(1))[0], 0)[0]["text"]
                assert "[FIRING:1] DiskFull" in first  # the attachment's title, rendered as text
                assert fake_slack.incoming_posts and "attachments" in fake_slack.incoming_posts[0]
    finally:
        await target.close()
