"""What the log tools decide before any command runs and how they word the answer: their limits, what counts as a
rotated log, and the texts of tail_log and grep_log."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from tools.builtin.host import human_bytes
from tools.builtin.log_times import Clock, Window, line_time, show_duration
from tools.patterns import compile_pattern as compile_pattern  # the log tools take this pattern (re-exported)
from tools.registry import ToolError

MAX_TAIL_LINES = 5_000
MAX_LINE_CHARS = 500  # a line shown is cut here
MAX_GREP_FILES = 1_000
LISTED_FILES = 50  # clean_logs previews name this many files; the list digest covers all of them

_COMPRESSED_RE = re.compile(r"\.(?:gz|bz2|xz|zst)$")
_DATE = r"(?:19|20)\d\d-?(?:0[1-9]|1[0-2])-?(?:0[1-9]|[12]\d|3[01])"
# What rotation appends: app.log.1, app.log-20261130 (optionally -<seconds>), app.log.2026-11-30, x.log.old
_ROTATION_RE = re.compile(rf"(?:\.\d{{1,4}}|[._-]{_DATE}(?:[._-]\d{{1,10}})?|\.old)$")
# Logs that are named without "log": syslog's siblings on Debian and Red Hat
_LOG_NAMES = frozenset(
    {
        "messages",
        "secure",
        "cron",
        "dmesg",
        "debug",
        "kern",
        "auth",
        "daemon",
        "mail",
        "user",
        "boot",
        "btmp",
        "wtmp",
        "spooler",
    }
)


def is_rotated(name: str) -> bool:
    """A rotated or compressed log: a log-ish stem (app.log, syslog, messages) plus a rotation suffix
    (.1, -20261130, .old) and/or compression (app.log.2.gz, app-2026-11-30.log.gz). Never a live *.log,
    never an archive or dump (backup-2026-11-30.tar.gz, db-2026.sql.gz)."""
    stem, compressed = _COMPRESSED_RE.subn("", name)
    stem, rotated = _ROTATION_RE.subn("", stem)
    return bool(compressed or rotated) and (stem.lower().endswith("log") or stem.lower() in _LOG_NAMES)


def clip(line: str) -> str:
    line = line.rstrip("\n")
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " …"


def check_count(name: str, value: int) -> None:
    """tail_log's lines and grep_log's max_matches: 1 to MAX_TAIL_LINES."""
    if not 1 <= value <= MAX_TAIL_LINES:
        raise ToolError(f"{name}: must be between 1 and {MAX_TAIL_LINES}, got {value}")


def tail_text(shown: str, lines: list[str], size: int) -> str:
    return f"{shown} (last {len(lines)} lines, {human_bytes(size)})\n" + "\n".join(clip(line) for line in lines)


NAMED_FILES = 20  # grep_log names up to this many of the files it searched, and of those whose matches it cut


@dataclass(frozen=True)
class FileMatches:
    """One file grep_log searched: its name as shown, how many lines matched, how many of them are listed."""

    name: str
    matched: int
    listed: int


def _named(items: list[str]) -> str:
    more = len(items) - NAMED_FILES
    return ", ".join(items[:NAMED_FILES]) + (f", … and {more} more" if more > 0 else "")


def _coverage(per_file: list[str], unsearched: int) -> list[str]:
    """For a directory: the files searched in path order, each with its count, and those left unsearched."""
    lines = ["searched in path order: " + _named(per_file)] if len(per_file) > 1 or unsearched else []
    if unsearched:
        lines.append(f"not searched: {unsearched} files past the first {MAX_GREP_FILES} (name a subdirectory)")
    return lines


def grep_text(pattern: str, where: str, searched: list[FileMatches], shown: list[str], *, unsearched: int = 0) -> str:
    """What grep_log found and what it covered: for a directory, the files searched in order with their counts,
    those past MAX_GREP_FILES left unsearched, and the files whose matches were cut at max_matches."""
    total = sum(f.matched for f in searched)
    more = f", showing the first {len(shown)}" if total > len(shown) else ""
    lines = [f"{total} matching lines for /{pattern}/ in {where}{more}"]
    lines += _coverage([f"{f.name} ({f.matched})" for f in searched], unsearched)
    lines += shown
    if cut := [f"{f.name} ({f.matched - f.listed})" for f in searched if f.matched > f.listed and len(searched) > 1]:
        lines.append("matching lines not shown (raise max_matches or name one file): " + _named(cut))
    return "\n".join(lines)


# -- windowed and newest-first reads ---------------------------------------------------------------------------

MAX_BUCKETS = 60  # log_histogram's rows; a finer bucket over a longer window is widened to fit
LISTED_LOGS = 50  # list_logs rows
_BAR = 30  # the peak bucket's bar, in characters
_ROUND_BUCKETS = [timedelta(seconds=s) for s in (1, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800)] + [
    timedelta(hours=h) for h in (6, 12, 24, 48, 168)
]


@dataclass(frozen=True)
class Match:
    """A matching line: its file as shown ("" for one file), its line number, its time (None: none recognised)."""

    file: str
    lineno: int
    time: datetime | None
    text: str

    def shown(self) -> str:
        return f"{self.file + ':' if self.file else ''}{self.lineno}: {clip(self.text)}"


@dataclass(frozen=True)
class FileRing:
    """One file searched for a window: how many lines matched in all, and the newest of them that were read."""

    name: str
    count: int
    matches: list[Match]

    @property
    def cut(self) -> bool:
        return len(self.matches) < self.count


@dataclass(frozen=True)
class Counted:
    """What a window holds of the files' matches, and what could not be counted in it, as notes."""

    matches: list[Match]  # in the window, oldest first
    at_least: bool  # some file's older matches were not read, and may be in the window
    notes: list[str]
    newest: datetime | None  # the newest matching line's time, in the window or not


