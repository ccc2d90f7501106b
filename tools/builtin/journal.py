"""The systemd journal and the kernel log: `journal` (entries by unit, identifier, priority and pattern in a window)
and `kernel_events` (OOM kills, segfaults, disk and filesystem errors, hung tasks, boots), on this machine or an
inventory host.

Both run one fixed `journalctl -o json` command through tools.builtin.reach.run (over SSH on an inventory host, in
a local `sh` here), with the window as absolute `@epoch` times computed here, so both places read the same window.
The pattern is matched here with RE2 (the syntax grep_log takes), not with journalctl's --grep, which not every
build has and which backtracks. journalctl reads the system journal, or the journal files in a configured
directory (`journal_dir` of the host, `[tools.journal] dir` here: a journal-remote collector's directory, say).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from tools import times
from tools.api import BadCall
from tools.builtin import reach
from tools.builtin.log_reads import clip, compile_pattern
from tools.builtin.services import check_unit
from tools.registry import Category, ToolContext, ToolError, tool
from tools.remote.inventory import Host

MAX_LINES = 1_000
SCAN_MAX_BYTES = 8 * 1024 * 1024  # journalctl's JSON read per call: the window's newest (or oldest) part
OUTPUT_BUDGET = 11_000  # characters of entries shown; the rest are counted and said to be left out
_TIMEOUT_S = 40.0  # journalctl's own limit, under the tools' 60 s
PRIORITIES = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")
_PRIORITY_ALIASES = {"emergency": 0, "critical": 2, "error": 3, "warn": 4}
_FIELDS = "MESSAGE,PRIORITY,_SYSTEMD_UNIT,SYSLOG_IDENTIFIER,_PID,_COMM,_BOOT_ID"
_IDENTIFIER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9@._:/+-]{0,127}")
_NO_PERMISSION = "insufficient permissions"


# -- arguments ----------------------------------------------------------------------------------------------


def window(since: str, until: str | None) -> tuple[float, float]:
    """since/until as epoch seconds: a span before now or an ISO 8601 time (UTC when it has no offset)."""
    now = datetime.now(UTC)
    start = times.when(since, "since", now).timestamp()
    end = now.timestamp() if until is None else times.when(until, "until", now).timestamp()
    if start >= end:
        raise BadCall(f"since ({iso(start)}) must be before until ({iso(end)})")
    return start, end


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def priority_level(priority: str | int) -> int:
    """0-7 or a syslog priority name (err, warning, …) as its number; BadCall otherwise."""
    text = str(priority).strip().lower()
    if text.isdigit() and int(text) < len(PRIORITIES):
        return int(text)
    if text in PRIORITIES:
        return PRIORITIES.index(text)
    if text in _PRIORITY_ALIASES:
        return _PRIORITY_ALIASES[text]
    raise BadCall(f"priority: {priority!r} is not 0-7 or one of {', '.join(PRIORITIES)}")


# -- reading the journal ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One journal entry as the tools show it."""

    at: float  # epoch seconds
    priority: int | None
    unit: str
    identifier: str
    pid: str
    message: str
    boot: str

    def line(self) -> str:
        prio = PRIORITIES[self.priority] if self.priority is not None and self.priority < 8 else "-"
        who = self.identifier or self.unit or "-"
        unit = f" ({self.unit})" if self.unit and self.unit.removesuffix(".service") != who else ""
        pid = f"[{self.pid}]" if self.pid else ""
        return clip(f"{iso(self.at)} {prio} {who}{pid}{unit}: {self.message}")


@dataclass(frozen=True)
class Scan:
    """What one journalctl call read: its entries in the order asked, and whether the read was cut."""

    entries: list[Entry]
    cut: bool
    note: str  # journalctl's own warning worth passing on (permissions), or ""


def _text(value: object) -> str:
    """A field's value: a string, or the byte array journalctl writes for a value that is not UTF-8."""
    if isinstance(value, list):
        return bytes(v for v in value if isinstance(v, int) and 0 <= v < 256).decode("utf-8", "replace")
    return "" if value is None else str(value)


