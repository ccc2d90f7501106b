"""Tool.run/validate/dry_run, truncation, and the ToolRegistry rules."""

from __future__ import annotations

import asyncio
import enum
import os
import threading
from typing import Literal

import psutil
import pytest

from tools import (
    MAX_OUTPUT_CHARS,
    Category,
    PermissionDenied,
    Tool,
    ToolContext,
    ToolError,
    ToolRegistry,
    tool,
    truncate_output,
)
from tools.worker import WORKER_MARK


@tool(category=Category.READ_ONLY, parallel=True)
def top(sort_by: Literal["cpu", "memory"] = "cpu", limit: int = 10) -> str:
    """Top processes."""
    return f"{sort_by}:{limit}"


@tool(category=Category.MUTATING)
async def restart(unit: str, *, confirmed_by: str) -> str:
    """Restart a unit."""
    return f"restarted {unit} for {confirmed_by}"


@tool(category=Category.MUTATING)
async def scale(replicas: int) -> str:
    """Scale without recording the approver."""
    return f"scaled to {replicas}"


@tool(category=Category.DESTRUCTIVE)
async def wipe(path: str, days: int = 7, *, confirmed_by: str, ctx: ToolContext) -> str:
    """Delete old files."""
    return f"wiped {path} older than {days}d in {ctx.log_dirs[0]} for {confirmed_by}"


@wipe.dry_run
async def _wipe_preview(path: str, days: int = 7, *, ctx: ToolContext) -> str:
    return f"would wipe {path} older than {days}d in {ctx.log_dirs[0]}"


# -- validation --------------------------------------------------------------------------------------


async def test_validate_returns_the_arguments() -> None:
    assert top.validate({"limit": 3}) == {"limit": 3}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"limit": "ten"}, "invalid arguments for top: limit: 'ten' is not of type 'integer'"),
        ({"sort_by": "disk"}, "invalid arguments for top: sort_by: 'disk' is not one of ['cpu', 'memory']"),
        ({"limit": True}, "invalid arguments for top: limit: True is not of type 'integer'"),
        ({"host": "db-1"}, "invalid arguments for top: unexpected argument 'host' (expected: limit, sort_by)"),
    ],
)
def test_validation_error_names_the_field(args: dict[str, object], message: str) -> None:
    with pytest.raises(ToolError) as e:
        top.validate(args)
    assert str(e.value) == message


def test_missing_required_argument_is_named() -> None:
    with pytest.raises(ToolError) as e:
        restart.validate({})
    assert str(e.value) == "invalid arguments for restart: missing required argument 'unit'"


def test_arguments_must_be_an_object() -> None:
    with pytest.raises(ToolError, match="expected a JSON object"):
        top.validate(["cpu"])  # type: ignore[arg-type]


async def test_run_validates_before_calling() -> None:
    with pytest.raises(ToolError, match="limit"):
        await top.run({"limit": "x"})


# -- run -------------------------------------------------------------------------------------------


async def test_run_fills_defaults_and_returns_text() -> None:
    assert await top.run({"sort_by": "memory"}) == "memory:10"


async def test_confirmed_by_is_passed_to_a_tool_that_declares_it() -> None:
    assert await restart.run({"unit": "nginx"}, confirmed_by="U024BE7LH") == "restarted nginx for U024BE7LH"


async def test_tool_that_declares_confirmed_by_refuses_to_run_without_one() -> None:
    with pytest.raises(PermissionDenied, match="requires an approver"):
        await restart.run({"unit": "nginx"})


async def test_confirmed_by_is_not_passed_to_a_tool_that_does_not_declare_it() -> None:
    assert await scale.run({"replicas": 3}, confirmed_by="U1") == "scaled to 3"


async def test_sync_tool_runs_in_a_worker_thread() -> None:
    seen: list[int] = []

    @tool(category=Category.READ_ONLY)
    def where() -> str:
        """Which thread."""
        seen.append(threading.get_ident())
        return "ok"

    assert await where.run({}) == "ok"
    assert seen and seen[0] != threading.get_ident()


