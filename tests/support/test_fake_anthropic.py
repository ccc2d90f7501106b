"""The fake Anthropic server, driven by the real ``anthropic.AsyncAnthropic`` client (and its beta client).

The first sections pin the older-model behaviour (``OLD_MODEL``); the later ones the
current models: thinking, the prefix check, rejected parameters, thinking tokens, prices."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic
from anthropic.types import Message

from tests.support.fakes.anthropic import (
    DEFAULT_THINKING_SUMMARY,
    DEFAULT_THINKING_TOKENS,
    FakeAnthropic,
    count_tokens,
    error,
    redacted_thinking,
    repeating_text,
    reply,
    text,
    thinking,
    tool_use,
)

KEY = "sk-ant-test"
OLD_MODEL = "claude-sonnet-4-5"  # the pre-2026 behaviour, kept for every id but the current ones
MODEL = "claude-sonnet-5-5"
EPHEMERAL = {"type": "ephemeral"}
TOOL = {
    "name": "get_status",
    "description": "Status of a service",
    "input_schema": {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]},
}
BIG = "Incident runbook. " * 1200  # about 5,400 tokens: well above the 1,024-token cache minimum


@pytest.fixture
async def fake():
    async with FakeAnthropic(api_key=KEY) as server:
        yield server


@pytest.fixture
async def client(fake: FakeAnthropic):
    async with AsyncAnthropic(api_key=KEY, base_url=fake.base_url, max_retries=0) as c:
        yield c


def usage(input_tokens: int, output_tokens: int, creation: int = 0, read: int = 0) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": creation,
        "cache_read_input_tokens": read,
    }


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def cached(block: dict[str, Any], ttl: str | None = None) -> dict[str, Any]:
    return {**block, "cache_control": {**EPHEMERAL, **({"ttl": ttl} if ttl else {})}}


# --------------------------------------------------------------------------- replies


async def test_text_reply_non_stream(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("All systems nominal.")))

    msg = await client.messages.create(model=OLD_MODEL, max_tokens=256, messages=[user("status?")])

    assert msg.model_dump(exclude_none=True) == {
        "id": "msg_fake_0001",
        "type": "message",
        "role": "assistant",
        "model": OLD_MODEL,
        "content": [{"type": "text", "text": "All systems nominal."}],
        "stop_reason": "end_turn",
        "usage": usage(count_tokens(text("status?")), count_tokens([text("All systems nominal.")])),
    }
    assert msg._request_id == "req_fake_0001"
    [req] = fake.requests
    assert req.body == {"model": OLD_MODEL, "max_tokens": 256, "messages": [user("status?")]}
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert req.response == {**msg.model_dump(exclude_none=True), "stop_sequence": None}
    fake.assert_complete()


async def test_text_reply_stream_helper(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("All systems nominal.")))

    async with client.messages.stream(model=OLD_MODEL, max_tokens=256, messages=[user("status?")]) as stream:
        chunks = [chunk async for chunk in stream.text_stream]
        msg = await stream.get_final_message()

    assert "".join(chunks) == "All systems nominal."
    assert len(chunks) == 3  # the fake splits text into a few deltas
    assert msg.model_dump(exclude_none=True) == {
        "id": "msg_fake_0001",
        "type": "message",
        "role": "assistant",
        "model": OLD_MODEL,
        "content": [{"type": "text", "text": "All systems nominal."}],
        "stop_reason": "end_turn",
        "usage": usage(count_tokens(text("status?")), count_tokens([text("All systems nominal.")])),
    }
    assert fake.requests[0].body["stream"] is True
    assert fake.requests[0].cancelled is False


async def test_create_stream_true_sends_the_real_event_sequence(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("Rolling back."), tool_use("rollback", {"deploy": "d-42"}, id="toolu_rb")))

    stream = await client.messages.create(model=OLD_MODEL, max_tokens=256, messages=[user("fix it")], stream=True)
    events = [event async for event in stream]

    assert [(e.type, getattr(e, "index", None)) for e in events] == [
        ("message_start", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_delta", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
        ("message_delta", None),
        ("message_stop", None),
    ]
    start, delta = events[0], events[-2]
    assert start.message.content == []
    assert start.message.stop_reason is None
    assert events[6].content_block.model_dump() == {
        "type": "tool_use",
        "id": "toolu_rb",
        "name": "rollback",
        "input": {},
        "caller": None,
        "toolset_name": None,
    }
    assert "".join(e.delta.text for e in events[2:5]) == "Rolling back."
    assert "".join(e.delta.partial_json for e in events[7:10]) == '{"deploy": "d-42"}'
    assert delta.delta.stop_reason == "tool_use"
    expected_output = count_tokens([text("Rolling back."), tool_use("rollback", {"deploy": "d-42"}, id="toolu_rb")])
    assert (start.message.usage.input_tokens, delta.usage.output_tokens) == (
        count_tokens(text("fix it")),
        expected_output,
    )
    assert (start.message.usage.cache_creation_input_tokens, start.message.usage.cache_read_input_tokens) == (0, 0)


@pytest.mark.parametrize("stream", [False, True])
async def test_empty_and_max_tokens_replies(fake: FakeAnthropic, client: AsyncAnthropic, stream: bool) -> None:
    fake.script(reply(), reply(text("cut off"), stop_reason="max_tokens"))

    async def ask() -> Message:
        if not stream:
            return await client.messages.create(model=OLD_MODEL, max_tokens=5, messages=[user("hi")])
        async with client.messages.stream(model=OLD_MODEL, max_tokens=5, messages=[user("hi")]) as s:
            return await s.get_final_message()

    empty, truncated = await ask(), await ask()

    assert (empty.content, empty.stop_reason, empty.usage.output_tokens) == ([], "end_turn", 1)
    assert ([b.model_dump(exclude_none=True) for b in truncated.content], truncated.stop_reason) == (
        [text("cut off")],
        "max_tokens",
    )


async def test_tool_use_round_trip(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    def echo_tool_result(body: dict[str, Any]) -> Any:
        result = body["messages"][-1]["content"][0]
        return reply(text(f"{result['tool_use_id']} said {result['content']}"))

    call = tool_use("get_status", {"service": "api", "checks": ["db", "cache"]})
    fake.script(reply(text("Let me check."), call), echo_tool_result)
    messages: list[dict[str, Any]] = [user("Is the API up?")]

    async with client.messages.stream(model=OLD_MODEL, max_tokens=512, tools=[TOOL], messages=messages) as s:
        first = await s.get_final_message()

    assert first.stop_reason == "tool_use"
    assert [b.model_dump(exclude_none=True) for b in first.content] == [text("Let me check."), call]
    assert call["id"].startswith("toolu_")

    messages += [
        assistant([b.model_dump(exclude_none=True) for b in first.content]),
        user([{"type": "tool_result", "tool_use_id": call["id"], "content": "healthy"}]),
    ]
    second = await client.messages.create(model=OLD_MODEL, max_tokens=512, tools=[TOOL], messages=messages)

    assert second.content[0].text == f"{call['id']} said healthy"
    assert [r.status for r in fake.requests] == [200, 200]
    fake.assert_complete()


# --------------------------------------------------------------------------- errors


async def test_rate_limit_is_retried_by_the_sdk(fake: FakeAnthropic) -> None:
    fake.script(error(429, "rate_limit_error", headers={"retry-after": "0.01"}), reply(text("ok")))

    async with AsyncAnthropic(api_key=KEY, base_url=fake.base_url, max_retries=2) as client:
        msg = await client.messages.create(model=OLD_MODEL, max_tokens=16, messages=[user("hi")])

    assert msg.content[0].text == "ok"
    assert [(r.status, r.headers["x-stainless-retry-count"]) for r in fake.requests] == [(429, "0"), (200, "1")]
    assert fake.requests[0].error == {
        "type": "rate_limit_error",
        "message": "Number of request tokens has exceeded your per-minute rate limit",
    }
    assert fake.requests[0].body == fake.requests[1].body  # the SDK sends no idempotency key


@pytest.mark.parametrize("stream", [False, True])
async def test_overloaded_surfaces_as_overloaded_error(
    fake: FakeAnthropic, client: AsyncAnthropic, stream: bool
) -> None:
    fake.script(error(529, "overloaded_error"))

    async def send() -> None:
        if stream:
            async with client.messages.stream(model=OLD_MODEL, max_tokens=16, messages=[user("hi")]) as s:
                await s.get_final_message()
        else:
            await client.messages.create(model=OLD_MODEL, max_tokens=16, messages=[user("hi")])

    with pytest.raises(anthropic.OverloadedError) as exc_info:
        await send()

    err = exc_info.value
    assert (err.status_code, err.type, err.api_message, err.request_id) == (
        529,
        "overloaded_error",
        "Overloaded",
        "req_fake_0001",
    )
    assert err.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


async def test_wrong_api_key_is_rejected_without_consuming_the_script(fake: FakeAnthropic) -> None:
    fake.script(reply(text("never")))

    async with AsyncAnthropic(api_key="sk-ant-wrong", base_url=fake.base_url, max_retries=2) as client:
        with pytest.raises(anthropic.AuthenticationError) as exc_info:
            await client.messages.create(model=OLD_MODEL, max_tokens=16, messages=[user("hi")])

    assert exc_info.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
    }
    assert [r.status for r in fake.requests] == [401]  # 401 is not retried
    with pytest.raises(AssertionError, match="1 scripted response"):
        fake.assert_complete()


async def test_scripted_authentication_error(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(error(401, "authentication_error", "key revoked"))

    with pytest.raises(anthropic.AuthenticationError, match="key revoked"):
        await client.messages.create(model=OLD_MODEL, max_tokens=16, messages=[user("hi")])


async def test_empty_script_answers_500_and_is_not_retried(fake: FakeAnthropic) -> None:
    async with AsyncAnthropic(api_key=KEY, base_url=fake.base_url, max_retries=2) as client:
        with pytest.raises(anthropic.InternalServerError) as exc_info:
            await client.messages.create(model=OLD_MODEL, max_tokens=16, messages=[user("hi")])

    assert exc_info.value.api_message == "fake: no scripted response left"
    assert [(r.status, r.error["type"]) for r in fake.requests] == [(500, "api_error")]


async def test_assert_complete_lists_unused_items(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("used")), reply(text("left over")))
    await client.messages.create(model=OLD_MODEL, max_tokens=16, messages=[user("hi")])

    with pytest.raises(AssertionError, match=r"1 scripted response\(s\) not used: .*left over"):
        fake.assert_complete()


async def test_wait_for_requests_times_out_with_a_clear_message(fake: FakeAnthropic) -> None:
    with pytest.raises(AssertionError, match=r"expected 1 request\(s\) within 0.01s, got 0"):
        await fake.wait_for_requests(1, timeout=0.01)


# --------------------------------------------------------------------------- validation

TOOL_CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_status", "input": {"service": "api"}}
TOOL_RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "healthy"}
VALID = {"model": OLD_MODEL, "max_tokens": 64, "messages": [user("hi")]}


def without(key: str) -> dict[str, Any]:
    return {k: v for k, v in VALID.items() if k != key}


def with_messages(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {**VALID, "messages": list(messages), **extra}


REJECTED = {
    "missing model": (without("model"), "model: Field required"),
    "missing max_tokens": (without("max_tokens"), "max_tokens: Field required"),
    "zero max_tokens": ({**VALID, "max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
    "missing messages": (without("messages"), "messages: Field required"),
    "empty messages": (with_messages(), "messages: at least one message is required"),
    "top_p": ({**VALID, "top_p": 0.9}, "top_p: Extra inputs are not permitted"),
    "top_k": ({**VALID, "top_k": 5}, "top_k: Extra inputs are not permitted"),
    "assistant first": (with_messages(assistant("hi"), user("hi")), 'messages: first message must use the "user" role'),
    "tool_use without tool_result": (
        with_messages(user("status?"), assistant([TOOL_CALL]), user("and?"), tools=[TOOL]),
        "messages.2: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1."
        " Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
    ),
    "tool_result one turn late": (
        with_messages(
            user("status?"), assistant([TOOL_CALL]), user("wait"), assistant("ok"), user([TOOL_RESULT]), tools=[TOOL]
        ),
        "messages.2: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1."
        " Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
    ),
    "tool_result for an unknown id": (
        with_messages(user("status?"), assistant("no tools"), user([TOOL_RESULT]), tools=[TOOL]),
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_1."
        " Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
    ),
    "text before tool_result": (
        with_messages(user("status?"), assistant([TOOL_CALL]), user([text("also"), TOOL_RESULT]), tools=[TOOL]),
        "messages.2.content.1: `tool_result` blocks must come first in the user message, before any other content",
    ),
    # consecutive same-role messages are one turn, so a separate thread reply before the result also breaks it
    "text message before tool_result message": (
        with_messages(user("status?"), assistant([TOOL_CALL]), user("also"), user([TOOL_RESULT]), tools=[TOOL]),
        "messages.3.content.0: `tool_result` blocks must come first in the user message, before any other content",
    ),
    "tool blocks without tools": (
        with_messages(user("status?"), assistant([TOOL_CALL]), user([TOOL_RESULT])),
        "messages.1.content.0: Requests which include `tool_use` or `tool_result` blocks must define tools.",
    ),
    "empty text block": (
        with_messages(user([text("")])),
        "messages.0.content.0.text: text content blocks must be non-empty",
    ),
    "whitespace text block": (
        with_messages(user([text(" \n")])),
        "messages.0.content.0.text: text content blocks must contain non-whitespace text",
    ),
    "empty string content": (
        with_messages(user("")),
        "messages.0: all messages must have non-empty content except for the optional final assistant message",
    ),
    "empty system block": (
        {**VALID, "system": [text("")]},
        "system.0.text: text content blocks must be non-empty",
    ),
    "extra field on a block": (
        with_messages(user([{**text("hi"), "parsed_output": None}])),
        "messages.0.content.0.text.parsed_output: Extra inputs are not permitted",
    ),
    "duplicate tool_use id": (
        with_messages(
            user("a"),
            assistant([TOOL_CALL]),
            user([TOOL_RESULT]),
            assistant([TOOL_CALL]),
            user([TOOL_RESULT]),
            tools=[TOOL],
        ),
        "messages.3.content.0: `tool_use` ids must be unique",
    ),
    "duplicate tool names": ({**VALID, "tools": [TOOL, TOOL]}, "tools: Tool names must be unique."),
    "bad tool name": (
        {**VALID, "tools": [{**TOOL, "name": "get status"}]},
        "tools.0.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'",
    ),
    "tool name too long": (
        {**VALID, "tools": [{**TOOL, "name": "x" * 65}]},
        "tools.0.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'",
    ),
    "input_schema not an object": (
        {**VALID, "tools": [{**TOOL, "input_schema": {"type": "array"}}]},
        "tools.0.custom.input_schema.type: Input should be 'object'",
    ),
    "tool_choice names an unknown tool": (
        {**VALID, "tools": [TOOL], "tool_choice": {"type": "tool", "name": "nope"}},
        "tool_choice: Tool 'nope' not found in tools",
    ),
    "five cache_control blocks": (
        {
            **VALID,
            "tools": [cached(TOOL)],
            "system": [cached(text("a")), cached(text("b"))],
            "messages": [user([cached(text("c"))])],
            "cache_control": EPHEMERAL,
        },
        "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    ),
    "cache_control type": (
        {**VALID, "system": [{**text("a"), "cache_control": {"type": "persistent"}}]},
        "system.0.cache_control.type: Input should be 'ephemeral'",
    ),
    "cache_control ttl": (
        {**VALID, "system": [cached(text("a"), ttl="10m")]},
        "system.0.cache_control.ttl: Input should be '5m' or '1h'",
    ),
    "1h breakpoint after a 5m one": (
        {**VALID, "system": [cached(text("a")), cached(text("b"), ttl="1h")]},
        "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block",
    ),
}


@pytest.mark.parametrize(("body", "message"), REJECTED.values(), ids=REJECTED.keys())
async def test_invalid_request_is_rejected(
    fake: FakeAnthropic, client: AsyncAnthropic, body: dict[str, Any], message: str
) -> None:
    fake.script(reply(text("only for valid requests")))

    with pytest.raises(anthropic.BadRequestError) as exc_info:
        # the raw post, as the SDK's create() refuses to send some of these
        await client.post("/v1/messages", cast_to=Message, body=copy.deepcopy(body))

    assert exc_info.value.body == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    [rejected] = fake.requests
    assert (rejected.status, rejected.body) == (400, body)
    # a rejected request consumes nothing: the next valid one gets the scripted reply
    msg = await client.messages.create(model=OLD_MODEL, max_tokens=16, messages=[user("hi")])
    assert msg.content[0].text == "only for valid requests"


async def test_temperature_is_rejected(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="temperature: Extra inputs are not permitted"):
        await client.messages.create(
            model=OLD_MODEL, max_tokens=16, messages=[user("hi")], extra_body={"temperature": 0.2}
        )
    assert fake.requests[0].error == {
        "type": "invalid_request_error",
        "message": "temperature: Extra inputs are not permitted",
    }


async def test_consecutive_user_messages_are_one_turn(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    # The API combines consecutive same-role messages (see the SDK's `messages` docstring), so a
    # thread reply may follow the tool results as its own message.
    fake.script(reply(text("noted")))
    messages = [
        user("status?"),
        assistant([TOOL_CALL]),
        user([TOOL_RESULT]),
        user("the on-call says: also check the db"),
    ]

    msg = await client.messages.create(model=OLD_MODEL, max_tokens=16, tools=[TOOL], messages=messages)

    assert msg.content[0].text == "noted"


async def test_prompt_over_the_context_window_is_too_long() -> None:
    async with (
        FakeAnthropic(api_key=KEY, context_window=100) as fake,
        AsyncAnthropic(api_key=KEY, base_url=fake.base_url, max_retries=0) as client,
    ):
        with pytest.raises(anthropic.BadRequestError) as exc_info:
            await client.messages.create(model=OLD_MODEL, max_tokens=16, messages=[user("x" * 1000)])

    assert exc_info.value.api_message == f"prompt is too long: {count_tokens(text('x' * 1000))} tokens > 100 maximum"


# --------------------------------------------------------------------------- prompt caching


async def ask(client: AsyncAnthropic, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, int]:
    """Send a request and return its usage (without output tokens)."""
    msg = await client.messages.create(model=kwargs.pop("model", OLD_MODEL), max_tokens=64, messages=messages, **kwargs)
    return msg.usage.model_dump(include={"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"})


def input_usage(input_tokens: int, creation: int = 0, read: int = 0) -> dict[str, int]:
    return {"input_tokens": input_tokens, "cache_creation_input_tokens": creation, "cache_read_input_tokens": read}


async def test_cache_write_then_read_with_a_moving_breakpoint(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(*(reply(text("answer")) for _ in range(3)))
    tool, system = count_tokens(TOOL), count_tokens(text(BIG))
    q1, a1, q2 = count_tokens(text("q1")), count_tokens(text("a1")), count_tokens(text("q2"))

    # First turn: breakpoint on the newest message writes tools + system + q1.
    first = await ask(client, [user([cached(text("q1"))])], tools=[TOOL], system=BIG)
    # Next turn: the breakpoint moves to the new message; the look-back finds the q1 prefix
    # (cache_control and string-vs-block form don't change the key).
    second = await ask(client, [user("q1"), assistant("a1"), user([cached(text("q2"))])], tools=[TOOL], system=BIG)
    # Same prompt without any breakpoint: nothing is read or written.
    third = await ask(client, [user("q1"), assistant("a1"), user("q2")], tools=[TOOL], system=BIG)

    assert first == input_usage(0, creation=tool + system + q1)
    assert second == input_usage(0, creation=a1 + q2, read=tool + system + q1)
    assert third == input_usage(tool + system + q1 + a1 + q2)


async def test_top_level_cache_control_marks_the_last_block(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("a")), reply(text("b")))
    system, q1 = count_tokens(text(BIG)), count_tokens(text("q1"))

    first = await ask(client, [user("q1")], system=BIG, cache_control=EPHEMERAL)
    second = await ask(client, [user("q1")], system=BIG, cache_control=EPHEMERAL)

    assert first == input_usage(0, creation=system + q1)
    assert second == input_usage(0, read=system + q1)


async def test_prefix_below_minimum_is_not_cached(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("a")), reply(text("b")))
    system = [cached(text("short system prompt"))]
    total = count_tokens(text("short system prompt")) + count_tokens(text("q"))

    first = await ask(client, [user("q")], system=system)
    second = await ask(client, [user("q")], system=system)

    assert first == second == input_usage(total)


async def test_cache_expires_after_five_minutes_and_reads_refresh_it(
    fake: FakeAnthropic, client: AsyncAnthropic
) -> None:
    fake.script(*(reply(text("a")) for _ in range(4)))
    system, q = [cached(text(BIG))], count_tokens(text("q"))
    prefix = count_tokens(text(BIG))

    written = await ask(client, [user("q")], system=system)
    fake.advance(299)
    read = await ask(client, [user("q")], system=system)
    fake.advance(299)  # 598 s after the write, but only 299 s after the read that refreshed it
    read_again = await ask(client, [user("q")], system=system)
    fake.advance(301)
    expired = await ask(client, [user("q")], system=system)

    assert written == expired == input_usage(q, creation=prefix)
    assert read == read_again == input_usage(q, read=prefix)


async def test_one_hour_ttl_outlives_five_minutes(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(*(reply(text("a")) for _ in range(3)))
    system, q = [cached(text(BIG), ttl="1h")], count_tokens(text("q"))
    prefix = count_tokens(text(BIG))

    await ask(client, [user("q")], system=system)
    fake.advance(301)
    still_cached = await ask(client, [user("q")], system=system)
    fake.advance(3601)
    expired = await ask(client, [user("q")], system=system)

    assert still_cached == input_usage(q, read=prefix)
    assert expired == input_usage(q, creation=prefix)


async def test_cache_is_per_model(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("a")), reply(text("b")))
    system, q = [cached(text(BIG))], count_tokens(text("q"))

    await ask(client, [user("q")], system=system)
    other_model = await ask(client, [user("q")], system=system, model="claude-haiku-4-5")

    assert other_model == input_usage(q, creation=count_tokens(text(BIG)))


@pytest.mark.parametrize(("new_blocks", "hit"), [(20, True), (21, False)])
async def test_lookback_reaches_twenty_blocks(
    fake: FakeAnthropic, client: AsyncAnthropic, new_blocks: int, hit: bool
) -> None:
    fake.script(reply(text("a")), reply(text("b")))
    blocks = [text(f"log line {i}") for i in range(new_blocks)]
    blocks[-1] = cached(blocks[-1])
    prefix = count_tokens(text(BIG))
    rest = sum(count_tokens(text(f"log line {i}")) for i in range(new_blocks))

    await ask(client, [user("go")], system=[cached(text(BIG))])  # caches the system prompt alone
    usage_after = await ask(client, [user(blocks)], system=BIG)

    if hit:
        assert usage_after == input_usage(0, creation=rest, read=prefix)
    else:
        assert usage_after == input_usage(0, creation=prefix + rest)


# --------------------------------------------------------------------------- cancellation


async def test_client_closing_a_repeating_stream_is_recorded_as_cancelled(
    fake: FakeAnthropic, client: AsyncAnthropic
) -> None:
    fake.script(repeating_text("tick "))
    received = ""

    async with client.messages.stream(model=OLD_MODEL, max_tokens=4096, messages=[user("tail the logs")]) as stream:
        async for chunk in stream.text_stream:
            received += chunk
            if len(received) >= 25:
                break  # leaving the block closes the HTTP response

    [req] = await fake.wait_for_requests(1)
    await req.wait_finished()
    assert req.cancelled is True
    assert received == "tick " * 5
    sent = req.response["content"][0]["text"]
    assert sent.startswith(received)
    assert set(sent.split()) == {"tick"}
    assert len(sent) < len("tick ") * 5000
    assert req.response["stop_reason"] is None


async def test_repeating_text_without_streaming(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(repeating_text("ab", max_chunks=10))

    msg = await client.messages.create(model=OLD_MODEL, max_tokens=64, messages=[user("go")])

    assert ([b.model_dump(exclude_none=True) for b in msg.content], msg.stop_reason) == (
        [text("ab" * 10)],
        "max_tokens",
    )


# =========================================================================== current models

BINDING_BETA = "thinking-binding-controls-2026-08-01"
DROP_BLOCK = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
SUMMARIZED = {"type": "adaptive", "display": "summarized"}
SYSTEM = "You are the on-call assistant. " + BIG


def bound_to_conversation(path: str) -> str:
    """The real API's 400 message for a thinking block whose prefix changed."""
    return (
        f"{path}: Invalid `signature` in `thinking` block. The block is bound to a different conversation."
        ' Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
    )


