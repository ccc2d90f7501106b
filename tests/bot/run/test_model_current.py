"""The Anthropic adapter on the current models, through the real SDK against the strict fake:
what it sends (and never sends), the drop_block self-heal, thinking-only and degenerate replies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.core.pricing import price_for
from bot.core.types import AnswerSink, ModelRequest, StopReason
from bot.run.events import RunEvent, ToolStarted
from bot.run.loop import RunConfig, run
from bot.run.model import AnthropicModel
from bot.store import Store
from tests.support.fakes.anthropic import repeating_text, reply, text, tool_use
from tests.support.harness import answered
from tools import Category, ToolRegistry, tool

SONNET, HAIKU = "claude-sonnet-5-5", "claude-haiku-5-5"


@tool(category=Category.READ_ONLY, parallel=True)
async def check_disk(host: str) -> str:
    """Disk usage on a host."""
    return f"{host}: / 97% used"


TOOLS = ToolRegistry([check_disk])


def config(store: Store, client: Any, **kw: Any) -> RunConfig:
    model = AnthropicModel(client, [SONNET, HAIKU], backoff_base=0.001, retry_after_cap=0.05)
    return RunConfig(
        model=model,
        store=store,
        tools=TOOLS,
        price_for=lambda m: price_for(m)[0],
        system_prompt="You are opsloop.",
        effort="medium",
        **kw,
    )


async def start(store: Store, task: str = "web-03 is out of disk") -> str:
    row = await store.create_run(
        channel="C1",
        thread_ts="1.0",
        requester="U1",
        task=task,
        model=SONNET,
        history=[{"role": "user", "content": [{"type": "text", "text": task}]}],
    )
    return row.id


async def test_requests_use_adaptive_thinking_and_effort_and_nothing_the_models_reject(
    store, fake_anthropic, anthropic_client
):
    fake_anthropic.script(
        reply(text("Checking."), tool_use("check_disk", {"host": "web-03"})), *answered(reply(text("full")))
    )
    result = await run(config(store, anthropic_client), await start(store))
    assert result.stop_reason == StopReason.COMPLETED
    for request in fake_anthropic.requests:
        body = request.body
        assert request.status == 200
        assert body["thinking"] == {"type": "adaptive", "display": "summarized"}
        assert body["output_config"] == {"effort": "medium"}
        assert body["max_tokens"] == 16_000
        assert not {"temperature", "top_p", "top_k", "tool_choice"} & body.keys()
        assert body["messages"][-1]["role"] == "user"  # never a prefill
        assert "anthropic-beta" not in request.headers  # the beta only when it is needed


async def test_older_models_get_no_thinking_parameters(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(reply(text("ok")))
    model = AnthropicModel(anthropic_client, ["claude-haiku-4-5"])
    response = await model.complete(
        ModelRequest(
            system="s",
            tools=[],
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=100,
            effort="medium",
            thinking_display="summarized",
        )
    )
    assert response.content == [{"type": "text", "text": "ok"}]
    assert not {"thinking", "output_config"} & fake_anthropic.requests[0].body.keys()


async def test_an_edited_stored_turn_heals_with_drop_block_for_the_rest_of_the_run(
    store, fake_anthropic, anthropic_client
):
    """Someone (an old version, a migration) changed a turn the model already saw: the run must not die."""
    fake_anthropic.script(
        reply(text("Checking."), tool_use("check_disk", {"host": "web-03"})),
        reply(tool_use("check_disk", {"host": "web-04"})),
        *answered(reply(text("both full"))),
    )
    run_id = await start(store)
    stop_after_first: list[int] = []

    async def stop_requested() -> str | None:
        return "U9" if stop_after_first else None

    async def on_event(event: RunEvent) -> None:
        if isinstance(event, ToolStarted):
            stop_after_first.append(1)

    first = await run(config(store, anthropic_client, stop_requested=stop_requested, on_event=on_event), run_id)
    assert first.stop_reason == StopReason.CANCELLED
    # Edit the first user turn behind the thinking block's back, and continue the thread.
    history = await store.history(run_id)
    history[0]["content"][0]["text"] = "web-03 is out of disk (edited)"
    history.append({"role": "user", "content": [{"type": "text", "text": "go on"}]})
    history[-2]["content"].extend(history.pop()["content"])
    follow = await store.create_run(
        channel="C1", thread_ts="2.0", requester="U1", task="go on", model=SONNET, history=history
    )
    result = await run(config(store, anthropic_client), follow.id)

    assert result.stop_reason == StopReason.COMPLETED, result.stop_detail
    # `again`: the answer once more, asked once for the summary
    rejected, healed, later, again = fake_anthropic.requests[1:]
    assert rejected.status == 400 and "bound to a different conversation" in rejected.error["message"]
    for request in (healed, later, again):
        assert request.status == 200
        assert "thinking-binding-controls-2026-08-01" in request.headers["anthropic-beta"]
        assert request.body["thinking"]["block_binding"] == {"prefix_mismatch_behavior": "drop_block"}
    assert [t["type"] for t in healed.response["input_transformations"]] == ["thinking_dropped"]
    assert (await store.get_run(follow.id)).drop_block


async def test_a_thinking_only_stop_at_max_tokens_is_retried_with_twice_the_room(
    store, fake_anthropic, anthropic_client
):
    fake_anthropic.script(reply(text("full"), thinking_tokens=20_000), reply(text("/var is full")))
    result = await run(config(store, anthropic_client), await start(store))
    first, second = fake_anthropic.requests
    assert first.response["stop_reason"] == "max_tokens"
    assert [b["type"] for b in first.response["content"]] == ["thinking"]
    assert (second.body["max_tokens"], result.output) == (32_000, "/var is full")
    assert result.usage.output_tokens == sum(r.usage["output_tokens"] for r in fake_anthropic.requests)
    assert round(result.cost_usd, 9) == round(fake_anthropic.cost_usd(), 9)


async def test_degenerate_output_is_named_and_charged(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(*[repeating_text("the disk is full. ")] * 3)
    run_id = await start(store)
    result = await run(config(store, anthropic_client), run_id)
    assert result.stop_reason == StopReason.MODEL_ERROR
    assert result.stop_detail == (
        "claude-sonnet-5-5 returned degenerate output, then degenerate output, then degenerate output"
    )
    assert result.usage.output_tokens > 3 * 800 // 4  # each cut stream is billed for what it streamed
    assert result.cost_usd > 0
    steps = await store.steps(run_id)
    assert json.dumps([s.data for s in steps]).count("degenerate output") >= 1


# --- the streamed turn, event by event (shapes the fake can't send), as the API's JSON -----------------------
def ev(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def block(**fields: Any) -> dict[str, Any]:
    return dict(fields)


def usage(**fields: Any) -> dict[str, Any]:
    return {"input_tokens": fields.pop("input_tokens", 10), "output_tokens": fields.pop("output_tokens", 1), **fields}


def test_a_tool_call_cut_off_mid_input_is_dropped_not_run() -> None:
    """max_tokens can land inside a tool's JSON input: that call is never run with half its arguments."""
    from bot.run.model import _Turn

    turn = _Turn(SONNET)
    for event in (
        ev("message_start", message=ev("message", model=SONNET, usage=usage())),
        ev("content_block_start", index=0, content_block=block(type="thinking", thinking="", signature="")),
        ev("content_block_delta", index=0, delta=ev("signature_delta", signature="sig")),
        ev("content_block_stop", index=0),
        ev("content_block_start", index=1, content_block=block(type="tool_use", id="t1", name="check_disk", input={})),
        ev("content_block_delta", index=1, delta=ev("input_json_delta", partial_json='{"host": "web-')),
        ev("content_block_stop", index=1),
        ev("message_delta", delta=ev("delta", stop_reason="max_tokens"), usage=ev("u", output_tokens=16_000)),
        ev("message_stop"),
    ):
        assert turn.add(event) is False
    assert turn.content() == [{"type": "thinking", "thinking": "", "signature": "sig"}]
    assert (turn.stop_reason, turn.stopped) == ("max_tokens", True)


