"""Host health: disk, memory, CPU and the busiest processes, on this machine or an inventory host.

Each tool runs fixed commands (`df -P -T -k`, /proc/meminfo, two /proc/stat samples, two /proc/*/stat samples)
through tools.builtin.reach.run: over SSH on an inventory host, in a local `sh` on this machine, read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tools.api import BadCall
from tools.builtin import reach
from tools.registry import Category, ToolContext, ToolError, tool

_TIMEOUT_S = 20.0  # a command's own limit, under the tools' 30 s
# Filesystems df lists that have no device behind them: not shown (except the root filesystem)
PSEUDO_FS = frozenset(
    {
        "tmpfs",
        "devtmpfs",
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "devpts",
        "mqueue",
        "debugfs",
        "tracefs",
        "securityfs",
        "pstore",
        "bpf",
        "configfs",
        "fusectl",
        "hugetlbfs",
        "autofs",
        "binfmt_misc",
        "nsfs",
        "ramfs",
        "efivarfs",
        "rpc_pipefs",
        "squashfs",
        "shm",
        "none",
    }
)


def human_bytes(n: float) -> str:
    """1536 -> '1.5K' (binary units, like df -h)."""
    for unit in ("B", "K", "M", "G", "T"):
        if abs(n) < 1024:
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}P"


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _percent(part: float, whole: float) -> float:
    return part / whole * 100 if whole > 0 else 0.0


# -- check_disk ----------------------------------------------------------------------------------------

# Space (df -P -T -k), then inodes (df -P -i), \0 between: df exits 1 when one mount is unreadable, so the exit
# status is not checked, only that space rows came.
_DISK_SCRIPT = "df -P -T -k; printf '\\0'; df -P -i"


@dataclass(frozen=True)
class Mount:
    """One filesystem as check_disk shows it: space in bytes, inodes (0 in all when the filesystem has none)."""

    mount: str
    fstype: str
    size: int
    used: int
    avail: int
    inodes: int = 0
    inodes_used: int = 0

    @property
    def space_pct(self) -> float:
        return round(_percent(self.used, self.used + self.avail), 1)  # as df computes it: of what users can use

    @property
    def inode_pct(self) -> float | None:
        return round(_percent(self.inodes_used, self.inodes), 1) if self.inodes else None


def parse_df(space: str, inodes: str) -> list[Mount]:
    """The real filesystems from `df -P -T -k` and `df -P -i` output, joined by mount point (pseudo filesystems
    and repeated mounts left out, the root filesystem always kept)."""
    counts: dict[str, tuple[int, int]] = {}
    for line in inodes.splitlines()[1:]:
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[1].isdigit() and fields[2].isdigit():
            counts.setdefault(fields[5], (int(fields[1]), int(fields[2])))
    mounts: list[Mount] = []
    seen: set[str] = set()
    for line in space.splitlines()[1:]:
        fields = line.split(None, 6)
        if len(fields) < 7 or not all(f.isdigit() for f in fields[2:5]):
            continue
        _dev, fstype, size_k, used_k, avail_k, _cap, mount = fields
        size, used, avail = (int(v) * 1024 for v in (size_k, used_k, avail_k))
        if mount in seen or size == 0 or (fstype in PSEUDO_FS and mount != "/"):
            continue
        seen.add(mount)
        mounts.append(Mount(mount, fstype, size, used, avail, *counts.get(mount, (0, 0))))
    return mounts


def nearest_to_full(mounts: list[Mount]) -> str:
    """The mount nearest to full by either measure, and which: "/var: 61.0% of space, 100.0% of inodes: nearest
    to full by inodes"."""
    if not mounts:
        return "no real filesystem is mounted"
    top = max(mounts, key=lambda m: max(m.space_pct, m.inode_pct or 0.0))
    inodes = f"{top.inode_pct:.1f}% of inodes" if top.inode_pct is not None else "no inode count"
    by = "inodes" if (top.inode_pct or 0.0) > top.space_pct else "space"
    return f"nearest to full: {top.mount}: {top.space_pct:.1f}% of space, {inodes}: nearest to full by {by}"