def dropped(*paths: str, reason: str = "prefix_binding_mismatch") -> list[dict[str, str]]:
    return [{"type": "thinking_dropped", "path": path, "reason": reason} for path in paths]


def sent_back(msg: Any) -> dict[str, Any]:
    """An assistant turn as an append-only client returns it: every block, exactly as received."""
    return assistant([b.model_dump(exclude_none=True) for b in msg.content])


def tool_result(tool_use_id: str, content: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}


def without_thinking(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**m, "content": [b for b in m["content"] if b["type"] not in ("thinking", "redacted_thinking")]}
        if isinstance(m["content"], list)
        else m
        for m in messages
    ]


async def tool_turns(
    fake: FakeAnthropic, client: AsyncAnthropic, turns: int, *, model: str = MODEL, **kwargs: Any
) -> list[dict[str, Any]]:
    """``turns`` streamed tool-calling turns, sent back append-only; the messages end with the
    last tool result, so thinking sits at messages.1.content.0, messages.3.content.0, …"""
    messages = [user("Is the API up?")]
    for k in range(turns):
        fake.script(reply(text(f"Checking s{k}."), tool_use("get_status", {"service": f"s{k}"}, id=f"toolu_s{k}")))
        async with client.messages.stream(
            model=model, max_tokens=1024, system=SYSTEM, tools=[TOOL], messages=messages, **kwargs
        ) as stream:
            msg = await stream.get_final_message()
        messages += [sent_back(msg), user([tool_result(f"toolu_s{k}", f"s{k} healthy")])]
    return messages


