"""Where a host tool runs: `localhost` (this machine, the local code in a worker process) or an inventory host
(fixed commands over the SSH pool). Shared by tools/builtin/host.py, logs.py and services.py;
`on_host` is the one local-or-remote dispatch.

`target(host, ctx)` is the only way a tool turns the model's `host` into something it can reach: an inventory
Host, or None for this machine. Any other name is refused by Inventory.resolve (naming the closest inventory
names) before any connection exists.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from tools.api import ToolContext, ToolError
from tools.remote.inventory import LOCALHOST, Host, Inventory

DESCRIBED_HOSTS_MAX = 10  # up to this many inventory names are listed in the host tools' descriptions
HOST_HELP = 'an inventory name (see list_hosts) or "localhost" (the machine opsloop runs on)'


def target(host: str, ctx: ToolContext) -> Host | None:
    """The inventory host `host` names, or None for this machine; ToolError for any other name."""
    inventory = ctx.resource(Inventory) or Inventory()
    found = inventory.resolve(host)
    if found is not None and _pool(ctx) is None:  # an inventory without a pool: a context built by hand
        raise ToolError(f"{found.name}: no SSH connections are set up in this process")
    return found


def host_name(found: Host | None) -> str:
    """What the output calls the host: the inventory name, or this machine's hostname."""
    return found.name if found is not None else socket.gethostname()


async def remote(
    ctx: ToolContext, host: Host, argv: Sequence[str], *, timeout_s: float, max_bytes: int = 1024 * 1024
) -> Any:
    """Run the fixed command `argv` on `host` over the pool (a tools.remote.pool.Result)."""
    pool = _pool(ctx)
    assert pool is not None  # target() checked it
    return await pool.run(host, argv, timeout_s=timeout_s, max_bytes=max_bytes)


def _pool(ctx: ToolContext) -> Any:
    from tools.remote.pool import SshPool  # asyncssh is imported only when a remote host is named

    return ctx.resource(SshPool)


def failed(host: Host, what: str, result: Any) -> ToolError:
    """A remote command's non-zero exit as the error the model reads (its stderr's first lines)."""
    detail = (result.stderr or result.stdout).strip().splitlines()[:3]
    return ToolError(
        f"{host.name}: {what} failed (exit {result.exit_status})" + (f": {' '.join(detail)}" if detail else "")
    )


async def local(
    local_tool: Any,
    args: Mapping[str, Any],
    ctx: ToolContext,
    *,
    role: str = "impl",
    confirmed_by: str | None = None,
    approved_preview: str | None = None,
) -> str:
    """Call the local (sync, isolated) implementation `local_tool` in a worker process killed on cancel."""
    impl = getattr(local_tool, role)
    return str(await impl.call(dict(args), ctx, confirmed_by, approved_preview))


async def on_host(
    host: str,
    ctx: ToolContext,
    local_tool: Any,
    args: Mapping[str, Any],
    remote_call: Callable[[Host], Awaitable[str]],
    *,
    role: str = "impl",
    confirmed_by: str | None = None,
    approved_preview: str | None = None,
) -> str:
    """The one host dispatch of the host tools: `local_tool` (its `role`) in a worker on this machine, or
    `remote_call` with the inventory Host `host` names; any other name is refused before anything runs."""
    found = target(host, ctx)
    if found is None:
        return await local(
            local_tool, args, ctx, role=role, confirmed_by=confirmed_by, approved_preview=approved_preview
        )
    return await remote_call(found)


def describe_hosts(schema: dict[str, Any], inventory: Inventory | None) -> dict[str, Any]:
    """`schema` with its `host` description naming the inventory when it is small (≤ DESCRIBED_HOSTS_MAX hosts).

    Done once per registry build, so the tool definitions (and the prompt cache) stay the same across runs."""
    props = schema.get("properties", {})
    if "host" not in props or inventory is None or not 0 < len(inventory) <= DESCRIBED_HOSTS_MAX:
        return schema
    names = ", ".join([*inventory.names, LOCALHOST])
    host = {**props["host"], "description": f"{props['host'].get('description', HOST_HELP)} Hosts: {names}."}
    return {**schema, "properties": {**props, "host": host}}


def with_hosts(tool: Any, inventory: Inventory | None) -> Any:
    """A built-in Tool whose `host` parameter description lists a small inventory (see describe_hosts)."""
    if tool.source != "builtin":  # another module's `host` may mean something else
        return tool
    schema = describe_hosts(tool.input_schema, inventory)
    return tool if schema is tool.input_schema else dataclasses.replace(tool, input_schema=schema)
