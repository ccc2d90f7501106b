"""The bench's tools, registered by `opsloop run` through `[tools] modules = ["bench.tools"]`."""

from __future__ import annotations

import asyncio

from tools import Category, tool

DF_OUTPUT = "\n".join(f"/dev/nvme{i}n1  500G  {480 - i}G  {20 + i}G  {96 - i}% /var/data{i}" for i in range(6))
SLOW_CALL_SECONDS = 0.3


@tool(category=Category.READ_ONLY, parallel=True)
async def df(host: str) -> str:
    """Disk usage per mount on a host (instant: the bench measures the loop, not the tool). Named `df`: the
    built-in `disk_usage` is another tool."""
    return f"{host}:\n{DF_OUTPUT}"


@tool(category=Category.READ_ONLY, parallel=True)
async def slow_probe(host: str) -> str:
    """A read-only check that takes 300 ms (the parallel-tools benchmark)."""
    await asyncio.sleep(SLOW_CALL_SECONDS)
    return f"{host}: ok"


LOG_LINE = (
    "2026-11-03T03:12:{s:02d}Z nginx[{pid}]: upstream timed out (110) while reading response header from upstream\n"
)


@tool(category=Category.READ_ONLY, parallel=True)
async def error_log_tail(host: str) -> str:
    """The newest lines of a host's error log (about 4 KB: the growth benchmark)."""
    return "".join(LOG_LINE.format(s=i % 60, pid=1000 + i) for i in range(36))
