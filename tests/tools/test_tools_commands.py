"""Runbook commands: argv templates, pattern-checked params, no shell, timeouts that kill."""

from __future__ import annotations

import ast
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tools import Category, PermissionDenied, Tool, ToolError
from tools.config import build_registry

PRINT_ARGV = [sys.executable, "-c", "import sys; print(sys.argv[1:])"]


async def command(spec: dict[str, Any], tmp_path: Path | None = None) -> Tool:
    registry = await build_registry({"modules": [], "commands": [spec]}, base_dir=tmp_path)
    (t,) = list(registry)
    return t


def argv_printed(result: str) -> list[str]:
    stdout = result.split("stdout:\n", 1)[1].split("\nstderr:", 1)[0]
    return ast.literal_eval(stdout)


async def test_command_becomes_a_tool_with_a_string_schema() -> None:
    t = await command(
        {
            "name": "restart_api",
            "description": "Restart the API service on a host",
            "command": ["ssh", "{host}", "sudo systemctl restart api"],
            "params": {"host": {"pattern": "^web-[0-9]+$", "description": "host name"}},
            "timeout_s": 30,
        }
    )
    assert (t.name, t.category, t.parallel, t.timeout_s, t.source) == (
        "restart_api",
        Category.MUTATING,
        False,
        30.0,
        "command",
    )
    assert t.api_schema() == {
        "name": "restart_api",
        "description": "Restart the API service on a host\n\nRuns `ssh {host} sudo systemctl restart api` without a "
        "shell; each parameter must match its pattern. Returns the exit code, the command line and its stdout and "
        "stderr, each cut to 5,500 characters (head and tail kept). It is killed after 30 s and needs a person's "
        "approval.",
        "input_schema": {
            "type": "object",
            "properties": {"host": {"type": "string", "pattern": "^web-[0-9]+$", "description": "host name"}},
            "required": ["host"],
            "additionalProperties": False,
        },
    }


@pytest.mark.parametrize("value", ["web-1; rm -rf /", "$(id)", "web-1\nweb-2", "-oProxyCommand=id"])
async def test_injection_attempt_is_refused_by_the_pattern(value: str) -> None:
    t = await command(
        {
            "name": "restart_api",
            "description": "Restart",
            "command": [*PRINT_ARGV, "{host}"],
            "params": {"host": {"pattern": "^web-[0-9]+$"}},
        }
    )
    with pytest.raises(ToolError, match="host"):
        await t.run({"host": value}, confirmed_by="U1")


async def test_pattern_must_match_the_whole_value() -> None:
    # jsonschema's "pattern" only searches; the command itself requires a full match.
    t = await command(
        {
            "name": "show",
            "description": "Show",
            "command": [*PRINT_ARGV, "{host}"],
            "params": {"host": {"pattern": "web-[0-9]+"}},
            "category": "read_only",
        }
    )
    with pytest.raises(ToolError) as e:
        await t.run({"host": "web-1; id"})
    assert str(e.value) == "host: 'web-1; id' does not match the required pattern web-[0-9]+"


@pytest.mark.processes
async def test_value_with_spaces_and_shell_characters_is_one_argv_element() -> None:
    t = await command(
        {
            "name": "echo_args",
            "description": "Echo",
            "command": [*PRINT_ARGV, "{x}", "--msg={y}"],
            "params": {"x": {"pattern": ".*"}, "y": {"pattern": ".*"}},
            "category": "read_only",
        }
    )
    out = await t.run({"x": "a b; $(id) | cat", "y": "two words"})
    assert out.splitlines()[0] == "exit code 0"
    assert argv_printed(out) == ["a b; $(id) | cat", "--msg=two words"]


@pytest.mark.processes
async def test_literal_braces_are_written_doubled() -> None:
    t = await command(
        {
            "name": "braces",
            "description": "Braces",
            "command": [*PRINT_ARGV, "{{x}}", "{{{x}}}"],
            "params": {"x": {"pattern": "[a-z]+"}},
            "category": "read_only",
        }
    )
    assert argv_printed(await t.run({"x": "abc"})) == ["{x}", "{abc}"]


@pytest.mark.processes
async def test_mutating_command_needs_and_records_its_approver() -> None:
    t = await command(
        {
            "name": "deploy",
            "description": "Deploy",
            "command": [*PRINT_ARGV, "{version}"],
            "params": {"version": {"pattern": r"v\d+"}},
        }
    )
    with pytest.raises(PermissionDenied):
        await t.run({"version": "v2"})
    out = await t.run({"version": "v2"}, confirmed_by="U024BE7LH")
    assert out.splitlines()[0] == "exit code 0 (approved by U024BE7LH)"
    assert out.splitlines()[1] == f"$ {sys.executable} -c 'import sys; print(sys.argv[1:])' v2"


@pytest.mark.processes
async def test_exit_code_and_stderr_are_reported() -> None:
    t = await command(
        {
            "name": "fail",
            "description": "Fail",
            "category": "read_only",
            "command": [sys.executable, "-c", "import sys; print('partial'); sys.exit('boom')"],
        }
    )
    assert await t.run({}) == (
        f"exit code 1\n$ {sys.executable} -c 'import sys; print('\"'\"'partial'\"'\"'); sys.exit('\"'\"'boom'\"'\"')'"
        "\nstdout:\npartial\nstderr:\nboom"
    )