def _clock_time(t: datetime, clock: Clock) -> str:
    return t.astimezone(clock.zone).isoformat(timespec="seconds")


def count_in(rings: list[FileRing], window: Window, clock: Clock) -> Counted:
    found: list[tuple[datetime, int, int, Match]] = []
    notes: list[str] = []
    at_least = False
    newest: datetime | None = None
    for rank, ring in enumerate(rings):
        name = ring.name or "the file"
        timed = [m for m in ring.matches if m.time is not None]
        if ring.matches and not timed and not window.open:
            notes.append(
                f"no timestamps recognised in {name}: the window could not apply to its {ring.count} matching "
                "lines (not counted, not shown); search it without since/until"
            )
            continue
        if untimed := len(ring.matches) - len(timed) if not window.open else 0:
            notes.append(f"{name}: {untimed} matching lines with no time found for them, not counted")
        for m in ring.matches if window.open else timed:
            if window.open or window.holds(m.time):  # type: ignore[arg-type]
                found.append((m.time or datetime.min.replace(tzinfo=clock.zone), -rank, m.lineno, m))
        newest = max([t for t in (newest, *(m.time for m in timed)) if t is not None], default=None)
        reached = window.since is not None and any(m.time < window.since for m in timed)  # type: ignore[operator]
        if ring.cut and not window.open and not reached:
            at_least = True
            oldest = min((m.time for m in timed if m.time is not None), default=None)
            since = f" (before {_clock_time(oldest, clock)})" if oldest else ""
            notes.append(
                f"{name}: only its newest {len(ring.matches)} of {ring.count} matching lines were read; the older "
                f"ones{since} are not counted: narrow the pattern or the window"
            )
    found.sort(key=lambda f: f[:3])
    return Counted([f[3] for f in found], at_least, notes, newest)


def window_grep_text(
    pattern: str,
    where: str,
    rings: list[FileRing],
    window: Window,
    clock: Clock,
    max_matches: int,
    newest_first: bool,
    *,
    unsearched: int = 0,
) -> str:
    """grep_log's answer with a window or newest first: the count in the window (and in all), per file for a
    directory, what could not be counted, then the matches, newest first when asked."""
    counted = count_in(rings, window, clock)
    total = sum(r.count for r in rings)
    in_window = total if window.open else len(counted.matches)
    ordered = counted.matches[::-1] if newest_first else counted.matches
    shown = ordered[:max_matches]
    head = f"{'at least ' if counted.at_least else ''}{in_window} matching lines for /{pattern}/ in {where}"
    if not window.open:
        head += f" {window.describe(clock)} ({total} in all)"
    if len(shown) < in_window:
        head += f", showing the {'newest' if newest_first else 'first'} {len(shown)}"
    per_file = [
        f"{r.name} ({r.count})"
        if window.open
        else f"{r.name} ({sum(m.file == r.name for m in counted.matches)} of {r.count})"
        for r in rings
    ]
    lines = [head, *_coverage(per_file, unsearched), *counted.notes]
    if not counted.matches and counted.newest is not None and total:
        lines.append(f"the newest matching line is at {_clock_time(counted.newest, clock)}")
    return "\n".join(lines + [m.shown() for m in shown])


def _bucket_width(window: Window, width: timedelta) -> timedelta:
    assert window.since is not None and window.until is not None
    span = window.until - window.since
    if span / width <= MAX_BUCKETS:
        return width
    return next((w for w in _ROUND_BUCKETS if span / w <= MAX_BUCKETS), span / MAX_BUCKETS)