async def test_async_tool_timeout_is_a_tool_error() -> None:
    @tool(category=Category.READ_ONLY, timeout_s=0.05)
    async def hang() -> str:
        """Hang."""
        await asyncio.Event().wait()
        return "never"

    with pytest.raises(ToolError) as e:
        await hang.run({})
    assert str(e.value) == "hang timed out after 0.05s"


async def test_sync_tool_timeout_is_a_tool_error() -> None:
    release = threading.Event()

    @tool(category=Category.READ_ONLY, timeout_s=0.05)
    def block() -> str:
        """Block."""
        release.wait(10)
        return "late"

    try:
        with pytest.raises(ToolError, match=r"block timed out after 0\.05s"):
            await block.run({})
    finally:
        release.set()  # let the worker thread finish


async def test_timeout_error_raised_by_the_tool_itself_is_not_reported_as_our_timeout() -> None:
    @tool(category=Category.READ_ONLY, timeout_s=10)
    async def upstream() -> str:
        """Upstream."""
        raise TimeoutError("upstream took too long")

    with pytest.raises(ToolError) as e:
        await upstream.run({})
    assert str(e.value) == "TimeoutError: upstream took too long"


async def test_unexpected_exception_becomes_tool_error_with_its_type() -> None:
    @tool(category=Category.READ_ONLY)
    def broken() -> str:
        """Broken."""
        raise KeyError("disk")

    with pytest.raises(ToolError) as e:
        await broken.run({})
    assert str(e.value) == "KeyError: 'disk'"


async def test_tool_error_and_permission_denied_propagate_unchanged() -> None:
    @tool(category=Category.READ_ONLY)
    def fails(kind: Literal["tool", "policy"]) -> str:
        """Fails."""
        if kind == "tool":
            raise ToolError("no such file")
        raise PermissionDenied("not on the allowlist")

    with pytest.raises(ToolError) as e:
        await fails.run({"kind": "tool"})
    assert str(e.value) == "no such file"
    with pytest.raises(PermissionDenied) as p:
        await fails.run({"kind": "policy"})
    assert str(p.value) == "not on the allowlist"


async def test_non_string_result_is_json() -> None:
    @tool(category=Category.READ_ONLY)
    def facts() -> dict[str, object]:
        """Facts."""
        return {"load": [0.5, 0.25], "ok": True}

    assert await facts.run({}) == '{"load": [0.5, 0.25], "ok": true}'


async def test_output_is_truncated() -> None:
    @tool(category=Category.READ_ONLY)
    def chatty() -> str:
        """Chatty."""
        return "a" * 10_000 + "b" * 10_000

    out = await chatty.run({})
    assert len(out) <= MAX_OUTPUT_CHARS
    assert out.startswith("a" * 5_000) and out.endswith("b" * 5_000)
    assert "[truncated" in out


class Level(enum.Enum):
    INFO = "info"
    ERROR = "error"


async def test_enum_arguments_arrive_as_members() -> None:
    @tool(category=Category.READ_ONLY)
    def level_of(level: Level, levels: list[Level] | None = None) -> str:
        """Level."""
        return f"{level!r} {levels!r}"

    assert await level_of.run({"level": "error", "levels": ["info"]}) == "<Level.ERROR: 'error'> [<Level.INFO: 'info'>]"


async def test_optional_parameter_without_default_receives_none() -> None:
    @tool(category=Category.READ_ONLY)
    def maybe(tag: str | None) -> str:
        """Maybe."""
        return repr(tag)

    assert await maybe.run({}) == "None"


