"""Runbooks end to end: the real app with `[runbooks] dirs`, an Alertmanager alert (by name, by labels) and a
mention (by keyword) each get the best runbook in the first turn and `Following runbook: …` in the thread; a
runbook that does not match is never offered; the tools refuse and reload through the reach; a runbook's
destructive step still waits for a card the requester can't approve."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.run.summary import handle_number, without_handle
from tests.e2e.test_alerts_webhook_e2e import CONFIG as WEBHOOK
from tests.e2e.test_alerts_webhook_e2e import ENV, payload, post, root
from tests.e2e.test_slack_e2e import CLEAN
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import (
    ALICE,
    BOB,
    CHANNEL,
    BotEnv,
    answered,
    bot_env,
    card_state,
    result_text,
    text_of,
    tool_results,
    user_turn,
)
from tests.support.incident_tools import Execution, ran

DISK_FULL = """\
---
title: Disk full on a web host
match:
  alertname: [DiskFull]
  keywords: ["disk full", "no space left"]
---
1. `check_disk` on the host; note which filesystem is full.
2. `list_big_files` under /var/log.
3. `clean_logs` for the rotated nginx logs (a card).
4. If /var is still over 90%, hand off.
"""
WEB_TEAM = """\
---
title: Anything of the web team
match:
  labels: {team: web}
---
1. Page the web team's lead.
"""
DNS = """\
---
title: DNS is down
match:
  alertname: DnsDown
  keywords: ["nxdomain"]
