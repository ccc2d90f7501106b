"""PagerDuty's v3 webhooks, end to end: the real app's receiver on its own loopback port, posted to as PagerDuty
posts (one signed event per request, built from its documented examples), against FakeSlack and FakeAnthropic."""

# ruff: noqa: ASYNC109  (the helpers take timeout= like the harness's waits)

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

from handlers.alerts.threads import ThreadedAlerts
from handlers.supervisor.alert_facts import alert_facts
from tests.handlers.alerts import pagerduty_events as pd
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import BOB, CHANNEL, PEOPLE, BotEnv, block_ids, bot_env, card_state, text_of, user_turn

OTHER = "C0PAYMENTS"
CONFIG = f"""
[alerts.pagerduty]
listen = "127.0.0.1:0"
secret_env = "OPSLOOP_PAGERDUTY_WEBHOOK_SECRET"
routes = {{ {pd.SERVICE} = "{CHANNEL}", "*" = "{OTHER}" }}
"""
ENV = {"OPSLOOP_PAGERDUTY_WEBHOOK_SECRET": pd.SECRET}


async def post(
    env: BotEnv, payload: dict[str, Any], *secrets: str, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    assert env.ops.alerts is not None
    live = env.ops.alerts.sources["pagerduty"]
    assert isinstance(live, ThreadedAlerts) and live.port
    body, signed = pd.signed(payload, *secrets)
    url = f"http://127.0.0.1:{live.port}/pagerduty"
    async with aiohttp.ClientSession() as session, session.post(url, data=body, headers=headers or signed) as r:
        return r.status, await r.text()


def outcome(answer: tuple[int, str]) -> str:
    assert answer[0] == 200, answer
    return str(json.loads(answer[1]).get("outcome", json.loads(answer[1])["status"]))


def groups(env: BotEnv) -> list[Any]:
    with env.ledger() as ledger:
        return [g for g in ledger.alert_groups() if g.source == "pagerduty"]


def triggered(event_id: str = "ev-trigger-1", **kw: Any) -> dict[str, Any]:
    return pd.event("incident.triggered", event_id=event_id, **kw)


async def root(env: BotEnv, channel: str = CHANNEL, timeout: float = 5.0) -> str:
    msg = await env.slack.wait_for_message(channel, lambda m: m.thread_ts is None and "checkout 5xx" in m.text)
    return msg.ts


async def test_a_page_starts_a_run_in_its_services_channel_and_its_acknowledge_and_resolve_reach_it(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.add_channel(OTHER, "payments", members=PEOPLE)
    fake_anthropic.script(
        reply(text("Looking at checkout."), tool_use("restart_service", {"host": "web-03", "unit": "nginx.service"})),
        reply(text("Restarted; the 5xx stopped.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        assert outcome(await post(env, triggered())) == "started"
        ts = await root(env)
        shown = text_of(fake_slack.message(CHANNEL, ts))  # type: ignore[arg-type]
        assert "*[P1] checkout 5xx (#1234)*" in shown and f"<{pd.ACCOUNT}/incidents/{pd.INCIDENT}>" in shown
        card = await env.card(CHANNEL, ts)  # the run started in the incident's thread
        [run] = env.runs()
        assert (run.channel, run.thread_ts, run.title) == (CHANNEL, ts, "[P1] checkout 5xx (#1234)")
        with env.ledger() as ledger:  # how the run's code finds its incident: its alert group's stored payload
            group = ledger.alert_group_of_run(run.id)
        assert group is not None and group.key == f"pd:{pd.INCIDENT}"
        facts = alert_facts(group.source, group.payload)
        assert facts is not None and facts.labels["pagerduty_incident_id"] == pd.INCIDENT
        first = " ".join(b.get("text", "") for b in user_turn((await env.requests(1))[0], 0))
        assert "[alert from PagerDuty in <#" in first
        assert "Started by: the alert PagerDuty page #1234: checkout 5xx, firing since 2026-12-01 10:00:00" in first
        for part in ("Service: checkout-api (id PF9KMXH)", "Urgency: high; priority: P1", "Details: 5xx ratio 12%"):
            assert part in first
        assert fake_slack.messages.get(OTHER, []) == []

        assert outcome(await post(env, pd.event("incident.acknowledged", event_id="ev-ack"))) == "changed"
        await fake_slack.wait_for_message(CHANNEL, lambda m: m.thread_ts == ts and "acknowledged by" in m.text)
        assert outcome(await post(env, pd.event("incident.resolved", event_id="ev-res", status="resolved"))) == (
            "resolved"
        )
        await fake_slack.wait_for_message(CHANNEL, lambda m: m.thread_ts == ts and "#1234 resolved" in m.text)
        # the card waiting when it resolved says so, and its approval stays possible
        flagged = await fake_slack.wait_for_message(
            CHANNEL, lambda m: m.ts == card.ts and "approval_alert" in block_ids(m) and card_state(m) == "pending"
        )
        assert "PagerDuty said this alert is resolved while this waited" in text_of(flagged)
        await env.approve(card, BOB)
        await env.wait_final(CHANNEL, ts)
        said = " ".join(b.get("text", "") for b in user_turn((await env.requests(2))[1]))
        # each under opsloop's own marker, naming its sender
        assert "[alert update from PagerDuty] PagerDuty #1234 acknowledged by Tenex Engineer" in said
        assert "[alert update from PagerDuty] PagerDuty #1234 resolved by Tenex Engineer" in said
        assert "Alertmanager" not in said
        assert len(env.runs()) == 1
        decided = fake_slack.message(CHANNEL, card.ts)
        assert decided is not None and card_state(decided) == "approved" and "approval_alert" in block_ids(decided)

        # another service's page goes to the "*" route's channel
        other = triggered("ev-trigger-2", id_="PXYZ123", service="PSOMETHING")
        assert outcome(await post(env, other)) == "started"
        await root(env, OTHER)


async def test_a_forged_or_missing_signature_is_a_401_and_stores_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        assert (await post(env, triggered(), "forged-secret"))[0] == 401
        assert (await post(env, triggered(), headers={"Content-Type": "application/json"}))[0] == 401
        body, headers = pd.signed(triggered())
        assert (await post(env, json.loads(body) | {"extra": 1}, headers=headers))[0] == 401  # not the signed body
        assert groups(env) == [] and env.runs() == []
        assert fake_slack.messages.get(CHANNEL, []) == []
        assert outcome(await post(env, triggered(), "old-secret", pd.SECRET)) == "started"  # a rotation's pair


async def test_a_redelivered_page_starts_nothing_new_and_an_unknown_incidents_update_opens_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Looked.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        assert outcome(await post(env, triggered())) == "started"
        assert outcome(await post(env, triggered())) == "duplicate"  # PagerDuty's retry: the same event id
        assert outcome(await post(env, triggered("ev-trigger-again"))) == "repeat"  # the same incident
        ts = await root(env)
        await env.wait_final(CHANNEL, ts)
        assert outcome(await post(env, triggered("ev-trigger-third"))) == "repeat"  # said once in its thread
        said = await fake_slack.wait_for_message(CHANNEL, lambda m: m.thread_ts == ts and "again" in m.text)
        assert said.text.startswith("PagerDuty sent this alert again with nothing new: nothing new was started")
        ack = pd.event("incident.acknowledged", event_id="ev-ack-unknown", id_="PUNSEEN")
        assert outcome(await post(env, ack)) == "ignored"
        service = {"event": {"id": "ev-svc", "event_type": "service.updated", "data": {"id": pd.SERVICE}}}
        assert outcome(await post(env, service)) == "ignored"
        assert len(env.runs()) == 1 and len(groups(env)) == 1
        assert len([m for m in fake_slack.messages[CHANNEL] if m.thread_ts is None]) == 1


async def test_two_replicas_receiving_one_page_and_its_redeliveries_start_one_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, db_url: str
) -> None:
    """Two apps on one store (a SQLite file, then Postgres), PagerDuty's event reaching both, twice each."""
    fake_anthropic.script(reply(text("Checkout is back.")))
    shared = {**ENV, "OPSLOOP_DB": db_url}
    async with (
        bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=shared) as one,
        bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=shared) as two,
    ):
        answers = await asyncio.gather(*(post(env, triggered()) for env in (one, two, one, two)))
        assert sorted(outcome(a) for a in answers) == ["duplicate", "duplicate", "duplicate", "started"]
        ts = await root(one)
        await one.wait_final(CHANNEL, ts, timeout=20)
        await one.ops.outbox.settle()
        await two.ops.outbox.settle()
        assert len(one.runs()) == 1 and len(groups(one)) == 1
        assert len([m for m in fake_slack.messages[CHANNEL] if m.thread_ts is None]) == 1