async def test_context_is_injected_and_bound() -> None:
    @tool(category=Category.READ_ONLY)
    def dirs(*, ctx: ToolContext) -> str:
        """Dirs."""
        return ",".join(map(str, ctx.log_dirs))

    assert await dirs.run({}) == "/var/log"  # unbound: the default context
    from pathlib import Path

    bound = dirs.bind(ToolContext(log_dirs=(Path("/srv/logs"),)))
    assert await bound.run({}) == "/srv/logs"
    assert dirs.input_schema == {"type": "object", "properties": {}, "additionalProperties": False}


# -- truncation --------------------------------------------------------------------------------------


def test_truncate_keeps_short_text() -> None:
    assert truncate_output("short", limit=100) == "short"


def test_truncate_keeps_head_and_tail_with_a_note() -> None:
    text = "".join(str(i % 10) for i in range(1000))
    out = truncate_output(text, limit=200)
    note = out[out.index("\n…") : out.index("…\n") + 2]
    head, tail = out.split(note)
    assert note == f"\n… [truncated {1000 - len(head) - len(tail)} chars of 1000] …\n"
    assert text.startswith(head) and text.endswith(tail)
    assert len(out) <= 200
    assert abs(len(head) - len(tail)) <= 1


# -- dry run ---------------------------------------------------------------------------------------


async def test_dry_run_previews_with_validated_arguments_and_context() -> None:
    assert await wipe.dry_run({"path": "/var/log/app"}) == "would wipe /var/log/app older than 7d in /var/log"
    assert wipe.has_dry_run


async def test_dry_run_validates() -> None:
    with pytest.raises(ToolError, match="days"):
        await wipe.dry_run({"path": "x", "days": "old"})


async def test_dry_run_is_none_for_a_tool_without_one() -> None:
    assert await top.dry_run({}) is None
    assert not top.has_dry_run


def test_dry_run_is_only_for_mutating_and_destructive_tools() -> None:
    with pytest.raises(ValueError, match="dry_run is for mutating and destructive tools"):

        @top.dry_run
        def _preview() -> str:
            return ""


def test_dry_run_parameters_must_belong_to_the_tool() -> None:
    @tool(category=Category.DESTRUCTIVE)
    def drop(table: str, *, confirmed_by: str) -> str:
        """Drop."""
        return table

    with pytest.raises(TypeError, match="not parameters of drop"):

        @drop.dry_run
        def _preview(database: str) -> str:
            return database


def test_destructive_tool_without_dry_run_is_rejected_at_registration() -> None:
    @tool(category=Category.DESTRUCTIVE)
    def drop(table: str, *, confirmed_by: str) -> str:
        """Drop."""
        return table

    with pytest.raises(ValueError, match="drop is destructive but has no dry run"):
        ToolRegistry([drop])


async def test_raising_to_destructive_gives_an_argument_echo_preview() -> None:
    raised = restart.with_category(Category.DESTRUCTIVE)
    assert raised.category is Category.DESTRUCTIVE and raised.has_dry_run
    assert (
        await raised.dry_run({"unit": "nginx"})
        == 'no dry-run available; the call would send: restart {\n  "unit": "nginx"\n}'
    )
    assert restart.category is Category.MUTATING  # the original is unchanged


def test_raising_a_parallel_tool_makes_it_sequential_and_lowering_is_refused() -> None:
    assert top.with_category(Category.MUTATING).parallel is False
    with pytest.raises(ValueError, match="cannot lower"):
        restart.with_category(Category.READ_ONLY)


# -- registry ---------------------------------------------------------------------------------------


def test_registry_keeps_registration_order_and_lookups() -> None:
    registry = ToolRegistry([top, restart])
    registry.register(wipe)
    assert [t.name for t in registry] == ["top", "restart", "wipe"]
    assert len(registry) == 3
    assert "wipe" in registry and wipe in registry and "nope" not in registry
    assert registry.get("restart") is restart
    assert registry.get("nope") is None


def test_duplicate_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate tool name 'top'"):
        ToolRegistry([top, top])


