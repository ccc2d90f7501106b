"""The tools of the end-to-end incident scenario: web-03's /var is full.

Loaded by the bot like any tool module (`[tools] modules = ["tests.support.incident_tools"]`).
Nothing here touches a real host: the outputs are fixed, and every call that really
ran is appended to `EXECUTIONS` so a test can assert what ran and who confirmed it.

`hold(tool)` makes the next calls of a tool wait until the test releases them, so a
test can act while the run is provably busy inside that tool (no sleeps).
`reset()` clears both; the harness calls it before each test.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from tools import Category, PermissionDenied, ToolError, tool
from tools.api import BadCall

__all__ = ["check_disk", "clean_logs", "list_large_files", "read_secret", "restart_service"]

DISK_TABLES = {
    "web-03": (
        "mount  size   used   avail  use%\n"
        "/      20G    7.1G   12.9G  36%\n"
        "/var   50G    49.8G  0.2G   100%\n"
        "/tmp   5G     0.3G   4.7G   6%"
    ),
}
HEALTHY_DISK = "mount  size   used   avail  use%\n/      20G    6.0G   14.0G  30%\n/var   50G    21.0G  29.0G  42%"
LARGE_FILES = (
    "19.8G  /var/log/nginx (212 rotated files: access.log.2.gz … access.log.213.gz)\n"
    "1.2G   /var/log/nginx/access.log\n"
    "0.4G   /var/lib/postgresql/wal"
)
CLEAN_PREVIEW = "would delete 212 files, 19.8 GB"
PREVIEW = {"clean_logs": CLEAN_PREVIEW}  # a test may change what the dry run finds


UNREACHABLE = frozenset({"db-01", "db-02", "db-03"})  # check_disk fails there: an error the model cannot fix


@dataclass(frozen=True)
class Execution:
    """One call that really ran (dry runs are not executions)."""

    tool: str
    args: dict[str, Any]
    confirmed_by: str | None


EXECUTIONS: list[Execution] = []


@dataclass
class Gate:
    """Holds calls of one tool: `entered` is set when a call arrives, the call waits for `release()`."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self._released.set()

    async def wait_entered(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109 (test helper)
        async with asyncio.timeout(timeout):
            await self.entered.wait()


_gates: dict[str, Gate] = {}


def hold(tool_name: str) -> Gate:
    """From now on, calls of `tool_name` wait at their start until the gate is released."""
    gate = _gates[tool_name] = Gate()
    return gate


def reset() -> None:
    EXECUTIONS.clear()
    PREVIEW["clean_logs"] = CLEAN_PREVIEW
    for gate in _gates.values():
        gate.release()  # never leave a call stuck behind a gate from an earlier test
    _gates.clear()


def ran(tool_name: str) -> list[Execution]:
    return [e for e in EXECUTIONS if e.tool == tool_name]


async def _enter(tool_name: str, args: dict[str, Any], confirmed_by: str | None = None) -> None:
    if gate := _gates.get(tool_name):
        gate.entered.set()
        await gate._released.wait()
    EXECUTIONS.append(Execution(tool_name, args, confirmed_by))


@tool(category=Category.READ_ONLY, parallel=True)
async def check_disk(host: str) -> str:
    """Disk usage per mount on a host (size, used, available, use%).

    Args:
        host: the host name, e.g. web-03
    """
    await _enter("check_disk", {"host": host})
    if host in UNREACHABLE:
        raise ToolError(f"ssh: connect to host {host} port 22: Connection refused")
    return f"{host}:\n{DISK_TABLES.get(host, HEALTHY_DISK)}"


@tool(category=Category.READ_ONLY, parallel=True)
async def list_large_files(host: str, path: str) -> str:
    """The largest files and directories under a path on a host.

    Args:
        host: the host name
        path: the directory to look in, e.g. /var
    """
    await _enter("list_large_files", {"host": host, "path": path})
    if not path.startswith("/"):
        raise ToolError(f"path must be absolute, got {path!r}")
    if path.startswith("/nonexistent"):
        raise BadCall(f"no such directory: {path} on {host}")
    return LARGE_FILES if host == "web-03" else f"nothing over 100M under {path} on {host}"


@tool(category=Category.DESTRUCTIVE)
async def clean_logs(host: str, path: str, older_than_days: int = 7, *, confirmed_by: str) -> str:
    """Delete rotated log files older than N days under a path on a host.

    Args:
        host: the host name
        path: the log directory, e.g. /var/log/nginx
        older_than_days: only files older than this many days are deleted
    """
    await _enter("clean_logs", {"host": host, "path": path, "older_than_days": older_than_days}, confirmed_by)
    return f"deleted 212 files under {path} on {host}, freed 19.8 GB; /var now 61% used"


@clean_logs.dry_run
async def _clean_logs_preview(host: str, path: str, older_than_days: int = 7) -> str:
    return PREVIEW["clean_logs"]


@tool(category=Category.MUTATING)
async def restart_service(host: str, unit: str, *, confirmed_by: str) -> str:
    """Restart a systemd unit on a host.

    Args:
        host: the host name
        unit: the systemd unit, e.g. nginx.service
    """
    await _enter("restart_service", {"host": host, "unit": unit}, confirmed_by)
    return f"{unit} restarted on {host}; active (running)"


@tool(category=Category.READ_ONLY)
async def read_secret(name: str) -> str:
    """Read a secret from the vault (always refused by policy in this scenario).

    Args:
        name: the secret's name
    """
    await _enter("read_secret", {"name": name})
    raise PermissionDenied(f"policy forbids reading secret {name!r} from an incident bot")