# --------------------------------------------------------------------------- replies with thinking


async def test_a_reply_starts_with_an_empty_signed_thinking_block(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("All systems nominal.")))

    msg = await client.messages.create(model=MODEL, max_tokens=256, messages=[user("status?")])

    [block, answer] = msg.content
    assert (block.type, block.thinking) == ("thinking", "")
    assert block.signature  # opaque, filled in by the fake
    assert answer.model_dump(exclude_none=True) == text("All systems nominal.")
    assert msg.usage.model_dump(exclude_none=True) == {
        **usage(count_tokens(text("status?")), DEFAULT_THINKING_TOKENS + count_tokens([text("All systems nominal.")])),
        "output_tokens_details": {"thinking_tokens": DEFAULT_THINKING_TOKENS},
    }


@pytest.mark.parametrize(
    ("config", "shown"), [(None, ""), ({"type": "adaptive", "display": "omitted"}, ""), (SUMMARIZED, "Let me check.")]
)
async def test_text_between_tool_calls_comes_back_as_thinking(
    fake: FakeAnthropic, client: AsyncAnthropic, config: dict[str, Any] | None, shown: str
) -> None:
    call = tool_use("get_status", {"service": "api"}, id="toolu_x")
    fake.script(reply(text("Let me check."), call))
    extra = {"thinking": config} if config else {}

    msg = await client.messages.create(model=MODEL, max_tokens=256, tools=[TOOL], messages=[user("up?")], **extra)

    assert [b.type for b in msg.content] == ["thinking", "tool_use"]
    assert msg.content[0].thinking == shown
    assert msg.content[1].model_dump(exclude_none=True) == call
    assert msg.stop_reason == "tool_use"