def test_the_runtimes_own_tool_names_are_refused() -> None:
    """The runtime adds these to every run's tools block: a registered copy would make the API refuse every run."""
    from bot.run import living
    from tests.support.clash_tools import update_summary
    from tools.api import RUNTIME_TOOLS

    assert living.schema()["name"] in RUNTIME_TOOLS
    with pytest.raises(ValueError, match="tool name 'update_summary' is taken by opsloop's own tool"):
        ToolRegistry([top, update_summary])


def test_api_schemas_are_stable_and_callers_cannot_corrupt_them() -> None:
    registry = ToolRegistry([top, restart, wipe])
    first = registry.api_schemas()
    assert [s["name"] for s in first] == ["top", "restart", "wipe"]
    first[-1]["cache_control"] = {"type": "ephemeral"}
    first[0]["input_schema"]["properties"].clear()
    assert registry.api_schemas() == [top.api_schema(), restart.api_schema(), wipe.api_schema()]
    assert registry.api_schemas()[0]["input_schema"]["properties"] != {}


async def test_aclose_runs_the_registered_closers_in_reverse_order() -> None:
    closed: list[str] = []
    registry = ToolRegistry()

    async def close(name: str) -> None:
        closed.append(name)

    registry.push_async_callback(lambda: close("first"))
    registry.push_async_callback(lambda: close("second"))
    async with registry:
        pass
    assert closed == ["second", "first"]


def test_tool_is_a_plain_dataclass_the_runtime_can_build() -> None:
    t = Tool(
        name="noop",
        description="Nothing.",
        input_schema={"type": "object", "properties": {}},
        category=Category.READ_ONLY,
        parallel=True,
        timeout_s=5,
        idempotent=True,
        source="builtin",
        has_dry_run=False,
    )
    assert t.api_schema() == {
        "name": "noop",
        "description": "Nothing.",
        "input_schema": {"type": "object", "properties": {}},
    }
    assert str(Category.DESTRUCTIVE) == "destructive" and Category("mutating") is Category.MUTATING


# -- a category is always declared ------------------------------------------------------------------


def test_a_tool_without_a_category_is_refused_naming_it() -> None:
    def peek(x: str) -> str:
        """Peek."""
        return x

    for decorate in (tool, tool(), tool(parallel=True)):
        with pytest.raises(TypeError, match=r"^peek: @tool needs an explicit category"):
            decorate(peek)


# -- isolated sync tools run in a killable worker process ---------------------------------------------


@tool(category=Category.READ_ONLY, isolated=True)
def worker_pid(kind: Literal["pid", "tool", "policy", "bug"] = "pid", *, ctx: ToolContext) -> str:
    """The process it runs in, or a failure of the kind asked for."""
    if kind == "tool":
        raise ToolError("no such file")
    if kind == "policy":
        raise PermissionDenied("not on the allowlist")
    if kind == "bug":
        raise KeyError("disk")
    print("a stray print goes to stderr, not into the result")
    return f"{os.getpid()} {ctx.log_dirs[0]}"


@tool(category=Category.READ_ONLY, isolated=True, timeout_s=0.5)
def spin() -> str:
    """Spin forever, holding its GIL."""
    while True:
        pass


def worker_processes() -> list[psutil.Process]:
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and WORKER_MARK in " ".join(p.cmdline())
    ]


@pytest.mark.processes
async def test_an_isolated_tool_runs_in_another_process_with_its_context() -> None:
    from pathlib import Path

    out = await worker_pid.bind(ToolContext(log_dirs=(Path("/srv/logs"),))).run({})
    pid, logdir = out.split()
    assert int(pid) != os.getpid() and logdir == "/srv/logs"
    assert worker_processes() == []