def histogram_text(
    pattern: str, where: str, rings: list[FileRing], window: Window, clock: Clock, bucket: timedelta
) -> str:
    """log_histogram's answer: one row per bucket over the window (at most MAX_BUCKETS), its count and a bar; the
    first bucket with a match and the peak named up front."""
    assert window.since is not None and window.until is not None
    width = _bucket_width(window, bucket)
    counted = count_in(rings, window, clock)
    start = datetime.fromtimestamp(
        window.since.timestamp() // width.total_seconds() * width.total_seconds(), clock.zone
    )
    counts = [0] * (int((window.until - start) / width) + 1)
    for m in counted.matches:
        counts[int((m.time - start) / width)] += 1  # type: ignore[operator]
    fmt = "%Y-%m-%d %H:%M" if width >= timedelta(minutes=1) else "%Y-%m-%d %H:%M:%S"

    def label(k: int) -> str:
        return (start + k * width).strftime(fmt)

    n = len(counted.matches)
    widened = f" (widened from {show_duration(bucket)}: at most {MAX_BUCKETS} buckets)" if width != bucket else ""
    head = (
        f"{'at least ' if counted.at_least else ''}{n} matching lines for /{pattern}/ in {where} "
        f"{window.describe(clock)}, per {show_duration(width)}{widened}"
    )
    if not n:
        newest = f"; the newest matching line is at {_clock_time(counted.newest, clock)}" if counted.newest else ""
        total = sum(r.count for r in rings)
        return "\n".join([head + f" ({total} in all{newest})", *counted.notes])
    peak = max(range(len(counts)), key=lambda k: counts[k])
    first = next(k for k, c in enumerate(counts) if c)
    lines = [head, f"first: {label(first)} ({counts[first]}); peak: {label(peak)} ({counts[peak]})", *counted.notes]
    for k, c in enumerate(counts):
        lines.append(f"{label(k)} {c:>6} {'#' * -(-c * _BAR // counts[peak])}".rstrip())
    return "\n".join(lines)


def tail_window_text(
    file: str, newest_first: list[str], lines: int, window: Window, clock: Clock, size: int, *, cut_at: int | None
) -> str:
    """tail_log's answer with a window: the last `lines` lines whose time is in it, oldest first. A line with no
    time belongs to the entry above it (its time): lines read newest first wait for the line that starts them."""
    kept: list[str] = []  # newest first
    pending: list[str] = []  # lines with no time, newest first, waiting for the line that starts their entry
    newest: datetime | None = None
    reached = False
    for line in newest_first:
        t = line_time(line, clock)
        if t is None:
            pending.append(line)
            continue
        newest = newest or t
        entry, pending = [*pending, line], []
        if window.since is not None and t < window.since:
            reached = True
            break
        if window.holds(t):
            kept += entry
            if len(kept) >= lines:
                break
    shown = kept[:lines][::-1]
    what = window.describe(clock)
    if newest is None:
        return (
            f"{file}: no timestamps recognised in the {len(newest_first)} lines read from its end, so the window "
            f"({what}) could not apply; use tail_log without since/until"
        )
    if not shown:
        return f"no lines in {file} {what} ({human_bytes(size)}; its newest line is at {_clock_time(newest, clock)})"
    text = f"{file} (last {len(shown)} lines {what}, {human_bytes(size)})"
    if cut_at is not None and not reached and len(kept) < lines:
        text += f"\nread only the newest {human_bytes(cut_at)} of the file: older lines in the window were not reached"
    return text + "\n" + "\n".join(clip(line) for line in shown)


@dataclass(frozen=True)
class LogFile:
    path: str
    size: int
    mtime: float


def list_logs_text(host: str, dirs: list[str], missing: list[str], files: list[LogFile], clock: Clock | None) -> str:
    """list_logs' answer: the newest LISTED_LOGS files by last write, with size, and how many more."""
    where = ", ".join(dirs)
    notes = [f"not a directory on {host}: {', '.join(missing)}"] if missing else []
    if not files or clock is None:
        return "\n".join([f"no log files under {where} on {host}", *notes])
    files = sorted(files, key=lambda f: (-f.mtime, f.path))
    offset = clock.now.strftime("%z")
    more = len(files) - LISTED_LOGS
    head = f"{len(files)} log files under {where} on {host}, newest write first (times UTC{offset[:3]}:{offset[3:]})"
    if more > 0:
        head += f", showing {LISTED_LOGS}; {more} more, older"
    rows = [
        f"{datetime.fromtimestamp(f.mtime, clock.zone):%Y-%m-%d %H:%M:%S} {human_bytes(f.size):>7}  {f.path}"
        for f in files[:LISTED_LOGS]
    ]
    return "\n".join([head, *notes, *rows])
