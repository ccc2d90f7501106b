"""Runbook commands from config: an argv template whose {params} are checked against patterns, run without a shell.

Every child process opsloop starts (runbook commands, systemctl, tool workers) gets a minimal
environment: BASE_ENV plus the names a command's config lists, never the bot's own secrets.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.config.reader import Reader, setting
from tools.process import BOT_SECRETS, child_env, kill_group
from tools.registry import (
    DEFAULT_TIMEOUT_S,
    TOOL_NAME_RE,
    Category,
    Implementation,
    Tool,
    ToolError,
    truncate_output,
)

# `{name}` is a placeholder; `{{` and `}}` are literal braces.
PLACEHOLDER_RE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PARAM_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_STREAM_BYTES = 2 * 1024 * 1024  # per stream of a child's output: the first and last half are kept


def _regex(pattern: str, r: Reader, key: str) -> str | None:
    try:
        re.compile(pattern)
    except re.error as e:
        r.problem(f"invalid regex {pattern!r}: {e}", key)
        return None
    return pattern


@dataclass(frozen=True)
class CommandParam:
    """One runbook parameter: always a required string that must fullmatch `pattern`."""

    pattern: str = setting(
        doc="every value must fullmatch it", why=" (every value is checked against one)", check=_regex
    )
    description: str = setting("", "what the model reads about it", empty_ok=True)


def _tool_name(name: str, r: Reader, key: str) -> str:
    if not TOOL_NAME_RE.fullmatch(name):
        r.problem(f"{name!r} must match ^[a-zA-Z0-9_-]{{1,64}}$", key)
    return name


def _argv(argv: tuple[str, ...], r: Reader, key: str) -> tuple[str, ...]:
    if not argv:
        r.problem("must not be empty", key)
    elif placeholders(argv[0]):
        r.problem("the program itself cannot be a parameter", f"{key}[0]")
    return argv


def _params(params: Mapping[str, CommandParam], r: Reader, key: str) -> Mapping[str, CommandParam]:
    for name in params:
        if not PARAM_NAME_RE.fullmatch(name) or name == "confirmed_by":
            r.problem(f"{name!r} cannot be a parameter name", f"{key}.{name}")
    return params


def _env_names(names: tuple[str, ...], r: Reader, key: str) -> tuple[str, ...]:
    for i, name in enumerate(names):
        if not ENV_NAME_RE.fullmatch(name):
            r.problem(f"{name!r} is not an environment variable name", f"{key}[{i}]")
        elif name in BOT_SECRETS:
            r.problem(f"{name} is the bot's own secret; runbook commands never get it", f"{key}[{i}]")
    return names


@dataclass(frozen=True)
class RunbookCommand:
    """A declared command ([[tools.commands]]): `argv` is a template, each `{param}` fills part or all of one
    argv element."""

    name: str = setting(doc="the tool's name", check=_tool_name)
    description: str = setting(doc="what the model reads about the tool")
    argv: tuple[str, ...] = setting(
        doc="the program and its arguments, run without a shell", key="command", check=_argv
    )
    params: Mapping[str, CommandParam] = setting(doc="the {placeholders} of command", factory=dict, check=_params)
    category: Category = setting(Category.MUTATING, "read_only, mutating or destructive")
    timeout_s: float = setting(DEFAULT_TIMEOUT_S, "the command is killed after it", unit="s")
    cwd: Path | None = None  # the config file's directory
    env: tuple[str, ...] = setting(
        (), "names passed through from the bot's environment (e.g. KUBECONFIG)", check=_env_names
    )


def allows_leading_dash(pattern: str) -> bool:
    """A value may start with '-' only when its pattern itself starts with a literal '-' (after an optional ^)."""
    return pattern.removeprefix("^").startswith(("-", "\\-"))


def placeholders(element: str) -> list[str]:
    """The parameter names used in one argv element, in order."""
    return [m.group(1) for m in PLACEHOLDER_RE.finditer(element) if m.group(1)]


def substitute(element: str, values: Mapping[str, str]) -> str:
    """Fill the placeholders of one argv element; the result stays one element whatever the values hold."""

    def fill(m: re.Match[str]) -> str:
        if m.group(1):
            return values[m.group(1)]
        return m.group(0)[0]  # "{{" -> "{", "}}" -> "}"

    return PLACEHOLDER_RE.sub(fill, element)


def render_argv(cmd: RunbookCommand, values: Mapping[str, str]) -> list[str]:
    """The argv to execute, after checking each value against its parameter's pattern."""
    for name, param in cmd.params.items():
        value = values[name]
        if not re.fullmatch(param.pattern, value):
            raise ToolError(f"{name}: {value!r} does not match the required pattern {param.pattern}")
        if value.startswith("-") and not allows_leading_dash(param.pattern):
            raise ToolError(
                f"{name}: {value!r} starts with '-', so the command would read it as an option; "
                "refused (a parameter whose pattern starts with '-' may take such values)"
            )
    return [substitute(element, values) for element in cmd.argv]