async def test_summarized_display_shows_scripted_or_default_thinking(
    fake: FakeAnthropic, client: AsyncAnthropic
) -> None:
    fake.script(
        reply(thinking("The disk filled at 03:00."), redacted_thinking(), text("It is full.")), reply(text("ok"))
    )

    scripted = await client.messages.create(model=MODEL, max_tokens=256, messages=[user("?")], thinking=SUMMARIZED)
    default = await client.messages.create(model=MODEL, max_tokens=256, messages=[user("?")], thinking=SUMMARIZED)

    assert [b.type for b in scripted.content] == ["thinking", "redacted_thinking", "text"]
    assert scripted.content[0].thinking == "The disk filled at 03:00."
    assert scripted.content[1].data  # opaque
    assert default.content[0].thinking == DEFAULT_THINKING_SUMMARY


@pytest.mark.parametrize(("config", "deltas"), [(None, []), (SUMMARIZED, ["Pl", "an", "."])])
async def test_thinking_streams_as_the_real_event_sequence(
    fake: FakeAnthropic, client: AsyncAnthropic, config: dict[str, Any] | None, deltas: list[str]
) -> None:
    fake.script(reply(thinking("Plan."), redacted_thinking(), text("Done.")))
    extra = {"thinking": config} if config else {}

    stream = await client.messages.create(model=MODEL, max_tokens=256, messages=[user("go")], stream=True, **extra)
    events = [event async for event in stream]

    kinds = [(e.type, getattr(getattr(e, "delta", None), "type", None)) for e in events]
    assert kinds == [
        ("message_start", None),
        ("content_block_start", None),
        *[("content_block_delta", "thinking_delta")] * len(deltas),
        ("content_block_delta", "signature_delta"),
        ("content_block_stop", None),
        ("content_block_start", None),
        ("content_block_stop", None),
        ("content_block_start", None),
        *[("content_block_delta", "text_delta")] * 3,
        ("content_block_stop", None),
        ("message_delta", None),
        ("message_stop", None),
    ]
    sent = fake.requests[0].response["content"]
    assert events[1].content_block.model_dump() == {"type": "thinking", "thinking": "", "signature": ""}
    assert [e.delta.thinking for e in events[2 : 2 + len(deltas)]] == deltas
    assert events[2 + len(deltas)].delta.signature == sent[0]["signature"]
    redacted_start = events[4 + len(deltas)].content_block.model_dump()
    assert redacted_start == {"type": "redacted_thinking", "data": sent[1]["data"]}


async def test_a_streamed_final_message_is_the_message_the_fake_sent(
    fake: FakeAnthropic, client: AsyncAnthropic
) -> None:
    fake.script(reply(thinking("Plan."), redacted_thinking(), text("Done."), thinking_tokens=7))

    async with client.messages.stream(model=MODEL, max_tokens=256, messages=[user("go")], thinking=SUMMARIZED) as s:
        msg = await s.get_final_message()

    assert {**msg.model_dump(exclude_none=True), "stop_sequence": None} == fake.requests[0].response
    assert msg.usage.output_tokens_details.thinking_tokens == 7


