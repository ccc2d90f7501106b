"""The fake Anthropic server, driven by the real ``anthropic.AsyncAnthropic`` client."""

from __future__ import annotations

import copy
from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic
from anthropic.types import Message

from tests.fakes.anthropic import (
    FakeAnthropic,
    count_tokens,
    error,
    repeating_text,
    reply,
    text,
    tool_use,
)

KEY = "sk-ant-test"
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

    msg = await client.messages.create(model=MODEL, max_tokens=256, messages=[user("status?")])

    assert msg.model_dump(exclude_none=True) == {
        "id": "msg_fake_0001",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "All systems nominal."}],
        "stop_reason": "end_turn",
        "usage": usage(count_tokens(text("status?")), count_tokens([text("All systems nominal.")])),
    }
    assert msg._request_id == "req_fake_0001"
    [req] = fake.requests
    assert req.body == {"model": MODEL, "max_tokens": 256, "messages": [user("status?")]}
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert req.response == {**msg.model_dump(exclude_none=True), "stop_sequence": None}
    fake.assert_complete()


async def test_text_reply_stream_helper(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("All systems nominal.")))

    async with client.messages.stream(model=MODEL, max_tokens=256, messages=[user("status?")]) as stream:
        chunks = [chunk async for chunk in stream.text_stream]
        msg = await stream.get_final_message()

    assert "".join(chunks) == "All systems nominal."
    assert len(chunks) == 3  # the fake splits text into a few deltas
    assert msg.model_dump(exclude_none=True) == {
        "id": "msg_fake_0001",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "All systems nominal."}],
        "stop_reason": "end_turn",
        "usage": usage(count_tokens(text("status?")), count_tokens([text("All systems nominal.")])),
    }
    assert fake.requests[0].body["stream"] is True
    assert fake.requests[0].cancelled is False


async def test_create_stream_true_sends_the_real_event_sequence(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("Rolling back."), tool_use("rollback", {"deploy": "d-42"}, id="toolu_rb")))

    stream = await client.messages.create(model=MODEL, max_tokens=256, messages=[user("fix it")], stream=True)
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
            return await client.messages.create(model=MODEL, max_tokens=5, messages=[user("hi")])
        async with client.messages.stream(model=MODEL, max_tokens=5, messages=[user("hi")]) as s:
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

    async with client.messages.stream(model=MODEL, max_tokens=512, tools=[TOOL], messages=messages) as s:
        first = await s.get_final_message()

    assert first.stop_reason == "tool_use"
    assert [b.model_dump(exclude_none=True) for b in first.content] == [text("Let me check."), call]
    assert call["id"].startswith("toolu_")

    messages += [
        assistant([b.model_dump(exclude_none=True) for b in first.content]),
        user([{"type": "tool_result", "tool_use_id": call["id"], "content": "healthy"}]),
    ]
    second = await client.messages.create(model=MODEL, max_tokens=512, tools=[TOOL], messages=messages)

    assert second.content[0].text == f"{call['id']} said healthy"
    assert [r.status for r in fake.requests] == [200, 200]
    fake.assert_complete()


# --------------------------------------------------------------------------- errors


async def test_rate_limit_is_retried_by_the_sdk(fake: FakeAnthropic) -> None:
    fake.script(error(429, "rate_limit_error", headers={"retry-after": "0.01"}), reply(text("ok")))

    async with AsyncAnthropic(api_key=KEY, base_url=fake.base_url, max_retries=2) as client:
        msg = await client.messages.create(model=MODEL, max_tokens=16, messages=[user("hi")])

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

    with pytest.raises(anthropic.OverloadedError) as exc_info:
        if stream:
            async with client.messages.stream(model=MODEL, max_tokens=16, messages=[user("hi")]) as s:
                await s.get_final_message()
        else:
            await client.messages.create(model=MODEL, max_tokens=16, messages=[user("hi")])

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
            await client.messages.create(model=MODEL, max_tokens=16, messages=[user("hi")])

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
        await client.messages.create(model=MODEL, max_tokens=16, messages=[user("hi")])


async def test_empty_script_answers_500_and_is_not_retried(fake: FakeAnthropic) -> None:
    async with AsyncAnthropic(api_key=KEY, base_url=fake.base_url, max_retries=2) as client:
        with pytest.raises(anthropic.InternalServerError) as exc_info:
            await client.messages.create(model=MODEL, max_tokens=16, messages=[user("hi")])

    assert exc_info.value.api_message == "fake: no scripted response left"
    assert [(r.status, r.error["type"]) for r in fake.requests] == [(500, "api_error")]


async def test_assert_complete_lists_unused_items(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    fake.script(reply(text("used")), reply(text("left over")))
    await client.messages.create(model=MODEL, max_tokens=16, messages=[user("hi")])

    with pytest.raises(AssertionError, match=r"1 scripted response\(s\) not used: .*left over"):
        fake.assert_complete()


async def test_wait_for_requests_times_out_with_a_clear_message(fake: FakeAnthropic) -> None:
    with pytest.raises(AssertionError, match=r"expected 1 request\(s\) within 0.01s, got 0"):
        await fake.wait_for_requests(1, timeout=0.01)


# --------------------------------------------------------------------------- validation

TOOL_CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_status", "input": {"service": "api"}}
TOOL_RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "healthy"}
VALID = {"model": MODEL, "max_tokens": 64, "messages": [user("hi")]}


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
    msg = await client.messages.create(model=MODEL, max_tokens=16, messages=[user("hi")])
    assert msg.content[0].text == "only for valid requests"


async def test_temperature_is_rejected(fake: FakeAnthropic, client: AsyncAnthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="temperature: Extra inputs are not permitted"):
        await client.messages.create(model=MODEL, max_tokens=16, messages=[user("hi")], extra_body={"temperature": 0.2})
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

    msg = await client.messages.create(model=MODEL, max_tokens=16, tools=[TOOL], messages=messages)

    assert msg.content[0].text == "noted"


async def test_prompt_over_the_context_window_is_too_long() -> None:
    async with FakeAnthropic(api_key=KEY, context_window=100) as fake:
        async with AsyncAnthropic(api_key=KEY, base_url=fake.base_url, max_retries=0) as client:
            with pytest.raises(anthropic.BadRequestError) as exc_info:
                await client.messages.create(model=MODEL, max_tokens=16, messages=[user("x" * 1000)])

    assert exc_info.value.api_message == f"prompt is too long: {count_tokens(text('x' * 1000))} tokens > 100 maximum"


# --------------------------------------------------------------------------- prompt caching


async def ask(client: AsyncAnthropic, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, int]:
    """Send a request and return its usage (without output tokens)."""
    msg = await client.messages.create(model=kwargs.pop("model", MODEL), max_tokens=64, messages=messages, **kwargs)
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
    other_model = await ask(client, [user("q")], system=system, model="claude-haiku-5-5")

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

    async with client.messages.stream(model=MODEL, max_tokens=4096, messages=[user("tail the logs")]) as stream:
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

    msg = await client.messages.create(model=MODEL, max_tokens=64, messages=[user("go")])

    assert ([b.model_dump(exclude_none=True) for b in msg.content], msg.stop_reason) == (
        [text("ab" * 10)],
        "max_tokens",
    )
