"""build_registry from the [tools] table: defaults, context, categories, and errors that say where."""

from __future__ import annotations

import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.support.config_readers import tool_context
from tools import Category, ToolConfigError, ToolContext
from tools.config import build_registry, tool_table

BUILTINS = [
    "check_disk",
    "check_memory",
    "check_cpu",
    "list_top_processes",
    "disk_usage",
    "read_file",
    "list_hosts",
    "list_logs",
    "tail_log",
    "grep_log",
    "log_histogram",
    "clean_logs",
    "journal",
    "kernel_events",
    "service_status",
    "restart_service",
    "check_url",
    "dns_lookup",
    "tcp_check",
    "tls_check",
    "prometheus_query",
    "prometheus_query_range",
    "prometheus_metrics",
    "prometheus_alerts",
]


async def test_default_registry_has_the_builtin_tools_in_order() -> None:
    registry = await build_registry({})
    assert [t.name for t in registry] == BUILTINS
    assert await build_registry(None) is not registry


async def test_tool_table_rows_for_opsloop_check() -> None:
    registry = await build_registry({})
    rows = tool_table(registry)
    assert rows[0] == {"name": "check_disk", "category": "read_only", "parallel": True, "source": "builtin"}
    assert {r["name"]: r["category"] for r in rows if r["category"] != "read_only"} == {
        "clean_logs": "destructive",
        "restart_service": "mutating",
    }


