"""Host tools against this machine's real psutil readings."""

from __future__ import annotations

import os
import re
import socket

import psutil
import pytest

from tools import ToolError
from tools.builtin import check_cpu, check_disk, check_memory, list_top_processes
from tools.builtin.host import human_bytes


@pytest.mark.processes
async def test_check_disk_lists_the_root_filesystem() -> None:
    out = await check_disk.run({})
    usage = psutil.disk_usage("/")
    root = next(line for line in out.splitlines() if line.startswith("/ ")).split()
    assert root[2] == human_bytes(usage.total)  # used and free move while other processes write
    assert re.fullmatch(r"\d+(\.\d)?[BKMGTP]", root[3]) and re.fullmatch(r"\d+(\.\d)?[BKMGTP]", root[4])
    assert abs(float(root[5].rstrip("%")) - usage.percent) < 1
    assert out.splitlines()[0] == f"disk usage on {socket.gethostname()}"


@pytest.mark.processes
async def test_check_memory_reports_the_total() -> None:
    out = await check_memory.run({"host": "localhost"})
    assert f"total {human_bytes(psutil.virtual_memory().total)}," in out
    assert "swap total" in out


@pytest.mark.processes
async def test_check_cpu_reports_cores_and_load_average() -> None:
    out = await check_cpu.run({"host": socket.gethostname()})
    assert f"cores {psutil.cpu_count(logical=True)} logical" in out
    assert "load average " in out and "(1, 5, 15 min)" in out
    assert out.splitlines()[1].startswith("cpu ") and out.count("%") >= 1 + psutil.cpu_count()


@pytest.mark.processes
async def test_list_top_processes_by_memory_includes_this_test_process() -> None:
    out = await list_top_processes.run({"sort_by": "memory", "limit": 100})
    lines = out.splitlines()
    assert lines[0].startswith("top ") and lines[0].endswith(" by memory")
    assert lines[1].split() == ["pid", "user", "cpu%", "rss", "command"]
    assert str(os.getpid()) in {line.split()[0] for line in lines[2:]}


async def test_list_top_processes_limit_is_checked() -> None:
    with pytest.raises(ToolError, match="limit: must be between 1 and 100"):
        await list_top_processes.run({"limit": 0})


@pytest.mark.parametrize("tool", [check_disk, check_memory, check_cpu, list_top_processes])
async def test_another_host_is_refused(tool: object) -> None:
    """No [[hosts]]: only this machine is reachable (tests/tools/remote/test_host_tools_ssh.py covers an inventory)."""
    with pytest.raises(ToolError) as e:
        await tool.run({"host": "db-7.prod"})  # type: ignore[attr-defined]
    assert str(e.value) == (
        "'db-7.prod' is not a host opsloop can reach: no [[hosts]] are configured, so only "
        "'self' (the machine opsloop runs on) is available"
    )


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1536, 5 * 1024**3)] == ["0B", "1023B", "1.5K", "5.0G"]
