"""The fake Slack, driven by the real slack_sdk clients and a real bolt AsyncApp."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.models.blocks.blocks import PlanBlock, TaskCardBlock
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.playground import standin
from tests.support.fakes.slack import (
    FakeSlack,
    block_action_payload,
    mention_event,
    message_event,
)

TIMEOUT = 5


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(bot_token="xoxb-test", app_token="xapp-test") as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)


def _task(**over: Any) -> dict[str, Any]:
    """A valid task_card, with `over` replacing fields (None drops one)."""
    task = {
        "type": "task_card",
        "task_id": "toolu_1",
        "title": "check_disk on web-03",
        "status": "complete",
        "output": {
            "type": "rich_text",
            "elements": [{"type": "rich_text_section", "elements": [{"type": "text", "text": "ok"}]}],
        },
    }
    task.update(over)
    return {k: v for k, v in task.items() if v is not None}


async def test_plan_and_task_cards_as_the_sdk_builds_them_are_accepted(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    plan = PlanBlock(
        title="What opsloop is doing",
        tasks=[
            TaskCardBlock(task_id="a", title="check_disk on web-03", status="in_progress"),
            TaskCardBlock(task_id="b", title="clean_logs", status="pending", output=_task()["output"]),
        ],
    ).to_dict()
    resp = await client.chat_postMessage(channel="C1", text="status", blocks=[plan, _task(task_id="c")])
    assert resp["ok"] and slack.messages["C1"][0].blocks == [plan, _task(task_id="c")]


async def test_views_publish_takes_a_home_view_of_at_most_100_blocks(slack: FakeSlack, client: AsyncWebClient) -> None:
    slack.add_user("U0ALICE", "alice")
    section = {"type": "section", "text": {"type": "mrkdwn", "text": "x"}}
    await client.views_publish(user_id="U0ALICE", view={"type": "home", "blocks": [section] * 100})
    for view, error in (
        ({"type": "home", "blocks": [section] * 101}, "invalid_blocks"),
        ({"type": "modal", "blocks": [section]}, "invalid_arguments"),
    ):
        with pytest.raises(SlackApiError) as exc:
            await client.views_publish(user_id="U0ALICE", view=view)
        assert exc.value.response["error"] == error
    assert len(slack.home_views["U0ALICE"]["blocks"]) == 100


def _button(action_id: str, value: str, text: str = "Approve") -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": text},
        "value": value,
    }


def _section(text: str, block_id: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "section", "text": {"type": "mrkdwn", "text": text}}
    if block_id:
        block["block_id"] = block_id
    return block


CARD = [
    _section("*restart_service* `web-1`", block_id="summary"),
    {
        "type": "actions",
        "block_id": "decision",
        "elements": [
            _button("opsloop.approve", "appr-1", "Approve"),
            _button("opsloop.deny", "appr-1", "Deny"),
        ],
    },
]


# --------------------------------------------------------------------------------------
# Web API
# --------------------------------------------------------------------------------------


async def test_auth_test_identifies_the_bot(slack: FakeSlack, client: AsyncWebClient) -> None:
    resp = await client.auth_test()
    assert (resp["user_id"], resp["bot_id"], resp["team_id"]) == ("UBOT", "BBOT", "T1")
    assert resp["is_enterprise_install"] is False
    assert slack.calls[-1].method == "auth.test"
    assert slack.calls[-1].token == "xoxb-test"


@pytest.mark.parametrize(("token", "error"), [(None, "not_authed"), ("xoxb-wrong", "invalid_auth")])
async def test_bad_or_missing_token_is_rejected(slack: FakeSlack, token: str | None, error: str) -> None:
    with pytest.raises(SlackApiError) as exc:
        await AsyncWebClient(token=token, base_url=slack.api_url).chat_postMessage(channel="C1", text="x")
    assert exc.value.response["error"] == error


async def test_post_message_then_replies_shows_thread(slack: FakeSlack, client: AsyncWebClient) -> None:
    root = await client.chat_postMessage(channel="C1", text="incident: disk full")
    reply = await client.chat_postMessage(channel="C1", text="looking", thread_ts=root["ts"])
    assert reply["message"]["user"] == "UBOT" and reply["message"]["bot_id"] == "BBOT"
    assert float(reply["ts"]) > float(root["ts"])

    thread = await client.conversations_replies(channel="C1", ts=root["ts"])

    assert [m["text"] for m in thread["messages"]] == ["incident: disk full", "looking"]
    assert thread["messages"][0]["reply_count"] == 1
    assert thread["messages"][1]["thread_ts"] == root["ts"]
    assert thread["has_more"] is False


async def test_post_metadata_comes_back_from_replies_only_when_asked_for(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    root = await client.chat_postMessage(channel="C1", text="incident: disk full")
    metadata = {"event_type": "opsloop_post", "event_payload": {"id": "out_1"}}
    posted = await client.chat_postMessage(channel="C1", text="card", thread_ts=root["ts"], metadata=metadata)

    plain = await client.conversations_replies(channel="C1", ts=root["ts"])
    full = await client.conversations_replies(channel="C1", ts=root["ts"], include_all_metadata=True)

    assert ["metadata" in m for m in plain["messages"]] == [False, False]
    assert [(m["ts"], m.get("metadata")) for m in full["messages"]] == [(root["ts"], None), (posted["ts"], metadata)]


async def test_malformed_metadata_is_invalid_metadata_format(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as exc:
        await client.chat_postMessage(channel="C1", text="x", metadata={"event_type": "opsloop_post"})
    assert exc.value.response["error"] == "invalid_metadata_format"


async def test_update_replaces_text_and_blocks_of_own_message(slack: FakeSlack, client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel="C1", text="approve?", blocks=CARD)

    await client.chat_update(channel="C1", ts=posted["ts"], text="Approved by <@U2>", blocks=[])

    msg = slack.message("C1", posted["ts"])
    assert msg is not None
    assert (msg.text, msg.blocks) == ("Approved by <@U2>", None)
    assert msg.edited is not None and msg.edited["user"] == "UBOT"
    assert slack.calls_to("chat.update")[0].args["blocks"] == []


async def test_update_of_unknown_message_is_message_not_found(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as exc:
        await client.chat_update(channel="C1", ts="1600000000.000100", text="x")
    assert exc.value.response["error"] == "message_not_found"


async def test_update_of_someone_elses_message_is_cant_update(slack: FakeSlack, client: AsyncWebClient) -> None:
    theirs = slack.add_message("C1", "U1", "my message")
    with pytest.raises(SlackApiError) as exc:
        await client.chat_update(channel="C1", ts=theirs.ts, text="hijacked")
    assert exc.value.response["error"] == "cant_update_message"
    assert theirs.text == "my message"


async def test_second_identical_reaction_is_already_reacted(slack: FakeSlack, client: AsyncWebClient) -> None:
    mention = slack.add_message("C1", "U1", "<@UBOT> help")
    await client.reactions_add(channel="C1", timestamp=mention.ts, name="eyes")
    with pytest.raises(SlackApiError) as exc:
        await client.reactions_add(channel="C1", timestamp=mention.ts, name="eyes")
    assert exc.value.response["error"] == "already_reacted"
    assert slack.reactions == [("C1", mention.ts, "eyes")]


@pytest.mark.parametrize(
    ("blocks", "pointer"),
    [
        pytest.param([_section("x" * 3001)], "/blocks/0/text/text", id="section-text-3001"),
        pytest.param([{"type": "divider"}] * 51, "/blocks]", id="51-blocks"),
        pytest.param(
            [
                {"type": "actions", "elements": [_button("opsloop.approve", "a")]},
                {"type": "actions", "elements": [_button("opsloop.approve", "b")]},
            ],
            "/blocks/1/elements/0/action_id",
            id="duplicate-action_id",
        ),
        pytest.param(
            [{"type": "plan", "title": "t", "tasks": [_task(status="done")]}],
            "/blocks/0/tasks/0/status",
            id="task-status-enum",
        ),
        pytest.param(
            [{"type": "plan", "title": "t", "tasks": [_task(status=None)]}],
            "/blocks/0/tasks/0]",
            id="task-status-required",
        ),
        pytest.param(
            [{"type": "plan", "title": "t", "tasks": [_task(task_id="")]}], "/blocks/0/tasks/0]", id="task-id-required"
        ),
        pytest.param([_task(title="x" * 256)], "/blocks/0/title", id="task-title-256"),
        pytest.param([{"type": "plan", "tasks": [_task()]}], "/blocks/0]", id="plan-title-required"),
        pytest.param([_task(output={"type": "mrkdwn", "text": "x"})], "/blocks/0/output", id="task-output-rich-text"),
        pytest.param(
            [{"type": "plan", "title": "t", "tasks": [_task(), _task()]}],
            "/blocks/0/tasks/1/task_id",
            id="duplicate-task_id",
        ),
    ],
)
async def test_invalid_blocks_are_rejected_with_errors(
    slack: FakeSlack, client: AsyncWebClient, blocks: list[dict[str, Any]], pointer: str
) -> None:
    with pytest.raises(SlackApiError) as exc:
        await client.chat_postMessage(channel="C1", text="card", blocks=blocks)
    resp = exc.value.response
    assert resp["error"] == "invalid_blocks"
    assert len(resp["errors"]) == 1 and f"[json-pointer:{pointer}" in resp["errors"][0]
    assert resp["response_metadata"]["messages"] == [f"[ERROR] {resp['errors'][0]}"]
    assert slack.messages["C1"] == []


@pytest.mark.parametrize("method", ["chat.postMessage", "chat.update", "chat.postEphemeral"])
async def test_blocks_holding_more_than_12000_characters_of_text_are_msg_blocks_too_long(
    slack: FakeSlack, client: AsyncWebClient, method: str
) -> None:
    posted = await client.chat_postMessage(channel="C1", text="first")
    where = {"chat.postMessage": {}, "chat.update": {"ts": posted["ts"]}, "chat.postEphemeral": {"user": "U1"}}[method]
    at_limit = [_section("x" * 3000, f"b{i}") for i in range(4)]  # each section valid, 12,000 in all
    await client.api_call(method, json={"channel": "C1", "text": "ok", "blocks": at_limit, **where})
    before = ([(m.ts, m.text) for m in slack.messages["C1"]], len(slack.ephemerals))
    over = [*at_limit, _section("x", "b4")]
    with pytest.raises(SlackApiError) as exc:
        await client.api_call(method, json={"channel": "C1", "text": "long", "blocks": over, **where})
    assert exc.value.response["error"] == "msg_blocks_too_long"
    assert ([(m.ts, m.text) for m in slack.messages["C1"]], len(slack.ephemerals)) == before


async def test_message_with_neither_text_nor_blocks_is_no_text(client: AsyncWebClient) -> None:
    # slack_sdk itself warns before sending a message without top-level text.
    with pytest.warns(UserWarning, match="top-level `text`"), pytest.raises(SlackApiError) as exc:
        await client.chat_postMessage(channel="C1")
    assert exc.value.response["error"] == "no_text"


async def test_form_encoded_blocks_arrive_as_json_string_and_are_decoded(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    # chat.postMessage normally goes as JSON; api_call(data=...) is what curl-style callers send.
    await client.api_call("chat.postMessage", data={"channel": "C1", "text": "card", "blocks": json.dumps(CARD)})
    call = slack.calls[-1]
    assert call.encoding == "form" and call.args["blocks"] == CARD
    assert slack.messages["C1"][0].blocks == CARD


@pytest.mark.slow
async def test_ratelimited_call_is_retried_after_retry_after(slack: FakeSlack) -> None:
    client = AsyncWebClient(
        token=slack.bot_token,
        base_url=slack.api_url,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)],
    )
    slack.fail_next("chat.postMessage", error="ratelimited", status=429, retry_after=1)

    resp = await client.chat_postMessage(channel="C1", text="hello")

    assert resp["ok"] is True
    first, second = slack.calls_to("chat.postMessage")
    assert (first.status, first.error, second.status) == (429, "ratelimited", 200)
    assert second.at - first.at >= 1  # Retry-After honoured (the handler adds up to 1 s jitter)
    assert [m.text for m in slack.messages["C1"]] == ["hello"]


async def test_ratelimited_call_without_retry_handler_raises_429(slack: FakeSlack, client: AsyncWebClient) -> None:
    slack.fail_next("chat.postMessage", error="ratelimited", status=429, retry_after=7)
    with pytest.raises(SlackApiError) as exc:
        await client.chat_postMessage(channel="C1", text="hello")
    assert exc.value.response.status_code == 429
    assert exc.value.response.headers["Retry-After"] == "7"
    assert exc.value.response["error"] == "ratelimited"
    # Only the next call was failed.
    assert (await client.chat_postMessage(channel="C1", text="hello"))["ok"] is True


async def test_usergroups_users_list(slack: FakeSlack, client: AsyncWebClient) -> None:
    slack.add_usergroup("S1", ["U1", "U2"])
    assert (await client.usergroups_users_list(usergroup="S1"))["users"] == ["U1", "U2"]
    with pytest.raises(SlackApiError) as exc:
        await client.usergroups_users_list(usergroup="S404")
    assert exc.value.response["error"] == "no_such_subteam"


async def test_users_info(slack: FakeSlack, client: AsyncWebClient) -> None:
    slack.add_user("U1", name="alice", real_name="Alice Smith")
    user = (await client.users_info(user="U1"))["user"]
    assert (user["id"], user["name"], user["is_bot"]) == ("U1", "alice", False)
    assert user["profile"] == {
        "display_name": "alice",
        "display_name_normalized": "alice",
        "real_name": "Alice Smith",
        "real_name_normalized": "Alice Smith",
        "team": "T1",
    }
    with pytest.raises(SlackApiError) as exc:
        await client.users_info(user="U404")
    assert exc.value.response["error"] == "user_not_found"


async def test_response_url_replace_original_updates_the_message(slack: FakeSlack, client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel="C1", text="approve?", blocks=CARD)
    url = slack.new_response_url("C1", posted["ts"])

    resp = await AsyncWebhookClient(url).send(text="Denied", replace_original=True)

    assert resp.status_code == 200
    assert slack.responses[0].body == {"text": "Denied", "replace_original": True}
    assert slack.message("C1", posted["ts"]).text == "Denied"  # type: ignore[union-attr]


async def test_messages_stay_in_ts_order_and_are_found_by_ts_until_deleted(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    """Seeded messages out of order, posts in between: a channel reads oldest first, and `message` finds each by
    its ts (an index, not a scan) until a response_url deletes it."""
    for ts in ("30.000001", "10.000001", "20.000001"):
        slack.add_message("C1", "U1", f"at {ts}", ts=ts)
    posted = await client.chat_postMessage(channel="C1", text="approve?", blocks=CARD)
    assert [m.ts for m in slack.messages["C1"]] == ["10.000001", "20.000001", "30.000001", posted["ts"]]
    assert [slack.message("C1", ts).text for ts in ("10.000001", "30.000001")] == ["at 10.000001", "at 30.000001"]  # type: ignore[union-attr]
    await AsyncWebhookClient(slack.new_response_url("C1", posted["ts"])).send(text="", delete_original=True)
    assert slack.message("C1", posted["ts"]) is None and len(slack.messages["C1"]) == 3
    assert slack.acked_at == {}  # no envelope was sent, so none was acked


# --------------------------------------------------------------------------------------
# Socket Mode
# --------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def socket_mode(slack: FakeSlack, app: AsyncApp) -> AsyncIterator[AsyncSocketModeHandler]:
    """Connect bolt's real Socket Mode handler to the fake; always close it."""
    handler = AsyncSocketModeHandler(app, app_token=slack.app_token)
    try:
        await handler.connect_async()
        await slack.wait_connected(timeout=TIMEOUT)
        yield handler
    finally:
        await handler.close_async()