def command_schema(cmd: RunbookCommand) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for name, param in cmd.params.items():
        prop: dict[str, Any] = {"type": "string", "pattern": param.pattern}
        if param.description:
            prop["description"] = param.description
        properties[name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if properties:
        schema["required"] = list(properties)
    schema["additionalProperties"] = False
    return schema


async def run_argv(argv: list[str], *, cwd: Path | None = None, env: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """Run argv (no shell, child_env(env)) in its own process group; if the caller is cancelled (timeout),
    kill the group. Each output stream is kept to MAX_STREAM_BYTES (its head and tail, with a note)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=child_env(env),
            start_new_session=True,
        )
    except OSError as e:
        raise ToolError(f"cannot run {argv[0]!r}: {e.strerror or e}") from e
    assert proc.stdout is not None and proc.stderr is not None
    try:
        out, err, _ = await asyncio.gather(_read_bounded(proc.stdout), _read_bounded(proc.stderr), proc.wait())
    except BaseException:
        await kill_group(proc)
        raise
    assert proc.returncode is not None
    return proc.returncode, out, err


async def _read_bounded(stream: asyncio.StreamReader, limit: int = MAX_STREAM_BYTES) -> str:
    """All of a stream read, at most `limit` bytes of it kept: the head and the tail, the middle as a note."""
    head = bytearray()
    tail = bytearray()
    total = 0
    half = limit // 2
    while chunk := await stream.read(64 * 1024):
        total += len(chunk)
        room = half - len(head)
        if room > 0:
            head += chunk[:room]
            chunk = chunk[room:]
        tail += chunk
        if len(tail) > 2 * half:
            del tail[:-half]
    if total <= limit:
        return (bytes(head) + bytes(tail)).decode(errors="replace")
    tail = tail[-half:]
    note = f"\n… [{total - len(head) - len(tail)} bytes of {total} not kept] …\n"
    return head.decode(errors="replace") + note + tail.decode(errors="replace")


def format_result(argv: list[str], code: int, out: str, err: str, *, confirmed_by: str | None = None) -> str:
    header = f"exit code {code}"
    if confirmed_by:
        header += f" (approved by {confirmed_by})"
    parts = [header, f"$ {shlex.join(argv)}"]
    parts.append("stdout:\n" + (truncate_output(out.rstrip("\n"), _STREAM_CHARS) if out.strip() else "(empty)"))
    if err.strip():
        parts.append("stderr:\n" + truncate_output(err.rstrip("\n"), _STREAM_CHARS))
    return "\n".join(parts)


_STREAM_CHARS = 5_500  # each of stdout and stderr keeps this much of the output budget


def command_description(cmd: RunbookCommand) -> str:
    """The config's description, then what opsloop knows of every command: how it runs, what it returns, limits."""
    params = "; each parameter must match its pattern" if cmd.params else ""
    approval = "" if cmd.category is Category.READ_ONLY else " and needs a person's approval"
    template = " ".join(cmd.argv)  # the template as configured, {placeholders} and all
    return (
        f"{cmd.description.strip()}\n\nRuns `{template}` without a shell{params}. Returns the exit "
        f"code, the command line and its stdout and stderr, each cut to {_STREAM_CHARS:,} characters (head and "
        f"tail kept). It is killed after {cmd.timeout_s:g} s{approval}."
    )


def command_tool(cmd: RunbookCommand) -> Tool:
    """The Tool for a runbook command; mutating and destructive ones record who approved them."""
    needs_approver = cmd.category is not Category.READ_ONLY

    async def run(*, confirmed_by: str | None = None, **values: str) -> str:
        argv = render_argv(cmd, values)
        code, out, err = await run_argv(argv, cwd=cmd.cwd, env=cmd.env)
        return format_result(argv, code, out, err, confirmed_by=confirmed_by)

    async def preview(**values: str) -> str:
        argv = render_argv(cmd, values)
        return f"no dry-run available; the command would run: $ {shlex.join(argv)}"

    return Tool(
        name=cmd.name,
        description=command_description(cmd),
        input_schema=command_schema(cmd),
        category=cmd.category,
        parallel=False,
        timeout_s=cmd.timeout_s,
        idempotent=False,
        source="command",
        impl=Implementation(fn=run, parameters=None, takes_confirmed_by=needs_approver),
        preview=Implementation(fn=preview, parameters=None) if cmd.category is Category.DESTRUCTIVE else None,
    )
