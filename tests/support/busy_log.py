"""A log grep_log is busy with for minutes, and the host-command processes a tool started (to see them killed)."""

from __future__ import annotations

import gzip
from pathlib import Path

import psutil

_MEMBER = gzip.compress(b"request took a while\n" * 1_200_000, 9)  # 25 MB of text in about 25 kB


def huge_log(path: Path) -> Path:
    """`path` + ".gz": 25 GB of text in about 25 MB (one gzip member, repeated), with no match for "needle", so
    grep_log decompresses and searches it far longer than any test waits."""
    gz = path.with_name(path.name + ".gz")
    with gz.open("wb") as f:
        for _ in range(1000):
            f.write(_MEMBER)
    return gz


def host_commands() -> list[psutil.Process]:
    """Live processes of this process that run a host tool's command (tools/builtin/reach.py: `sh -c` with the
    bounded command line of tools/remote/command.py)."""
    found = []
    for p in psutil.Process().children():
        try:
            cmd = p.cmdline()
            if cmd[:2] == ["sh", "-c"] and "timeout --signal=KILL" in " ".join(cmd) and p.status() != "zombie":
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def grep_commands() -> list[psutil.Process]:
    """Of host_commands(), those running grep (a tool call runs a few commands; grep_log's search is the long one)."""
    found = []
    for command in host_commands():
        try:
            if any(p.name() == "grep" for p in command.children(recursive=True)):
                found.append(command)
        except psutil.NoSuchProcess:
            continue
    return found
