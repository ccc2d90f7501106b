"""Tools from MCP servers (stdio or streamable HTTP), kept connected for the registry's lifetime."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from bot.config.reader import Reader, setting
from tools.registry import (
    DEFAULT_TIMEOUT_S,
    Category,
    Implementation,
    Tool,
    ToolError,
    argument_echo,
    exception_text,
)

log = logging.getLogger(__name__)

SERVER_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")
_MAX_PAGES = 100
_CLOSE_TIMEOUT_S = 10.0


def _server_name(name: str, r: Reader, key: str) -> str:
    if not SERVER_NAME_RE.fullmatch(name):
        r.problem(f"{name!r} must match ^[A-Za-z0-9_-]{{1,32}}$", key)
    return name


def _not_empty(command: tuple[str, ...], r: Reader, key: str) -> tuple[str, ...]:
    if not command:
        r.problem("must not be empty", key)
    return command


@dataclass(frozen=True)
class MCPServerSpec:
    """One [[tools.mcp]] entry: a stdio `command` or a streamable-HTTP `url`."""

    name: str = setting(doc="the prefix of its tools' names (<name>__<tool>)", check=_server_name)
    command: tuple[str, ...] | None = setting(None, "the server program and its arguments (stdio)", check=_not_empty)
    url: str | None = setting(None, "the server's streamable-HTTP endpoint", kind="url")
    env: Mapping[str, str] = setting(doc="the stdio server's environment", factory=dict, empty_ok=True)
    cwd: Path | None = None  # the config file's directory
    timeout_s: float = setting(DEFAULT_TIMEOUT_S, "per tool call", unit="s")
    connect_timeout_s: float = setting(30.0, "to connect and list the tools", unit="s")
    include: tuple[str, ...] | None = setting(None, "only these of the server's tools; None = all")
    trust_annotations: bool = setting(False, "may the server's readOnlyHint let a tool skip approval?")


def tool_name(server: str, name: str) -> str:
    """`<server>__<tool>`, sanitized to what the Messages API accepts (^[a-zA-Z0-9_-]{1,64}$)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", f"{server}__{name}")[:64]


def category_of(annotations: mcp_types.ToolAnnotations | None, *, trusted: bool = False) -> Category:
    """A server's hints are its own claims, so by default they never let a tool skip approval.

    readOnlyHint true: read_only if the config trusts the server, else mutating. destructiveHint false:
    mutating. Anything else: destructive (the MCP spec's default for destructiveHint is true).
    """
    read_only = annotations is not None and annotations.read_only_hint is True
    if read_only and trusted:
        return Category.READ_ONLY
    if read_only or (annotations is not None and annotations.destructive_hint is False):
        return Category.MUTATING
    return Category.DESTRUCTIVE


def with_operator_category(t: Tool, category: Category) -> Tool:
    """An MCP tool at the category [tools.categories] names, up or down: the operator's word outranks the server's."""
    preview = Implementation(fn=argument_echo(t.name), parameters=None) if category is Category.DESTRUCTIVE else None
    return dataclasses.replace(
        t, category=category, parallel=category is Category.READ_ONLY, preview=preview, has_dry_run=preview is not None
    )