def _app(slack: FakeSlack) -> AsyncApp:
    return AsyncApp(client=AsyncWebClient(token=slack.bot_token, base_url=slack.api_url))


async def test_raw_socket_gets_hello_then_envelope_and_ack_is_recorded(slack: FakeSlack) -> None:
    async with aiohttp.ClientSession() as http, http.ws_connect(slack.ws_url) as ws:
        hello = await ws.receive_json(timeout=TIMEOUT)
        assert hello["type"] == "hello" and hello["connection_info"] == {"app_id": "A1"}

        env_id = await slack.send_event(mention_event("C1", "U1", "hi"), event_id="Ev0001")
        envelope = await ws.receive_json(timeout=TIMEOUT)
        assert envelope["envelope_id"] == env_id
        assert (envelope["type"], envelope["retry_attempt"], envelope["retry_reason"]) == ("events_api", 0, "")
        payload = envelope["payload"]
        assert (payload["type"], payload["event_id"], payload["api_app_id"]) == ("event_callback", "Ev0001", "A1")
        assert payload["authorizations"][0]["user_id"] == "UBOT"

        await ws.send_json({"envelope_id": env_id})
        assert await slack.wait_ack(env_id, timeout=TIMEOUT) == {"envelope_id": env_id}
        assert slack.ack_latency(env_id) >= 0  # the stand-in stamped when it read the ack


