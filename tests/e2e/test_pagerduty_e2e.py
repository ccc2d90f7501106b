"""PagerDuty's out side through the real app (README, PagerDuty, Notes back to the incident): a run started by an
alert whose labels name a PagerDuty incident writes its likely cause and its answer to the incident as notes,
exactly once even when PagerDuty's answer to the answer's note is lost after it accepted it; an approved
acknowledge is written as the approver; an approver PagerDuty doesn't know is refused; an approved restart is a
change event on the incident's service, and recent_changes lists PagerDuty's change events. The fake PagerDuty
checks every request and answer against PagerDuty's OpenAPI documents."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.run.summary import TOOL_NAME
from tests.e2e.test_alerts_webhook_e2e import CONFIG as ALERT_CONFIG
from tests.e2e.test_alerts_webhook_e2e import ENV as ALERT_ENV
from tests.e2e.test_alerts_webhook_e2e import payload, post, root
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.pagerduty import FakePagerDuty
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import BOB, CAROL, CHANNEL, BotEnv, bot_env, result_text, tool_results
from tools.pagerduty.store import pager_items

TOKEN = "pd-e2e-token-0123456789"
LABELS = {"pagerduty_incident_id": "PINC001", "pagerduty_service_id": "PSVC001"}


@pytest.fixture
async def pd() -> AsyncIterator[FakePagerDuty]:
    async with FakePagerDuty(token=TOKEN) as fake:
        fake.add_user("opsloop@example.com", "opsloop")
        fake.add_user("bob@example.com", "Bob")
        fake.add_service("PSVC001", "checkout", routing_key="R0UTINGKEY")
        fake.add_incident("PINC001", service="PSVC001")
        yield fake
        assert fake.problems == []


def config(pd: FakePagerDuty) -> str:
    return (
        ALERT_CONFIG
        + f"""
[changes]
window_minutes = 120

[pagerduty]
token_env = "PD_TOKEN"
events_routing_key_env = "PD_ROUTING_KEY"
notes_from = "opsloop@example.com"
base_url = "{pd.url}"
events_url = "{pd.events_url}"

[pagerduty.from]
{BOB} = "bob@example.com"
{CAROL} = "carol@nowhere.example"
"""
    )


ENV = {**ALERT_ENV, "PD_TOKEN": TOKEN, "PD_ROUTING_KEY": "R0UTINGKEY"}


def paged() -> dict[str, Any]:
    body = payload(name="Checkout5xx")
    body["commonLabels"] = {**body["commonLabels"], **LABELS}
    for alert in body["alerts"]:
        alert["labels"] = {**alert["labels"], **LABELS}
    return body


async def until(check: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    """Wait for the note sender (it polls the store each second), failing with `what`."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while not check():
        assert loop.time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def sent(env: BotEnv) -> list[Any]:
    with env.ledger() as ledger:
        return [i for i in pager_items(ledger) if i.state == "sent"]


DISK = {"handle": "#1", "quote": "/var 50G 49.8G 0.2G 100%"}
LIKELY = {
    "situation": "checkout answers 5xx; web-03 /var is full",
    "hypotheses": [
        {
            "id": "disk",
            "statement": "a full /var stops nginx",
            "status": "supported",
            "confidence": "high",
            "evidence": [DISK],
        },
    ],
    "next_steps": ["free /var"],
}