@pytest.mark.processes
async def test_an_isolated_tools_errors_arrive_as_in_process() -> None:
    with pytest.raises(ToolError) as e:
        await worker_pid.run({"kind": "tool"})
    assert str(e.value) == "no such file"
    with pytest.raises(PermissionDenied) as p:
        await worker_pid.run({"kind": "policy"})
    assert str(p.value) == "not on the allowlist"
    with pytest.raises(ToolError) as b:
        await worker_pid.run({"kind": "bug"})
    assert str(b.value) == "KeyError: 'disk'"


@pytest.mark.processes
async def test_an_isolated_tool_that_overruns_its_timeout_is_killed() -> None:
    with pytest.raises(ToolError) as e:
        await spin.run({})
    assert str(e.value) == "spin timed out after 0.5s (its process was killed)"
    assert worker_processes() == []


def test_isolated_is_for_module_level_sync_functions() -> None:
    async def later() -> str:
        """Async."""
        return ""

    def nested() -> str:
        """Nested."""
        return ""

    for fn in (later, nested):
        with pytest.raises(TypeError, match="isolated=True is for sync functions defined at module level"):
            tool(category=Category.READ_ONLY, isolated=True)(fn)


def test_a_new_sync_builtin_cannot_forget_to_run_isolated() -> None:
    def check_inodes() -> str:
        """Inodes."""
        return ""

    check_inodes.__module__ = "tools.builtin.host"
    with pytest.raises(TypeError, match="check_inodes: a sync built-in must be isolated=True"):
        tool(category=Category.READ_ONLY)(check_inodes)


# -- approved_preview: the run receives the preview its approval was bound to ------------------------------


@tool(category=Category.DESTRUCTIVE)
async def purge(queue: str, *, confirmed_by: str, approved_preview: str) -> str:
    """Purge a queue."""
    return f"purged {queue} for {confirmed_by}, as previewed: {approved_preview}"


@purge.dry_run
async def _purge_preview(queue: str) -> str:
    return f"would purge {queue} ({len(queue)} messages)"


async def test_the_run_receives_the_preview_shown_for_the_same_call_in_this_task() -> None:
    assert "approved_preview" not in str(purge.api_schema())
    assert await purge.dry_run({"queue": "jobs"}) == "would purge jobs (4 messages)"
    assert (
        await purge.run({"queue": "jobs"}, confirmed_by="U1")
        == "purged jobs for U1, as previewed: would purge jobs (4 messages)"
    )


async def test_without_a_preview_for_the_same_arguments_the_run_is_refused() -> None:
    await purge.dry_run({"queue": "jobs"})
    with pytest.raises(PermissionDenied, match="no preview was shown for this call"):
        await purge.run({"queue": "payments"}, confirmed_by="U1")


async def test_a_preview_shown_in_another_task_does_not_count() -> None:
    await asyncio.create_task(purge.dry_run({"queue": "jobs"}))
    with pytest.raises(PermissionDenied, match="no preview was shown for this call"):
        await purge.run({"queue": "jobs"}, confirmed_by="U1")


async def test_an_explicit_approved_preview_is_passed_as_given() -> None:
    assert (
        await purge.run({"queue": "jobs"}, confirmed_by="U1", approved_preview="X")
        == "purged jobs for U1, as previewed: X"
    )


def test_approved_preview_is_never_for_read_only_tools_keyword_only_and_never_for_previews() -> None:
    def grow(x: str, *, approved_preview: str) -> str:
        """Grow."""
        return x

    with pytest.raises(TypeError, match="only mutating and destructive tools have an approved dry-run preview"):
        tool(category=Category.READ_ONLY)(grow)

    def shrink(x: str, approved_preview: str, *, confirmed_by: str) -> str:
        """Shrink."""
        return x

    with pytest.raises(TypeError, match="approved_preview must be keyword-only"):
        tool(category=Category.DESTRUCTIVE)(shrink)

    with pytest.raises(TypeError, match="a dry run happens before approval, it cannot take approved_preview"):

        @purge.dry_run
        def _bad(queue: str, *, approved_preview: str) -> str:
            return queue