async def test_bolt_connects_with_the_app_token(slack: FakeSlack) -> None:
    async with socket_mode(slack, _app(slack)):
        (call,) = slack.calls_to("apps.connections.open")
        assert call.token == "xapp-test" and call.response["url"] == slack.ws_url
        assert slack.connections == 1


async def test_app_mention_reaches_bolt_listener_and_is_acked(slack: FakeSlack) -> None:
    app = _app(slack)
    bodies: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    @app.event("app_mention")
    async def on_mention(body: dict[str, Any], event: dict[str, Any], say: Any) -> None:
        await say(text="on it", thread_ts=event["ts"])
        bodies.put_nowait(body)

    async with socket_mode(slack, app):
        event = mention_event("C1", "U1", "disk full on web-1")
        env_id = await slack.send_event(event)

        assert await slack.wait_ack(env_id, timeout=TIMEOUT) == {"envelope_id": env_id}
        body = await asyncio.wait_for(bodies.get(), TIMEOUT)
        assert body["event"]["text"] == "<@UBOT> disk full on web-1"
        reply = await slack.wait_for_message("C1", where=lambda m: m.thread_ts == event["ts"], timeout=TIMEOUT)
        assert (reply.text, reply.user) == ("on it", "UBOT")
    # The mention itself is stored, so the thread reads like Slack's.
    assert [m.text for m in slack.thread("C1", event["ts"])] == [event["text"], "on it"]


