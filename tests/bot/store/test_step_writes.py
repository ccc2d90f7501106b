"""A step's store round trips: its trace rows ride in its own writes (one transaction each), the Stop flag and the
inbox come in one read (after a tool step, in that step's last write), a read-only call's result is stored with
the turn that answers it (and, when the calls end quickly, with the turn that made them), and a drive never
re-reads the results it just wrote. The store side runs once per
backend (`db_url`); the loop side counts the calls handed to the store's writer thread (`Store.round_trips`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from bot.core.pricing import price_for
from bot.core.types import (
    CallResult,
    ConfirmRequest,
    Decision,
    InboxState,
    Injected,
    RunNews,
    StopReason,
    Totals,
    Usage,
)
from bot.run.guards import Limits
from bot.run.loop import RunConfig, run
from bot.run.model import AnthropicModel
from bot.store import Store
from tests.support.fakes.anthropic import FakeAnthropic, Reply, error, reply, text, tool_use
from tests.support.harness import answered
from tools import Category, ToolRegistry, tool

MODEL = "claude-sonnet-5-5"


@tool(category=Category.READ_ONLY)
async def check_cpu(host: str) -> str:
    """CPU usage of a host."""
    return f"{host}: cpu 97%"


TOOLS = ToolRegistry([check_cpu])


@pytest.fixture
async def any_store(db_url: str) -> AsyncIterator[Store]:
    s = await Store(db_url, retry_seconds=5).open()
    yield s
    await s.close()


async def new_run(store: Store, task: str = "web-03 has high CPU") -> str:
    row = await store.create_run(
        channel="C1",
        thread_ts="1.0",
        requester="U1",
        task=task,
        model=MODEL,
        history=[{"role": "user", "content": [{"type": "text", "text": task}]}],
    )
    return row.id


def config(
    store: Store, client: anthropic.AsyncAnthropic, run_id: str, *, tools: ToolRegistry = TOOLS, **kw: Any
) -> RunConfig:
    async def news() -> RunNews:
        return await store.run_news(run_id)

    return RunConfig(
        model=AnthropicModel(client, [MODEL], backoff_base=0.001),
        store=store,
        tools=tools,
        price_for=lambda m: price_for(m)[0],
        system_prompt="You are opsloop.",
        news=news,
        **kw,
    )


# --- the store, on both backends ------------------------------------------------------------------------
async def test_a_turn_and_its_trace_rows_are_written_together(any_store: Store) -> None:
    run_id = await new_run(any_store)
    turn = {"role": "assistant", "content": [{"type": "text", "text": "fine"}]}
    totals = Totals(iterations=1, usage=Usage(), cost_usd=0.0, agent_seconds=0.0, tools_called=(), condensed=False)
    await any_store.put_message(
        run_id, 1, turn, totals=totals, steps=[("request", {"iteration": 1}), ("response", {"text": "fine"})]
    )
    assert [(s.kind, s.data) for s in await any_store.steps(run_id)] == [
        ("request", {"iteration": 1}),
        ("response", {"text": "fine"}),
    ]
    assert (await any_store.history(run_id))[1] == turn


async def test_many_trace_rows_at_once_are_stored_in_order_with_their_secrets_redacted(any_store: Store) -> None:
    run_id = await new_run(any_store)  # more rows than one statement takes: they go in several, in order
    steps = [("tool", {"n": i, "token": f"xoxb-{i}-secret"}) for i in range(450)]
    await any_store.add_steps(run_id, steps)
    stored = await any_store.steps(run_id)
    assert [s.data["n"] for s in stored] == list(range(450))
    assert {s.data["token"] for s in stored} == {"[REDACTED]"}


async def test_a_turn_that_fails_to_store_leaves_none_of_its_trace_rows(any_store: Store) -> None:
    run_id = await new_run(any_store)
    with pytest.raises(TypeError):  # content that can't be encoded: the whole transaction goes
        await any_store.put_message(
            run_id, 1, {"role": "assistant", "content": {1, 2}}, steps=[("request", {"iteration": 1})]
        )
    assert (await any_store.steps(run_id), len(await any_store.history(run_id))) == ([], 1)


async def test_a_result_and_its_trace_row_are_written_together(any_store: Store) -> None:
    run_id = await new_run(any_store)
    assert await any_store.save_tool_result(
        run_id,
        tool_use_id="toolu_1",
        tool="check_cpu",
        args={"host": "a"},
        content="a: cpu 97%",
        is_error=False,
        confirmed_by=None,
        steps=[("tool", {"tool": "check_cpu", "result": "a: cpu 97%"})],
    )
    assert [(s.kind, s.data["tool"]) for s in await any_store.steps(run_id)] == [("tool", "check_cpu")]
    assert (await any_store.tool_results(run_id))["toolu_1"].content == "a: cpu 97%"


def _result(i: int, content: str = "a: cpu 97%") -> CallResult:
    return CallResult(tool_use_id=f"toolu_{i}", tool="check_cpu", args={"host": "a"}, content=content, is_error=False)


async def test_a_turn_of_results_and_its_results_are_written_together_then_the_news_read(any_store: Store) -> None:
    run_id = await new_run(any_store)
    await any_store.add_inbox(run_id=run_id, channel="C1", ts="2.0", user="U7", text="logs first")
    turn = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a: cpu 97%"}]}
    news = await any_store.answer_turn(run_id, 1, turn, results=[_result(1)], steps=[("tool", {"tool": "check_cpu"})])
    assert [i.text for i in news.inbox] == ["logs first"]
    assert (await any_store.tool_results(run_id))["toolu_1"].content == "a: cpu 97%"
    assert ((await any_store.history(run_id))[1], [s.kind for s in await any_store.steps(run_id)]) == (turn, ["tool"])


async def test_a_turn_of_results_that_fails_to_store_leaves_none_of_its_results(any_store: Store) -> None:
    run_id = await new_run(any_store)
    with pytest.raises(TypeError):  # a turn that can't be encoded: its results go with it
        await any_store.answer_turn(run_id, 2, {"role": "user", "content": {1, 2}}, results=[_result(1)])
    assert (await any_store.tool_results(run_id), len(await any_store.history(run_id))) == ({}, 1)


async def test_a_result_replaces_its_started_marker(any_store: Store) -> None:
    run_id = await new_run(any_store)
    claim = {"tool_use_id": "toolu_1", "tool": "check_cpu", "args": {"host": "a"}, "is_error": False}
    assert await any_store.save_tool_result(run_id, content=None, confirmed_by="U2", **claim)  # type: ignore[arg-type]
    await any_store.save_tool_results(run_id, [_result(1, "restarted")])
    assert (await any_store.tool_results(run_id))["toolu_1"].content == "restarted"


async def test_run_news_reads_the_stop_flag_and_the_queued_replies(any_store: Store) -> None:
    run_id = await new_run(any_store)
    assert await any_store.run_news(run_id) == RunNews(stop_requested_by=None, inbox=[])
    inbox_id = await any_store.add_inbox(run_id=run_id, channel="C1", ts="2.0", user="U7", text="logs first")
    assert await any_store.request_stop(run_id, "U9")
    assert await any_store.run_news(run_id) == RunNews(
        stop_requested_by="U9", inbox=[Injected(id=inbox_id, user="U7", text="logs first")]
    )
    later = await any_store.add_inbox(run_id=run_id, channel="C1", ts="3.0", user="U8", text="and nginx")
    assert [i.id for i in (await any_store.run_news(run_id)).inbox] == [inbox_id, later]  # oldest first
    await any_store.put_inbox_state(inbox_id, InboxState.CONSUMED)
    assert (await any_store.run_news(run_id)).inbox == [Injected(id=later, user="U8", text="and nginx")]
    assert await any_store.run_news("run_none") == RunNews(stop_requested_by=None, inbox=[])


async def test_a_turn_of_calls_is_stored_with_the_turn_that_answers_it(any_store: Store) -> None:
    run_id = await new_run(any_store)
    calls = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "check_cpu", "input": {}}]}
    turn = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a: cpu 97%"}]}
    await any_store.answer_turn(run_id, 2, turn, calls=calls, results=[_result(1)])
    assert (await any_store.history(run_id))[1:] == [calls, turn]


# --- the loop ---------------------------------------------------------------------------------------------
async def drive(
    store: Store, fake: FakeAnthropic, client: anthropic.AsyncAnthropic, tool_steps: int
) -> tuple[int, str]:
    """A run of `tool_steps` tool steps and an answer, given twice (asked once for the summary): (the store
    round trips it took, its id)."""
    fake.script(
        *[reply(tool_use("check_cpu", {"host": f"web-{i}"}, id=f"toolu_{i}")) for i in range(tool_steps)],
        *answered(reply(text("fine"))),
    )
    run_id = await new_run(store)
    before = store.round_trips
    result = await run(config(store, client, run_id), run_id)
    assert result.stop_reason == StopReason.COMPLETED
    return store.round_trips - before, run_id


async def test_a_read_only_tool_step_takes_one_store_round_trip(
    store: Store, fake_anthropic: FakeAnthropic, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    """The model's turn of read-only calls, its request and response rows, the calls' results, their tool rows
    and the turn of results, with the next step's news read back: one transaction. Nothing re-reads what the
    drive just wrote."""
    one, _ = await drive(store, fake_anthropic, anthropic_client, 1)
    three, _ = await drive(store, fake_anthropic, anthropic_client, 3)
    assert (three - one) / 2 == 1


async def test_a_reply_that_lands_during_a_tool_step_enters_the_next_request(
    store: Store, fake_anthropic: FakeAnthropic, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    """The news the turn of results read back is the news of that moment: a reply stored while the tool ran."""
    run_id = await new_run(store)

    @tool(category=Category.READ_ONLY)
    async def check_disk(host: str) -> str:
        """Disk usage of a host."""
        await store.add_inbox(run_id=run_id, channel="C1", ts="2.0", user="U7", text="show me the logs")
        return f"{host}: 91% full"

    fake_anthropic.script(reply(tool_use("check_disk", {"host": "a"})), reply(text("fine")))
    await run(config(store, anthropic_client, run_id, tools=ToolRegistry([check_disk])), run_id)
    said = [b.get("text") for m in fake_anthropic.requests[1].body["messages"] for b in m["content"]]
    assert "[thread reply from U7] show me the logs" in said


async def test_a_result_is_stored_before_the_stop_it_caused_ends_the_run(
    store: Store, fake_anthropic: FakeAnthropic, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    """A read-only result waits for its turn's write; a stop in between (the loop detector) stores it first, so
    the handoff report says what each call returned."""
    fake_anthropic.script(*[reply(tool_use("check_cpu", {"host": "a"}, id=f"toolu_{i}")) for i in range(3)])
    run_id = await new_run(store)
    limits = Limits(loop_warn_at=2, loop_stop_at=3)
    result = await run(config(store, anthropic_client, run_id, limits=limits), run_id)
    assert result.stop_reason == StopReason.LOOP_DETECTED
    stored = await store.tool_results(run_id)
    assert len(stored) == len(result.tools_called) and all(r.content for r in stored.values())
    [last] = (await store.history(run_id))[-1]["content"]  # the turn that answers the call the stop came after
    assert (last["tool_use_id"], last["content"]) == ("toolu_2", stored["toolu_2"].content)


async def test_every_trace_row_is_stored_in_order(
    store: Store, fake_anthropic: FakeAnthropic, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    _, run_id = await drive(store, fake_anthropic, anthropic_client, 1)
    kinds = ["request", "response", "tool", "request", "response", "request", "response", "stop"]
    assert [s.kind for s in await store.steps(run_id)] == kinds


async def test_a_stop_read_with_the_news_ends_the_run_before_any_request(
    store: Store, fake_anthropic: FakeAnthropic, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    run_id = await new_run(store)
    assert await store.request_stop(run_id, "U9")
    result = await run(config(store, anthropic_client, run_id), run_id)
    assert (result.stop_reason, result.stopped_by, fake_anthropic.requests) == (StopReason.CANCELLED, "U9", [])


async def test_a_reply_read_with_the_news_enters_the_first_request(
    store: Store, fake_anthropic: FakeAnthropic, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    run_id = await new_run(store)
    await store.add_inbox(run_id=run_id, channel="C1", ts="2.0", user="U7", text="check the logs first")
    fake_anthropic.script(reply(text("fine")))
    await run(config(store, anthropic_client, run_id), run_id)
    [first] = fake_anthropic.requests
    said = [b["text"] for m in first.body["messages"] for b in m["content"] if b.get("type") == "text"]
    assert (said[-1], await store.queued_inbox(run_id)) == ("[thread reply from U7] check the logs first", [])
    assert "inject" in [s.kind for s in await store.steps(run_id)]


async def test_a_request_that_fails_keeps_its_trace_row(
    store: Store, fake_anthropic: FakeAnthropic, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    """The request row waits for the step's next write; a model error writes it with its own."""
    fake_anthropic.script(error(401, "authentication_error", "invalid x-api-key"))
    run_id = await new_run(store)
    result = await run(config(store, anthropic_client, run_id), run_id)
    assert result.stop_reason == StopReason.MODEL_ERROR
    assert [s.kind for s in await store.steps(run_id)] == ["request", "model_error", "stop"]


