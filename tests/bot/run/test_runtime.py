"""The agent loop against the fake Messages API, driven by the real anthropic client.

No Slack: the confirm/inject/stop callbacks are plain coroutines here, the way the
runtime sees them. Every boundary and error class has its own test.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import anthropic
import pytest

from bot.core.pricing import price_for
from bot.core.types import ConfirmRequest, Decision, Injected, StopReason
from bot.run import events, prompts
from bot.run.guards import Limits
from bot.run.loop import RunConfig, run
from bot.run.model import AnthropicModel
from bot.store import Store
from tests.support.fakes.anthropic import FakeAnthropic, error, repeating_text, reply, text, tool_use
from tests.support.harness import answered
from tests.support.scripted import ScriptedModel, call
from tools import Category, PermissionDenied, ToolError, ToolRegistry, tool

EXECUTED: list[tuple[str, dict[str, Any], str | None]] = []


@tool(category=Category.READ_ONLY, parallel=True)
async def check_cpu(host: str) -> str:
    """CPU usage and load on a host."""
    EXECUTED.append(("check_cpu", {"host": host}, None))
    return f"{host}: cpu 97%, load 7.9"


@tool(category=Category.READ_ONLY, parallel=True)
async def list_top_processes(host: str, limit: int = 5) -> str:
    """Top processes by CPU."""
    EXECUTED.append(("list_top_processes", {"host": host, "limit": limit}, None))
    return "PID 4242 java 310% cpu"


@tool(category=Category.MUTATING)
async def restart_service(host: str, unit: str, *, confirmed_by: str) -> str:
    """Restart a systemd unit."""
    EXECUTED.append(("restart_service", {"host": host, "unit": unit}, confirmed_by))
    return f"restarted {unit} on {host} (approved by {confirmed_by})"


@tool(category=Category.DESTRUCTIVE)
async def clean_logs(path: str, older_than_days: int = 7, *, confirmed_by: str) -> str:
    """Delete rotated logs older than N days."""
    EXECUTED.append(("clean_logs", {"path": path}, confirmed_by))
    return "deleted 212 files, 19.8 GB"


@clean_logs.dry_run
async def _clean_logs_preview(path: str, older_than_days: int = 7) -> str:
    return f"would delete 212 files, 19.8 GB under {path}"


@tool(category=Category.READ_ONLY)
async def flaky(host: str) -> str:
    """Always fails."""
    raise ToolError(f"ssh: connect to host {host} port 22: Connection refused")


@tool(category=Category.READ_ONLY)
async def read_secret_file(path: str) -> str:
    """Returns something with secrets in it."""
    return "SLACK_BOT_TOKEN=xoxb-1111-2222-abcdefghijkl\nkey=sk-ant-api03-SECRETSECRET"


@tool(category=Category.MUTATING)
async def drop_database(name: str, *, confirmed_by: str) -> str:
    """Not allowed by policy."""
    raise PermissionDenied(f"dropping {name} is not allowed for opsloop")


@tool(category=Category.READ_ONLY)
async def hang(host: str) -> str:
    """Never returns."""
    await asyncio.Event().wait()
    return "unreachable"


REGISTRY = ToolRegistry(
    [check_cpu, list_top_processes, restart_service, clean_logs, flaky, read_secret_file, drop_database, hang]
)
PRIMARY, FALLBACK = "claude-sonnet-5-5", "claude-haiku-5-5"


@pytest.fixture(autouse=True)
def _reset_executed() -> None:
    EXECUTED.clear()


def config(store: Store, client: anthropic.AsyncAnthropic, **kw: Any) -> RunConfig:
    model = AnthropicModel(client, [PRIMARY, FALLBACK], backoff_base=0.001, retry_after_cap=0.05)
    return RunConfig(
        model=model,
        store=store,
        tools=kw.pop("tools", REGISTRY),
        price_for=lambda m: price_for(m)[0],
        system_prompt=kw.pop("system_prompt", "You are opsloop."),
        **kw,
    )


async def start(store: Store, task: str = "web-03 has high CPU") -> str:
    row = await store.create_run(
        channel="C1",
        thread_ts="1.0",
        requester="U1",
        task=task,
        model=PRIMARY,
        history=[{"role": "user", "content": [{"type": "text", "text": task}]}],
    )
    return row.id


async def approve_as(user: str) -> Any:
    seen: list[ConfirmRequest] = []

    async def confirm(req: ConfirmRequest) -> Decision:
        seen.append(req)
        return Decision(approved=True, confirmed_by=user)

    return confirm, seen


def user_turns(fake: FakeAnthropic, i: int) -> list[dict[str, Any]]:
    body = fake.requests[i].body
    assert body is not None
    return [m for m in body["messages"] if m["role"] == "user"]


def last_content(fake: FakeAnthropic, i: int) -> list[dict[str, Any]]:
    body = fake.requests[i].body
    assert body is not None
    content: list[dict[str, Any]] = body["messages"][-1]["content"]
    return content


def strip_cache(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]


def unsigned(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Blocks without cache markers, with every thinking signature (opaque, but present) shown as "sig"."""
    out = strip_cache(blocks)
    for b in out:
        if b["type"] == "thinking":
            assert b["signature"]
            b["signature"] = "sig"
    return out