async def test_the_documented_example_config_loads(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    table = tomllib.loads(
        textwrap.dedent(f"""
        [tools]
        modules = ["tools.builtin"]
        [tools.categories]
        restart_service = "destructive"
        [tools.logs]
        dirs = ["{logs}"]
        [tools.services]
        restart_allowlist = ["nginx", "api"]
        [tools.prometheus]
        url = "http://prometheus:9090/"
        [[tools.commands]]
        name = "restart_api"
        description = "Restart the API service on a host"
        command = ["ssh", "{{host}}", "sudo systemctl restart api"]
        params = {{ host = {{ pattern = "^web-[0-9]+$", description = "host name" }} }}
        category = "mutating"
        timeout_s = 30
    """)
    )["tools"]
    registry = await build_registry(table, base_dir=tmp_path)
    assert [t.name for t in registry] == [*BUILTINS, "restart_api"]
    restart = registry.get("restart_service")
    assert restart is not None and restart.category is Category.DESTRUCTIVE and restart.has_dry_run
    assert restart.ctx == ToolContext(
        log_dirs=(logs,), restart_allowlist=("nginx", "api"), prometheus_url="http://prometheus:9090"
    )


def test_tool_context_resolves_relative_dirs_against_the_config_directory(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    ctx = tool_context({"logs": {"dirs": ["logs"]}, "http": {"timeout_s": 3, "ca_file": "ca.pem"}}, base_dir=tmp_path)
    assert ctx == ToolContext(log_dirs=(tmp_path / "logs",), http_timeout_s=3.0, http_ca_file=ca)


async def test_category_can_be_raised() -> None:
    registry = await build_registry({"categories": {"check_disk": "mutating"}})
    disk = registry.get("check_disk")
    assert disk is not None and (disk.category, disk.parallel) == (Category.MUTATING, False)


async def test_modules_register_their_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "team_runbooks.py").write_text(
        textwrap.dedent('''
        from tools import Category, tool

        @tool(category=Category.MUTATING)
        def flush_queue(queue: str, *, confirmed_by: str) -> str:
            """Flush a queue."""
            return f"flushed {queue} ({confirmed_by})"

        helper = 42
    ''')
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = await build_registry({"modules": ["team_runbooks"]})
    assert tool_table(registry) == [
        {"name": "flush_queue", "category": "mutating", "parallel": False, "source": "module:team_runbooks"}
    ]
    flush = registry.get("flush_queue")
    assert flush is not None and await flush.run({"queue": "jobs"}, confirmed_by="U1") == "flushed jobs (U1)"
    sys.modules.pop("team_runbooks", None)


def cmd(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "restart_api",
        "description": "Restart the API",
        "command": ["ssh", "{host}", "sudo systemctl restart api"],
        "params": {"host": {"pattern": "^web-[0-9]+$"}},
    }
    return {k: v for k, v in {**base, **overrides}.items() if v is not None}


BAD_CONFIGS: list[tuple[dict[str, Any], str]] = [
    (
        {"modul": []},
        "tools.modul: unknown key (known: modules, categories, timeouts, logs, journal, services, files, prometheus, "
        "http, commands, mcp)",
    ),
    ({"modules": "tools.builtin"}, "tools.modules: expected a list of strings, got a string"),
    (
        {"modules": ["tools.builtin", "no_such_module_xyz"]},
        "tools.modules[1]: cannot import 'no_such_module_xyz': ModuleNotFoundError: No module named 'no_such_module_xyz'",  # noqa: E501
    ),
    ({"modules": ["json"]}, "tools.modules[0]: module 'json' defines no @tool functions"),
    (
        {"modules": ["tools.builtin", "tools.builtin.host"]},
        "tools.modules[1]: duplicate tool name 'check_disk' (already defined by tools.modules[0])",
    ),
    (
        {"categories": {"restart_service": "read_only"}},
        "tools.categories.restart_service: cannot lower mutating to read_only (categories may only be raised)",
    ),
    (
        {"categories": {"clean_logs": "mutating"}},
        "tools.categories.clean_logs: cannot lower destructive to mutating (categories may only be raised)",
    ),
    ({"categories": {"no_such_tool": "mutating"}}, "tools.categories.no_such_tool: no such tool"),
    (
        {"categories": {"check_disk": "dangerous"}},
        "tools.categories.check_disk: 'dangerous' is not a category (read_only, mutating, destructive)",
    ),
    ({"logs": {"dir": ["/var/log"]}}, "tools.logs.dir: unknown key (known: dirs)"),
    ({"logs": {"dirs": ["/nonexistent/logs"]}}, "tools.logs.dirs[0]: '/nonexistent/logs' is not a directory"),
    (
        {"services": {"restart_allowlist": ["nginx", "--all"]}},
        "tools.services.restart_allowlist[1]: '--all' is not a unit name",
    ),
    (
        {"prometheus": {"url": "prometheus:9090"}},
        "tools.prometheus.url: expected an http:// or https:// URL, got 'prometheus:9090'",
    ),
    ({"http": {"timeout_s": 0}}, "tools.http.timeout_s: must be positive, got 0"),
    ({"commands": {"name": "x"}}, "tools.commands: expected a list of tables ([[tools.commands]]), got a table"),
    (
        {"commands": [cmd(params={"host": {"pattern": "^web-[0-9+$"}})]},
        "tools.commands[0].params.host.pattern: invalid regex '^web-[0-9+$': unterminated character set at position 5",
    ),
    (
        {"commands": [cmd(params={"host": {}})]},
        "tools.commands[0].params.host: missing required key 'pattern' (every value is checked against one)",
    ),
    (
        {"commands": [cmd(params={"host": {"pattern": "x", "default": "web-1"}})]},
        "tools.commands[0].params.host.default: unknown key (known: pattern, description)",
    ),
    ({"commands": [cmd(params={})]}, "tools.commands[0].command[1]: {host} is not declared in params"),
    (
        {"commands": [cmd(params={"host": {"pattern": "x"}, "port": {"pattern": "[0-9]+"}})]},
        "tools.commands[0].params.port: declared but not used in command",
    ),
    (
        {"commands": [cmd(command=["{host}", "uptime"])]},
        "tools.commands[0].command[0]: the program itself cannot be a parameter",
    ),
    ({"commands": [cmd(command=[])]}, "tools.commands[0].command: must not be empty"),
    ({"commands": [cmd(description=None)]}, "tools.commands[0]: missing required key 'description'"),
    ({"commands": [cmd(name="restart api")]}, "tools.commands[0].name: 'restart api' must match ^[a-zA-Z0-9_-]{1,64}$"),
    (
        {"commands": [cmd(category="safe")]},
        "tools.commands[0].category: 'safe' is not a category (read_only, mutating, destructive)",
    ),
    ({"commands": [cmd(timeout_s="30s")]}, "tools.commands[0].timeout_s: expected a number of seconds, got a string"),
    (
        {"commands": [cmd(shell=True)]},
        "tools.commands[0].shell: unknown key (known: name, description, command, params, category, timeout_s, env)",
    ),
    (
        {"commands": [cmd(), cmd()]},
        "tools.commands[1]: duplicate tool name 'restart_api' (already defined by tools.commands[0])",
    ),
    (
        {"commands": [cmd(name="check_disk")]},
        "tools.commands[0]: duplicate tool name 'check_disk' (already defined by tools.modules[0])",
    ),
    ({"mcp": [{"name": "grafana"}]}, "tools.mcp[0]: give exactly one of 'command' (stdio) or 'url' (streamable HTTP)"),
    (
        {"mcp": [{"name": "graf ana", "url": "http://127.0.0.1:1/mcp"}]},
        "tools.mcp[0].name: 'graf ana' must match ^[A-Za-z0-9_-]{1,32}$",
    ),
    (
        {"mcp": [{"name": "g", "url": "http://127.0.0.1:1/mcp", "token": "x"}]},
        "tools.mcp[0].token: unknown key (known: name, command, url, env, timeout_s, connect_timeout_s, include, "
        "trust_annotations)",
    ),
    (
        {"mcp": [{"name": "g", "url": "http://127.0.0.1:1/mcp", "trust_annotations": "yes"}]},
        "tools.mcp[0].trust_annotations: expected true or false, got a string",
    ),
    # zero, negative or infinite seconds are refused wherever a timeout is configured
    ({"commands": [cmd(timeout_s=0)]}, "tools.commands[0].timeout_s: must be positive, got 0"),
    ({"commands": [cmd(timeout_s=-5)]}, "tools.commands[0].timeout_s: must be positive, got -5"),
    (
        {"commands": [cmd(timeout_s=float("inf"))]},
        "tools.commands[0].timeout_s: must be a finite number of seconds, got inf",
    ),
    (
        {"mcp": [{"name": "g", "url": "http://127.0.0.1:1/mcp", "timeout_s": 0}]},
        "tools.mcp[0].timeout_s: must be positive, got 0",
    ),
    (
        {"mcp": [{"name": "g", "url": "http://127.0.0.1:1/mcp", "connect_timeout_s": -1.5}]},
        "tools.mcp[0].connect_timeout_s: must be positive, got -1.5",
    ),
    ({"timeouts": {"grep_log": 0}}, "tools.timeouts.grep_log: must be positive, got 0"),
    ({"timeouts": {"grep_log": -1}}, "tools.timeouts.grep_log: must be positive, got -1"),
    ({"timeouts": {"grep_log": True}}, "tools.timeouts.grep_log: expected a number of seconds, got a boolean"),
    ({"timeouts": {"no_such_tool": 5}}, "tools.timeouts.no_such_tool: no such tool"),
    ({"timeouts": 30}, "tools.timeouts: expected a table, got an integer"),
    # runbook commands never get the bot's own secrets
    (
        {"commands": [cmd(env=["KUBECONFIG", "SLACK_BOT_TOKEN"])]},
        "tools.commands[0].env[1]: SLACK_BOT_TOKEN is the bot's own secret; runbook commands never get it",
    ),
    (
        {"commands": [cmd(env=["ANTHROPIC_API_KEY"])]},
        "tools.commands[0].env[0]: ANTHROPIC_API_KEY is the bot's own secret; runbook commands never get it",
    ),
    (
        {"commands": [cmd(env=["KUBE CONFIG"])]},
        "tools.commands[0].env[0]: 'KUBE CONFIG' is not an environment variable name",
    ),
    ({"commands": [cmd(env="KUBECONFIG")]}, "tools.commands[0].env: expected a list of strings, got a string"),
]


@pytest.mark.parametrize(
    ("table", "message"), BAD_CONFIGS, ids=[m.split(":")[0] + f"-{i}" for i, (_, m) in enumerate(BAD_CONFIGS)]
)
async def test_config_error_names_its_location(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolConfigError) as e:
        await build_registry(table)
    assert str(e.value) == message


async def test_timeouts_table_sets_a_tools_timeout() -> None:
    registry = await build_registry({"timeouts": {"grep_log": 5, "check_disk": 2.5}})
    assert [(t.name, t.timeout_s) for t in registry if t.name in ("grep_log", "check_disk", "tail_log")] == [
        ("check_disk", 2.5),
        ("tail_log", 60.0),
        ("grep_log", 5.0),
    ]


async def test_a_module_tool_without_a_category_is_refused_at_load_time_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lax_tools.py").write_text(
        textwrap.dedent('''
        from tools import tool

        @tool(parallel=True)
        def peek_queue(name: str) -> str:
            """Peek at a queue."""
            return name
    ''')
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ToolConfigError) as e:
        await build_registry({"modules": ["lax_tools"]})
    assert str(e.value).startswith(
        "tools.modules[0]: cannot import 'lax_tools': TypeError: peek_queue: @tool needs an explicit category"
    )
    sys.modules.pop("lax_tools", None)


async def test_destructive_module_tool_without_dry_run_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "risky_tools.py").write_text(
        textwrap.dedent('''
        from tools import Category, tool

        @tool(category=Category.DESTRUCTIVE)
        def drop_table(table: str, *, confirmed_by: str) -> str:
            """Drop a table."""
            return table
    ''')
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ToolConfigError) as e:
        await build_registry({"modules": ["risky_tools"]})
    assert str(e.value) == (
        "tools.modules[0]: drop_table is destructive but has no dry run: add a @drop_table.dry_run preview"
    )
    sys.modules.pop("risky_tools", None)


async def test_every_problem_of_the_tools_table_is_named_at_once() -> None:
    with pytest.raises(ToolConfigError) as e:
        await build_registry(
            {
                "logs": {"dir": ["/var/log"]},
                "http": {"timeout_s": 0},
                "commands": [cmd(category="safe", timeout_s="30s")],
            }
        )
    assert e.value.problems == [
        "tools.logs.dir: unknown key (known: dirs)",
        "tools.http.timeout_s: must be positive, got 0",
        "tools.commands[0].category: 'safe' is not a category (read_only, mutating, destructive)",
        "tools.commands[0].timeout_s: expected a number of seconds, got a string",
    ]