def _disk_text(name: str, mounts: list[Mount]) -> str:
    rows = [["mount", "fs", "size", "used", "avail", "use%", "inodes", "iused", "iuse%"]]
    warnings: list[str] = []
    for m in mounts:
        ipct = m.inode_pct
        inode_cells = [str(m.inodes), str(m.inodes_used), f"{ipct:.1f}%"] if ipct is not None else ["-", "-", "-"]
        rows.append([m.mount, m.fstype, *(human_bytes(v) for v in (m.size, m.used, m.avail)), f"{m.space_pct:.1f}%"])
        rows[-1] += inode_cells
        if m.space_pct >= 90:
            warnings.append(f"WARNING {m.mount} is {m.space_pct:.1f}% full")
        if ipct is not None and ipct >= 90:
            warnings.append(f"WARNING {m.mount} has used {ipct:.1f}% of its inodes (new files fail when none are left)")
    return "\n".join([f"disk usage on {name}", table(rows), *warnings, nearest_to_full(mounts)])


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True)
async def check_disk(host: str | None = None, *, ctx: ToolContext) -> str:
    """Disk space and inodes of every mounted filesystem on one host, from `df -P -T -k` and `df -P -i`.

    Returns a table with one row per real filesystem (mount, fs type, size, used, avail, use%, then inodes,
    inodes used and iuse%; "-" where the filesystem keeps no inode count), sizes in binary units (K, M, G: powers
    of 1024), use% of the space users can use as df computes it; pseudo filesystems (tmpfs, proc, cgroup and the
    like) are left out. A WARNING line follows for each mount 90% full or more, by space or by inodes, and a last
    line names the mount nearest to full by either measure and which measure. The commands are killed after
    20 s. Use it when an alert or a log says "No space left on device" (at low use%, look at iuse%: inodes run
    out too), or before clean_logs or disk_usage to see how full a disk is.

    Args:
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
    """
    found = reach.target(host, ctx)
    result = await reach.run(ctx, found, ["sh", "-c", _DISK_SCRIPT], timeout_s=_TIMEOUT_S)
    space, _, inodes = result.stdout.partition("\0")
    if not space.strip():
        raise reach.failed(found, "df", result)
    return _disk_text(reach.host_name(found), parse_df(space, inodes))


# -- check_memory --------------------------------------------------------------------------------------


def _memory_text(name: str, total: int, used: int, available: int, swap_total: int, swap_used: int) -> str:
    percent = round(_percent(total - available, total), 1)
    swap_percent = round(_percent(swap_used, swap_total), 1)
    lines = [
        f"memory on {name}",
        f"total {human_bytes(total)}, used {human_bytes(used)}, available {human_bytes(available)} "
        f"({percent:.1f}% in use)",
        f"swap total {human_bytes(swap_total)}, used {human_bytes(swap_used)} ({swap_percent:.1f}% in use)",
    ]
    if percent >= 90:
        lines.append(f"WARNING memory is {percent:.1f}% used")
    return "\n".join(lines)


def meminfo_usage(text: str) -> tuple[int, int, int, int, int]:
    """(total, used, available, swap total, swap used) in bytes from /proc/meminfo, computed as free(1) does."""
    kb: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        value = rest.split()
        if value and value[0].isdigit():
            kb[key.strip()] = int(value[0]) * 1024
    if "MemTotal" not in kb:
        raise ToolError("/proc/meminfo has no MemTotal line")
    total, free = kb["MemTotal"], kb.get("MemFree", 0)
    buffers, cached = kb.get("Buffers", 0), kb.get("Cached", 0) + kb.get("SReclaimable", 0)
    available = kb.get("MemAvailable", free + buffers + cached)
    used = total - free - cached - buffers
    if used < 0:
        used = total - free
    swap_total = kb.get("SwapTotal", 0)
    return total, used, min(available, total), swap_total, max(swap_total - kb.get("SwapFree", 0), 0)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True)
async def check_memory(host: str | None = None, *, ctx: ToolContext) -> str:
    """Memory and swap use of one host, from /proc/meminfo, computed as free(1) does.

    Returns the total, used and available memory with the percent in use (of total minus available), then swap
    total and used with its percent; sizes in binary units (K, M, G). A WARNING line follows when 90% or more is
    in use. Use it when a process was OOM-killed or a host is slow and swapping.

    Args:
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
    """
    found = reach.target(host, ctx)
    result = await reach.run(ctx, found, ["cat", "/proc/meminfo"], timeout_s=_TIMEOUT_S)
    if result.exit_status != 0:
        raise reach.failed(found, "cat /proc/meminfo", result)
    return _memory_text(reach.host_name(found), *meminfo_usage(result.stdout))


# -- check_cpu -----------------------------------------------------------------------------------------


def _cpu_text(
    name: str, per_core: list[float], load: tuple[float, float, float], logical: int, physical: int | None
) -> str:
    overall = sum(per_core) / len(per_core) if per_core else 0.0
    cores = f"{logical} logical" + (f", {physical} physical" if physical else "")
    return "\n".join(
        [
            f"cpu on {name}",
            f"cpu {overall:.1f}% (per core: {', '.join(f'{p:.0f}%' for p in per_core)})",
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1, 5, 15 min)",
            f"cores {cores}",
        ]
    )


# Two /proc/stat readings half a second apart, then the load average and the core counts; \0 between parts.
_CPU_SCRIPT = (
    "cat /proc/stat; printf '\\0'; sleep 0.5; cat /proc/stat; printf '\\0'; cat /proc/loadavg; printf '\\0'; "
    "grep -E '^(physical id|core id)' /proc/cpuinfo 2>/dev/null | paste - - | sort -u | wc -l"
)


