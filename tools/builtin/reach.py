"""Where a host tool runs: `self` (this machine) or an inventory host. Shared by tools/builtin/host.py,
log_files.py and services.py.

A host tool is written once, as fixed commands (`run`): on an inventory host they go over the SSH pool, on this
machine the very same command line goes to a local `sh`, so the output is the same wherever it ran. Either way
the command is bounded by tools.remote.command (every argument quoted, `timeout` and `head -c` around it).

`target(host, ctx)` is the only way a tool turns the model's `host` into something it can reach: an inventory
Host, or None for this machine. Any other name is refused by Inventory.resolve (naming the closest inventory
names) before any connection exists; so is no name at all when an inventory is configured.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Sequence
from typing import Any

from tools.api import ToolContext, ToolError
from tools.process import communicate
from tools.remote.command import KILLED_BY_TIMEOUT, Result, remote_command
from tools.remote.inventory import SELF, Host, Inventory

# Tools whose `host` is where to check from, the bot by default: it stays optional when [[hosts]] are configured.
FROM_THE_BOT = frozenset({"check_url", "dns_lookup", "tcp_check", "tls_check"})
DESCRIBED_HOSTS_MAX = 10  # up to this many inventory names are listed in the host tools' descriptions
HOST_HELP = (
    'the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when '
    '[[hosts]] are configured; without them it defaults to "self".'
)


def target(host: str | None, ctx: ToolContext) -> Host | None:
    """The inventory host `host` names, or None for this machine; ToolError for any other name, and for no name
    when an inventory is configured."""
    inventory = ctx.resource(Inventory) or Inventory()
    found = inventory.resolve(host)
    if found is not None and _pool(ctx) is None:  # an inventory without a pool: a context built by hand
        raise ToolError(f"{found.name}: no SSH connections are set up in this process")
    return found


def host_name(found: Host | None) -> str:
    """What the output calls the host: the inventory name, or this machine's hostname."""
    return found.name if found is not None else socket.gethostname()


async def run(
    ctx: ToolContext, host: Host | None, argv: Sequence[str], *, timeout_s: float, max_bytes: int = 1024 * 1024
) -> Result:
    """Run the fixed command `argv` on `host` over the pool, or on this machine (None) through the same command
    line in a local `sh`, killed with everything it started if the call is cancelled."""
    if host is not None:
        pool = _pool(ctx)
        assert pool is not None  # target() checked it
        result: Result = await pool.run(host, argv, timeout_s=timeout_s, max_bytes=max_bytes)
        return result
    try:
        command = remote_command(argv, timeout_s=timeout_s, max_bytes=max_bytes)
    except ValueError as e:
        raise ToolError(f"{host_name(None)}: {e}") from None
    started = time.monotonic()
    returncode, out, err = await communicate(["sh", "-c", command])
    code = returncode if returncode is not None and returncode >= 0 else 255
    if code == KILLED_BY_TIMEOUT and time.monotonic() - started >= timeout_s * 0.95:
        raise ToolError(f"{host_name(None)}: {argv[0]} ran past {timeout_s:g}s and was killed")
    return Result.of(code, out, err, max_bytes)


def _pool(ctx: ToolContext) -> Any:
    from tools.remote.pool import SshPool  # asyncssh is imported only when a remote host is named

    return ctx.resource(SshPool)


def failed(host: Host | None, what: str, result: Result) -> ToolError:
    """A command's non-zero exit as the error the model reads (its stderr's first lines)."""
    detail = (result.stderr or result.stdout).strip().splitlines()[:3]
    return ToolError(
        f"{host_name(host)}: {what} failed (exit {result.exit_status})" + (f": {' '.join(detail)}" if detail else "")
    )


def with_hosts(tool: Any, inventory: Inventory | None) -> Any:
    """A built-in Tool whose `host` has no default when an inventory is configured (target() refuses no host,
    naming the inventory), unless the tool checks from the bot (FROM_THE_BOT), and whose description names the
    inventory when it is small (≤ DESCRIBED_HOSTS_MAX hosts). Another module's `host` may mean something else.

    Done once per registry build, so the tool definitions (and the prompt cache) stay the same across runs."""
    props = tool.input_schema.get("properties", {})
    if tool.source != "builtin" or "host" not in props or inventory is None or not inventory.hosts:
        return tool
    host = {k: v for k, v in props["host"].items() if k != "default" or tool.name in FROM_THE_BOT}
    if len(inventory) <= DESCRIBED_HOSTS_MAX:
        names = ", ".join([*inventory.names, SELF])
        host["description"] = f"{host.get('description', HOST_HELP)} Hosts: {names}."
    schema = {**tool.input_schema, "properties": {**props, "host": host}}
    return dataclasses.replace(tool, input_schema=schema)