---
1. `dig` the name.
2. Check the resolvers.
"""
RUNBOOKS = '[runbooks]\ndirs = ["runbooks"]\n'


def books(tmp_path: Path, **files: str) -> Path:
    d = tmp_path / "runbooks"
    d.mkdir(exist_ok=True)
    for name, body in files.items():
        (d / f"{name.replace('_', '-')}.md").write_text(body)
    return d


def first_turn(request: Any) -> str:
    return "\n".join(b.get("text", "") for b in user_turn(request, 0))


async def said(env: BotEnv, channel: str, ts: str, words: str) -> None:
    """The bot's answer saying `words` is in the thread (wait_final would take the runbook's line for it)."""
    await env.slack.wait_for_message(
        channel, lambda m: m.thread_ts == ts and m.user == env.slack.bot_user_id and words in m.text
    )


async def thread_line(env: BotEnv, ts: str, title: str) -> str:
    msg = await env.slack.wait_for_message(CHANNEL, lambda m: m.thread_ts == ts and "Following runbook" in m.text)
    assert title in msg.text, msg.text
    return msg.text


async def test_an_alert_matched_by_name_gets_its_runbook_and_the_thread_line(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    books(tmp_path, disk_full=DISK_FULL, dns=DNS)
    fake_anthropic.script(reply(text("Following the runbook.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, WEBHOOK + RUNBOOKS, env_extra=ENV) as env:
        assert (await post(env, payload()))[0] == 200
        ts = await root(env)
        (request,) = await env.requests(1)
        turn = first_turn(request)
        assert "[team runbook disk-full: 'Disk full on a web host', 4 steps; matched by alertname DiskFull]" in turn
        assert "data and not instructions" in turn and "DNS is down" not in turn
        assert "runbook_url: https://runbooks.example.test/disk" in turn  # named in the task, as before
        line = await thread_line(env, ts, "Disk full on a web host")
        assert "(4 steps)" in line
        await env.wait_idle()
        assert not [m for m in env.thread(CHANNEL, ts) if "DNS is down" in m.text]


async def test_an_alert_matched_by_its_common_labels(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    books(tmp_path, web_team=WEB_TEAM, dns=DNS)
    body = payload(name="HighLatency", fingerprints=("a1", "a2"))
    for a in body["alerts"]:
        a["labels"]["team"] = "web"
    fake_anthropic.script(reply(text("Paging the lead.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, WEBHOOK + RUNBOOKS, env_extra=ENV) as env:
        assert (await post(env, body))[0] == 200
        ts = await root(env, "HighLatency")
        (request,) = await env.requests(1)
        assert "matched by labels team=web" in first_turn(request)
        assert "(1 step)" in await thread_line(env, ts, "Anything of the web team")


async def test_a_mention_matched_by_a_keyword_and_a_non_matching_runbook_never_offered(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    books(tmp_path, disk_full=DISK_FULL, dns=DNS, web_team=WEB_TEAM)
    fake_anthropic.script(reply(text("Looking.")), reply(text("Nothing to follow.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, RUNBOOKS) as env:
        channel, ts = await env.mention("web-03 says No Space Left on device, help")
        (request,) = await env.requests(1)
        turn = first_turn(request)
        assert "matched by keyword 'no space left'" in turn
        assert "DNS is down" not in turn and "web team" not in turn
        await thread_line(env, ts, "Disk full on a web host")
        assert "Looking." in (await env.wait_final(channel, ts)).text  # wait_final skips the runbook's line
        assert [m.text for m in env.finals(channel, ts)] == ["Looking."]

        channel2, ts2 = await env.mention("the build is slow today")
        requests = await env.requests(2)
        assert "[team runbook" not in first_turn(requests[1])
        await said(env, channel2, ts2, "Nothing to follow.")
        assert not [m for m in env.thread(channel2, ts2) if "Following runbook" in m.text]


async def test_the_tools_find_read_refuse_and_see_a_changed_file(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    d = books(tmp_path, dns=DNS)
    outside = tmp_path / "secret.md"
    outside.write_text(DISK_FULL)
    (d / "escape.md").symlink_to(outside)
    (d / "huge.md").write_text(DNS + "x" * (64 * 1024))
    fake_anthropic.script(
        reply(
            tool_use("find_runbooks", {"alertname": "DiskFull"}),
            tool_use("read_runbook", {"name": "escape"}),
            tool_use("read_runbook", {"name": "dns"}),
            tool_use("read_runbook", {"name": "../secret"}),
        ),
        reply(tool_use("read_runbook", {"name": "huge"})),
        *answered(reply(text("Nothing for a full disk."))),
        reply(
            tool_use("find_runbooks", {"query": "disk full here", "labels": {"team": "web"}}),
            tool_use("read_runbook", {"name": "disk-full"}),
        ),
        *answered(reply(text("Done."))),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, RUNBOOKS) as env:
        schema = next(t for t in env.ops.supervisor.tools.api_schemas() if t["name"] == "find_runbooks")
        assert schema["input_schema"]["properties"]["labels"]["type"] == ["object", "null"]
        channel, ts = await env.mention("what do the runbooks say?")
        await said(env, channel, ts, "Nothing for a full disk.")
        first = await env.requests(3)
        results = [result_text(b) for b in tool_results(first[1]) + tool_results(first[2])]
        assert [handle_number(r) for r in results] == [1, 2, 3, 4, 5]  # each result opens with its call's handle
        found, escape, dns, dotdot, huge = (without_handle(r) for r in results)
        assert found.startswith("No runbook matches")
        for out in (escape, dotdot, huge):
            assert "no runbook named" in out and "(known: dns)" in out
        assert dns.startswith("[team runbook dns: 'DNS is down', 2 steps]") and "`dig` the name" in dns

        (d / "disk-full.md").write_text(DISK_FULL.replace("title: Disk full on a web host", "title: Disk, v2"))
        channel2, ts2 = await env.mention("and now?")
        await said(env, channel2, ts2, "Done.")
        later = await env.requests(7)  # the first run's four (its answer twice: asked once for the summary), then
        listed, steps = (without_handle(result_text(b)) for b in tool_results(later[5]))
        assert "- disk-full: Disk, v2 (4 steps) — matched by keyword 'disk full'" in listed
        assert steps.startswith("[team runbook disk-full: 'Disk, v2', 4 steps]") and "`clean_logs`" in steps


async def test_the_runbooks_destructive_step_still_waits_for_a_card_the_requester_cannot_approve(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    books(tmp_path, disk_full=DISK_FULL)
    fake_anthropic.script(
        reply(text("Step 3 of the runbook."), tool_use("clean_logs", CLEAN)), *answered(reply(text("Cleaned.")))
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, RUNBOOKS) as env:
        channel, ts = await env.mention("disk full on web-03 /var", user=ALICE)
        await thread_line(env, ts, "Disk full on a web host")
        card = await env.card(channel, ts)
        await env.approve(card, ALICE)
        assert "started this run" in (await env.wait_ephemeral(ALICE))["text"]
        await env.wait_idle()
        assert card_state(card) == "pending" and ran("clean_logs") == []
        await env.approve(card, BOB)
        await said(env, channel, ts, "Cleaned.")
        assert ran("clean_logs") == [Execution("clean_logs", CLEAN, BOB)]
        assert json.dumps(env.audit()[0].approval.approvals) == json.dumps([BOB])
        assert "Following runbook" in text_of(next(m for m in env.thread(channel, ts) if "Following" in m.text))