def test_final_usage_on_message_delta_replaces_the_start_counts() -> None:
    from bot.run.model import _Turn

    turn = _Turn(SONNET)
    turn.add(ev("message_start", message=ev("message", model=SONNET, usage=usage(input_tokens=100))))
    turn.add(
        ev(
            "message_delta",
            delta=ev("delta", stop_reason="end_turn"),
            usage=ev(
                "u", output_tokens=50, input_tokens=9000, cache_read_input_tokens=5000, cache_creation_input_tokens=700
            ),
        )
    )
    got = turn.usage()
    assert (got.input_tokens, got.output_tokens, got.cache_read_tokens, got.cache_write_tokens) == (9000, 50, 5000, 700)


def test_a_stream_that_ends_before_message_stop_is_transient() -> None:
    from bot.run.model import IncompleteStream, _is_transient

    assert _is_transient(IncompleteStream("cut"))


async def test_retried_attempts_are_priced_one_by_one(store) -> None:
    """Two 60K-token Haiku 5.5 prompts are two lower-tier prompts, not one 120K upper-tier prompt."""
    from bot.core.types import ModelResponse, Usage

    first = Usage(input_tokens=60_000, output_tokens=10)
    second = Usage(input_tokens=60_000, output_tokens=20)

    class RetriedOnce:
        model = HAIKU

        async def complete(self, request: ModelRequest, *, sink: AnswerSink | None = None) -> ModelResponse:
            return ModelResponse(
                content=[{"type": "text", "text": "done"}],
                stop_reason="end_turn",
                usage=first + second,
                model=HAIKU,
                billed=((HAIKU, first), (HAIKU, second)),
            )

    result = await run(
        RunConfig(model=RetriedOnce(), store=store, tools=TOOLS, price_for=lambda m: price_for(m)[0]),
        await start(store),
    )
    haiku = price_for(HAIKU)[0]
    assert result.cost_usd == pytest.approx(haiku.cost(first) + haiku.cost(second))
    assert result.cost_usd < haiku.cost(first + second)


async def test_a_follow_up_run_keeps_the_threads_system_and_tools(store) -> None:
    """The carried-over turns' thinking is bound to them; a follow-up that rebuilt them would pay a 400."""
    first, _ = await store.open_run(
        channel="C1", thread_ts="9.0", requester="U1", task="a", prompt="a", model=SONNET, mention_ts="9.0"
    )
    await store.fix_prompt(first.id, system="old system", tools=[{"name": "gone", "input_schema": {}}])
    await store.finish_run(first.id, stop_reason=StopReason.COMPLETED, stop_detail="")
    follow, created = await store.open_run(
        channel="C1", thread_ts="9.0", requester="U2", task="b", prompt="b", model=SONNET, mention_ts="9.5"
    )
    assert created and (follow.system, follow.tools) == ("old system", [{"name": "gone", "input_schema": {}}])