def _entries(lines: Iterator[str]) -> Iterator[Entry]:
    for line in lines:
        try:
            fields = json.loads(line)
            at = int(fields["__REALTIME_TIMESTAMP"]) / 1e6
        except (ValueError, KeyError, TypeError):
            continue  # the cut's last, partial line
        prio = _text(fields.get("PRIORITY"))
        yield Entry(
            at=at,
            priority=int(prio) if prio.isdigit() else None,
            unit=_text(fields.get("_SYSTEMD_UNIT")),
            identifier=_text(fields.get("SYSLOG_IDENTIFIER")) or _text(fields.get("_COMM")),
            pid=_text(fields.get("_PID")),
            message=_text(fields.get("MESSAGE")).replace("\n", " ⏎ "),
            boot=_text(fields.get("_BOOT_ID")),
        )


def journal_dir(on: Host | None, ctx: ToolContext) -> str | None:
    """Where journalctl reads on `on`: its configured journal directory, or None for the system journal."""
    if on is not None:
        return on.journal_dir
    return str(ctx.journal_dir) if ctx.journal_dir is not None else None


async def read_journal(
    on: Host | None, ctx: ToolContext, start: float, end: float, matches: list[str], *, newest_first: bool
) -> Scan:
    """`journalctl -o json` over the window with `matches` (options and FIELD=value matches), at most
    SCAN_MAX_BYTES of it, newest first when asked (so a cut leaves out the oldest)."""
    argv = ["journalctl", "--no-pager", "--quiet", "-o", "json", f"--output-fields={_FIELDS}"]
    if (directory := journal_dir(on, ctx)) is not None:
        argv.append(f"--directory={directory}")
    argv += [f"--since=@{start:.0f}", f"--until=@{end:.0f}", *(["--reverse"] if newest_first else []), *matches]
    result = await reach.run(ctx, on, argv, timeout_s=_TIMEOUT_S, max_bytes=SCAN_MAX_BYTES)
    if result.exit_status == 127:
        raise ToolError(f"{reach.host_name(on)}: journalctl is not available (no systemd journal there)")
    if result.exit_status != 0 and not result.truncated:
        raise reach.failed(on, "journalctl", result)
    note = ""
    if _NO_PERMISSION in result.stderr:
        note = (
            f"journalctl on {reach.host_name(on)} could not read some journal files (insufficient permissions: "
            "add opsloop's user to the systemd-journal group)"
        )
    return Scan(list(_entries(iter(result.stdout.splitlines()))), result.truncated, note)


def _cut_note(scan: Scan, newest_first: bool) -> str:
    if not scan.cut or not scan.entries:
        return ""
    edge = scan.entries[-1].at
    left = f"entries before {iso(edge)}" if newest_first else f"entries after {iso(edge)}"
    return (
        f"read cut at {SCAN_MAX_BYTES // (1024 * 1024)} MiB of journal ({len(scan.entries)} entries): {left} "
        "were not read; narrow the window or add a unit, identifier or priority"
    )


