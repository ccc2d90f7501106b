"""Store, then ack: a mention or reply is durable before Slack gets its ack, and a store failure gets no ack.

The app runs with bolt's process_before_response, so the ack leaves only once the listener has stored the
delivery. The store is made to fail by SQLite itself: a trigger (created on a second connection, as an
operator's sqlite3 shell could) aborts the insert the listener's transaction needs. Socket Mode then sends
no ack and Slack redelivers; HTTP mode answers 500 and Slack retries. The event claim is in the same
transaction, so the redelivery is not mistaken for a duplicate.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from bot.core.types import ApprovalState, InboxState
from bot.run.approvals import supersede_by_reply
from bot.store import Ledger
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, mention_event, message_event
from tests.support.harness import ALICE, BOB, CHANNEL, BotEnv, bot_env, card_state, sign, text_of

TASK = "web-03 is paging: disk full on /var, please fix"
RESTART = {"host": "web-03", "unit": "nginx.service"}
DAY = 24 * 3600


def fail_inserts(env: BotEnv, table: str) -> None:
    """Every INSERT into `table` aborts, as a full disk would fail it (SQLite itself refuses)."""
    with env.ledger() as ledger:
        ledger.db.execute(
            f"CREATE TRIGGER fail_{table} BEFORE INSERT ON {table} "
            "BEGIN SELECT RAISE(ABORT, 'simulated store failure'); END"
        )


def heal(env: BotEnv, table: str) -> None:
    with env.ledger() as ledger:
        ledger.db.execute(f"DROP TRIGGER fail_{table}")


def events(env: BotEnv) -> list[str]:
    with env.ledger() as ledger:
        return [r["event_id"] for r in ledger.db.query("SELECT event_id FROM events ORDER BY event_id")]


async def take_listener_errors(env: BotEnv) -> list[str]:
    """Once a listener run failed: the failures the test caused (the harness fails a test on any listener
    error left over). Bolt records the error, then the run's completion, which wakes the waiter."""
    listeners = env.listeners
    async with asyncio.timeout(5), listeners.changed:
        await listeners.changed.wait_for(lambda: bool(listeners.errors) and listeners.completed >= listeners.arrived)
    errors = [str(e) for e in listeners.errors]
    listeners.errors.clear()
    return errors


# --------------------------------------------------------------------------------------
# Socket Mode
# --------------------------------------------------------------------------------------