def thought(summary: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": summary, "signature": "sig"}


# --- the seeds' example ------------------------------------------------------------
async def test_high_cpu_incident_end_to_end(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(
        reply(text("Checking CPU."), tool_use("check_cpu", {"host": "web-03"}, id="toolu_a")),
        reply(tool_use("list_top_processes", {"host": "web-03"}, id="toolu_b")),
        reply(
            text("java is spinning; restarting it."),
            tool_use("restart_service", {"host": "web-03", "unit": "java-app"}, id="toolu_c"),
        ),
        reply(tool_use("check_cpu", {"host": "web-03"}, id="toolu_d")),
        *answered(reply(text("CPU is back to normal after restarting java-app (approved by U2)."))),
    )
    confirm, seen = await approve_as("U2")
    result = await run(config(store, anthropic_client, confirm=confirm), await start(store))

    assert result.stop_reason == StopReason.COMPLETED
    assert result.output == "CPU is back to normal after restarting java-app (approved by U2)."
    assert result.iterations == 6  # the answer, asked once for the summary it never wrote, comes again
    assert result.tools_called == ("check_cpu", "list_top_processes", "restart_service", "check_cpu")
    assert [r.name for r in [s.call for s in seen]] == ["restart_service"]
    assert ("restart_service", {"host": "web-03", "unit": "java-app"}, "U2") in EXECUTED
    fake_anthropic.assert_complete()
    # The exact conversation the model saw on its last request.
    # Current models: what the model says between calls arrives as (summarized) thinking, sent back as is.
    body = fake_anthropic.requests[-1].body
    assert [(m["role"], unsigned(m["content"])) for m in body["messages"]] == [
        ("user", [{"type": "text", "text": "web-03 has high CPU"}]),
        (
            "assistant",
            [
                thought("Checking CPU."),
                {"type": "tool_use", "id": "toolu_a", "name": "check_cpu", "input": {"host": "web-03"}},
            ],
        ),
        (
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_a",
                    "content": "#1 check_cpu web-03\nweb-03: cpu 97%, load 7.9",
                }
            ],
        ),
        (
            "assistant",
            [
                thought("Considering the next step."),
                {"type": "tool_use", "id": "toolu_b", "name": "list_top_processes", "input": {"host": "web-03"}},
            ],
        ),
        (
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": "#2 list_top_processes web-03\nPID 4242 java 310% cpu",
                }
            ],
        ),
        (
            "assistant",
            [
                thought("java is spinning; restarting it."),
                {
                    "type": "tool_use",
                    "id": "toolu_c",
                    "name": "restart_service",
                    "input": {"host": "web-03", "unit": "java-app"},
                },
            ],
        ),
        (
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_c",
                    "content": "#3 restart_service web-03\nrestarted java-app on web-03 (approved by U2)",
                }
            ],
        ),
        (
            "assistant",
            [
                thought("Considering the next step."),
                {"type": "tool_use", "id": "toolu_d", "name": "check_cpu", "input": {"host": "web-03"}},
            ],
        ),
        (
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_d",
                    "content": "#4 check_cpu web-03\nweb-03: cpu 97%, load 7.9",
                }
            ],
        ),
        (
            "assistant",
            [
                thought("Considering the next step."),
                {"type": "text", "text": "CPU is back to normal after restarting java-app (approved by U2)."},
            ],
        ),
        ("user", [{"type": "text", "text": prompts.SUMMARY_BEHIND}]),
    ]
    assert [len(r.body["messages"]) for r in fake_anthropic.requests] == [1, 3, 5, 7, 9, 11]


# --- budgets --------------------------------------------------------------------------
def keep_calling(n: int) -> list[Any]:
    return [reply(tool_use("check_cpu", {"host": f"web-{i:02d}"})) for i in range(n)]