def result_text(result: mcp_types.CallToolResult) -> str:
    """The text of a tool result: text blocks as they are, other blocks as a one-line mention."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.EmbeddedResource):
            res = block.resource
            if isinstance(res, mcp_types.TextResourceContents):
                parts.append(res.text)
            else:
                parts.append(f"[binary resource {res.uri}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link: {block.uri}]")
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            parts.append(f"[{block.type} ({block.mime_type}) not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)


class MCPConnection:
    """One connected server. A dedicated task enters and exits the SDK client (anyio scopes must be left by
    the task that entered them), so close() can be awaited from any task."""

    def __init__(self, spec: MCPServerSpec) -> None:
        self.spec = spec
        self._client: Client | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failure: str | None = None

    def _target(self) -> StdioServerParameters | str:
        if self.spec.url is not None:
            return self.spec.url
        assert self.spec.command
        cmd, *args = self.spec.command
        return StdioServerParameters(
            command=cmd,
            args=list(args),
            env=dict(self.spec.env) or None,
            cwd=self.spec.cwd,
        )

    async def start(self) -> list[mcp_types.Tool]:
        """Connect, list the server's tools, and keep the session open until close()."""
        ready: asyncio.Future[list[mcp_types.Tool]] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._own(ready), name=f"mcp:{self.spec.name}")
        try:
            return await asyncio.wait_for(asyncio.shield(ready), self.spec.connect_timeout_s)
        except BaseException:
            await self.close()
            raise

    async def _own(self, ready: asyncio.Future[list[mcp_types.Tool]]) -> None:
        try:
            async with Client(self._target(), read_timeout_seconds=None) as client:
                listing: list[mcp_types.Tool] = []
                cursor: str | None = None
                for _ in range(_MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    listing.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self._client = client
                ready.set_result(listing)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except Exception as e:  # anyio wraps task-group failures in ExceptionGroups
            if not ready.done():
                ready.set_exception(e)
            else:
                self._failure = describe_error(e)
                log.warning("MCP server %s disconnected: %s", self.spec.name, self._failure)
        finally:
            self._client = None

    async def call(self, name: str, args: Mapping[str, Any]) -> str:
        client = self._client
        if client is None:
            reason = f": {self._failure}" if self._failure else ""
            raise ToolError(f"MCP server {self.spec.name!r} is not connected{reason}")
        try:
            result = await client.call_tool(name, dict(args))
        except MCPError as e:
            raise ToolError(f"MCP server {self.spec.name!r}: {e.error.message}") from e
        except Exception as e:  # a broken pipe or closed stream: the server went away mid-call
            raise ToolError(f"MCP server {self.spec.name!r}: {describe_error(e)}") from e
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or f"{name} failed on MCP server {self.spec.name!r}")
        return text

    async def close(self) -> None:
        self._stop.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(task, _CLOSE_TIMEOUT_S)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
        except Exception:  # failures were reported by start() or logged by _own()
            pass


def describe_error(e: BaseException) -> str:
    """A one-line reason for a failed connection or call (unwraps anyio's exception groups)."""
    if isinstance(e, BaseExceptionGroup) and e.exceptions:
        return describe_error(e.exceptions[0])
    return exception_text(e)


def _input_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(schema)
    out.setdefault("type", "object")
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False  # unknown arguments are refused here, not silently dropped
    return out


def _caller(conn: MCPConnection, remote_name: str) -> Callable[..., Awaitable[str]]:
    async def call(**args: Any) -> str:
        return await conn.call(remote_name, args)

    return call


def mcp_tools(conn: MCPConnection, listing: list[mcp_types.Tool]) -> list[Tool]:
    """Tools for a connected server's listing (the ones `include` selects)."""
    spec = conn.spec
    tools: list[Tool] = []
    for remote in listing:
        if spec.include is not None and remote.name not in spec.include:
            continue
        if remote.input_schema.get("type", "object") != "object":
            log.warning("skipping MCP tool %s/%s: its input schema is not an object", spec.name, remote.name)
            continue
        schema = _input_schema(remote.input_schema)
        try:
            jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
        except jsonschema.SchemaError as e:
            log.warning("skipping MCP tool %s/%s: invalid input schema: %s", spec.name, remote.name, e.message)
            continue
        category = category_of(remote.annotations, trusted=spec.trust_annotations)
        name = tool_name(spec.name, remote.name)
        hinted = bool(spec.trust_annotations and remote.annotations and remote.annotations.idempotent_hint)
        idempotent = category is Category.READ_ONLY or hinted
        tools.append(
            Tool(
                name=name,
                description=remote.description or remote.title or remote.name,
                input_schema=schema,
                category=category,
                parallel=category is Category.READ_ONLY,
                timeout_s=spec.timeout_s,
                idempotent=idempotent,
                source=f"mcp:{spec.name}",
                impl=Implementation(fn=_caller(conn, remote.name), parameters=None),
                preview=(
                    Implementation(fn=argument_echo(remote.name), parameters=None)
                    if category is Category.DESTRUCTIVE
                    else None
                ),
            )
        )
    return tools