async def test_dated_ids_of_a_current_model_behave_as_it(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("ok")))

    msg = await client.messages.create(model="claude-haiku-5-5-20261007", max_tokens=256, messages=[user("hi")])

    assert [b.type for b in msg.content] == ["thinking", "text"]


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "claude-haiku-4-5-20251001", "claude-sonnet-5", "test-model"])
async def test_older_model_ids_keep_the_old_behaviour(fake: FakeAnthropic, client: AsyncAnthropic, model: str) -> None:
    call = tool_use("get_status", {"service": "api"})
    fake.script(reply(text("Let me check."), call))

    msg = await client.messages.create(model=model, max_tokens=5, tools=[TOOL], messages=[user("up?")])

    assert [b.model_dump(exclude_none=True) for b in msg.content] == [text("Let me check."), call]
    assert msg.usage.output_tokens == count_tokens([text("Let me check."), call])  # no thinking, no max_tokens cut
    assert msg.usage.output_tokens_details is None
    for extra, message in [
        ({"temperature": 0.2}, "temperature: Extra inputs are not permitted"),
        ({"messages": [{"role": "system", "content": "x"}, user("hi")]}, "messages.0.role: the fake does not model"),
    ]:
        with pytest.raises(anthropic.BadRequestError, match=message):
            await client.post("/v1/messages", cast_to=Message, body={**VALID, "model": model, **extra})


# --------------------------------------------------------------------------- thinking tokens and max_tokens


async def test_thinking_tokens_are_billed_as_output(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("ok"), thinking_tokens=300))

    msg = await client.messages.create(model=MODEL, max_tokens=1000, messages=[user("hi")])

    assert (msg.usage.output_tokens, msg.usage.output_tokens_details.thinking_tokens) == (
        300 + count_tokens([text("ok")]),
        300,
    )
    assert msg.stop_reason == "end_turn"


@pytest.mark.parametrize("stream", [False, True])
async def test_thinking_that_reaches_max_tokens_is_all_there_is(
    fake: FakeAnthropic, client: AsyncAnthropic, stream: bool
) -> None:
    fake.script(reply(text("Rolling back."), tool_use("get_status", {"service": "api"}), thinking_tokens=64))

    kwargs = {"model": MODEL, "max_tokens": 64, "tools": [TOOL], "messages": [user("fix it")]}
    if stream:
        async with client.messages.stream(**kwargs) as s:
            msg = await s.get_final_message()
    else:
        msg = await client.messages.create(**kwargs)

    assert [b.type for b in msg.content] == ["thinking"]
    assert (msg.stop_reason, msg.usage.output_tokens, msg.usage.output_tokens_details.thinking_tokens) == (
        "max_tokens",
        64,
        64,
    )


async def test_visible_output_past_max_tokens_is_cut(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    long_text = "word " * 200
    call = tool_use("get_status", {"service": "api"})
    fake.script(reply(text(long_text), thinking_tokens=10), reply(text("ok"), call, thinking_tokens=10))

    cut_text = await client.messages.create(model=MODEL, max_tokens=60, messages=[user("essay")])
    no_room_for_call = await client.messages.create(model=MODEL, max_tokens=12, tools=[TOOL], messages=[user("go")])

    [_, partial] = cut_text.content
    assert long_text.startswith(partial.text) and 0 < len(partial.text) < len(long_text)
    assert (cut_text.stop_reason, cut_text.usage.output_tokens) == (
        "max_tokens",
        10 + count_tokens([partial.model_dump(exclude_none=True)]),
    )
    assert cut_text.usage.output_tokens <= 60
    assert [b.type for b in no_room_for_call.content] == ["thinking"]  # "ok" is thinking next to a call
    assert no_room_for_call.stop_reason == "max_tokens"


# --------------------------------------------------------------------------- what current models reject

CURRENT_REJECTED = {
    "thinking disabled": (
        {"thinking": {"type": "disabled"}},
        '"thinking.type.disabled" is not supported for this model. Use "thinking.type.adaptive" and'
        ' "output_config.effort" to control thinking behavior.',
    ),
    "thinking enabled with a budget": (
        {"thinking": {"type": "enabled", "budget_tokens": 2048}},
        '"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" and'
        ' "output_config.effort" to control thinking behavior.',
    ),
    "adaptive with a budget": (
        {"thinking": {"type": "adaptive", "budget_tokens": 2048}},
        '"thinking.budget_tokens" is not supported for this model. Use "thinking.type.adaptive" and'
        ' "output_config.effort" to control thinking behavior.',
    ),
    "temperature": ({"extra_body": {"temperature": 0.2}}, "`temperature` is deprecated for this model."),
    "top_p": ({"extra_body": {"top_p": 0.9}}, "`top_p` is deprecated for this model."),
    "top_k": ({"extra_body": {"top_k": 5}}, "`top_k` is deprecated for this model."),
    "prefill": (
        {"messages": [user("hi"), assistant("Sure,")]},
        "This model does not support assistant message prefill. The conversation must end with a user message.",
    ),
    "prefill before a system message": (
        {"messages": [user("hi"), assistant("Sure,"), {"role": "system", "content": "Be brief."}]},
        "This model does not support assistant message prefill. The conversation must end with a user message.",
    ),
    "tool_choice any": (
        {"tools": [TOOL], "tool_choice": {"type": "any"}},
        'tool_choice: type "tool" and "any" are not supported for this model.',
    ),
    "tool_choice tool": (
        {"tools": [TOOL], "tool_choice": {"type": "tool", "name": "get_status"}},
        'tool_choice: type "tool" and "any" are not supported for this model.',
    ),
    "unknown effort": (
        {"output_config": {"effort": "extreme"}},
        "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'",
    ),
    "unknown display": (
        {"thinking": {"type": "adaptive", "display": "full"}},
        "thinking.adaptive.display: Input should be 'summarized' or 'omitted'",
    ),
    "unknown prefix_mismatch_behavior": (
        {"thinking": {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "ignore"}}},
        "thinking.adaptive.block_binding.prefix_mismatch_behavior: Input should be 'error' or 'drop_block'",
    ),
    "system message with a tool_use": (
        {"messages": [user("hi"), {"role": "system", "content": [TOOL_CALL]}]},
        "messages.1.content.0.type: Input should be 'text'",
    ),
}


@pytest.mark.parametrize(("kwargs", "message"), CURRENT_REJECTED.values(), ids=CURRENT_REJECTED.keys())
async def test_current_models_reject_what_the_api_rejects(
    fake: FakeAnthropic, client: AsyncAnthropic, kwargs: dict[str, Any], message: str
) -> None:
    fake.script(reply(text("only for valid requests")))

    with pytest.raises(anthropic.BadRequestError) as exc_info:
        await client.messages.create(**{"model": MODEL, "max_tokens": 64, "messages": [user("hi")], **kwargs})

    assert exc_info.value.body == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    assert [r.status for r in fake.requests] == [400]


SAME_ON_CURRENT_MODELS = {
    name: case
    for name, case in REJECTED.items()
    if name not in {"missing model", "top_p", "top_k", "tool_choice names an unknown tool"}
}


