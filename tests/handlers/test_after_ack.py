"""Work that waits for the acks of the deliveries in hand (`AfterAck.spawn(..., after_deliveries=True)`): the
:eyes: reactions and the starts of the runs a burst of mentions stored go out after the burst's acks, not between
them. Driven through handlers.socket_mode's Socket Mode handler and bolt against the Slack stand-in."""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from handlers import after_ack
from handlers.after_ack import AfterAck
from handlers.http_mode import slack_doors
from handlers.socket_mode import SocketMode
from tests.support.fakes.slack import FakeSlack, mention_event
from tests.support.harness import sign

TIMEOUT = 10
SIGNING_SECRET = "test-signing-secret"


class _TwoMentions:
    """An app whose listener, for mention A, spawns work after the deliveries in hand and then plain work
    (`a_plain_ran`: tasks start in the order they were made, so the first had its chance to run by then); for
    mention B, holds B in hand until `release_b` is set. `order` says what happened when."""

    def __init__(self, slack: FakeSlack, gate: AfterAck, **app_kw: Any) -> None:
        self.release_b, self.b_in_hand, self.a_plain_ran = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.order: list[str] = []
        self.app = AsyncApp(
            client=AsyncWebClient(token=slack.bot_token, base_url=slack.api_url),
            process_before_response=True,  # as bot/app/wiring.py: the ack waits for the listener
            **app_kw,
        )

        async def record() -> None:
            self.order.append("work of A")

        @self.app.event("app_mention")
        async def on_mention(event: dict[str, Any]) -> None:
            if "A" in event["text"]:
                gate.spawn(record(), name="a", after_deliveries=True)
                gate.spawn(_set(self.a_plain_ran), name="a-plain")
            else:
                self.b_in_hand.set()
                await self.release_b.wait()
                self.order.append("B handled")


async def test_work_after_deliveries_waits_until_the_deliveries_in_hand_are_acked(fake_slack: FakeSlack) -> None:
    """Mention B is being handled when mention A is acked and spawns its work: A's work waits for B's ack."""
    gate = AfterAck()
    two = _TwoMentions(fake_slack, gate)
    socket = SocketMode(two.app, fake_slack.app_token, after_ack=gate)
    await socket.connect_async()
    try:
        await fake_slack.wait_connected(timeout=TIMEOUT)
        b = await fake_slack.send_event(mention_event("C1", "U1", "<@UBOT> B"))
        await asyncio.wait_for(two.b_in_hand.wait(), TIMEOUT)
        a = await fake_slack.send_event(mention_event("C1", "U1", "<@UBOT> A"))
        await fake_slack.wait_ack(a, timeout=TIMEOUT)
        await asyncio.wait_for(two.a_plain_ran.wait(), TIMEOUT)  # A's work had its chance, and did not take it
        assert (two.order, b in fake_slack.acks) == ([], False)
        two.release_b.set()
        await fake_slack.wait_ack(b, timeout=TIMEOUT)
        await asyncio.wait_for(gate.close(), TIMEOUT)
        assert two.order == ["B handled", "work of A"]
    finally:
        await socket.close_async()


async def test_http_mode_counts_its_deliveries_the_same_way(fake_slack: FakeSlack) -> None:
    """HTTP mode: mention B's request is in hand (its listener runs, no response yet) when mention A's request is
    answered and spawns its work: the work waits for B's response."""
    gate = AfterAck()
    two = _TwoMentions(fake_slack, gate, signing_secret=SIGNING_SECRET)
    web_app = two.app.web_app(path="/slack/events")
    web_app.middlewares.append(slack_doors(gate, SIGNING_SECRET))
    async with TestServer(web_app, host="127.0.0.1") as server, TestClient(server) as http:

        async def post(text: str) -> int:
            body = json.dumps(_callback(fake_slack, mention_event("C1", "U1", f"<@UBOT> {text}"))).encode()
            return (await http.post("/slack/events", data=body, headers=sign(body, secret=SIGNING_SECRET))).status

        b = asyncio.ensure_future(post("B"))
        await asyncio.wait_for(two.b_in_hand.wait(), TIMEOUT)
        assert await post("A") == 200
        await asyncio.wait_for(two.a_plain_ran.wait(), TIMEOUT)  # A's work had its chance, and did not take it
        assert (two.order, b.done()) == ([], False)
        two.release_b.set()
        assert await asyncio.wait_for(b, TIMEOUT) == 200
        await asyncio.wait_for(gate.close(), TIMEOUT)
        assert two.order == ["B handled", "work of A"]


def _callback(slack: FakeSlack, event: dict[str, Any]) -> dict[str, Any]:
    return {
        "token": "unused",
        "team_id": slack.team_id,
        "api_app_id": slack.app_id,
        "event": event,
        "type": "event_callback",
        "event_id": f"Ev{event['ts'].replace('.', '')}",
        "event_time": int(time.time()),
        "authorizations": [{"team_id": slack.team_id, "user_id": slack.bot_user_id, "is_bot": True}],
    }


async def test_a_delivery_read_and_queued_holds_the_work_too() -> None:
    gate, queued, ran = AfterAck(), [1], asyncio.Event()

    async def work() -> None:
        ran.set()

    plain_ran = asyncio.Event()
    with gate.delivering(lambda: queued[0]):
        gate.spawn(work(), name="w", after_deliveries=True)
        gate.spawn(_set(plain_ran), name="plain")  # starts after the first: that one had its chance by then
    await asyncio.wait_for(plain_ran.wait(), TIMEOUT)  # none in hand, one queued: still waiting
    assert not ran.is_set()
    queued[0] = 0
    await asyncio.wait_for(ran.wait(), TIMEOUT)


async def test_a_steady_stream_of_deliveries_never_starves_the_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(after_ack, "QUIET_WAIT_S", 0.05)
    gate, ran = AfterAck(), asyncio.Event()

    async def work() -> None:
        ran.set()

    with gate.delivering():  # never ends while the work waits
        gate.spawn(work(), name="w", after_deliveries=True)
        await asyncio.wait_for(ran.wait(), TIMEOUT)


async def test_work_cancelled_while_waiting_is_closed_not_left_unawaited() -> None:
    gate = AfterAck()

    async def work() -> None:
        raise AssertionError("never runs")

    coro = work()
    with gate.delivering():
        task = gate.spawn(coro, name="w", after_deliveries=True)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED


async def test_work_spawned_plainly_runs_at_once_even_with_deliveries_in_hand() -> None:
    gate, ran = AfterAck(), asyncio.Event()

    async def work() -> None:
        ran.set()

    with gate.delivering():
        gate.spawn(work(), name="w")
        await asyncio.wait_for(ran.wait(), TIMEOUT)


async def _set(event: asyncio.Event) -> None:
    event.set()