# --- redacted once ----------------------------------------------------------------------------------------
def test_redacted_text_is_not_redacted_again_but_what_is_made_from_it_is() -> None:
    from bot.core.redact import Redacted, redact

    secret = "sk-ant-api03-PLANTEDsecret0value0123456789"
    once = redact(f"the key is {secret}")
    assert (type(once), redact(once) is once, secret in once) == (Redacted, True, False)
    assert secret not in redact(once + f" and {secret}")  # a concatenation is plain text: redacted again


async def test_a_read_only_turn_never_waits_for_the_store(
    store: Store, fake_anthropic: FakeAnthropic, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    """A turn whose calls are all read-only is not written before they run: with the store's writer held busy
    until the call has run, the call still runs (it releases the writer), and the turn is stored before the
    results that answer it."""
    run_id = await new_run(store)
    released = threading.Event()
    held: list[asyncio.Future[bool]] = []

    @tool(category=Category.READ_ONLY)
    async def check_disk(host: str) -> str:
        """Disk usage of a host."""
        released.set()
        return f"{host}: 91% full"

    def hold_the_writer(_body: dict[str, Any]) -> Reply:  # runs as the request arrives, before its answer
        held.append(asyncio.ensure_future(store.atomically(lambda _ledger: released.wait(10))))
        return reply(tool_use("check_disk", {"host": "a"}))

    fake_anthropic.script(hold_the_writer, *answered(reply(text("fine"))))
    result = await run(config(store, anthropic_client, run_id, tools=ToolRegistry([check_disk])), run_id)
    assert result.stop_reason == StopReason.COMPLETED
    assert await held[0] is True  # released by the call, not by the 10 s timeout: the call ran before the write
    # ... then the answer, the ask for the summary, and the answer again
    roles = ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert [m["role"] for m in await store.history(run_id)] == roles
    assert [r.content for r in (await store.tool_results(run_id)).values()] == ["#1 check_disk a\na: 91% full"]


async def test_a_read_only_turn_whose_calls_take_a_while_is_stored_while_they_run(
    store: Store,
    fake_anthropic: FakeAnthropic,
    anthropic_client: anthropic.AsyncAnthropic,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the grace, the turn is written on its own: the call sees it stored before it returns."""
    monkeypatch.setattr("bot.run.loop.TURN_GRACE_S", 0.01)
    run_id = await new_run(store)
    seen: list[list[str]] = []

    @tool(category=Category.READ_ONLY)
    async def check_disk(host: str) -> str:
        """Disk usage of a host (slow)."""
        while len(roles := [m["role"] for m in await store.history(run_id)]) < 2:  # noqa: ASYNC110
            await asyncio.sleep(0.005)  # the store has no event for a write landing: its readers poll
        seen.append(roles)
        return f"{host}: 91% full"

    fake_anthropic.script(reply(tool_use("check_disk", {"host": "a"})), *answered(reply(text("fine"))))
    config_ = config(store, anthropic_client, run_id, tools=ToolRegistry([check_disk]))
    result = await asyncio.wait_for(run(config_, run_id), 30)
    assert (result.stop_reason, seen) == (StopReason.COMPLETED, [["user", "assistant"]])
    roles = ["user", "assistant", "user", "assistant", "user", "assistant"]  # the answer comes twice (the ask)
    assert [m["role"] for m in await store.history(run_id)] == roles
    kinds = ["request", "response", "tool", "request", "response", "request", "response", "stop"]
    assert [s.kind for s in await store.steps(run_id)] == kinds


async def test_a_shutdown_while_read_only_calls_run_stores_their_turn_and_the_next_drive_runs_them(
    store: Store, fake_anthropic: FakeAnthropic, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    """A drive cancelled by a shutdown (no Stop asked) inside the grace still stores the turn it holds, so the
    next drive answers those calls instead of asking the model again."""
    run_id = await new_run(store)
    started, calls = asyncio.Event(), []

    @tool(category=Category.READ_ONLY)
    async def check_disk(host: str) -> str:
        """Disk usage of a host."""
        calls.append(host)
        if len(calls) == 1:
            started.set()
            await asyncio.Event().wait()  # the first drive never gets past this
        return f"{host}: 91% full"

    fake_anthropic.script(reply(tool_use("check_disk", {"host": "a"})), *answered(reply(text("fine"))))
    tools = ToolRegistry([check_disk])
    drive_ = asyncio.ensure_future(run(config(store, anthropic_client, run_id, tools=tools), run_id))
    await asyncio.wait_for(started.wait(), 30)
    drive_.cancel()
    with pytest.raises(asyncio.CancelledError):
        await drive_
    assert [m["role"] for m in await store.history(run_id)] == ["user", "assistant"]
    result = await run(config(store, anthropic_client, run_id, tools=tools), run_id)
    assert (result.stop_reason, result.output, calls, len(fake_anthropic.requests)) == (
        StopReason.COMPLETED,
        "fine",
        ["a", "a"],
        3,  # the calls' turn, the answer, and the answer again when asked once for the summary
    )


async def test_a_turn_with_a_change_is_stored_before_the_change_runs(
    store: Store, fake_anthropic: FakeAnthropic, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    run_id = await new_run(store)
    stored_when_run: list[list[str]] = []

    @tool(category=Category.MUTATING)
    async def restart(service: str, *, confirmed_by: str) -> str:
        """Restart a service."""
        stored_when_run.append([m["role"] for m in await store.history(run_id)])
        return f"{service} restarted"

    async def confirm(_req: ConfirmRequest) -> Decision:
        return Decision(approved=True, confirmed_by="U1")

    fake_anthropic.script(
        reply(tool_use("check_cpu", {"host": "a"}), tool_use("restart", {"service": "nginx"})),
        *answered(reply(text("done"))),
    )
    tools = ToolRegistry([check_cpu, restart])
    result = await run(config(store, anthropic_client, run_id, tools=tools, confirm=confirm), run_id)
    assert result.stop_reason == StopReason.COMPLETED
    assert stored_when_run == [["user", "assistant"]]