# -- journal ------------------------------------------------------------------------------------------------


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def journal(
    host: str | None = None,
    unit: str | None = None,
    identifier: str | None = None,
    priority: str | None = None,
    pattern: str | None = None,
    since: str = "1h",
    until: str | None = None,
    lines: int = 200,
    newest_first: bool = True,
    *,
    ctx: ToolContext,
) -> str:
    """Entries from one host's systemd journal (journalctl) in a time window, by unit, identifier, priority and
    pattern.

    Returns a header naming the host, the window (UTC) and the filters used, and how many entries matched in all;
    then one line per entry: time (UTC), priority, identifier[pid] (unit), message, each cut to 500 characters.
    At most `lines` entries (1 to 1000) and about 11,000 characters are shown; the rest are counted and said to
    be left out. journalctl reads at most 8 MiB of the window (newest first by default): when that cuts the
    window, the answer says which part was not read. An empty window says "no entries for …". Use it for a
    service that logs to the journal rather than a file (most systemd services), e.g. journal(unit="nginx",
    priority="err", since="2h"); kernel_events is better for OOM kills and disk errors.

    Args:
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
        unit: a systemd unit, e.g. "nginx" or "api.service" (journalctl -u: its entries and systemd's about it).
        identifier: a syslog identifier (SYSLOG_IDENTIFIER, journalctl -t), e.g. "sshd" or "CRON".
        priority: the least important priority shown, 0-7 or a name: emerg, alert, crit, err, warning, notice,
            info, debug ("err" shows err, crit, alert and emerg).
        pattern: a regular expression searched in each message, in Python's syntax matched by RE2 (as grep_log);
            use (?i) for case-insensitive.
        since: the window's start: a span before now ("30m", "2h", "1d") or an ISO 8601 time (UTC without offset).
        until: the window's end, in the same forms; default now.
        lines: how many matching entries to show, 1 to 1000.
        newest_first: newest entries first (default); false for oldest first, to find when something started.
    """
    on = reach.target(host, ctx)
    if not 1 <= lines <= MAX_LINES:
        raise BadCall(f"lines: must be between 1 and {MAX_LINES}, got {lines}")
    start, end = window(since, until)
    matches: list[str] = []
    filters: list[str] = []
    if unit is not None:
        matches.append(f"--unit={check_unit(unit)}")
        filters.append(f"unit {unit}")
    if identifier is not None:
        if not _IDENTIFIER_RE.fullmatch(identifier):
            raise BadCall(f"identifier: {identifier!r} is not a syslog identifier (letters, digits, @ . _ : / + -)")
        matches.append(f"--identifier={identifier}")
        filters.append(f"identifier {identifier}")
    if priority is not None:
        level = priority_level(priority)
        matches.append(f"--priority={level}")
        filters.append(f"priority {PRIORITIES[level]} or more important")
    regex = compile_pattern(pattern) if pattern is not None else None
    if pattern is not None:
        filters.append(f"messages matching /{pattern}/")
    scan = await read_journal(on, ctx, start, end, matches, newest_first=newest_first)
    found = [e for e in scan.entries if regex is None or regex.search(e.message)]
    name = reach.host_name(on)
    what = ", ".join(filters) or "all entries"
    span = f"between {iso(start)} and {iso(end)}"
    notes = [n for n in (_cut_note(scan, newest_first), scan.note) if n]
    if not found:
        return "\n".join([f"no entries for {what} in the journal of {name} {span}", *notes])
    shown: list[str] = []
    used = 0
    for entry in found[:lines]:
        line = entry.line()
        if used + len(line) + 1 > OUTPUT_BUDGET:
            break
        shown.append(line)
        used += len(line) + 1
    order = "newest" if newest_first else "oldest"
    head = f"{len(found)} entries for {what} in the journal of {name} {span}"
    if len(shown) < len(found):
        why = "lines" if len(shown) == lines else "the output limit"
        head += f", showing the {order} {len(shown)} ({len(found) - len(shown)} left out by {why})"
    else:
        head += f", {order} first"
    return "\n".join([head, *notes, *shown])