def _core_times(stat: str) -> list[tuple[int, int]]:
    """(busy, total) jiffies per core (cpu0, cpu1, …) as top counts them (guest time is in user time)."""
    cores = []
    for line in stat.splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("cpu") or fields[0] == "cpu":
            continue
        values = [int(v) for v in fields[1:11] if v.isdigit()]
        values += [0] * (10 - len(values))
        total = sum(values[:8])  # user nice system idle iowait irq softirq steal (guest is counted in user)
        cores.append((total - values[3] - values[4], total))
    return cores


def cpu_percents(before: str, after: str) -> list[float]:
    """Per-core CPU use between two /proc/stat readings."""
    pairs = zip(_core_times(before), _core_times(after), strict=False)
    return [min(max(_percent(b1 - b0, t1 - t0), 0.0), 100.0) for (b0, t0), (b1, t1) in pairs]


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True)
async def check_cpu(host: str | None = None, *, ctx: ToolContext) -> str:
    """CPU use of one host over a half-second sample of /proc/stat, with its load average and core count.

    Returns the overall CPU percent and each core's (busy time, guest time included, as top counts it), the 1, 5
    and 15 minute load averages, and the logical (and physical, when /proc/cpuinfo says) core count. A load
    average above the core count means work is queueing. Use it when requests are slow and you need to know
    whether the host is CPU-bound; list_top_processes then says which process.

    Args:
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
    """
    found = reach.target(host, ctx)
    result = await reach.run(ctx, found, ["sh", "-c", _CPU_SCRIPT], timeout_s=_TIMEOUT_S)
    parts = result.stdout.split("\0")
    if result.exit_status != 0 or len(parts) != 4:
        raise reach.failed(found, "reading /proc/stat", result)
    before, after, loadavg, physical = parts
    load = tuple(float(v) for v in loadavg.split()[:3])
    per_core = cpu_percents(before, after)
    physical_cores = int(physical.strip() or 0) or None
    return _cpu_text(reach.host_name(found), per_core, (load[0], load[1], load[2]), len(per_core), physical_cores)


# -- list_top_processes --------------------------------------------------------------------------------


# The sampling shell's own pid, then each process's /proc/PID/stat twice, half a second apart, with the host's
# clock and tick rate; then pid, user, rss and command line from ps; then every process's systemd cgroup line
# ("PID/cgroup:0::/system.slice/x.service"; grep fails when no line matches or a process ended: ignored). \0
# between. Everything this script starts is in the shell's session
# (a local run and each SSH channel start one of their own), which is how the tool leaves itself out.
_TOP_SCRIPT = (
    "cd /proc || exit 1; printf '%s\\0' \"$$\"; t0=$(date +%s%N); cat [0-9]*/stat 2>/dev/null; printf '\\0'; "
    "sleep 0.5; t1=$(date +%s%N); cat [0-9]*/stat 2>/dev/null; "
    'printf \'\\0%s %s %s\\0\' "$t0" "$t1" "$(getconf CLK_TCK)"; '
    "ps -e -ww -o pid=,user:32=,rss=,args= | cut -b 1-400; printf '\\0'; "
    "grep -H -E '^(0::|[0-9]+:name=systemd:)' [0-9]*/cgroup 2>/dev/null; exit 0"
)
_UNIT_SUFFIXES = (".service", ".scope", ".socket", ".mount", ".timer", ".swap", ".slice")


@dataclass(frozen=True)
class _Stat:
    session: int
    ticks: int  # utime + stime
    child_ticks: int  # cutime + cstime: children that ended and were waited for


def _stats(sample: str) -> dict[int, _Stat]:
    """pid -> its /proc/PID/stat numbers, from concatenated stat lines (the command name may hold any text)."""
    stats: dict[int, _Stat] = {}
    for line in sample.splitlines():
        pid, _, rest = line.partition(" (")
        f = rest.rpartition(") ")[2].split()
        if pid.isdigit() and len(f) > 14 and all(v.lstrip("-").isdigit() for v in (f[3], *f[11:15])):
            stats[int(pid)] = _Stat(int(f[3]), int(f[11]) + int(f[12]), int(f[13]) + int(f[14]))
    return stats


def unit_of(cgroup: str) -> str:
    """The systemd unit a cgroup path names ("/system.slice/nginx.service" -> "nginx.service"), or "-" for none."""
    return next((part for part in reversed(cgroup.strip().split("/")) if part.endswith(_UNIT_SUFFIXES)), "-")