async def test_iteration_limit_is_terminal(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(*keep_calling(2), reply(text("web-03 looks fine so far.")))
    cfg = config(store, anthropic_client, limits=Limits(max_iterations=2))
    result = await run(cfg, await start(store))
    # the two steps, then the one wrap-up call (no tool allowed): never more
    assert (result.stop_reason, result.iterations, len(fake_anthropic.requests)) == (StopReason.ITERATION_LIMIT, 2, 3)
    assert result.output == "web-03 looks fine so far."


def assert_wrapped_up(fake_anthropic: FakeAnthropic) -> None:
    """The last request is the wrap-up: it allows no tool call and says why."""
    body = fake_anthropic.requests[-1].body
    assert body is not None and body["tool_choice"] == {"type": "none"}
    assert "has reached its limit" in last_content(fake_anthropic, len(fake_anthropic.requests) - 1)[-1]["text"]


async def test_token_budget_is_terminal(store, fake_anthropic, anthropic_client):
    # the step that spends the budget, then the one wrap-up call: never another step
    fake_anthropic.script(*keep_calling(1), reply(text("web-00 is hot; not known why.")))
    result = await run(config(store, anthropic_client, limits=Limits(token_budget=10)), await start(store))
    assert (result.stop_reason, len(fake_anthropic.requests)) == (StopReason.TOKEN_BUDGET, 2)
    assert result.output == "web-00 is hot; not known why."
    assert_wrapped_up(fake_anthropic)


async def test_cost_budget_is_terminal(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(*keep_calling(1), reply(text("web-00 is hot; not known why.")))
    result = await run(config(store, anthropic_client, limits=Limits(cost_budget_usd=0.000001)), await start(store))
    assert (result.stop_reason, len(fake_anthropic.requests)) == (StopReason.COST_BUDGET, 2)
    assert result.output == "web-00 is hot; not known why."
    assert_wrapped_up(fake_anthropic)
    assert result.cost_usd > 0


def instant(*steps: Any, **kw: Any) -> RunConfig:
    """A config whose model answers in-process, so a short deadline is spent only where the test says."""
    return RunConfig(model=ScriptedModel(*steps), price_for=lambda m: price_for(m)[0], tools=REGISTRY, **kw)


WRAPPED_UP = [{"type": "text", "text": "web-03 is hot; the cause is not known."}]


async def test_deadline_covers_a_hung_tool(store):
    cfg = instant(
        call("hang", {"host": "web-03"}, "toolu_h"), WRAPPED_UP, store=store, limits=Limits(deadline_seconds=0.5)
    )
    result = await run(cfg, await start(store))
    assert result.stop_reason == StopReason.DEADLINE
    assert "running hang" in result.stop_detail
    # the deadline is a budget: one wrap-up call, with no tool allowed, gives the conclusion
    assert isinstance(cfg.model, ScriptedModel) and [r.tool_choice for r in cfg.model.requests] == [
        None,
        {"type": "none"},
    ]
    assert result.output == "web-03 is hot; the cause is not known."


NOT_RUN = "Not run: the run stopped ({}) before this call."


async def test_stopped_run_leaves_a_valid_history(store):
    """The hung call is answered, then the wrap-up note follows its result in the same user turn, and the
    conclusion is the last turn: roles alternate and every tool_use has its tool_result."""
    run_id = await start(store)
    await run(
        instant(
            call("hang", {"host": "web-03"}, "toolu_h"), WRAPPED_UP, store=store, limits=Limits(deadline_seconds=0.5)
        ),
        run_id,
    )
    history = await store.history(run_id)
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[-2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_h",
        "is_error": True,
        "content": NOT_RUN.format("deadline"),
    }
    [note] = history[-2]["content"][1:]
    assert note["type"] == "text" and "has reached its limit" in note["text"]
    assert history[-1] == {"role": "assistant", "content": WRAPPED_UP}


async def test_a_stop_click_leaves_a_valid_history_and_gets_no_wrap_up(store):
    """A person's Stop is not a budget: the hung call is answered and the run ends there, with no more requests."""
    started = asyncio.Event()

    @tool(category=Category.READ_ONLY)
    async def hang_here(host: str) -> str:
        """Never returns."""
        started.set()
        await asyncio.Event().wait()
        return "unreachable"

    async def stop_requested() -> str | None:
        return "U9" if started.is_set() else None

    run_id = await start(store)
    model = ScriptedModel(call("hang_here", {"host": "web-03"}, "toolu_h"))
    cfg = RunConfig(
        model=model,
        store=store,
        tools=ToolRegistry([hang_here]),
        price_for=lambda m: price_for(m)[0],
        stop_requested=stop_requested,
    )
    task = asyncio.create_task(run(cfg, run_id))
    await started.wait()
    task.cancel()  # as the Stop button does
    result = await task
    assert (result.stop_reason, result.stopped_by, result.output, len(model.requests)) == (
        StopReason.CANCELLED,
        "U9",
        None,
        1,
    )
    history = await store.history(run_id)
    assert history[-1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_h", "is_error": True, "content": NOT_RUN.format("cancelled")}
        ],
    }


# --- errors: recoverable --------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (tool_use("no_such_tool", {}, id="toolu_x"), "unknown tool 'no_such_tool'"),
        (tool_use("check_cpu", {"hostname": "web-03"}, id="toolu_x"), "invalid arguments for check_cpu"),
        (tool_use("flaky", {"host": "web-03"}, id="toolu_x"), "Connection refused"),
    ],
)
async def test_recoverable_errors_go_back_as_tool_results(store, fake_anthropic, anthropic_client, call, expected):
    fake_anthropic.script(reply(call), reply(text("ok, giving up on that")))
    result = await run(config(store, anthropic_client), await start(store))
    assert result.stop_reason == StopReason.COMPLETED
    [block] = last_content(fake_anthropic, 1)
    assert (block["tool_use_id"], block["is_error"], expected in block["content"]) == ("toolu_x", True, True)