@pytest.mark.processes
async def test_missing_program_is_a_tool_error() -> None:
    t = await command(
        {"name": "ghost", "description": "Ghost", "category": "read_only", "command": ["/nonexistent/ghost-binary"]}
    )
    with pytest.raises(ToolError, match="cannot run '/nonexistent/ghost-binary'"):
        await t.run({})


def gone(pid: int, within: float = 5.0) -> bool:
    """The process has exited (or is a zombie nobody reaped) within `within` seconds. SIGKILL is delivered
    asynchronously: a grandchild orphaned by the kill may still be running for a moment after killpg returns."""
    deadline = time.monotonic() + within
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


@pytest.mark.processes
async def test_timeout_kills_the_process_and_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = (
        "import os, subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "child.wait()\n"
    )
    t = await command(
        {
            "name": "slow",
            "description": "Slow",
            "category": "read_only",
            "timeout_s": 6,
            "command": [sys.executable, "-c", script],
        }
    )
    with pytest.raises(ToolError) as e:
        await t.run({})
    assert str(e.value) == "slow timed out after 6s (its process was killed)"
    parent, child = map(int, pids.read_text().split())
    assert gone(parent) and gone(child)


async def test_destructive_command_previews_the_exact_argv() -> None:
    t = await command(
        {
            "name": "drop_cache",
            "description": "Drop a cache",
            "category": "destructive",
            "command": ["redis-cli", "-h", "{host}", "FLUSHDB"],
            "params": {"host": {"pattern": "cache-[0-9]"}},
        }
    )
    assert (
        await t.dry_run({"host": "cache-1"})
        == "no dry-run available; the command would run: $ redis-cli -h cache-1 FLUSHDB"
    )


@pytest.mark.processes
async def test_command_runs_in_the_config_directory(tmp_path: Path) -> None:
    t = await command(
        {
            "name": "cwd",
            "description": "Where",
            "category": "read_only",
            "command": [sys.executable, "-c", "import os; print(os.getcwd())"],
        },
        tmp_path,
    )
    assert (await t.run({})).split("stdout:\n")[1].strip() == str(tmp_path)


@pytest.mark.processes
async def test_a_command_gets_a_minimal_environment_without_the_bots_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-fake-bot-token")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake")
    monkeypatch.setenv("SOME_OTHER_SETTING", "not for children")
    monkeypatch.setenv("KUBECONFIG", "/etc/kube/incident.yaml")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    t = await command(
        {"name": "show_env", "description": "Env", "command": ["env"], "category": "read_only", "env": ["KUBECONFIG"]}
    )
    out = await t.run({})
    names = {line.split("=", 1)[0] for line in out.split("stdout:\n", 1)[1].splitlines() if "=" in line}
    assert "xoxb-fake-bot-token" not in out and "sk-ant-fake" not in out
    assert names <= {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "KUBECONFIG"}
    assert "KUBECONFIG=/etc/kube/incident.yaml" in out and "PATH=/usr/bin:/bin" in out


@pytest.mark.parametrize("value", ["-rf", "--output=/etc/passwd", "-"])
async def test_a_value_starting_with_a_dash_is_refused_as_option_injection(value: str) -> None:
    t = await command(
        {
            "name": "show",
            "description": "Show",
            "command": [*PRINT_ARGV, "{name}"],
            "params": {"name": {"pattern": ".+"}},
            "category": "read_only",
        }
    )
    with pytest.raises(ToolError) as e:
        await t.run({"name": value})
    assert str(e.value) == (
        f"name: {value!r} starts with '-', so the command would read it as an option; refused "
        "(a parameter whose pattern starts with '-' may take such values)"
    )


@pytest.mark.parametrize("pattern", ["-[0-9]+[mh]", "^-[0-9]+[mh]", r"\-[0-9]+[mh]"])
@pytest.mark.processes
async def test_a_pattern_starting_with_a_dash_allows_a_leading_dash(pattern: str) -> None:
    t = await command(
        {
            "name": "since",
            "description": "Since",
            "command": [*PRINT_ARGV, "--since={ago}"],
            "params": {"ago": {"pattern": pattern}},
            "category": "read_only",
        }
    )
    assert argv_printed(await t.run({"ago": "-30m"})) == ["--since=-30m"]


async def test_huge_output_is_kept_to_its_head_and_tail() -> None:
    from tools.commands import MAX_STREAM_BYTES, _read_bounded

    stream = asyncio.StreamReader()
    stream.feed_data(b"H" + b"x" * (3 * MAX_STREAM_BYTES) + b"T")
    stream.feed_eof()
    kept = await _read_bounded(stream)
    total = 3 * MAX_STREAM_BYTES + 2
    assert kept.startswith("Hxx") and kept.endswith("xxT")
    assert f"\n… [{total - MAX_STREAM_BYTES} bytes of {total} not kept] …\n" in kept
    assert len(kept) < MAX_STREAM_BYTES + 100
