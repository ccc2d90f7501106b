"""MCP servers as tool sources: tests/support/mcp_server.py over stdio (a real subprocess) and streamable HTTP."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import pytest_asyncio
from mcp.types import ToolAnnotations

from tests.support import markers
from tools import Category, ToolConfigError, ToolError, ToolRegistry
from tools.config import build_registry, tool_table
from tools.mcp import category_of, tool_name

REPO = Path(__file__).resolve().parents[2]
STDIO_SERVER = {"name": "grafana", "command": [sys.executable, "tests/support/mcp_server.py"]}


def server_processes() -> set[int]:
    """Our stdio test servers still running."""
    found = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if "mcp_server.py" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                found.add(p.pid)
        except psutil.NoSuchProcess:
            continue
    return found


# One event loop for the module, so one server process serves the read-mostly tests below.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
@markers.spawns  # the stdio MCP server, started by tools.mcp for the first test that uses it
async def grafana() -> AsyncIterator[ToolRegistry]:
    registry = await build_registry({"modules": [], "mcp": [STDIO_SERVER]}, base_dir=REPO)
    try:
        yield registry
    finally:
        await registry.aclose()


@pytest.mark.processes
async def test_an_untrusted_servers_read_only_hint_does_not_skip_approval(grafana: ToolRegistry) -> None:
    assert tool_table(grafana) == [
        {"name": "grafana__list_dashboards", "category": "mutating", "parallel": False, "source": "mcp:grafana"},
        {"name": "grafana__delete_dashboard", "category": "destructive", "parallel": False, "source": "mcp:grafana"},
        {"name": "grafana__silence_alert", "category": "destructive", "parallel": False, "source": "mcp:grafana"},
        {"name": "grafana__broken_query", "category": "mutating", "parallel": False, "source": "mcp:grafana"},
    ]


@pytest.mark.processes
async def test_a_trusted_servers_annotations_set_the_categories() -> None:
    registry = await build_registry(
        {"modules": [], "mcp": [{**STDIO_SERVER, "trust_annotations": True}]}, base_dir=REPO
    )
    try:
        assert tool_table(registry) == [
            {"name": "grafana__list_dashboards", "category": "read_only", "parallel": True, "source": "mcp:grafana"},
            {
                "name": "grafana__delete_dashboard",
                "category": "destructive",
                "parallel": False,
                "source": "mcp:grafana",
            },
            {"name": "grafana__silence_alert", "category": "destructive", "parallel": False, "source": "mcp:grafana"},
            {"name": "grafana__broken_query", "category": "read_only", "parallel": True, "source": "mcp:grafana"},
        ]
    finally:
        await registry.aclose()


@pytest.mark.parametrize(
    ("hints", "untrusted", "trusted"),
    [
        (None, Category.DESTRUCTIVE, Category.DESTRUCTIVE),  # the spec's default: destructiveHint true
        ({}, Category.DESTRUCTIVE, Category.DESTRUCTIVE),
        ({"read_only_hint": True}, Category.MUTATING, Category.READ_ONLY),
        ({"read_only_hint": True, "destructive_hint": True}, Category.MUTATING, Category.READ_ONLY),
        ({"destructive_hint": False}, Category.MUTATING, Category.MUTATING),
        ({"destructive_hint": True}, Category.DESTRUCTIVE, Category.DESTRUCTIVE),
        ({"read_only_hint": False, "destructive_hint": False}, Category.MUTATING, Category.MUTATING),
        ({"idempotent_hint": True}, Category.DESTRUCTIVE, Category.DESTRUCTIVE),
    ],
)
async def test_category_from_annotations(hints: dict[str, bool] | None, untrusted: Category, trusted: Category) -> None:
    annotations = None if hints is None else ToolAnnotations(**hints)
    assert (category_of(annotations), category_of(annotations, trusted=True)) == (untrusted, trusted)


async def test_input_schema_comes_from_the_server(grafana: ToolRegistry) -> None:
    t = grafana.get("grafana__silence_alert")
    assert t is not None
    assert t.api_schema() == {
        "name": "grafana__silence_alert",
        "description": "Silence an alert for some minutes.",
        "input_schema": {
            "type": "object",
            "title": "silence_alertArguments",
            "properties": {
                "alert": {"title": "Alert", "type": "string"},
                "minutes": {"title": "Minutes", "type": "integer"},
            },
            "required": ["alert", "minutes"],
            "additionalProperties": False,
        },
    }


async def test_calling_a_tool_returns_its_text(grafana: ToolRegistry) -> None:
    t = grafana.get("grafana__list_dashboards")
    assert t is not None
    assert await t.run({"query": "error"}) == "error-rate: Error rate"


async def test_arguments_are_validated_against_the_server_schema(grafana: ToolRegistry) -> None:
    t = grafana.get("grafana__silence_alert")
    assert t is not None
    with pytest.raises(ToolError) as e:
        await t.run({"alert": "HighLatency", "minutes": "ten", "reason": "x"})
    assert str(e.value) == (
        "invalid arguments for grafana__silence_alert: unexpected argument 'reason' "
        "(expected: alert, minutes); minutes: 'ten' is not of type 'integer'"
    )
    assert await t.run({"alert": "HighLatency", "minutes": 10}) == "silenced HighLatency for 10 minutes"


async def test_error_result_is_a_tool_error_with_the_servers_text(grafana: ToolRegistry) -> None:
    t = grafana.get("grafana__broken_query")
    assert t is not None
    with pytest.raises(ToolError) as e:
        await t.run({"expr": "up"})
    assert str(e.value) == "Error executing tool broken_query: datasource unreachable while running 'up'"


async def test_destructive_mcp_tool_previews_the_arguments_it_would_send(grafana: ToolRegistry) -> None:
    t = grafana.get("grafana__delete_dashboard")
    assert t is not None and t.has_dry_run
    assert await t.dry_run({"uid": "api-latency"}) == (
        'no dry-run available; the call would send: delete_dashboard {\n  "uid": "api-latency"\n}'
    )
    assert await t.run({"uid": "api-latency"}, confirmed_by="U1") == "deleted api-latency"


@pytest.mark.processes
async def test_config_sets_an_mcp_tools_category_up_or_down() -> None:
    categories = {
        "grafana__list_dashboards": "read_only",
        "grafana__silence_alert": "mutating",
        "grafana__broken_query": "destructive",
    }
    registry = await build_registry({"modules": [], "mcp": [STDIO_SERVER], "categories": categories}, base_dir=REPO)
    try:
        assert [(r["name"], r["category"], r["parallel"]) for r in tool_table(registry)] == [
            ("grafana__list_dashboards", "read_only", True),
            ("grafana__delete_dashboard", "destructive", False),
            ("grafana__silence_alert", "mutating", False),
            ("grafana__broken_query", "destructive", False),
        ]
        silence, broken = registry.get("grafana__silence_alert"), registry.get("grafana__broken_query")
        assert silence is not None and not silence.has_dry_run
        assert broken is not None and await broken.dry_run({"expr": "up"}) == (
            'no dry-run available; the call would send: grafana__broken_query {\n  "expr": "up"\n}'
        )
    finally:
        await registry.aclose()


@pytest.mark.processes
async def test_include_selects_tools_and_names_a_missing_one() -> None:
    registry = await build_registry(
        {"modules": [], "mcp": [{**STDIO_SERVER, "include": ["list_dashboards"]}]}, base_dir=REPO
    )
    try:
        assert [t.name for t in registry] == ["grafana__list_dashboards"]
    finally:
        await registry.aclose()
    with pytest.raises(ToolConfigError) as e:
        await build_registry({"modules": [], "mcp": [{**STDIO_SERVER, "include": ["nope"]}]}, base_dir=REPO)
    assert str(e.value) == "tools.mcp[0].include: the server has no tool 'nope'"


@pytest.mark.processes
async def test_aclose_stops_the_server_process() -> None:
    before = server_processes()
    registry = await build_registry({"modules": [], "mcp": [STDIO_SERVER]}, base_dir=REPO)
    started = server_processes() - before
    assert len(started) == 1
    await registry.aclose()
    assert server_processes() == before


@pytest.mark.processes
async def test_a_dead_server_is_a_tool_error_and_aclose_works_from_another_task() -> None:
    before = server_processes()
    registry = await build_registry({"modules": [], "mcp": [STDIO_SERVER]}, base_dir=REPO)
    (pid,) = server_processes() - before
    psutil.Process(pid).kill()
    t = registry.get("grafana__list_dashboards")
    assert t is not None
    with pytest.raises(ToolError, match="MCP server 'grafana'"):
        await t.run({})
    await asyncio.create_task(registry.aclose())  # not the task that connected
    assert server_processes() == before


@pytest.mark.processes
async def test_a_config_error_after_connecting_closes_the_connection() -> None:
    table: dict[str, Any] = {
        "modules": [],
        "mcp": [STDIO_SERVER],
        "commands": [{"name": "grafana__list_dashboards", "description": "clash", "command": ["true"]}],
    }
    before = server_processes()
    with pytest.raises(ToolConfigError, match="duplicate tool name 'grafana__list_dashboards'"):
        await build_registry(table, base_dir=REPO)
    assert server_processes() == before


@pytest.mark.processes
async def test_a_server_that_cannot_start_is_a_config_error() -> None:
    with pytest.raises(ToolConfigError) as e:
        await build_registry({"modules": [], "mcp": [{"name": "ghost", "command": ["/nonexistent/mcp-server"]}]})
    assert str(e.value).startswith("tools.mcp[0] (ghost): cannot connect: ")


@pytest.mark.processes
async def test_a_process_that_is_not_an_mcp_server_is_a_config_error() -> None:
    table = {
        "modules": [],
        "mcp": [{"name": "mute", "command": [sys.executable, "-c", "pass"], "connect_timeout_s": 20}],
    }
    with pytest.raises(ToolConfigError) as e:
        await build_registry(table)
    assert str(e.value).startswith("tools.mcp[0] (mute): ")


async def test_tool_names_are_sanitized_for_the_messages_api() -> None:
    assert tool_name("grafana", "dashboards/list.v2") == "grafana__dashboards_list_v2"
    assert len(tool_name("s", "x" * 100)) == 64


async def test_streamable_http_server() -> None:
    uvicorn = pytest.importorskip("uvicorn")
    from tests.support.mcp_server import server as mcp_server

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)  # connections queue from now on, before uvicorn starts accepting
    port = sock.getsockname()[1]
    config = uvicorn.Config(mcp_server.streamable_http_app(host="127.0.0.1"), log_level="warning")
    http_server = uvicorn.Server(config)
    serving = asyncio.create_task(http_server.serve(sockets=[sock]))
    try:
        registry = await build_registry(
            {"modules": [], "mcp": [{"name": "remote", "url": f"http://127.0.0.1:{port}/mcp"}]}
        )
        try:
            assert [t.name for t in registry][:2] == ["remote__list_dashboards", "remote__delete_dashboard"]
            t = registry.get("remote__silence_alert")
            assert t is not None and await t.run({"alert": "Disk", "minutes": 1}) == "silenced Disk for 1 minutes"
        finally:
            await registry.aclose()
    finally:
        http_server.should_exit = True
        await serving
        sock.close()