@pytest.mark.parametrize(("body", "message"), SAME_ON_CURRENT_MODELS.values(), ids=SAME_ON_CURRENT_MODELS.keys())
async def test_current_models_keep_the_structural_rules(
    fake: FakeAnthropic, client: AsyncAnthropic, body: dict[str, Any], message: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as exc_info:
        await client.post("/v1/messages", cast_to=Message, body={**copy.deepcopy(body), "model": MODEL})

    assert exc_info.value.body["error"]["message"] == message


async def test_current_models_accept_adaptive_settings_and_system_messages(
    fake: FakeAnthropic, client: AsyncAnthropic
) -> None:
    fake.script(reply(text("noted")))
    messages = [
        user("status?"),
        assistant([TOOL_CALL]),
        {"role": "system", "content": "The on-call changed to Ana."},  # between a call and its result
        user([TOOL_RESULT]),
        {"role": "system", "content": [text("It is now 10:00 UTC.")]},  # after the last user turn
    ]

    msg = await client.messages.create(
        model=MODEL,
        max_tokens=256,
        tools=[TOOL],
        tool_choice={"type": "auto"},
        messages=messages,
        thinking={"type": "adaptive", "display": "omitted", "block_binding": {"prefix_mismatch_behavior": "error"}},
        output_config={"effort": "xhigh"},
    )

    assert msg.content[-1].text == "noted"


# --------------------------------------------------------------------------- the prefix check


async def test_an_unchanged_history_is_accepted_many_turns_deep_with_moving_cache_breakpoints(
    fake: FakeAnthropic, client: AsyncAnthropic
) -> None:
    history: list[dict[str, Any]] = [user([text("Is the API up?")])]
    totals: list[int] = []
    reads: list[int] = []
    for k in range(8):
        fake.script(reply(text(f"Checking s{k}."), tool_use("get_status", {"service": f"s{k}"}, id=f"toolu_s{k}")))
        # Breakpoints move every turn (the newest message, the previous user turn, sometimes system
        # or a tool, sometimes inside a tool_result), and system flips between string and block form.
        request = copy.deepcopy(history)
        previous_user = max(i for i in range(len(request) - 1) if request[i]["role"] == "user") if k else None
        for i in (len(request) - 1, previous_user):
            if i is None:
                continue
            block = request[i]["content"][-1]
            target = block["content"][-1] if block["type"] == "tool_result" and k % 2 else block
            target["cache_control"] = EPHEMERAL
        system: Any = [cached(text(SYSTEM))] if k % 3 == 0 else SYSTEM
        tools = [cached(TOOL)] if k % 2 else [TOOL]
        async with client.messages.stream(
            model=MODEL, max_tokens=1024, system=system, tools=tools, messages=request
        ) as stream:
            msg = await stream.get_final_message()
        u = msg.usage
        totals.append(u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens)
        reads.append(u.cache_read_input_tokens)
        result = tool_result(f"toolu_s{k}", [text(f"s{k} healthy")])
        history += [sent_back(msg), user([result])]

    assert [r.status for r in fake.requests] == [200] * 8
    assert all(b["thinking"] == "" for m in history if m["role"] == "assistant" for b in m["content"][:1])
    # every turn reads the whole previous prompt from the cache, thinking blocks included
    assert reads[1:] == totals[:-1]


async def test_a_summarized_history_round_trips(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    messages = await tool_turns(fake, client, 3, thinking=SUMMARIZED)
    fake.script(reply(text("All healthy.")))

    msg = await client.messages.create(
        model=MODEL, max_tokens=1024, system=SYSTEM, tools=[TOOL], messages=messages, thinking=SUMMARIZED
    )

    assert messages[3]["content"][0]["thinking"] == "Checking s1."
    assert msg.content[-1].text == "All healthy."


def edit_question(request: dict[str, Any]) -> None:
    request["messages"][0]["content"] = "Is the DB up?"


def edit_tool_result(request: dict[str, Any]) -> None:
    request["messages"][2]["content"][0]["content"] = "s0 degraded"


def edit_tool_call(request: dict[str, Any]) -> None:
    request["messages"][1]["content"][1]["input"] = {"service": "db"}


def edit_system(request: dict[str, Any]) -> None:
    request["system"] = SYSTEM + " Today is Tuesday."


def change_tool_schema(request: dict[str, Any]) -> None:
    request["tools"][0]["input_schema"]["properties"]["region"] = {"type": "string"}


def remove_middle_thinking(request: dict[str, Any]) -> None:
    del request["messages"][3]["content"][0]


def move_thinking_after_its_call(request: dict[str, Any]) -> None:
    request["messages"][3]["content"].reverse()


def edit_thinking_text(request: dict[str, Any]) -> None:
    request["messages"][3]["content"][0]["thinking"] = "I changed my mind."


def forge_signature(request: dict[str, Any]) -> None:
    request["messages"][3]["content"][0]["signature"] = "RXJyb3JTaWduYXR1cmU="


def remove_first_tool_turn(request: dict[str, Any]) -> None:
    del request["messages"][1:3]


PREFIX_CHANGES = {  # change -> the thinking blocks it invalidates (the first one is the error's path)
    "edited question": (edit_question, ["messages.1.content.0", "messages.3.content.0", "messages.5.content.0"]),
    "edited tool_result": (edit_tool_result, ["messages.3.content.0", "messages.5.content.0"]),
    "edited tool_use input": (edit_tool_call, ["messages.3.content.0", "messages.5.content.0"]),
    "edited system": (edit_system, ["messages.1.content.0", "messages.3.content.0", "messages.5.content.0"]),
    "changed tool schema": (
        change_tool_schema,
        ["messages.1.content.0", "messages.3.content.0", "messages.5.content.0"],
    ),
    "removed middle thinking": (remove_middle_thinking, ["messages.5.content.0"]),
    "moved thinking": (move_thinking_after_its_call, ["messages.3.content.1", "messages.5.content.0"]),
    "edited thinking text": (edit_thinking_text, ["messages.3.content.0", "messages.5.content.0"]),
    "forged signature": (forge_signature, ["messages.3.content.0", "messages.5.content.0"]),
    "removed earlier turn": (remove_first_tool_turn, ["messages.1.content.0", "messages.3.content.0"]),
}


async def changed_conversation(
    fake: FakeAnthropic, client: AsyncAnthropic, change: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Three tool turns, then the next request's system/tools/messages with ``change`` applied."""
    request = copy.deepcopy({"system": SYSTEM, "tools": [TOOL], "messages": await tool_turns(fake, client, 3)})
    change(request)
    return request


@pytest.mark.parametrize(("change", "invalid"), PREFIX_CHANGES.values(), ids=PREFIX_CHANGES.keys())
async def test_a_changed_prefix_fails_with_the_first_invalid_block(
    fake: FakeAnthropic, client: AsyncAnthropic, change: Callable[[dict[str, Any]], None], invalid: list[str]
) -> None:
    request = await changed_conversation(fake, client, change)
    fake.script(reply(text("unused")))

    with pytest.raises(anthropic.BadRequestError) as exc_info:
        await client.messages.create(model=MODEL, max_tokens=1024, **request)

    assert exc_info.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": bound_to_conversation(invalid[0])},
    }


@pytest.mark.parametrize(("change", "invalid"), PREFIX_CHANGES.values(), ids=PREFIX_CHANGES.keys())
async def test_drop_block_with_the_beta_drops_every_invalid_block(
    fake: FakeAnthropic, client: AsyncAnthropic, change: Callable[[dict[str, Any]], None], invalid: list[str]
) -> None:
    request = await changed_conversation(fake, client, change)
    fake.script(reply(text("answer")), reply(text("answer")))

    async with client.beta.messages.stream(
        model=MODEL, max_tokens=1024, thinking=DROP_BLOCK, betas=[BINDING_BETA], **request
    ) as stream:
        msg = await stream.get_final_message()
    # the same request without the dropped blocks is valid and costs the same input
    kept = copy.deepcopy(request)
    for path in reversed(invalid):
        _, i, _, j = path.split(".")
        del kept["messages"][int(i)]["content"][int(j)]
    same = await client.messages.create(model=MODEL, max_tokens=1024, **kept)

    assert msg.input_transformations is not None
    assert [t.model_dump() for t in msg.input_transformations] == dropped(*invalid)
    assert msg.content[-1].text == "answer"
    assert msg.usage.input_tokens == same.usage.input_tokens


async def test_drop_block_without_the_beta_header_still_fails(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    request = await changed_conversation(fake, client, edit_system)

    with pytest.raises(anthropic.BadRequestError) as exc_info:
        await client.messages.create(model=MODEL, max_tokens=1024, thinking=DROP_BLOCK, **request)

    assert exc_info.value.api_message == (
        f"{bound_to_conversation('messages.1.content.0')} That setting requires the"
        " `thinking-binding-controls-2026-08-01` value in the `anthropic-beta` header."
    )


async def test_the_beta_header_alone_reports_and_keeps_erroring(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    messages = await tool_turns(fake, client, 2)
    fake.script(reply(text("fine")))

    clean = await client.beta.messages.create(
        model=MODEL, max_tokens=1024, system=SYSTEM, tools=[TOOL], messages=messages, betas=[BINDING_BETA]
    )
    with pytest.raises(anthropic.BadRequestError, match=r"messages\.1\.content\.0: Invalid `signature`"):
        await client.beta.messages.create(
            model=MODEL, max_tokens=1024, system=SYSTEM + "!", tools=[TOOL], messages=messages, betas=[BINDING_BETA]
        )

    assert clean.input_transformations == []
    assert "input_transformations" not in fake.requests[0].response  # no beta header, nothing reported


async def test_removing_all_earlier_thinking_is_accepted(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    messages = await tool_turns(fake, client, 3)
    # A summarising client: the first two tool turns become one summary line, and the kept
    # turns lose their thinking. The conversation goes on, append-only, from there.
    summarized = [user("Summary so far: s0 and s1 are healthy."), *without_thinking(messages[5:])]
    fake.script(reply(text("s2 is healthy too."), tool_use("get_status", {"service": "s3"}, id="toolu_s3")))
    fake.script(reply(text("All four are healthy.")))

    first = await client.messages.create(model=MODEL, max_tokens=1024, system=SYSTEM, tools=[TOOL], messages=summarized)
    summarized += [sent_back(first), user([tool_result("toolu_s3", "s3 healthy")])]
    second = await client.messages.create(
        model=MODEL, max_tokens=1024, system=SYSTEM, tools=[TOOL], messages=summarized
    )

    assert summarized[0]["content"].startswith("Summary")
    assert second.content[-1].text == "All four are healthy."


async def test_a_change_after_the_last_thinking_block_is_accepted(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    messages = await tool_turns(fake, client, 2)
    messages[-1] = user([tool_result("toolu_s1", "s1 healthy, rechecked"), text("the on-call says: hurry")])
    fake.script(reply(text("done")))

    msg = await client.messages.create(model=MODEL, max_tokens=1024, system=SYSTEM, tools=[TOOL], messages=messages)

    assert msg.content[-1].text == "done"


async def test_thinking_from_another_model_is_dropped_silently(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    messages = await tool_turns(fake, client, 2)  # on claude-sonnet-5-5
    fake.script(*(reply(text("fallback answer")) for _ in range(3)))
    fallback = "claude-haiku-5-5"

    silent = await client.messages.create(
        model=fallback, max_tokens=1024, system=SYSTEM, tools=[TOOL], messages=messages
    )
    reported = await client.beta.messages.create(
        model=fallback, max_tokens=1024, system=SYSTEM, tools=[TOOL], messages=messages, betas=[BINDING_BETA]
    )
    bare = await client.messages.create(
        model=fallback, max_tokens=1024, system=SYSTEM, tools=[TOOL], messages=without_thinking(messages)
    )

    assert "input_transformations" not in fake.requests[-3].response
    assert [t.model_dump() for t in reported.input_transformations or []] == dropped(
        "messages.1.content.0", "messages.3.content.0", reason="model_binding_mismatch"
    )
    assert silent.usage.input_tokens == bare.usage.input_tokens  # dropped blocks are not input


async def test_falling_back_and_back_keeps_each_models_thinking_valid(
    fake: FakeAnthropic, client: AsyncAnthropic
) -> None:
    messages = await tool_turns(fake, client, 1)
    for k, model in enumerate(["claude-haiku-5-5", "claude-haiku-5-5", "claude-sonnet-5-5", "claude-sonnet-5-5"], 1):
        fake.script(reply(text("next"), tool_use("get_status", {"service": f"s{k}"}, id=f"toolu_s{k}")))
        msg = await client.messages.create(
            model=model,
            max_tokens=1024,
            system=SYSTEM,
            tools=[TOOL],
            messages=messages,
            extra_headers={"anthropic-beta": BINDING_BETA},
        )
        messages += [sent_back(msg), user([tool_result(f"toolu_s{k}", "healthy")])]

    reports = [r.response["input_transformations"] for r in fake.requests[1:]]
    haiku_drops = dropped("messages.1.content.0", reason="model_binding_mismatch")
    sonnet_drops = dropped("messages.3.content.0", "messages.5.content.0", reason="model_binding_mismatch")
    assert reports == [haiku_drops, haiku_drops, sonnet_drops, sonnet_drops]


@pytest.mark.parametrize(("model", "bound"), [("claude-sonnet-5-5", True), ("claude-opus-5-5", False)])
async def test_sonnet_and_haiku_thinking_is_bound_to_the_account(
    fake: FakeAnthropic, client: AsyncAnthropic, model: str, bound: bool
) -> None:
    messages = await tool_turns(fake, client, 1, model=model)
    fake.api_key = "sk-ant-other-account"
    fake.script(reply(text("ok")))

    async with AsyncAnthropic(api_key=fake.api_key, base_url=fake.base_url, max_retries=0) as other:
        msg = await other.beta.messages.create(
            model=model, max_tokens=1024, system=SYSTEM, tools=[TOOL], messages=messages, betas=[BINDING_BETA]
        )

    expected = dropped("messages.1.content.0", reason="organization_binding_mismatch") if bound else []
    assert [t.model_dump() for t in msg.input_transformations or []] == expected


# --------------------------------------------------------------------------- prices


PRICES = {  # USD per MTok: input, output, 5-minute cache write, cache read
    "claude-sonnet-5-5": (2.0, 10.0, 2.50, 0.10),
    "claude-opus-5-5": (4.0, 20.0, 5.0, 0.20),
    "claude-haiku-5-5": (0.10, 0.50, 0.125, 0.01),
    "claude-fable-5-2": (8.0, 40.0, 10.0, 0.20),
    "claude-haiku-4-5": (1.0, 5.0, 1.25, 0.10),
    "claude-sonnet-4-5": (3.0, 15.0, 3.75, 0.30),
}


def priced(u: Any, rates: tuple[float, float, float, float]) -> float:
    input_rate, output_rate, write_rate, read_rate = rates
    return (
        u.input_tokens * input_rate
        + u.output_tokens * output_rate
        + u.cache_creation_input_tokens * write_rate
        + u.cache_read_input_tokens * read_rate
    ) / 1e6


@pytest.mark.parametrize("model", PRICES)
async def test_each_request_is_priced_at_its_model(fake: FakeAnthropic, client: AsyncAnthropic, model: str) -> None:
    fake.script(reply(text("a" * 400)), reply(text("b" * 400)))

    first = await ask_usage(client, model, system=[cached(text(BIG))])  # writes the cache
    second = await ask_usage(client, model, system=[cached(text(BIG))])  # reads it

    assert first.cache_creation_input_tokens and second.cache_read_input_tokens
    assert [r.cost_usd for r in fake.requests] == [
        pytest.approx(priced(first, PRICES[model])),
        pytest.approx(priced(second, PRICES[model])),
    ]
    assert fake.cost_usd() == pytest.approx(priced(first, PRICES[model]) + priced(second, PRICES[model]))


async def ask_usage(client: AsyncAnthropic, model: str, **kwargs: Any) -> Any:
    msg = await client.messages.create(model=model, max_tokens=4096, messages=[user("q")], **kwargs)
    return msg.usage


@pytest.mark.parametrize(
    ("chars", "rates"),
    [
        (400_000 - 25, (0.10, 0.50, 0.125, 0.01)),  # exactly 100,000 prompt tokens
        (400_004 - 25, (0.50, 2.50, 0.625, 0.05)),  # 100,001
    ],
)
async def test_haiku_5_5_prices_prompts_over_100k_tokens_higher(
    fake: FakeAnthropic, client: AsyncAnthropic, chars: int, rates: tuple[float, float, float, float]
) -> None:
    fake.script(reply(text("ok")))

    msg = await client.messages.create(model="claude-haiku-5-5", max_tokens=4096, messages=[user("x" * chars)])

    assert msg.usage.input_tokens == (chars + 25) // 4
    assert fake.cost_usd() == pytest.approx(priced(msg.usage, rates))


async def test_the_answering_model_is_priced_and_errors_are_free(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(error(500, "api_error"), reply(text("ok"), model="claude-opus-5-5"))

    with pytest.raises(anthropic.InternalServerError):
        await client.messages.create(model=MODEL, max_tokens=1024, messages=[user("q")])
    msg = await client.messages.create(model=MODEL, max_tokens=1024, messages=[user("q")])

    assert msg.model == "claude-opus-5-5"
    assert [r.cost_usd for r in fake.requests] == [None, pytest.approx(priced(msg.usage, PRICES["claude-opus-5-5"]))]
    assert fake.cost_usd() == fake.requests[1].cost_usd


async def test_cost_of_an_unpriced_model_is_an_error(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("ok")))
    await client.messages.create(model="test-model", max_tokens=64, messages=[user("q")])

    assert fake.requests[0].cost_usd is None
    with pytest.raises(AssertionError, match="the fake has no price for test-model"):
        fake.cost_usd()


# --------------------------------------------------------------------------- failing one model


async def test_fail_model_overloads_one_model_without_consuming_the_script(
    fake: FakeAnthropic, client: AsyncAnthropic
) -> None:
    fake.fail_model("claude-sonnet-5-5")
    fake.script(reply(text("from haiku")), reply(text("from sonnet")))

    with pytest.raises(anthropic.OverloadedError):
        await client.messages.create(model="claude-sonnet-5-5-20260928", max_tokens=1024, messages=[user("q")])
    fallback = await client.messages.create(model="claude-haiku-5-5", max_tokens=1024, messages=[user("q")])
    fake.restore_model("claude-sonnet-5-5")
    recovered = await client.messages.create(model="claude-sonnet-5-5", max_tokens=1024, messages=[user("q")])

    assert (fallback.content[-1].text, recovered.content[-1].text) == ("from haiku", "from sonnet")
    assert [r.status for r in fake.requests] == [529, 200, 200]


async def test_a_script_callable_can_answer_per_model(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    def overloaded_sonnet(body: dict[str, Any]) -> Any:
        return error(529, "overloaded_error") if body["model"] == MODEL else reply(text(f"from {body['model']}"))

    fake.script(overloaded_sonnet, overloaded_sonnet)

    with pytest.raises(anthropic.OverloadedError):
        await client.messages.create(model=MODEL, max_tokens=1024, messages=[user("q")])
    msg = await client.messages.create(model="claude-haiku-5-5", max_tokens=1024, messages=[user("q")])

    assert msg.content[-1].text == "from claude-haiku-5-5"


# --------------------------------------------------------------------------- effort and server-held threads

from tests.support.fakes.anthropic import EFFORT_THINKING_TOKENS, THREADS_BETA  # noqa: E402


@pytest.mark.parametrize(("effort", "expected"), [*EFFORT_THINKING_TOKENS.items(), (None, 2000)])
async def test_effort_sets_the_reasoning_of_an_unscripted_reply(effort: str | None, expected: int) -> None:
    async with (
        FakeAnthropic(api_key=KEY, thinking_by_effort=EFFORT_THINKING_TOKENS) as server,
        AsyncAnthropic(api_key=KEY, base_url=server.base_url, max_retries=0) as c,
    ):
        server.script(reply(text("ok")))
        extra = {"output_config": {"effort": effort}} if effort else {}

        msg = await c.messages.create(model=MODEL, max_tokens=20000, messages=[user("hi")], **extra)

    assert msg.usage.output_tokens_details.thinking_tokens == expected  # None: Sonnet 5.5 defaults to high


async def test_a_scripted_thinking_count_wins_over_effort() -> None:
    async with (
        FakeAnthropic(api_key=KEY, thinking_by_effort=EFFORT_THINKING_TOKENS) as server,
        AsyncAnthropic(api_key=KEY, base_url=server.base_url, max_retries=0) as c,
    ):
        server.script(reply(text("ok"), thinking_tokens=7))

        msg = await c.messages.create(
            model=MODEL, max_tokens=1000, messages=[user("hi")], output_config={"effort": "max"}
        )

    assert msg.usage.output_tokens_details.thinking_tokens == 7


async def test_without_the_effort_model_replies_keep_the_default_reasoning(
    fake: FakeAnthropic, client: AsyncAnthropic
) -> None:
    fake.script(reply(text("ok")))

    msg = await client.messages.create(
        model=MODEL, max_tokens=1000, messages=[user("hi")], output_config={"effort": "max"}
    )

    assert msg.usage.output_tokens_details.thinking_tokens == DEFAULT_THINKING_TOKENS


async def test_the_sdk_tool_runner_continues_a_thread_with_only_new_turns(
    fake: FakeAnthropic, client: AsyncAnthropic
) -> None:
    @anthropic.beta_async_tool
    async def get_status(service: str) -> str:
        """Status of a service."""
        return f"{service}: degraded"

    fake.script(
        reply(tool_use("get_status", {"service": "api"})),
        reply(tool_use("get_status", {"service": "db"})),
        reply(text("db is the cause")),
    )

    runner = client.beta.messages.tool_runner(
        model=MODEL,
        max_tokens=4000,
        system=BIG,
        tools=[get_status],
        messages=[user("api is slow")],
        cache_control=EPHEMERAL,
    )
    replies = [m async for m in runner]

    sent = [(r.body["thread"]["type"], len(r.body["messages"]), "system" in r.body) for r in fake.requests]
    assert sent == [("create", 1, True), ("continue", 1, False), ("continue", 1, False)]
    assert replies[-1].content[-1].text == "db is the cause"
    # Each continue reads the whole previous conversation (system included) from the cache.
    first, second, third = (r.usage for r in fake.requests)
    assert (second["cache_read_input_tokens"], third["cache_read_input_tokens"]) == (
        first["cache_creation_input_tokens"],
        first["cache_creation_input_tokens"] + second["cache_creation_input_tokens"],
    )
    assert all(r.headers["anthropic-beta"].count(THREADS_BETA) == 1 for r in fake.requests)


async def _create_thread(client: AsyncAnthropic) -> str:
    msg = await client.beta.messages.create(
        model=MODEL, max_tokens=1000, messages=[user("hi")], thread={"type": "create"}, betas=[THREADS_BETA]
    )
    return msg.id


async def test_a_message_continues_its_thread_only_once(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("one")), reply(text("two")))
    first = await _create_thread(client)
    await client.beta.messages.create(
        model=MODEL,
        max_tokens=1000,
        messages=[user("again")],
        betas=[THREADS_BETA],
        thread={"type": "continue", "previous_message_id": first},
    )

    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.beta.messages.create(
            model=MODEL,
            max_tokens=1000,
            messages=[user("next")],
            betas=[THREADS_BETA],
            thread={"type": "continue", "previous_message_id": first},
        )

    assert caught.value.body["error"]["details"] == {"error_code": "thread_already_continued"}


async def test_an_unknown_thread_is_not_found(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        await client.beta.messages.create(
            model=MODEL,
            max_tokens=1000,
            messages=[user("q")],
            betas=[THREADS_BETA],
            thread={"type": "continue", "previous_message_id": "msg_nope"},
        )

    assert caught.value.body["error"]["details"] == {"error_code": "thread_not_found"}


async def test_a_continue_may_not_resend_system(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("one")))
    first = await _create_thread(client)

    with pytest.raises(anthropic.BadRequestError, match="system: not allowed on a thread continue"):
        await client.beta.messages.create(
            model=MODEL,
            max_tokens=1000,
            messages=[user("q")],
            betas=[THREADS_BETA],
            system="changed",
            thread={"type": "continue", "previous_message_id": first},
        )