async def test_a_mention_is_stored_before_its_ack(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("/var on web-03 is at 100%.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        envelope = await env.send(
            mention_event(CHANNEL, ALICE, TASK, bot_user_id=fake_slack.bot_user_id), event_id="Ev0STORED"
        )
        await fake_slack.wait_ack(envelope)
        # No waiting past the ack: by then the run and the event claim are committed.
        assert [(r.requester, r.task) for r in env.runs()] == [(ALICE, TASK)]
        assert events(env) == ["Ev0STORED"]
        await env.wait_final(CHANNEL, env.runs()[0].thread_ts)


async def test_a_mention_the_store_refuses_gets_no_ack_and_its_redelivery_starts_the_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("/var on web-03 is at 100%.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        fail_inserts(env, "runs")
        event = mention_event(CHANNEL, ALICE, TASK, bot_user_id=fake_slack.bot_user_id)
        first = await env.send(event, event_id="Ev0MENTION")
        assert await take_listener_errors(env) == ["simulated store failure"]
        assert (env.runs(), events(env)) == ([], [])  # the claim rolled back with the run
        assert not env.reacted(CHANNEL, event["ts"])

        heal(env, "runs")
        again = await env.send(event, event_id="Ev0MENTION", retry_attempt=1)  # Slack redelivers: no ack came
        await fake_slack.wait_ack(again)
        await env.wait_reaction(CHANNEL, event["ts"])
        assert "/var" in text_of(await env.wait_final(CHANNEL, event["ts"]))
        assert first not in fake_slack.acks  # the failed delivery was never acked
        assert [r.requester for r in env.runs()] == [ALICE]


async def test_a_reply_the_store_refuses_gets_no_ack_and_supersedes_nothing_until_redelivered(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(text("Restarting nginx."), tool_use("restart_service", RESTART)),
        reply(text("Not restarting: bob asked to check the logs first.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        await env.wait_idle()
        fail_inserts(env, "inbox")
        event = message_event(channel, BOB, "hold on, check the logs first", thread_ts=ts)
        first = await env.send(event, event_id="Ev0REPLY")
        assert await take_listener_errors(env) == ["simulated store failure"]
        (approval,) = [e.approval for e in env.audit()]
        assert approval.state == ApprovalState.PENDING  # the supersede rolled back with the inbox row
        assert "Ev0REPLY" not in events(env)

        heal(env, "inbox")
        again = await env.send(event, event_id="Ev0REPLY", retry_attempt=1)
        await fake_slack.wait_ack(again)
        await env.wait_reaction(channel, event["ts"])
        superseded = await env.card(channel, ts, state="superseded")
        assert superseded.ts == card.ts and card_state(superseded) == "superseded"
        await env.wait_final(channel, ts)
        assert first not in fake_slack.acks
        with env.ledger() as ledger:
            (run,) = ledger.list_runs()
            assert [(i.user, i.state) for i in ledger.inbox(run.id)] == [(BOB, InboxState.SUPERSEDING)]


async def test_a_click_is_acked_after_its_decision_is_stored(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(text("Restarting nginx."), tool_use("restart_service", RESTART)),
        reply(text("nginx restarted.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        envelope = await env.approve(card, BOB)
        await fake_slack.wait_ack(envelope)
        (approval,) = [e.approval for e in env.audit()]
        assert (approval.state, approval.decided_by) == (ApprovalState.APPROVED, BOB)
        await env.wait_final(channel, ts)


# --------------------------------------------------------------------------------------
# HTTP mode
# --------------------------------------------------------------------------------------


def _callback(slack: FakeSlack, event: dict[str, Any], event_id: str) -> bytes:
    slack.add_message(CHANNEL, event["user"], event["text"], ts=event["ts"])
    return json.dumps(
        {
            "token": "unused",
            "team_id": slack.team_id,
            "api_app_id": slack.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(time.time()),
            "authorizations": [{"team_id": slack.team_id, "user_id": slack.bot_user_id, "is_bot": True}],
        }
    ).encode()


async def test_http_mode_answers_500_when_the_store_fails_and_200_to_slacks_retry(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Looking at web-03 over HTTP mode: /var is full.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, http=True) as env:
        fail_inserts(env, "runs")
        event = mention_event(CHANNEL, ALICE, TASK, bot_user_id=fake_slack.bot_user_id)
        body = _callback(fake_slack, event, "Ev0HTTP")
        status, _ = await env.post_http(body, sign(body))
        assert status == 500
        assert await take_listener_errors(env) == ["simulated store failure"]
        assert env.runs() == []

        heal(env, "runs")
        status, _ = await env.post_http(
            body, {**sign(body), "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_error"}
        )
        assert status == 200
        assert [r.requester for r in env.runs()] == [ALICE]  # stored before the 200
        assert "HTTP mode" in text_of(await env.wait_final(CHANNEL, event["ts"]))


# --------------------------------------------------------------------------------------
# the store's side: one transaction per delivery, and the dedupe table pruned
# --------------------------------------------------------------------------------------


def _mention(ledger: Ledger, event_id: str, ts: str = "1700000000.000100") -> Any:
    return ledger.accept_mention(
        event_id,
        channel=CHANNEL,
        thread_ts=ts,
        requester=ALICE,
        task=TASK,
        prompt=TASK,
        model="claude-sonnet-5-5",
        mention_ts=ts,
        on_reply=supersede_by_reply,
    )


def test_accept_mention_claims_the_event_and_opens_the_run_together(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "opsloop.db")
    ledger.db.execute("CREATE TRIGGER no_runs BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    with pytest.raises(sqlite3.IntegrityError):
        _mention(ledger, "Ev1")
    assert (ledger.list_runs(), ledger.claim_event("Ev1")) == ([], True)  # nothing kept, the claim included

    ledger.db.execute("DROP TRIGGER no_runs")
    accepted = _mention(ledger, "Ev2")
    assert accepted is not None and accepted.created and accepted.redirect is None
    assert _mention(ledger, "Ev2") is None  # a redelivery
    redirect = _mention(ledger, "Ev3", ts="1700000000.000100")  # the thread's run is going: a redirect
    assert redirect is not None and not redirect.created and redirect.run.id == accepted.run.id
    assert redirect.redirect is not None and redirect.redirect.item.state == InboxState.QUEUED
    ledger.close()


def test_accept_reply_supersedes_pending_approvals_and_stores_the_reply_together(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "opsloop.db")
    accepted = _mention(ledger, "Ev1")
    assert accepted is not None
    run = accepted.run
    approval = ledger.create_approval(
        run_id=run.id,
        tool_use_id="toolu_1",
        tool="restart_service",
        category="mutating",
        args=RESTART,
        requester=ALICE,
        expires_at=time.time() + 600,
    )
    ledger.db.execute("CREATE TRIGGER no_inbox BEFORE INSERT ON inbox BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    with pytest.raises(sqlite3.IntegrityError):
        ledger.accept_reply(
            "Ev2",
            channel=CHANNEL,
            thread_ts=run.thread_ts,
            ts="1700000000.000200",
            user=BOB,
            text="check the logs first",
            on_reply=supersede_by_reply,
        )
    assert ledger.get_approval(approval.id).state == ApprovalState.PENDING

    ledger.db.execute("DROP TRIGGER no_inbox")
    stored = ledger.accept_reply(
        "Ev2",
        channel=CHANNEL,
        thread_ts=run.thread_ts,
        ts="1700000000.000200",
        user=BOB,
        text="check the logs first",
        on_reply=supersede_by_reply,
    )
    assert stored is not None and stored.superseded == (approval.id,)
    assert (stored.item.user, stored.item.state) == (BOB, InboxState.SUPERSEDING)
    decided = ledger.get_approval(approval.id)
    assert (decided.state, decided.cause, decided.decided_by) == (ApprovalState.SUPERSEDED, "reply", BOB)
    assert (
        ledger.accept_reply(
            "Ev2",
            channel=CHANNEL,
            thread_ts=run.thread_ts,
            ts="1700000000.000200",
            user=BOB,
            text="check the logs first",
            on_reply=supersede_by_reply,
        )
        is None
    )
    assert (
        ledger.accept_reply(
            "Ev3",
            channel=CHANNEL,
            thread_ts="1700000099.000100",
            ts="1700000099.000200",
            user=BOB,
            text="no run in this thread",
            on_reply=supersede_by_reply,
        )
        is None
    )
    ledger.close()


def test_prune_events_forgets_only_event_ids_older_than_the_cutoff(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "opsloop.db")
    assert ledger.claim_event("EvOLD") and ledger.claim_event("EvNEW")
    ledger.db.execute("UPDATE events SET received_at = ? WHERE event_id = 'EvOLD'", [time.time() - 2 * DAY])

    assert ledger.prune_events(time.time() - DAY) == 1
    assert (ledger.claim_event("EvOLD"), ledger.claim_event("EvNEW")) == (True, False)
    ledger.close()


async def test_the_bot_prunes_day_old_event_ids_when_it_starts(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        with env.ledger() as ledger:
            ledger.claim_event("EvOLD")
            ledger.claim_event("EvRECENT")
            ledger.db.execute("UPDATE events SET received_at = ? WHERE event_id = 'EvOLD'", [time.time() - 2 * DAY])
        await env.restart()
        assert events(env) == ["EvRECENT"]