# -- kernel_events ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """One kind of kernel event: its name as shown, and what its messages look like (a line counts under the
    first kind it matches)."""

    name: str
    regex: re.Pattern[str]


KINDS = (
    Kind("OOM kills", re.compile(r"(?:Out of memory|Memory cgroup out of memory): Kill(?:ed)? process")),
    Kind("segfaults and traps", re.compile(r"segfault at |traps: .*(?:general protection|trap )")),
    Kind(
        "read-only remounts",
        re.compile(r"[Rr]emounting filesystem read-only|remounted read-only|Filesystem has been shut down"),
    ),
    Kind(
        "filesystem errors",
        re.compile(
            r"EXT[234]-fs (?:error|warning|critical)|XFS \([^)]*\): .*(?:[Ee]rror|[Cc]orrupt)|BTRFS (?:error|critical)"
        ),
    ),
    Kind(
        "disk I/O errors",
        re.compile(
            r"I/O error|blk_update_request: |nvme\d*.*(?:timeout|[Rr]eset)|ata\d+.*(?:failed command|exception)|"
            r"[Mm]edium [Ee]rror"
        ),
    ),
    Kind("hung tasks and lockups", re.compile(r"blocked for more than \d+ seconds|soft lockup|hard LOCKUP|hung_task")),
    Kind("kernel bugs and panics", re.compile(r"\bBUG: |\bOops\b|Kernel panic|kernel BUG at|WARNING: CPU: ")),
    Kind("boots", re.compile(r"^Linux version ")),
)


def _kind(message: str) -> Kind | None:
    return next((k for k in KINDS if k.regex.search(message)), None)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def kernel_events(
    host: str | None = None, since: str = "24h", until: str | None = None, *, ctx: ToolContext
) -> str:
    """What the kernel reported on one host in a time window, grouped by kind: OOM kills, segfaults and traps,
    read-only remounts, filesystem errors (EXT4, XFS, Btrfs), disk I/O errors (blk_update_request, NVMe timeouts,
    ATA), hung tasks and lockups, kernel bugs and panics, and boots.

    Reads the kernel messages (_TRANSPORT=kernel) of the host's systemd journal across boots. Returns a header
    with the host, the window (UTC) and how many kernel messages were read; then, for each kind found, its count
    and its latest message with its time; then the boots the window holds (boot ID, first and last kernel message).
    At most 8 MiB of the window is read, newest first: when that cuts it, the answer says from when on it read.
    A window with no such events says so and names the kinds looked for. Use it when a process died without a
    trace in its own logs, a disk filled or went read-only, or a host restarted: the kernel says why.

    Args:
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
        since: the window's start: a span before now ("30m", "2h", "1d") or an ISO 8601 time (UTC without offset).
        until: the window's end, in the same forms; default now.
    """
    on = reach.target(host, ctx)
    start, end = window(since, until)
    scan = await read_journal(on, ctx, start, end, ["_TRANSPORT=kernel"], newest_first=True)
    name = reach.host_name(on)
    span = f"between {iso(start)} and {iso(end)}"
    notes = [n for n in (_cut_note(scan, True), scan.note) if n]
    if not scan.entries:
        return "\n".join([f"no kernel messages in the journal of {name} {span}", *notes])
    counts: dict[str, int] = {}
    latest: dict[str, Entry] = {}
    boots: dict[str, tuple[float, float]] = {}  # boot ID: its first and last kernel message in the window
    for entry in scan.entries:  # newest first: the first one seen of a kind is its latest
        if entry.boot:
            first, last = boots.get(entry.boot, (entry.at, entry.at))
            boots[entry.boot] = (min(first, entry.at), max(last, entry.at))
        if (kind := _kind(entry.message)) is not None:
            counts[kind.name] = counts.get(kind.name, 0) + 1
            latest.setdefault(kind.name, entry)
    head = f"kernel events on {name} {span} ({len(scan.entries)} kernel messages read)"
    lines = [head, *notes]
    if not counts:
        looked = ", ".join(k.name for k in KINDS)
        lines.append(f"no kernel events ({looked}) in the journal of {name} {span}")
    lines += [f"{k.name}: {counts[k.name]}, latest: {latest[k.name].line()}" for k in KINDS if k.name in counts]
    ordered = sorted(boots.items(), key=lambda b: b[1][0])
    lines.append(f"boot IDs in the window ({len(ordered)}, oldest first):")
    lines += [f"  {boot} first {iso(first)} last {iso(last)}" for boot, (first, last) in ordered[-20:]]
    if len(ordered) > 20:
        lines.append(f"  … and {len(ordered) - 20} older boots not listed")
    return "\n".join(lines)