async def test_three_consecutive_errors_stop_the_run(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(*[reply(tool_use("flaky", {"host": f"web-{i}"})) for i in range(3)])
    result = await run(config(store, anthropic_client), await start(store))
    assert (result.stop_reason, result.iterations) == (StopReason.CONSECUTIVE_ERRORS, 3)


async def test_permission_denied_is_fatal_and_never_shown_to_the_model(store, fake_anthropic, anthropic_client):
    confirm, _ = await approve_as("U2")
    fake_anthropic.script(reply(tool_use("drop_database", {"name": "orders"})))
    result = await run(config(store, anthropic_client, confirm=confirm), await start(store))
    assert result.stop_reason == StopReason.PERMISSION_DENIED
    assert "not allowed" in result.stop_detail
    assert len(fake_anthropic.requests) == 1


# --- errors: retryable and fatal model errors -----------------------------------------------
async def test_rate_limit_is_retried_honouring_retry_after(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(error(429, "rate_limit_error", headers={"retry-after": "0.01"}), reply(text("done")))
    result = await run(config(store, anthropic_client), await start(store))
    assert (result.stop_reason, len(fake_anthropic.requests)) == (StopReason.COMPLETED, 2)


async def test_overloaded_primary_falls_back_once(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(*[error(529, "overloaded_error")] * 3, reply(text("from haiku")), reply(text("again")))
    fake_anthropic.script()
    run_id = await start(store)
    result = await run(config(store, anthropic_client), run_id)
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "from haiku")
    assert [r.body["model"] for r in fake_anthropic.requests] == [PRIMARY] * 3 + [FALLBACK]
    assert (await store.get_run(run_id)).model == FALLBACK


async def test_authentication_failure_is_fatal(store, fake_anthropic):
    client = anthropic.AsyncAnthropic(api_key="sk-ant-wrong", base_url=fake_anthropic.base_url, max_retries=0)
    result = await run(config(store, client), await start(store))
    await client.close()
    assert (result.stop_reason, len(fake_anthropic.requests)) == (StopReason.MODEL_ERROR, 1)
    assert "AuthenticationError" in result.stop_detail


async def test_every_model_unavailable_is_model_error(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(*[error(500, "api_error")] * 6)
    result = await run(config(store, anthropic_client), await start(store))
    assert (result.stop_reason, len(fake_anthropic.requests)) == (StopReason.MODEL_ERROR, 6)


# --- loop detection ------------------------------------------------------------------
async def test_third_identical_call_gets_a_change_approach_error(store, fake_anthropic, anthropic_client):
    same = [reply(tool_use("check_cpu", {"host": "web-03"})) for _ in range(3)]
    fake_anthropic.script(*same, *answered(reply(text("I will stop repeating myself."))))
    result = await run(config(store, anthropic_client), await start(store))
    assert result.stop_reason == StopReason.COMPLETED
    [third] = last_content(fake_anthropic, 3)
    assert third["is_error"] is True
    assert third["content"].startswith("#3 check_cpu web-03\nloop detected: you called check_cpu 3 times")


async def test_sixth_identical_call_stops_the_run(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(*[reply(tool_use("check_cpu", {"host": "web-03"})) for _ in range(6)])
    result = await run(config(store, anthropic_client), await start(store))
    assert (result.stop_reason, result.iterations) == (StopReason.LOOP_DETECTED, 6)


# --- parallel vs sequential ------------------------------------------------------------
async def test_read_only_parallel_tools_overlap_and_results_keep_call_order(store, fake_anthropic, anthropic_client):
    started: list[str] = []
    all_in = asyncio.Event()

    @tool(category=Category.READ_ONLY, parallel=True, name="probe")
    async def probe(host: str) -> str:
        """Waits until all three probes are running at once."""
        started.append(host)
        if len(started) == 3:
            all_in.set()
        async with asyncio.timeout(5):  # if calls were sequential, this never happens
            await all_in.wait()
        return f"{host} ok"

    calls = [tool_use("probe", {"host": h}, id=f"toolu_{h}") for h in ("c", "a", "b")]
    fake_anthropic.script(reply(*calls), *answered(reply(text("all fine"))))
    result = await run(config(store, anthropic_client, tools=ToolRegistry([probe])), await start(store))
    assert result.stop_reason == StopReason.COMPLETED
    assert [(b["tool_use_id"], b["content"]) for b in last_content(fake_anthropic, 1)] == [
        ("toolu_c", "#1 probe c\nc ok"),  # handles numbered in call order, whatever finishes first
        ("toolu_a", "#2 probe a\na ok"),
        ("toolu_b", "#3 probe b\nb ok"),
    ]


async def test_mutating_tools_never_overlap(store, fake_anthropic, anthropic_client):
    running: list[int] = []
    overlaps: list[int] = []

    @tool(category=Category.MUTATING, name="bump")
    async def bump(n: int, *, confirmed_by: str) -> str:
        """Mutates something."""
        running.append(n)
        overlaps.append(len(running))
        await asyncio.sleep(0)  # yield: a concurrent call would enter now
        running.remove(n)
        return f"bumped {n}"

    confirm, _ = await approve_as("U2")
    fake_anthropic.script(reply(*[tool_use("bump", {"n": i}) for i in range(3)]), reply(text("done")))
    await run(config(store, anthropic_client, tools=ToolRegistry([bump]), confirm=confirm), await start(store))
    assert overlaps == [1, 1, 1]


# --- confirm gate ---------------------------------------------------------------------
async def test_approval_injects_confirmed_by_and_destructive_preview_is_shown(store, fake_anthropic, anthropic_client):
    confirm, seen = await approve_as("U024BE7LH")
    fake_anthropic.script(reply(tool_use("clean_logs", {"path": "/var/log/nginx"})), reply(text("freed 19.8 GB")))
    await run(config(store, anthropic_client, confirm=confirm), await start(store))
    assert [(s.call.name, s.category, s.preview) for s in seen] == [
        ("clean_logs", "destructive", "would delete 212 files, 19.8 GB under /var/log/nginx")
    ]
    assert EXECUTED == [("clean_logs", {"path": "/var/log/nginx"}, "U024BE7LH")]


async def test_denial_reason_goes_to_the_model_and_nothing_runs(store, fake_anthropic, anthropic_client):
    async def deny(req: ConfirmRequest) -> Decision:
        return Decision(approved=False, confirmed_by="U2", reason="not during peak traffic")

    fake_anthropic.script(
        reply(tool_use("restart_service", {"host": "web-03", "unit": "nginx"})), reply(text("understood"))
    )
    await run(config(store, anthropic_client, confirm=deny), await start(store))
    [block] = last_content(fake_anthropic, 1)
    assert block["is_error"] is True
    assert block["content"].startswith(
        "#1 restart_service web-03\nDenied by U2: not during peak traffic. restart_service was NOT run."
    )
    assert EXECUTED == []


async def test_without_a_confirm_callback_confirm_tools_are_refused(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(
        reply(tool_use("restart_service", {"host": "web-03", "unit": "nginx"})), reply(text("cannot restart"))
    )
    await run(config(store, anthropic_client), await start(store))
    [block] = last_content(fake_anthropic, 1)
    assert (block["is_error"], "needs a human approval" in block["content"]) == (True, True)
    assert EXECUTED == []


# --- inject -------------------------------------------------------------------------
async def test_thread_reply_enters_after_tool_results_on_the_next_step(store, fake_anthropic, anthropic_client):
    run_id = await start(store)
    said = "don't restart nginx, show me the logs first"
    inbox_id = await store.add_inbox(run_id=run_id, channel="C1", ts="2.0", user="U7", text=said)
    queue = [[], [Injected(id=inbox_id, user="U7", text=said)]]

    async def inject() -> list[Injected]:
        return queue.pop(0) if queue else []

    fake_anthropic.script(reply(tool_use("check_cpu", {"host": "web-03"}, id="toolu_1")), reply(text("ok")))
    await run(config(store, anthropic_client, inject=inject), run_id)
    assert await store.queued_inbox(run_id) == []
    assert strip_cache(last_content(fake_anthropic, 1)) == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "#1 check_cpu web-03\nweb-03: cpu 97%, load 7.9"},
        {"type": "text", "text": "[thread reply from U7] don't restart nginx, show me the logs first"},
    ]


# --- context overflow ---------------------------------------------------------------
async def test_context_overflow_condenses_once_then_continues(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(
        reply(tool_use("check_cpu", {"host": "web-01"})),
        reply(tool_use("check_cpu", {"host": "web-02"})),
        error(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
        reply(text("Summary: web-01 and web-02 at 97% cpu.")),
        *answered(reply(text("Both hosts are hot."))),
    )
    run_id = await start(store)
    result = await run(config(store, anthropic_client), run_id)
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "Both hosts are hot.")
    condense_request = fake_anthropic.requests[3].body
    assert "tools" not in condense_request
    assert "check_cpu" in condense_request["messages"][0]["content"][0]["text"]
    first = (await store.history(run_id))[0]["content"][0]["text"]
    assert first.startswith("web-03 has high CPU\n\n[Summary of the work so far")


TOO_LONG = error(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")


async def test_a_second_overflow_condenses_again(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(
        reply(tool_use("check_cpu", {"host": "web-01"})),
        reply(tool_use("check_cpu", {"host": "web-02"})),
        TOO_LONG,
        reply(text("Summary: web-01 and web-02 at 97% cpu.")),
        reply(tool_use("check_cpu", {"host": "web-03"})),
        reply(tool_use("check_cpu", {"host": "web-04"})),
        TOO_LONG,
        reply(text("Summary: web-01 to web-04 at 97% cpu.")),
        *answered(reply(text("All four hosts are hot."))),
    )
    run_id = await start(store)
    result = await run(config(store, anthropic_client), run_id)
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "All four hosts are hot.")
    summarise = [r.body for r in fake_anthropic.requests if "tools" not in r.body]
    assert len(summarise) == 2
    # the second summary is asked of a history that holds the first one
    assert "Summary: web-01 and web-02 at 97% cpu." in summarise[1]["messages"][0]["content"][0]["text"]
    first = (await store.history(run_id))[0]["content"][0]["text"]
    assert first.startswith("web-03 has high CPU\n\n[Summary of the work so far")
    assert "Summary: web-01 to web-04 at 97% cpu." in first


async def test_an_overflow_with_nothing_left_to_condense_is_terminal(store, fake_anthropic, anthropic_client):
    # After the condensation only the newest call and its result are left: no older turn to summarise.
    fake_anthropic.script(
        reply(tool_use("check_cpu", {"host": "web-01"})),
        reply(tool_use("check_cpu", {"host": "web-02"})),
        TOO_LONG,
        reply(text("summary")),
        TOO_LONG,
    )
    result = await run(config(store, anthropic_client), await start(store))
    assert result.stop_reason == StopReason.MODEL_ERROR
    assert "nothing left to condense" in result.stop_detail
    assert len(fake_anthropic.requests) == 5  # no wrap-up: the context is what failed


async def test_an_overflow_with_condensation_off_is_terminal(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(
        reply(tool_use("check_cpu", {"host": "web-01"})),
        reply(tool_use("check_cpu", {"host": "web-02"})),
        TOO_LONG,
    )
    result = await run(config(store, anthropic_client, condense=False), await start(store))
    assert (result.stop_reason, len(fake_anthropic.requests)) == (StopReason.MODEL_ERROR, 3)
    assert "condensation is off" in result.stop_detail


# --- model quirks -------------------------------------------------------------------
async def test_tool_call_written_as_json_text_is_recovered(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(
        reply(text('I will check.\n```json\n{"name": "check_cpu", "input": {"host": "web-03"}}\n```')),
        reply(text("cpu is 97%")),
    )
    result = await run(config(store, anthropic_client), await start(store))
    assert result.tools_called == ("check_cpu",)
    assistant = [
        b for b in strip_cache(fake_anthropic.requests[1].body["messages"][1]["content"]) if b["type"] != "thinking"
    ]
    recovered_id = assistant[1]["id"]
    assert recovered_id.startswith("toolu_recovered_")
    assert assistant == [
        {"type": "text", "text": "I will check."},
        {"type": "tool_use", "id": recovered_id, "name": "check_cpu", "input": {"host": "web-03"}},
    ]


async def test_each_recovered_json_call_gets_its_own_id_and_runs(store, fake_anthropic, anthropic_client):
    """A reused id would answer the second call with the first one's stored result, and never run it."""
    EXECUTED.clear()
    fake_anthropic.script(
        reply(text('{"name": "check_cpu", "input": {"host": "web-01"}}')),
        reply(text('{"name": "check_cpu", "input": {"host": "web-02"}}')),
        *answered(reply(text("both checked"))),
    )
    result = await run(config(store, anthropic_client), await start(store))
    assert (result.stop_reason, result.tools_called) == (StopReason.COMPLETED, ("check_cpu", "check_cpu"))
    assert [args["host"] for name, args, _ in EXECUTED] == ["web-01", "web-02"]
    results = [
        b
        for m in fake_anthropic.requests[2].body["messages"]
        if m["role"] == "user"
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert [r["content"] for r in results] == [
        "#1 check_cpu web-01\nweb-01: cpu 97%, load 7.9",
        "#2 check_cpu web-02\nweb-02: cpu 97%, load 7.9",
    ]


async def test_json_naming_an_unknown_tool_stays_text(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(reply(text('{"name": "rm_rf", "input": {}}')))
    result = await run(config(store, anthropic_client), await start(store))
    assert (result.stop_reason, result.output, result.tools_called) == (
        StopReason.COMPLETED,
        '{"name": "rm_rf", "input": {}}',
        (),
    )


async def test_empty_response_is_retried_twice(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(reply(), reply(), reply(text("third time lucky")))
    result = await run(config(store, anthropic_client), await start(store))
    assert (result.output, len(fake_anthropic.requests)) == ("third time lucky", 3)


async def test_three_empty_responses_are_a_model_error(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(reply(), reply(), reply())
    result = await run(config(store, anthropic_client), await start(store))
    assert result.stop_reason == StopReason.MODEL_ERROR


async def test_degenerate_stream_is_cut_off_and_retried(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(repeating_text("the disk is full. "), reply(text("/var is full")))
    result = await run(config(store, anthropic_client), await start(store))
    assert result.output == "/var is full"
    assert fake_anthropic.requests[0].cancelled is True


# --- secrets ------------------------------------------------------------------------
async def test_secrets_in_tool_output_never_reach_the_model_or_the_store(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(reply(tool_use("read_secret_file", {"path": "/etc/app.env"})), reply(text("done")))
    run_id = await start(store)
    await run(config(store, anthropic_client), run_id)
    sent = str(fake_anthropic.requests[1].body)
    stored = str(await store.history(run_id)) + str(await store.steps(run_id))
    for where in (sent, stored):
        assert "xoxb-1111" not in where and "sk-ant-api03" not in where
        assert "[REDACTED]" in where


# --- prompt cache ---------------------------------------------------------------------
async def test_each_request_reads_the_previous_prefix_from_cache(store, fake_anthropic, anthropic_client):
    runbook = "Runbook: " + "check disks, then logs, then services. " * 200  # > 1024 tokens
    fake_anthropic.script(*keep_calling(3), *answered(reply(text("done"))))
    result = await run(config(store, anthropic_client, system_prompt=runbook), await start(store))
    usages = [r.response["usage"] for r in fake_anthropic.requests]
    assert usages[0]["cache_read_input_tokens"] == 0 and usages[0]["cache_creation_input_tokens"] > 0
    for before, after in itertools.pairwise(usages):
        # everything the previous request cached (read or written) is read now
        assert after["cache_read_input_tokens"] == (
            before["cache_read_input_tokens"] + before["cache_creation_input_tokens"]
        )
    assert result.usage.cache_read_tokens == sum(u["cache_read_input_tokens"] for u in usages)
    bodies = [r.body for r in fake_anthropic.requests]
    assert all(b["system"] == bodies[0]["system"] and b["tools"] == bodies[0]["tools"] for b in bodies)


# --- resume -----------------------------------------------------------------------------
async def test_run_resumes_from_the_store_after_the_process_dies(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(
        reply(
            tool_use("check_cpu", {"host": "web-03"}, id="toolu_1"),
            tool_use("restart_service", {"host": "web-03", "unit": "nginx"}, id="toolu_2"),
        ),
        *answered(reply(text("restarted nginx"))),
    )
    asked = asyncio.Event()

    async def never_answers(req: ConfirmRequest) -> Decision:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    run_id = await start(store)
    task = asyncio.create_task(run(config(store, anthropic_client, confirm=never_answers), run_id))
    await asyncio.wait_for(asked.wait(), 5)
    task.cancel()  # the process dies while the approval is pending
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await store.get_run(run_id)).status == "waiting_approval"

    confirm, seen = await approve_as("U2")  # a new process, a click arrives
    result = await run(config(store, anthropic_client, confirm=confirm), run_id)
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "restarted nginx")
    assert [name for name, _, _ in EXECUTED] == ["check_cpu", "restart_service"]  # nothing ran twice
    assert [b["tool_use_id"] for b in last_content(fake_anthropic, 1)] == ["toolu_1", "toolu_2"]
    assert seen[0].call.id == "toolu_2"


async def test_a_finished_run_returns_its_stored_result(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(reply(text("all good")))
    run_id = await start(store)
    first = await run(config(store, anthropic_client), run_id)
    again = await run(config(store, anthropic_client), run_id)
    assert (again.stop_reason, again.output, again.iterations) == (first.stop_reason, first.output, 1)
    assert len(fake_anthropic.requests) == 1


async def test_stop_requested_cancels_the_run(store, fake_anthropic, anthropic_client):
    stop_by: list[str] = []

    async def stop_requested() -> str | None:
        return stop_by[0] if stop_by else None

    async def confirm(req: ConfirmRequest) -> Decision:
        stop_by.append("U9")
        return Decision(approved=False, confirmed_by="U9", reason="stopping")

    fake_anthropic.script(reply(tool_use("restart_service", {"host": "web-03", "unit": "nginx"})))
    result = await run(
        config(store, anthropic_client, confirm=confirm, stop_requested=stop_requested), await start(store)
    )
    assert (result.stop_reason, result.stopped_by) == (StopReason.CANCELLED, "U9")


# --- trace ------------------------------------------------------------------------
async def test_every_step_is_one_structlog_event_keyed_by_run_id(store, fake_anthropic, anthropic_client):
    import structlog

    fake_anthropic.script(reply(tool_use("check_cpu", {"host": "web-03"})), *answered(reply(text("fine"))))
    run_id = await start(store)
    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        await run(config(store, anthropic_client), run_id)
    steps = [(e["event"], e["run_id"]) for e in logs if e.get("run_id")]
    # the answer, asked once for the summary, comes again: one more request and response
    kinds = ("request", "response", "tool", "request", "response", "request", "response", "stop")
    assert steps == [(kind, run_id) for kind in kinds]
    [tool_event] = [e for e in logs if e["event"] == "tool"]
    assert (tool_event["args"], tool_event["result"]) == ({"host": "web-03"}, "web-03: cpu 97%, load 7.9")
    assert [s.kind for s in await store.steps(run_id)] == [e for e, _ in steps]


async def test_a_run_that_died_after_its_answer_finishes_without_asking_again(store, fake_anthropic, anthropic_client):
    run_id = await start(store)
    await store.put_message(run_id, 1, {"role": "assistant", "content": [{"type": "text", "text": "all good"}]})
    result = await run(config(store, anthropic_client), run_id)
    assert (result.stop_reason, result.output, fake_anthropic.requests) == (StopReason.COMPLETED, "all good", [])


async def test_a_context_budget_condenses_each_time_there_is_history_to_condense(
    store, fake_anthropic, anthropic_client
):
    # Step 1 has nothing older to condense; after step 2 there is, so the summary request comes next; after
    # step 3 there is again.
    fake_anthropic.script(
        *keep_calling(2),
        reply(text("summary of web-00, web-01")),
        reply(tool_use("check_cpu", {"host": "web-09"})),
        reply(text("summary of web-00, web-01, web-09")),
        *answered(reply(text("done"))),
    )
    run_id = await start(store)
    result = await run(config(store, anthropic_client, context_budget_tokens=50), run_id)
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "done")
    # ... and the answer comes twice (asked once for the summary), neither time condensing
    assert ["tools" not in r.body for r in fake_anthropic.requests] == [False, False, True, False, True, False, False]
    history = await store.history(run_id)
    assert "[Summary of the work so far" in history[0]["content"][0]["text"]
    assert "summary of web-00, web-01, web-09" in history[0]["content"][0]["text"]


async def test_a_call_policy_forbids_stops_the_run_before_any_human_is_asked(store, fake_anthropic, anthropic_client):
    @tool(category=Category.MUTATING, name="restart_unit")
    async def restart_unit(unit: str, *, confirmed_by: str) -> str:
        """Restart an allowlisted unit."""
        raise AssertionError("must not run")

    @restart_unit.precheck
    def _only_nginx(unit: str) -> None:
        if unit != "nginx":
            raise PermissionDenied(f"{unit} is not on the restart allowlist")

    confirm, seen = await approve_as("U2")
    fake_anthropic.script(reply(tool_use("restart_unit", {"unit": "postgres"})))
    result = await run(
        config(store, anthropic_client, tools=ToolRegistry([restart_unit]), confirm=confirm), await start(store)
    )
    assert (result.stop_reason, result.stop_detail, seen) == (
        StopReason.PERMISSION_DENIED,
        "restart_unit: postgres is not on the restart allowlist",
        [],
    )


async def test_a_refusal_is_named_as_such(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(reply(stop_reason="refusal"))
    result = await run(config(store, anthropic_client), await start(store))
    assert (result.stop_reason, result.stop_detail, len(fake_anthropic.requests)) == (
        StopReason.MODEL_ERROR,
        "the model refused the request (stop_reason refusal)",
        1,
    )


async def test_the_run_tells_its_watchers_in_typed_events(store, fake_anthropic, anthropic_client):
    fake_anthropic.script(
        reply(tool_use("check_cpu", {"host": "web-03"}, id="toolu_a")),
        reply(tool_use("restart_service", {"host": "web-03", "unit": "java-app"}, id="toolu_b")),
        *answered(reply(text("Restarted java-app."))),
    )
    seen: list[events.RunEvent] = []

    async def watch(event: events.RunEvent) -> None:
        seen.append(event)
        raise RuntimeError("a broken watcher")  # logged, never the run's problem

    confirm, _ = await approve_as("U2")
    run_id = await start(store)
    result = await run(config(store, anthropic_client, confirm=confirm, on_event=watch), run_id)

    assert result.stop_reason == StopReason.COMPLETED
    # Current models think before each turn (summarized thinking): a Reasoning event per step.
    assert [type(e).__name__ for e in seen] == [
        "Iteration",
        "Reasoning",
        "ToolsAnnounced",
        "ToolStarted",
        "ToolDone",
        "Iteration",
        "Reasoning",
        "ToolsAnnounced",
        "WaitingApproval",
        "ApprovalDecided",
        "ToolStarted",
        "ToolDone",
        "Iteration",
        "Reasoning",
        "Iteration",  # asked once for the summary, the model answers again
        "Reasoning",
        "Finished",
    ]
    assert {e.run_id for e in seen} == {run_id}
    announced = next(e for e in seen if isinstance(e, events.ToolsAnnounced))
    assert announced.calls == (events.Announced(id="toolu_a", tool="check_cpu", args={"host": "web-03"}),)
    decided = next(e for e in seen if isinstance(e, events.ApprovalDecided))
    assert (decided.tool, decided.approved, decided.by) == ("restart_service", True, "U2")
    assert isinstance(seen[-1], events.Finished) and seen[-1].result.output == "Restarted java-app."
    assert seen[-1].tokens >= seen[0].tokens and seen[-1].cost_usd > 0