async def test_block_action_reaches_bolt_action_listener_and_is_acked(slack: FakeSlack, client: AsyncWebClient) -> None:
    app = _app(slack)
    clicks: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    @app.action("opsloop.approve")
    async def on_approve(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        await client.chat_update(
            channel=body["channel"]["id"],
            ts=body["message"]["ts"],
            text=f"Approved by <@{body['user']['id']}>",
            blocks=[],
        )
        clicks.put_nowait(body)

    card = await client.chat_postMessage(channel="C1", text="approve?", blocks=CARD)
    stored = slack.message("C1", card["ts"])
    assert stored is not None
    async with socket_mode(slack, app):
        payload = block_action_payload("U2", "C1", card["ts"], "opsloop.approve", "appr-1", message=stored.to_api())
        env_id = await slack.send_interactive(payload)

        assert await slack.wait_ack(env_id, timeout=TIMEOUT) == {"envelope_id": env_id}
        body = await asyncio.wait_for(clicks.get(), TIMEOUT)
        assert body["actions"][0]["value"] == "appr-1" and body["actions"][0]["block_id"] == "decision"
        assert body["response_url"].startswith(slack.base_url)
        await slack.wait_for_call("chat.update", where=lambda c: c.ok, timeout=TIMEOUT)
    assert slack.message("C1", card["ts"]).text == "Approved by <@U2>"  # type: ignore[union-attr]


async def test_click_delivers_the_stored_card(slack: FakeSlack, client: AsyncWebClient) -> None:
    app = _app(slack)
    actions: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    @app.action("opsloop.deny")
    async def on_deny(ack: Any, action: dict[str, Any]) -> None:
        await ack()
        actions.put_nowait(action)

    card = await client.chat_postMessage(channel="C1", text="approve?", blocks=CARD)
    async with socket_mode(slack, app):
        env_id = await slack.click("U2", "C1", card["ts"], "opsloop.deny")
        await slack.wait_ack(env_id, timeout=TIMEOUT)
        action = await asyncio.wait_for(actions.get(), TIMEOUT)
    assert (action["value"], action["block_id"], action["text"]["text"]) == ("appr-1", "decision", "Deny")


async def test_duplicate_delivery_reaches_bolt_twice(slack: FakeSlack) -> None:
    app = _app(slack)
    retries: asyncio.Queue[list[str]] = asyncio.Queue()

    @app.event("app_mention")
    async def on_mention(body: dict[str, Any], request: Any) -> None:
        assert body["event_id"] == "Ev0DUP"
        retries.put_nowait(request.headers.get("x-slack-retry-num"))

    async with socket_mode(slack, app):
        event = mention_event("C1", "U1", "restart web-1")
        first = await slack.send_event(event, event_id="Ev0DUP")
        second = await slack.send_event(event, event_id="Ev0DUP", retry_attempt=1)

        await slack.wait_ack(first, timeout=TIMEOUT)
        await slack.wait_ack(second, timeout=TIMEOUT)
        seen = [await asyncio.wait_for(retries.get(), TIMEOUT) for _ in range(2)]
    # Bolt copies Socket Mode's retry_attempt into the HTTP-style header and does not dedupe.
    assert sorted(seen) == [["0"], ["1"]]
    assert len(slack.messages["C1"]) == 1  # the user's message is stored once


async def test_reconnect_after_disconnect_message(slack: FakeSlack) -> None:
    app = _app(slack)
    seen = asyncio.Event()

    @app.event("app_mention")
    async def on_mention() -> None:
        seen.set()

    async with socket_mode(slack, app):
        await slack.disconnect_socket("refresh_requested")
        await slack.wait_connected(timeout=TIMEOUT, connects=2)

        env_id = await slack.send_event(mention_event("C1", "U1", "still there?"))
        await slack.wait_ack(env_id, timeout=TIMEOUT)
        await asyncio.wait_for(seen.wait(), TIMEOUT)
    assert len(slack.calls_to("apps.connections.open")) == 2


def test_message_event_builder_shapes() -> None:
    plain = message_event("C1", "U1", "hello", thread_ts="1700000000.000100")
    assert (plain["type"], plain["channel_type"], plain["thread_ts"]) == ("message", "channel", "1700000000.000100")
    assert "client_msg_id" in plain and "bot_id" not in plain
    bot = message_event("C1", "U9", "beep", bot_id="B9", subtype="bot_message")
    assert (bot["bot_id"], bot["subtype"]) == ("B9", "bot_message") and "client_msg_id" not in bot


async def test_routed_delivery_reaches_the_named_connection_and_random_delivery_spreads(slack: FakeSlack) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(slack.ws_url) as one,
        http.ws_connect(slack.ws_url) as two,
    ):
        for ws in (one, two):
            assert (await ws.receive_json(timeout=TIMEOUT))["type"] == "hello"
        await slack.wait_connected(timeout=TIMEOUT, connects=2)

        with slack.to(1):
            first = await slack.send_event(mention_event("C1", "U1", "to one"))
        with slack.to(2):
            second = await slack.send_event(mention_event("C1", "U1", "to two"))
        assert (await one.receive_json(timeout=TIMEOUT))["envelope_id"] == first
        assert (await two.receive_json(timeout=TIMEOUT))["envelope_id"] == second
        with pytest.raises(LookupError), slack.to(3):
            await slack.send_event(mention_event("C1", "U1", "nobody"))

        slack.delivery = "random"
        sent = [await slack.send_event(mention_event("C1", "U1", f"spread {n}")) for n in range(40)]
        assert {slack.delivered_on[e] for e in sent} == {1, 2}


def test_each_stand_in_module_has_one_concern_and_stays_under_650_lines() -> None:
    folder = Path(standin.__file__).parent
    sizes = {p.name: len(p.read_text().splitlines()) for p in sorted(folder.glob("*.py"))}
    assert {name for name, size in sizes.items() if size > 650} == set()
    assert set(sizes) == {
        "__init__.py",
        "blockkit.py",
        "methods.py",
        "payloads.py",
        "records.py",
        "render.py",
        "slack.py",
        "workspace.py",
    }


def test_every_web_api_method_the_stand_in_serves_is_in_its_table() -> None:
    handlers = {
        name
        for cls in FakeSlack.__mro__
        for name, value in vars(cls).items()
        if callable(value)
        and name.startswith(
            (
                "_chat_",
                "_conversations_",
                "_users_",
                "_usergroups_",
                "_reactions_",
                "_views_",
                "_assistant_",
                "_auth_",
                "_apps_",
            )
        )
    }
    assert {f.__name__ for f in FakeSlack._METHODS.values()} == handlers
