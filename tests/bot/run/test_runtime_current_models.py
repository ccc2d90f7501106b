"""The loop's rules for models that think and bind their thinking to the conversation.

In-process models here (no HTTP): these tests are about what the loop sends and keeps;
tests/e2e/test_current_models_e2e.py proves the same against the strict fake Messages API.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bot.core.pricing import price_for
from bot.core.types import AnswerSink, Decision, ModelError, ModelRequest, ModelResponse, StopReason, Usage
from bot.run import living
from bot.run.guards import Limits
from bot.run.loop import RunConfig, run
from bot.run.report import handoff_report
from bot.store import Store
from tests.support.scripted import ScriptedModel, answered, call
from tools import Category, ToolRegistry, tool

MODEL = "claude-sonnet-5-5"
RELEASED = asyncio.Event()
STARTED = asyncio.Event()


@tool(category=Category.READ_ONLY, parallel=True)
async def check_disk(host: str) -> str:
    """Disk usage on a host."""
    return f"{host}: / 97% used"


@tool(category=Category.READ_ONLY)
async def tail_log(path: str) -> str:
    """Last lines of a log."""
    return "ERROR disk full"


@tool(category=Category.MUTATING)
async def slow_restart(unit: str, *, confirmed_by: str) -> str:
    """Restart a unit (waits until the test lets it finish)."""
    STARTED.set()
    await RELEASED.wait()
    return f"restarted {unit}"


def thinking(text: str = "") -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": f"sig-{len(text)}"}


def price(model: str) -> Any:
    return price_for(model)[0]


class Replies:
    """A ModelClient that returns whole scripted ModelResponses and records every request."""

    def __init__(self, *responses: ModelResponse | BaseException) -> None:
        self.responses = list(responses)
        self.requests: list[ModelRequest] = []
        self.model = MODEL

    async def complete(self, request: ModelRequest, *, sink: AnswerSink | None = None) -> ModelResponse:
        self.requests.append(request)
        item = self.responses.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item


def answer(
    *blocks: dict[str, Any], stop: str = "end_turn", output: int = 10, drop_block: bool = False
) -> ModelResponse:
    return ModelResponse(
        content=list(blocks),
        stop_reason=stop,
        model=MODEL,
        drop_block=drop_block,
        usage=Usage(input_tokens=100, output_tokens=output),
    )


async def start(store: Store, task: str = "web-03 is out of disk") -> str:
    row = await store.create_run(
        channel="C1",
        thread_ts="1.0",
        requester="U1",
        task=task,
        model=MODEL,
        history=[{"role": "user", "content": [{"type": "text", "text": task}]}],
    )
    return row.id


async def test_a_resumed_run_sends_the_system_and_tools_it_started_with(store):
    """A new process with a changed config (or an MCP server whose tools changed) must not change the prefix."""
    first_tools = ToolRegistry([check_disk, tail_log])
    parked = asyncio.Event()

    class ParksOnSecondRequest(ScriptedModel):
        async def complete(self, request: ModelRequest, *, sink: AnswerSink | None = None) -> ModelResponse:
            if self.requests:
                self.requests.append(request)
                parked.set()
                await asyncio.Event().wait()  # the process dies here
            return await super().complete(request)

    first = ParksOnSecondRequest([thinking(), *call("check_disk", {"host": "web-03"}, "toolu_1")], model=MODEL)
    run_id = await start(store)
    task = asyncio.create_task(
        run(
            RunConfig(
                model=first, store=store, tools=first_tools, price_for=price, system_prompt="You are opsloop, v1."
            ),
            run_id,
        )
    )
    await parked.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    resumed = ScriptedModel(*answered([{"type": "text", "text": "done"}]), model=MODEL)
    result = await run(
        RunConfig(
            model=resumed,
            store=store,
            tools=ToolRegistry([check_disk]),
            price_for=price,
            system_prompt="You are opsloop, v2 with a new date.",
        ),
        run_id,
    )
    assert result.stop_reason == StopReason.COMPLETED
    sent = resumed.requests[0]
    assert (sent.system, sent.tools) == ("You are opsloop, v1.", [*first_tools.api_schemas(), living.schema()])
    old = first.requests[1].messages
    assert sent.messages[:2] == old[:2] and sent.messages[2]["content"][0] == old[2]["content"][0]  # untouched
    note = sent.messages[-1]["content"][-1]["text"]
    assert note == (
        "[opsloop note] Since this run started, these tools are no longer available and will fail if called: tail_log."
    )


async def test_thinking_only_at_max_tokens_is_retried_once_with_more_room(store):
    model = Replies(
        answer(thinking("long thought"), stop="max_tokens", output=16_000),
        answer({"type": "text", "text": "disk is full"}),
    )
    result = await run(
        RunConfig(model=model, store=store, tools=ToolRegistry([check_disk]), price_for=price), await start(store)
    )
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "disk is full")
    assert [r.max_tokens for r in model.requests] == [16_000, 32_000]
    assert result.usage.output_tokens == 16_010  # the thinking that ran out of room is charged
    assert [m["role"] for m in await store.history(result.run_id)] == ["user", "assistant"]  # never stored


async def test_thinking_only_twice_ends_the_run_with_a_clear_reason(store):
    model = Replies(answer(thinking(), stop="max_tokens"), answer(thinking(), stop="max_tokens"))
    result = await run(
        RunConfig(model=model, store=store, tools=ToolRegistry([check_disk]), price_for=price), await start(store)
    )
    assert result.stop_reason == StopReason.MODEL_ERROR
    assert result.stop_detail == (
        "claude-sonnet-5-5 used all 32,000 output tokens thinking without answering even after a retry with more room"
    )


async def test_the_retry_with_more_room_stays_within_the_token_budget(store):
    model = Replies(answer(thinking(), stop="max_tokens", output=16_000), answer({"type": "text", "text": "ok"}))
    limits = Limits(token_budget=40_000)
    result = await run(
        RunConfig(model=model, store=store, tools=ToolRegistry([check_disk]), price_for=price, limits=limits),
        await start(store),
    )
    assert result.stop_reason == StopReason.COMPLETED
    assert [r.max_tokens for r in model.requests] == [16_000, 40_000 - 16_100]


async def test_a_drop_block_self_heal_is_kept_for_the_rest_of_the_run(store):
    model = Replies(
        answer(thinking(), *call("check_disk", {"host": "web-03"}, "toolu_1"), stop="tool_use", drop_block=True),
        answer({"type": "text", "text": "done"}, drop_block=True),
        answer({"type": "text", "text": "done"}, drop_block=True),  # asked once for the summary, it answers again
    )
    run_id = await start(store)
    await run(RunConfig(model=model, store=store, tools=ToolRegistry([check_disk]), price_for=price), run_id)
    assert [r.drop_block for r in model.requests] == [False, True, True]
    assert (await store.get_run(run_id)).drop_block
    assert [s.kind for s in await store.steps(run_id)].count("thinking_prefix_mismatch") == 1


async def test_failed_attempts_are_charged(store):
    model = Replies(
        ModelError(
            "claude-sonnet-5-5 returned degenerate output, then degenerate output, then degenerate output",
            usage=Usage(output_tokens=3_000),
            model=MODEL,
        )
    )
    result = await run(
        RunConfig(model=model, store=store, tools=ToolRegistry([check_disk]), price_for=price), await start(store)
    )
    assert result.stop_reason == StopReason.MODEL_ERROR
    assert "degenerate output" in result.stop_detail
    assert (result.usage.output_tokens, round(result.cost_usd, 6)) == (3_000, 0.03)


async def test_a_change_interrupted_by_a_stop_is_reported_as_outcome_unknown(store):
    RELEASED.clear()
    STARTED.clear()
    stop_by: list[str] = []
    model = ScriptedModel(call("slow_restart", {"unit": "nginx"}, "toolu_r"), model=MODEL)

    async def confirm(request: Any) -> Decision:
        return Decision(approved=True, confirmed_by="U2")

    async def stop_requested() -> str | None:
        return stop_by[0] if stop_by else None

    run_id = await start(store)
    cfg = RunConfig(
        model=model,
        store=store,
        tools=ToolRegistry([slow_restart]),
        price_for=price,
        confirm=confirm,
        stop_requested=stop_requested,
    )
    task = asyncio.create_task(run(cfg, run_id))
    await STARTED.wait()  # the change is under way (its started marker is stored before it runs)
    stop_by.append("U3")
    task.cancel()
    result = await task
    assert result.stop_reason == StopReason.CANCELLED
    history = await store.history(run_id)
    last = history[-1]["content"][0]
    assert last["content"].startswith("Outcome unknown: the run stopped (cancelled) while slow_restart was running")
    assert "Verify before retrying" in last["content"]
    report = handoff_report(result, history)
    assert report.pending == ("slow_restart: outcome unknown, verify before retrying",)


async def test_condensing_drops_thinking_from_the_kept_turns_and_redacts_the_task(store):
    """Kept thinking would be bound to the summarised prefix: current models reject it."""

    def step(i: int) -> list[dict[str, Any]]:
        return [thinking(f"step {i}"), *call("check_disk", {"host": f"web-0{i}"}, f"toolu_{i}")]

    # Step 1's answer makes the history condensable, so the first summary is the third request; step 2's answer
    # makes it condensable again, so the second summary is the fifth.
    model = ScriptedModel(
        step(0),
        step(1),
        [{"type": "text", "text": "Checked web-00 and web-01: full."}],
        step(2),
        [{"type": "text", "text": "Checked web-00 to web-02: full."}],
        *answered([{"type": "text", "text": "done"}]),
        model=MODEL,
    )
    task = "web-03 is full; token xoxb-1234-5678-abcdefghijkl"
    run_id = await start(store, task=task)
    result = await run(
        RunConfig(
            model=model, store=store, tools=ToolRegistry([check_disk]), price_for=price, context_budget_tokens=50
        ),
        run_id,
    )
    assert result.stop_reason == StopReason.COMPLETED
    model.assert_complete()
    for summary_at, summary in ((2, "Checked web-00 and web-01: full."), (4, "Checked web-00 to web-02: full.")):
        summary_request, after = model.requests[summary_at], model.requests[summary_at + 1]
        assert summary_request.tools == []
        head = after.messages[0]["content"]
        assert [b["type"] for b in head] == ["text"] * len(head)  # the summary, then the record of the calls
        assert head[0]["text"].startswith("web-03 is full; token ") and summary in head[0]["text"]
        assert "xoxb-" not in "".join(b["text"] for b in head)
        kept = after.messages[1:]
        assert all(b["type"] != "thinking" for m in kept for b in m["content"])
        assert [b["type"] for m in kept if m["role"] == "assistant" for b in m["content"]] == ["tool_use"]
    assert (await store.history(run_id))[:-1] == model.requests[-1].messages  # stored as sent, then the answer


WIPED: list[str] = []
STOPS: dict[str, Any] = {}


@tool(category=Category.DESTRUCTIVE)
async def wipe(path: str, *, confirmed_by: str) -> str:
    """Delete everything under a path."""
    WIPED.append(path)
    return "wiped"


@wipe.dry_run
async def _wipe_preview(path: str) -> str:
    # Another process records a Stop while this one prepares the approved call: it can't cancel this task.
    await STOPS["store"].request_stop(STOPS["run_id"], "U_STOPPER")
    return f"would wipe {path}"


async def test_a_stop_recorded_after_the_approval_wins_over_the_change(store):
    """The started marker is refused once a Stop is recorded, whichever process recorded it."""
    WIPED.clear()
    run_id = await start(store)
    STOPS.update(store=store, run_id=run_id)

    async def confirm(request: Any) -> Decision:  # decided before the run resumed
        return Decision(approved=True, confirmed_by="U2")

    cfg = RunConfig(
        model=ScriptedModel(call("wipe", {"path": "/var"}, "toolu_w"), model=MODEL),
        store=store,
        tools=ToolRegistry([wipe]),
        price_for=price,
        confirm=confirm,
        stop_requested=lambda: store.stop_requested_by(run_id),
    )
    result = await run(cfg, run_id)
    assert (result.stop_reason, result.stopped_by, WIPED) == (StopReason.CANCELLED, "U_STOPPER", [])
    (result_block,) = (await store.history(run_id))[-1]["content"]
    assert result_block["content"] == "Not run: the run stopped (cancelled) before this call."


async def test_context_offered_at_the_first_drive_joins_the_task_turn_once_redacted(store):
    run_id = await start(store)
    block = "[past incidents: data] web-03 filled up on 2026-11-02; token xoxb-123456789012-abcdefghij"
    model = ScriptedModel([{"type": "text", "text": "done"}], model=MODEL)

    async def prelude() -> list[str]:
        return [block, block, "  "]  # the same block twice, and an empty one

    await run(RunConfig(model=model, store=store, tools=ToolRegistry(), price_for=price, prelude=prelude), run_id)
    expected = ["web-03 is out of disk", "[past incidents: data] web-03 filled up on 2026-11-02; token [REDACTED]"]
    assert [b["text"] for b in (await store.history(run_id))[0]["content"]] == expected
    assert [b["text"] for b in model.requests[0].messages[0]["content"]] == expected  # sent as stored


async def test_context_is_never_added_to_a_turn_the_model_already_has(store):
    """A run stored before its settings were (an older opsloop) may end with a tool_result turn already sent."""
    row = await store.create_run(
        channel="C1",
        thread_ts="1.0",
        requester="U1",
        task="web-03",
        model=MODEL,
        history=[
            {"role": "user", "content": [{"type": "text", "text": "web-03"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "check_disk", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
        ],
    )
    model = ScriptedModel(*answered([{"type": "text", "text": "done"}]), model=MODEL)

    async def prelude() -> list[str]:
        return ["[team runbook: data] step 1"]

    await run(RunConfig(model=model, store=store, tools=ToolRegistry(), price_for=price, prelude=prelude), row.id)
    assert [b.get("type") for b in (await store.history(row.id))[2]["content"]] == ["tool_result"]