async def test_the_likely_cause_and_the_answer_are_one_note_each_even_when_the_answer_s_acceptance_is_lost(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, pd: FakePagerDuty
) -> None:
    pd.drop_after_accept("POST", "/incidents/PINC001/notes", containing="final]")  # accepted, answer never seen
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"}, id="toolu_disk")),
        reply(tool_use(TOOL_NAME, LIKELY, id="toolu_sum")),
        reply(text("A full /var on web-03 stops nginx: free /var.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config(pd), env_extra=ENV) as env:
        assert (await post(env, paged()))[0] == 200
        ts = await root(env, "Checkout5xx")
        await env.wait_final(CHANNEL, ts)
        (run,) = env.runs()
        await until(lambda: len(sent(env)) == 2, "both notes recorded as sent")
        summary, final = pd.notes("PINC001")
        assert "a full /var stops nginx" in summary and summary.endswith(f"[opsloop {run.id} summary]")
        assert "A full /var on web-03 stops nginx: free /var." in final and final.endswith(f"[opsloop {run.id} final]")
        assert f"https://slack.com/archives/{CHANNEL}/p{ts.replace('.', '')}" in final
        # the lost answer was read back, not written again
        assert len([r for r in pd.requests if r.method == "POST"]) == 2
        assert [r.method for r in pd.requests if r.path.endswith("/notes")][-1] == "GET"
        assert any("PagerDuty incident PINC001" in m.text for m in env.thread(CHANNEL, ts))


async def test_an_approved_acknowledge_is_the_approver_s_and_an_approved_restart_is_a_change_event(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, pd: FakePagerDuty
) -> None:
    pd.add_change_event("deploy checkout 2.1", datetime.now(UTC) - timedelta(minutes=3), ["PSVC001"])
    pd.add_change_event("deploy billing 9", datetime.now(UTC) - timedelta(minutes=3), ["PSVC999"])
    fake_anthropic.script(
        reply(tool_use("pagerduty_acknowledge", {}, id="toolu_ack")),
        reply(tool_use("recent_changes", {"since_minutes": 60}, id="toolu_chg")),
        reply(tool_use("restart_service", {"host": "web-03", "unit": "nginx.service"}, id="toolu_rs")),
        reply(tool_use(TOOL_NAME, {"situation": "restarted nginx", "hypotheses": [], "next_steps": []})),
        reply(text("Acknowledged, restarted nginx after the checkout deploy.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config(pd), env_extra=ENV) as env:
        assert (await post(env, paged()))[0] == 200
        ts = await root(env, "Checkout5xx")
        await env.approve(await env.card(CHANNEL, ts), BOB)
        await env.approve(await env.card(CHANNEL, ts, where=lambda m: "restart_service" in m.text), BOB)
        await env.wait_final(CHANNEL, ts)
        (put,) = [r for r in pd.requests if r.method == "PUT"]
        assert put.path == "/incidents/PINC001" and put.headers["From"] == "bob@example.com"
        assert pd.incidents["PINC001"].status == "acknowledged"
        requests = await env.requests(3)
        (ack,) = [r for r in tool_results(requests[1]) if r["tool_use_id"] == "toolu_ack"]
        assert "is acknowledged now in PagerDuty; acknowledged as bob@example.com" in result_text(ack)
        (chg,) = [r for r in tool_results(requests[2]) if r["tool_use_id"] == "toolu_chg"]
        assert "pagerduty · PSVC001 · deploy checkout 2.1" in result_text(chg)
        assert "deploy billing 9" not in result_text(chg)  # another service's
        await until(lambda: len(pd.change_events) == 3, "the restart's change event")
        event = pd.change_events[-1]
        assert event["services"] == [{"id": "PSVC001", "type": "service_reference"}]
        assert "restart_service(host=web-03, unit=nginx.service) done, approved by U0BOB" in event["summary"]


async def test_an_approver_pagerduty_does_not_know_is_one_refusal_and_nothing_changes(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, pd: FakePagerDuty
) -> None:
    fake_anthropic.script(
        reply(tool_use("pagerduty_resolve", {}, id="toolu_res")),
        reply(text("Could not resolve it in PagerDuty.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config(pd), env_extra=ENV) as env:
        assert (await post(env, paged()))[0] == 200
        ts = await root(env, "Checkout5xx")
        await env.approve(await env.card(CHANNEL, ts), CAROL)
        await env.wait_final(CHANNEL, ts)
        (res,) = [r for r in tool_results((await env.requests(2))[1]) if r["tool_use_id"] == "toolu_res"]
        assert res.get("is_error")
        assert "\nnot resolved: PagerDuty does not accept carol@nowhere.example (approver U0CAROL): " in result_text(
            res
        )
        assert len([r for r in pd.requests if r.method == "PUT"]) == 1  # asked once, refused once
        assert pd.incidents["PINC001"].status == "triggered"
