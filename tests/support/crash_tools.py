"""Tools for the crash and rolling-deploy tests: every real execution is counted across process deaths.

Loaded by `opsloop run` like any tool module (`[tools] modules = ["tests.support.crash_tools"]`).
Each mutating/destructive call appends a JSON line to the file named by
``OPSLOOP_CRASH_LOG`` (opened with O_APPEND and fsynced, so a SIGKILL right after
cannot lose it): ``start`` when the call begins, ``done`` when it returns. The test
process reads the file to count executions per ``change`` (a unique argument the
scripted model gives each call), whatever happened to the bot processes.

A call can die in its middle: when the file named by ``OPSLOOP_CRASH_KILL`` holds the
call's ``change``, the tool logs ``start``, removes that file and SIGKILLs its own
process -- a crash inside a mutating tool, at an exact point, without sleeps.

A call can also be held in its middle: while the file named by ``OPSLOOP_CRASH_HOLD``
holds the call's ``change``, the call (after logging ``start``) waits until the test
removes that file (at most a minute), so a test can act while a run is provably busy
inside a change.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tools import Category, tool

__all__ = ["check_health", "drain_node", "executions", "restart_service"]

LOG_ENV = "OPSLOOP_CRASH_LOG"
KILL_ENV = "OPSLOOP_CRASH_KILL"
HOLD_ENV = "OPSLOOP_CRASH_HOLD"
HOLD_MAX_SECONDS = 60.0


def _append(record: dict[str, Any]) -> None:
    """One line, durably: O_APPEND keeps concurrent writers' lines whole, fsync survives SIGKILL."""
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(record, sort_keys=True) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _die_here(change: str) -> bool:
    """True (once) when the test asked this call to crash its process in the middle."""
    path = os.environ.get(KILL_ENV)
    if not path:
        return False
    try:
        wanted = Path(path).read_text().strip()
    except FileNotFoundError:
        return False
    if wanted != change:
        return False
    os.unlink(path)
    return True


def _hold_here(change: str) -> None:
    """Wait while the hold file names this call (the test deletes it to let the call go on)."""
    path = Path(os.environ.get(HOLD_ENV) or "/nonexistent")
    deadline = time.monotonic() + HOLD_MAX_SECONDS
    while time.monotonic() < deadline:
        try:
            if path.read_text().strip() != change:
                return
        except FileNotFoundError:
            return
        time.sleep(0.01)  # this tool runs in a worker thread; the test owns the file


def _execute(tool_name: str, change: str, confirmed_by: str) -> str:
    record = {"tool": tool_name, "change": change, "by": confirmed_by, "pid": os.getpid()}
    _append({**record, "event": "start"})
    if _die_here(change):
        os.kill(os.getpid(), signal.SIGKILL)
    _hold_here(change)
    _append({**record, "event": "done"})
    return f"{tool_name} {change}: done"


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """Every line the tools wrote (a torn last line from a kill mid-write is skipped)."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def executions(path: str | Path) -> Counter[str]:
    """How many times each change was started (at most once is the invariant)."""
    return Counter(r["change"] for r in read_log(path) if r.get("event") == "start")


def died_in(path: str | Path, pid: int) -> str | None:
    """The change a process was inside when it died (its last line is a start), else None."""
    mine = [r for r in read_log(path) if r.get("pid") == pid]
    return mine[-1]["change"] if mine and mine[-1].get("event") == "start" else None


@tool(category=Category.READ_ONLY, parallel=True)
async def check_health(host: str) -> str:
    """Health of a host (always fine here).

    Args:
        host: the host name
    """
    return f"{host}: healthy, load 0.4"


@tool(category=Category.MUTATING)
def restart_service(host: str, change: str, *, confirmed_by: str) -> str:
    """Restart the service on a host.

    Args:
        host: the host name
        change: the change ticket this restart belongs to
    """
    return _execute("restart_service", change, confirmed_by)


@tool(category=Category.DESTRUCTIVE)
def drain_node(host: str, change: str, *, confirmed_by: str) -> str:
    """Drain a node: evict every workload from it.

    Args:
        host: the node name
        change: the change ticket this drain belongs to
    """
    return _execute("drain_node", change, confirmed_by)


@drain_node.dry_run
def _drain_preview(host: str, change: str) -> str:
    return f"would evict 12 pods from {host} ({change})"