def _units(listing: str) -> dict[int, str]:
    """pid -> unit, from `grep -H` over /proc/*/cgroup: the unified (0::) line, else the name=systemd one."""
    units: dict[int, str] = {}
    for line in listing.splitlines():
        where, _, entry = line.partition(":")
        pid = where.partition("/")[0]
        if not pid.isdigit():
            continue
        unit = unit_of(entry.split(":", 2)[-1])
        if unit != "-" or int(pid) not in units:
            units[int(pid)] = unit
    return units


@dataclass
class _Row:
    cpu: float
    rss: int
    cells: list[str]


def _top_text(name: str, rows: list[_Row], what: str, sort_by: str, limit: int, hidden: int) -> str:
    rows.sort(key=lambda r: (r.cpu, r.rss) if sort_by == "cpu" else (r.rss, r.cpu), reverse=True)
    head = ["unit", "processes", "cpu%", "rss", "busiest command"] if what == "units" else []
    grid = [head or ["pid", "user", "cpu%", "rss", "command"]] + [r.cells for r in rows[:limit]]
    mine = [f"this tool's own {hidden} sampling processes are left out"] if hidden else []
    return "\n".join([f"top {min(limit, len(rows))} of {len(rows)} {what} on {name} by {sort_by}", table(grid), *mine])


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True)
async def list_top_processes(
    sort_by: Literal["cpu", "memory"] = "cpu",
    limit: int = 10,
    host: str | None = None,
    group_by: Literal["process", "unit"] = "process",
    *,
    ctx: ToolContext,
) -> str:
    """The processes, or the systemd units, using the most CPU or memory on one host, sampled from /proc over
    half a second.

    Returns a header ("top N of M processes on HOST by cpu") and a table of pid, user, cpu% (percent of one core:
    a busy multi-threaded process can pass 100) and rss (resident memory, binary units), and the command line cut
    to 120 characters. With group_by="unit", one row per systemd unit (from /proc/PID/cgroup; "-" for processes
    in none): its process count, cpu% summed over its processes including the CPU of their children that ended
    during the sample (so a unit whose work runs in short-lived children is still named), rss summed, and its
    busiest command. The tool's own sampling commands are left out (a last line says how many). At most 100 rows.
    Use it after check_cpu or check_memory shows a host busy, to find which process or unit it is.

    Args:
        sort_by: "cpu" (percent of one core, sampled over half a second) or "memory" (resident size).
        limit: how many rows to list, 1 to 100.
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
        group_by: "process" (one row per process) or "unit" (one row per systemd unit).
    """
    found = reach.target(host, ctx)  # an unknown host is named before a bad limit
    if not 1 <= limit <= 100:
        raise BadCall(f"limit: must be between 1 and 100, got {limit}")
    result = await reach.run(ctx, found, ["sh", "-c", _TOP_SCRIPT], timeout_s=_TIMEOUT_S, max_bytes=8 * 1024 * 1024)
    parts = result.stdout.split("\0")
    if result.exit_status != 0 or len(parts) != 6 or result.truncated or not parts[0].isdigit():
        raise reach.failed(found, "reading /proc", result)
    before, after, clock = _stats(parts[1]), _stats(parts[2]), parts[3].split()
    elapsed_s = max((int(clock[1]) - int(clock[0])) / 1e9, 1e-3)
    hz = int(clock[2]) or 100
    own = after.get(int(parts[0]))
    units = _units(parts[5]) if group_by == "unit" else {}
    rows: list[_Row] = []
    groups: dict[str, list[_Row]] = {}
    hidden = 0
    for line in parts[4].splitlines():
        fields = line.split(None, 3)
        if len(fields) < 3 or not fields[0].isdigit() or not fields[2].isdigit():
            continue
        pid = int(fields[0])
        if pid not in after:
            continue  # started or ended during the sample
        if own is not None and after[pid].session == own.session:
            hidden += 1
            continue
        now, then = after[pid], before.get(pid, after[pid])
        ticks = now.ticks - then.ticks + (now.child_ticks - then.child_ticks if group_by == "unit" else 0)
        cpu = max(ticks, 0) / hz / elapsed_s * 100
        rss = int(fields[2]) * 1024
        cmd = " ".join((fields[3] if len(fields) > 3 else "?").split())[:120]
        row = _Row(cpu, rss, [str(pid), fields[1], f"{cpu:.1f}", human_bytes(rss), cmd])
        rows.append(row)
        groups.setdefault(units.get(pid, "-"), []).append(row)
    if group_by == "unit":
        rows = []
        for unit, members in groups.items():
            cpu, rss = sum(r.cpu for r in members), sum(r.rss for r in members)
            busiest = max(members, key=lambda r: (r.cpu, r.rss)).cells[4]
            rows.append(_Row(cpu, rss, [unit, str(len(members)), f"{cpu:.1f}", human_bytes(rss), busiest]))
    return _top_text(
        reach.host_name(found), rows, "units" if group_by == "unit" else "processes", sort_by, limit, hidden
    )
