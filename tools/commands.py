"""Runbook commands from config: an argv template whose {params} are checked against patterns, run without a shell."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.registry import DEFAULT_TIMEOUT_S, Category, Implementation, Tool, ToolError, truncate_output

# `{name}` is a placeholder; `{{` and `}}` are literal braces.
PLACEHOLDER_RE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class CommandParam:
    """One runbook parameter: always a required string that must fullmatch `pattern`."""

    pattern: str
    description: str = ""


@dataclass(frozen=True)
class RunbookCommand:
    """A declared command: `argv` is a template, each `{param}` fills part or all of one argv element."""

    name: str
    description: str
    argv: tuple[str, ...]
    params: Mapping[str, CommandParam] = field(default_factory=dict)
    category: Category = Category.MUTATING
    timeout_s: float = DEFAULT_TIMEOUT_S
    cwd: Path | None = None


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


async def run_argv(argv: list[str], *, cwd: Path | None = None) -> tuple[int, str, str]:
    """Run argv (no shell) in its own process group; if the caller is cancelled (timeout), kill the group."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as e:
        raise ToolError(f"cannot run {argv[0]!r}: {e.strerror or e}") from e
    try:
        out, err = await proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.shield(proc.wait())
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def format_result(argv: list[str], code: int, out: str, err: str, *, confirmed_by: str | None = None) -> str:
    header = f"exit code {code}"
    if confirmed_by:
        header += f" (approved by {confirmed_by})"
    parts = [header, f"$ {shlex.join(argv)}"]
    half = 5_500  # each stream gets its share of the output budget
    parts.append("stdout:\n" + (truncate_output(out.rstrip("\n"), half) if out.strip() else "(empty)"))
    if err.strip():
        parts.append("stderr:\n" + truncate_output(err.rstrip("\n"), half))
    return "\n".join(parts)


def command_tool(cmd: RunbookCommand) -> Tool:
    """The Tool for a runbook command; mutating and destructive ones record who approved them."""
    needs_approver = cmd.category is not Category.READ_ONLY

    async def run(*, confirmed_by: str | None = None, **values: str) -> str:
        argv = render_argv(cmd, values)
        code, out, err = await run_argv(argv, cwd=cmd.cwd)
        return format_result(argv, code, out, err, confirmed_by=confirmed_by)

    async def preview(**values: str) -> str:
        argv = render_argv(cmd, values)
        return f"no dry-run available; the command would run: $ {shlex.join(argv)}"

    return Tool(
        name=cmd.name,
        description=cmd.description,
        input_schema=command_schema(cmd),
        category=cmd.category,
        parallel=False,
        timeout_s=cmd.timeout_s,
        idempotent=False,
        source="command",
        impl=Implementation(fn=run, parameters=None, takes_confirmed_by=needs_approver),
        preview=Implementation(fn=preview, parameters=None) if cmd.category is Category.DESTRUCTIVE else None,
    )
