"""disk_usage: the biggest directories and files under a path on one host, from a bounded `du` on one filesystem.

Only names, sizes and modification times are read, never contents. The path must lie under the host's configured
usage_dirs (default: the mount points of its real filesystems) and under nothing on the deny-list
(tools/builtin/files.py), both checked on the resolved path; entries under a denied path are left out of the
listing. `du` is killed after its own time limit, and what it had finished is still shown, saying so.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import PurePosixPath

from tools.api import BadCall
from tools.builtin import reach
from tools.builtin.files import confine
from tools.builtin.host import PSEUDO_FS, human_bytes
from tools.registry import Category, ToolContext, tool
from tools.remote.command import KILLED_BY_TIMEOUT
from tools.remote.inventory import Host

_TIMEOUT_S = 45.0  # the whole command, under the tool's own 60 s
DU_TIMEOUT_S = 30  # du itself, so that what it finished still comes back
_MAX_BYTES = 4 * 1024 * 1024
MAX_LIMIT = 100
# The host's clock, then `du` over one filesystem ($1, to depth $2, killed after $3 s; unbuffered, so what it
# finished arrives even when killed): "BYTES\tMTIME\tPATH" per entry, each ending in \0; then du's exit status.
_DU_SCRIPT = (
    "date +%s; printf '\\0'; timeout -s KILL \"$3\" stdbuf -o0 du -x -a -B1 --time --time-style=+%s -0 "
    '--max-depth="$2" -- "$1"; printf \'\\0%s\' "$?"'
)


def _mount_points(mounts: str) -> list[str]:
    """The mount points of the real filesystems in /proc/self/mounts (octal escapes decoded)."""
    rows = [line.split() for line in mounts.splitlines()]
    points = [
        f[1].encode().decode("unicode_escape") for f in rows if len(f) >= 3 and (f[2] not in PSEUDO_FS or f[1] == "/")
    ]
    return list(dict.fromkeys(points))


async def _usage_dirs(host: Host | None, ctx: ToolContext) -> list[str]:
    if host is not None and host.usage_dirs is not None:
        return list(host.usage_dirs)
    if ctx.usage_dirs is not None:
        return list(ctx.usage_dirs)
    result = await reach.run(ctx, host, ["cat", "/proc/self/mounts"], timeout_s=_TIMEOUT_S)
    if result.exit_status != 0:
        raise reach.failed(host, "cat /proc/self/mounts", result)
    return _mount_points(result.stdout)


def _age(seconds: float) -> str:
    units = (("d", 86_400), ("h", 3_600), ("m", 60))
    return next((f"{seconds / size:.0f}{unit} ago" for unit, size in units if seconds >= size), "just now")


def _usage_text(
    name: str,
    root: PurePosixPath,
    depth: int,
    limit: int,
    now: float,
    entries: list[tuple[int, int, str]],
    notes: list[str],
) -> str:
    total = next((size for size, _, p in entries if p == str(root)), None)
    rest = sorted((e for e in entries if e[2] != str(root)), reverse=True)
    shown = sorted(rest[:limit], key=lambda e: (e[1], e[0]), reverse=True)
    head = f"disk usage under {root} on {name}, one filesystem, to depth {depth}"
    head += f": {human_bytes(total)} in all" if total is not None else ": its total is unknown (du did not finish it)"
    if not shown:
        return "\n".join([f"{head}; no entries under {root}", *notes])
    rows = [["size", "modified (UTC)", "age", "path"]]
    for size, mtime, path in shown:
        stamp = datetime.fromtimestamp(mtime, UTC).strftime("%Y-%m-%d %H:%M")
        rows.append([human_bytes(size), stamp, _age(max(now - mtime, 0)), path])
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    table = ["  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3] for r in rows]
    if len(rest) > limit:
        notes.insert(0, f"{len(rest) - limit} smaller entries not shown")
    listed = f"the {len(shown)} biggest of {len(rest)} entries, newest first (a directory's time is its newest entry's)"
    return "\n".join([head, listed, *table, *notes])


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def disk_usage(path: str, host: str | None = None, depth: int = 2, limit: int = 20, *, ctx: ToolContext) -> str:
    """The biggest directories and files under a path on one host, newest growth first, from a bounded `du`.

    Returns the path's total size, then the `limit` biggest entries (directories and files, down to `depth`
    levels) listed newest first, each with its size on disk (binary units: K, M, G), its modification time (UTC)
    and age; a directory's time is that of the newest thing in it, so where the disk is filling comes first.
    Only names, sizes and times are read, never contents; `du` stays on the path's filesystem (-x) and is killed
    after 30 s, and the result then says the sizes are of what it finished. It also says how many entries were
    not shown, and how many were left out as denied (home and secret directories) or unreadable. Only paths
    under the configured directories (default: the mount points of the host's real filesystems) can be listed.
    Use it when check_disk shows a filesystem full, to find what filled it, e.g. core dumps in /var/tmp.

    Args:
        path: the directory to measure, an absolute path on the host, e.g. "/var".
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
        depth: how many levels below the path to list, 1 to 4.
        limit: how many of the biggest entries to list, 1 to 100.
    """
    found = reach.target(host, ctx)
    if not 1 <= depth <= 4:
        raise BadCall(f"depth: must be between 1 and 4, got {depth}")
    if not 1 <= limit <= MAX_LIMIT:
        raise BadCall(f"limit: must be between 1 and {MAX_LIMIT}, got {limit}")
    name = reach.host_name(found)
    root, kind, denied = await confine(found, ctx, path, await _usage_dirs(found, ctx), "disk_usage")
    if kind != "d":
        raise BadCall(f"{name}: {'no such directory' if kind == '-' else 'not a directory'}: {path}")
    argv = ["sh", "-c", _DU_SCRIPT, "sh", str(root), str(depth), str(DU_TIMEOUT_S)]
    result = await reach.run(ctx, found, argv, timeout_s=_TIMEOUT_S, max_bytes=_MAX_BYTES)
    clock, sep, listing = result.stdout.partition("\0")
    if not sep or not clock.strip().isdigit():
        raise reach.failed(found, "du", result)
    body, _, status = listing.rpartition("\0")
    if result.truncated:
        body, status = listing, ""
    entries: list[tuple[int, int, str]] = []
    hidden = 0
    for entry in body.split("\0"):
        fields = entry.split("\t", 2)
        if len(fields) != 3 or not fields[0].isdigit() or not fields[1].isdigit():
            continue
        p = PurePosixPath(fields[2])
        if p != root and any(p.is_relative_to(d) for d in denied):  # denied directories; a key's name is no secret
            hidden += 1
            continue
        entries.append((int(fields[0]), int(fields[1]), fields[2]))
    notes: list[str] = []
    if hidden:
        notes.append(f"{hidden} entries under denied paths (home and secret directories) not shown")
    if unreadable := sum(1 for line in result.stderr.splitlines() if line.startswith("du: cannot")):
        notes.append(f"du could not read {unreadable} entries (their sizes are not counted)")
    if status.strip() == str(KILLED_BY_TIMEOUT):
        notes.append(f"cut by time: du was stopped after {DU_TIMEOUT_S} s; sizes are of what it had finished")
    if result.truncated:
        notes.append(f"cut: the listing passed {human_bytes(_MAX_BYTES)}; ask for less depth or a deeper path")
    if not entries and not notes:
        raise reach.failed(found, f"du {root}", result)
    return _usage_text(name, root, depth, limit, float(clock), entries, notes)
