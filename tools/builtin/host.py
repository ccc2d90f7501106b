"""Host health from psutil: disk, memory, CPU and the busiest processes. Only the local host is reachable."""

from __future__ import annotations

import os
import socket
import time
from typing import Literal

import psutil

from tools.registry import Category, ToolError, tool

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
_SAMPLE_S = 0.5  # CPU percentages need two readings this far apart


def check_local(host: str) -> str:
    """The local host's name, or ToolError if `host` names another machine."""
    hostname = socket.gethostname()
    if host in LOCAL_NAMES or host in (hostname, hostname.split(".")[0]):
        return hostname
    raise ToolError(
        f"only the local host is supported: this bot runs on {hostname!r} and cannot reach {host!r}; "
        "use host='localhost' or a runbook command for remote hosts"
    )


def human_bytes(n: float) -> str:
    """1536 -> '1.5K' (binary units, like df -h)."""
    for unit in ("B", "K", "M", "G", "T", "P"):
        if abs(n) < 1024 or unit == "P":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True, isolated=True)
def check_disk(host: str = "localhost") -> str:
    """Disk usage per mounted filesystem (size, used, free, use%).

    Args:
        host: the host to check; only the local host is supported.
    """
    name = check_local(host)
    rows = [["mount", "fs", "size", "used", "avail", "use%"]]
    seen: set[str] = set()
    warnings: list[str] = []
    for part in psutil.disk_partitions(all=False):
        if part.mountpoint in seen:
            continue
        seen.add(part.mountpoint)
        try:
            usage = psutil.disk_usage(part.mountpoint)
        except OSError:
            continue
        if usage.total == 0:
            continue
        rows.append([part.mountpoint, part.fstype, human_bytes(usage.total), human_bytes(usage.used),
                     human_bytes(usage.free), f"{usage.percent:.1f}%"])
        if usage.percent >= 90:
            warnings.append(f"WARNING {part.mountpoint} is {usage.percent:.1f}% full")
    if "/" not in seen:  # containers often list no partitions; the root filesystem is always worth a line
        usage = psutil.disk_usage("/")
        rows.insert(1, ["/", "-", human_bytes(usage.total), human_bytes(usage.used), human_bytes(usage.free),
                        f"{usage.percent:.1f}%"])
        if usage.percent >= 90:
            warnings.append(f"WARNING / is {usage.percent:.1f}% full")
    return "\n".join([f"disk usage on {name}", _table(rows), *warnings])


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True, isolated=True)
def check_memory(host: str = "localhost") -> str:
    """Memory and swap usage.

    Args:
        host: the host to check; only the local host is supported.
    """
    name = check_local(host)
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    lines = [
        f"memory on {name}",
        f"total {human_bytes(vm.total)}, used {human_bytes(vm.used)}, available {human_bytes(vm.available)} "
        f"({vm.percent:.1f}% in use)",
        f"swap total {human_bytes(swap.total)}, used {human_bytes(swap.used)} ({swap.percent:.1f}% in use)",
    ]
    if vm.percent >= 90:
        lines.append(f"WARNING memory is {vm.percent:.1f}% used")
    return "\n".join(lines)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True, isolated=True)
def check_cpu(host: str = "localhost") -> str:
    """CPU use (overall and per core), load average and core count.

    Args:
        host: the host to check; only the local host is supported.
    """
    name = check_local(host)
    per_core = psutil.cpu_percent(interval=_SAMPLE_S, percpu=True)
    overall = sum(per_core) / len(per_core) if per_core else 0.0
    load1, load5, load15 = os.getloadavg()
    logical = psutil.cpu_count(logical=True) or len(per_core)
    physical = psutil.cpu_count(logical=False)
    cores = f"{logical} logical" + (f", {physical} physical" if physical else "")
    return "\n".join([
        f"cpu on {name}",
        f"cpu {overall:.1f}% (per core: {', '.join(f'{p:.0f}%' for p in per_core)})",
        f"load average {load1:.2f} {load5:.2f} {load15:.2f} (1, 5, 15 min)",
        f"cores {cores}",
    ])


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True, isolated=True)
def list_top_processes(sort_by: Literal["cpu", "memory"] = "cpu", limit: int = 10, host: str = "localhost") -> str:
    """The processes using the most CPU or memory.

    Args:
        sort_by: "cpu" (percent of one core, sampled over half a second) or "memory" (resident size).
        limit: how many processes to list, 1 to 100.
        host: the host to check; only the local host is supported.
    """
    name = check_local(host)
    if not 1 <= limit <= 100:
        raise ToolError(f"limit: must be between 1 and 100, got {limit}")
    procs = []
    for p in psutil.process_iter(["pid", "name", "username", "memory_info", "cmdline"]):
        try:
            p.cpu_percent(None)  # first reading: starts the sample
        except psutil.Error:
            continue
        procs.append(p)
    time.sleep(_SAMPLE_S)
    rows: list[tuple[float, int, list[str]]] = []
    for p in procs:
        try:
            cpu = p.cpu_percent(None)
            info = p.info
        except psutil.Error:
            continue
        rss = info["memory_info"].rss if info.get("memory_info") else 0
        cmd = " ".join(" ".join(info.get("cmdline") or []).split()) or info.get("name") or "?"
        rows.append((cpu, rss, [str(info["pid"]), str(info.get("username") or "?"), f"{cpu:.1f}",
                                human_bytes(rss), cmd[:120]]))
    rows.sort(key=lambda r: (r[0], r[1]) if sort_by == "cpu" else (r[1], r[0]), reverse=True)
    table = [["pid", "user", "cpu%", "rss", "command"]] + [r[2] for r in rows[:limit]]
    return f"top {min(limit, len(rows))} of {len(rows)} processes on {name} by {sort_by}\n" + _table(table)
