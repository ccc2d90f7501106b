"""tail_log, grep_log and clean_logs, on this machine or an inventory host alike: fixed `sh -c` scripts run through
tools.builtin.reach.run, whose model-given values arrive only as quoted "$@" arguments, with paths resolved and
confined on the host itself."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath

from tools.api import BadCall
from tools.builtin import reach
from tools.builtin.files import resolve
from tools.builtin.log_cleanup import (
    Candidate,
    Outcome,
    Scan,
    choose,
    clean_report,
    file_line,
    preview_text,
    printable_path,
)
from tools.builtin.log_reads import (
    MAX_GREP_FILES,
    FileMatches,
    FileRing,
    LogFile,
    Match,
    check_count,
    compile_pattern,
    grep_text,
    histogram_text,
    is_rotated,
    list_logs_text,
    tail_text,
    tail_window_text,
    window_grep_text,
)
from tools.builtin.log_times import Clock, Window, duration, line_time
from tools.registry import ToolContext, ToolError
from tools.remote.command import Result
from tools.remote.ere import Ere, translate
from tools.remote.inventory import Host

# Paths are resolved on the host (realpath) and checked here against its log_dirs (this machine's: [tools.logs]
# dirs; an inventory host's default to those too), then only the resolved path is used. grep_log's pattern is
# compiled by RE2 here first (what RE2 refuses is refused; GNU grep -E would accept backreferences), then
# translated to a POSIX ERE for `grep -E` (tools/remote/ere.py). Every command is a fixed program or a fixed
# `sh -c` script whose model-given values arrive as quoted "$@" arguments.

_TIMEOUT_S = 45.0  # one command, under the tools' own 60 s (clean_logs: 120 s, several commands)
_LINE_BYTES = 2_000  # a line is cut here on the host (then to MAX_LINE_CHARS here)
_DELETE_BATCH = 100  # files checked and deleted per remote command

_DECOMPRESS = (
    'dec() { case $1 in *.gz) gzip -dc -- "$1";; *.bz2) bzip2 -dc -- "$1";; *.xz) xz -dc -- "$1";; '
    '*.zst) zstd -dc -- "$1";; *) cat -- "$1";; esac; }; '
)
_TAIL_SCRIPT = (
    _DECOMPRESS + "stat -L -c %s -- \"$1\" || exit 1; printf '\\0'; "
    f'case $1 in *.gz|*.bz2|*.xz|*.zst) dec "$1" | tail -n "$2";; *) tail -n "$2" -- "$1";; esac '
    f"| cut -b 1-{_LINE_BYTES}"
)
# Both grep scripts, once $pat (an ERE) and $LC_ALL (the locale it matches in: C: bytes; C.UTF-8: characters,
# checked to work, else "no-utf8") are set and the files are "$@": per file, its path and its number of matching
# lines (or "not-utf8": C.UTF-8 and a line that is not valid UTF-8), each ending in \0; then $n is that number.
# The locale is never the host's own: the ERE names every class explicitly (tools/remote/ere.py).
_COUNT_EACH = (
    'if [ "$LC_ALL" != C ] && [ "$(printf \'\\303\\251\\n\' | grep -c -x -e .)" != 1 ]; then '
    "printf 'no-utf8\\0'; exit 0; fi; for f do "
    'if [ "$LC_ALL" != C ] && dec "$f" 2>/dev/null | grep -I -q -v -x -e ".*"; then '
    "printf '%s\\0not-utf8\\0\\0' \"$f\"; continue; fi; "
    'n=$(dec "$f" 2>/dev/null | grep -E -I -c -e "$pat"); n=${n:-0}; printf \'%s\\0%s\\0\' "$f" "$n"; '
)
# $1 pattern, $2 how many lines may still be listed, $3 the locale; then the files. Per file (_COUNT_EACH), then the
# matches still listable (NUMBER:LINE), ending in \0.
_GREP_SCRIPT = (
    _DECOMPRESS
    + "pat=$1; left=$2; LC_ALL=$3; export LC_ALL; shift 3; "
    + _COUNT_EACH
    + 'if [ "$n" -gt 0 ] && [ "$left" -gt 0 ]; then '
    f'dec "$f" 2>/dev/null | grep -E -I -n -m "$left" -e "$pat" | cut -b 1-{_LINE_BYTES}; '
    "left=$((left - n)); fi; printf '\\0'; done"
)
# Windowed and newest-first reads. Each starts with the host's clock (`date +'%s %z'`, then \0): "30m" and a time
# without a zone are the host's. tail_log streams the file from its end (`tac`), up to _WINDOW_READ_BYTES; grep_log
# streams, per file, its count of matching lines and the newest bytes (`tail -c`, a ring on the host) of
# `grep -n -B _CONTEXT`: each match with the lines before it, context lines cut to their first _CONTEXT_BYTES (where
# a time is), so a continuation line (a stack trace's) takes the time of the line that starts its entry.
_CLOCK = "date '+%s %z'; printf '\\0'; "
_WINDOW_READ_BYTES = 32 * 1024 * 1024
_CONTEXT = 30
_CONTEXT_BYTES = 200
_RING_BYTES = 16 * 1024 * 1024  # grep's ring, shared by the files searched (at least _MIN_RING each)
_MIN_RING = 64 * 1024
_TAC_SCRIPT = (
    _DECOMPRESS + _CLOCK + "stat -L -c %s -- \"$1\" || exit 1; printf '\\0'; "
    f'case $1 in *.gz|*.bz2|*.xz|*.zst) dec "$1" | tac;; *) tac -- "$1";; esac | cut -b 1-{_LINE_BYTES}'
)
# $1 ERE, $2 locale, $3 ring bytes per file; then the files. Per file (_COUNT_EACH), then the ring, ending in \0.
_RING_SCRIPT = (
    _DECOMPRESS
    + _CLOCK
    + "pat=$1; LC_ALL=$2; export LC_ALL; ring=$3; shift 3; "
    + _COUNT_EACH
    + 'if [ "$n" -gt 0 ]; then '
    f'dec "$f" 2>/dev/null | grep -E -I -n -B {_CONTEXT} -e "$pat" | cut -b 1-{_LINE_BYTES} '
    f"| sed -E 's/^([0-9]+-.{{0,{_CONTEXT_BYTES}}}).*/\\1/' | tail -c \"$ring\"; fi; printf '\\0'; done"
)
# The host's clock, then the regular files under the directories given: mtime, size, path.
_LIST_SCRIPT = _CLOCK + "find \"$@\" -type f -printf '%T@\\t%s\\t%p\\0'"
# The host's clock, then every entry under $1 on its filesystem: type, inode, size, mtime, path.
_SCAN_SCRIPT = "date +%s.%N; printf '\\0'; find \"$1\" -xdev -mindepth 1 -printf '%y\\t%i\\t%s\\t%T@\\t%p\\0'"
# Arguments in fours (path, inode, size, mtime as find printed it): each is removed only if it is still that
# very regular file; one status per file, each ending in \0 (failed is followed by rm's message).
_DELETE_SCRIPT = (
    'while [ "$#" -ge 4 ]; do p=$1; want=$(printf \'f\\t%s\\t%s\\t%s\' "$2" "$3" "$4"); shift 4; '
    "cur=$(find \"$p\" -maxdepth 0 -printf '%y\\t%i\\t%s\\t%T@' 2>/dev/null); "
    'if [ -z "$cur" ]; then printf \'gone\\0\'; elif [ "$cur" != "$want" ]; then printf \'changed\\0\'; '
    "elif err=$(rm -- \"$p\" 2>&1); then printf 'deleted\\0'; else printf 'failed\\0%s\\0' \"$err\"; fi; done"
)


def _host_log_dirs(host: Host | None, ctx: ToolContext) -> list[str]:
    return list(host.log_dirs) if host is not None and host.log_dirs is not None else [str(d) for d in ctx.log_dirs]


async def _allowed(host: Host | None, path: str, ctx: ToolContext) -> tuple[PurePosixPath, str]:
    """`path` resolved on `host` and inside one of its log_dirs (resolved there too), with its type (d, f, o, -)."""
    if not path.strip():
        raise BadCall("path: must not be empty")
    dirs = _host_log_dirs(host, ctx)
    raw = PurePosixPath(path)
    candidates = [str(raw)] if raw.is_absolute() else [str(PurePosixPath(d) / raw) for d in dirs]
    resolved = await resolve(host, ctx, [*dirs, *candidates])  # realpath: absolute paths
    roots = [r for kind, r in resolved[: len(dirs)] if kind == "d"]
    inside = [(r, kind) for kind, r in resolved[len(dirs) :] if any(r.is_relative_to(root) for root in roots)]
    if inside:
        return next((c for c in inside if c[1] != "-"), inside[0])
    raise ToolError(f"{reach.host_name(host)}: path is outside the allowed log directories ({', '.join(dirs)}): {path}")


async def _regular_file(host: Host | None, path: str, ctx: ToolContext) -> PurePosixPath:
    file, kind = await _allowed(host, path, ctx)
    if kind == "-":
        raise BadCall(f"no such file: {path}")
    if kind != "f":
        raise ToolError(f"not a regular file: {path}")
    return file


async def tail(host: Host | None, path: str, lines: int, ctx: ToolContext) -> str:
    check_count("lines", lines)
    file = await _regular_file(host, path, ctx)
    result = await reach.run(
        ctx,
        host,
        ["sh", "-c", _TAIL_SCRIPT, "sh", str(file), str(lines)],
        timeout_s=_TIMEOUT_S,
        max_bytes=lines * (_LINE_BYTES + 1) + 64,
    )
    size, sep, text = result.stdout.partition("\0")
    if result.exit_status != 0 or not sep or not size.strip().isdigit():
        raise reach.failed(host, f"tail {file}", result)
    return tail_text(str(file), text.splitlines()[-lines:], int(size))


async def _files(host: Host | None, root: PurePosixPath, ctx: ToolContext) -> tuple[list[str], int]:
    """Regular files under `root` on the host (symlinks are not followed), sorted, at most MAX_GREP_FILES; and how
    many there are in all."""
    result = await reach.run(
        ctx, host, ["find", str(root), "-type", "f", "-print0"], timeout_s=_TIMEOUT_S, max_bytes=8 * 1024 * 1024
    )
    if result.exit_status != 0 and not result.stdout:
        raise reach.failed(host, f"find {root}", result)
    entries = result.stdout.split("\0")[:-1]  # a cut-off last entry has no \0 after it
    return sorted(entries, key=PurePosixPath)[:MAX_GREP_FILES], len(entries)  # in the order the local walk takes


@dataclass(frozen=True)
class GrepTargets:
    """What a grep searches: the pattern as an ERE, the path resolved (its type) and its files (`found` in all)."""

    expression: Ere
    target: PurePosixPath
    kind: str
    files: list[str]
    found: int

    @property
    def where(self) -> str:
        return str(self.target) if self.kind == "f" else f"{len(self.files)} files under {self.target}"

    def name(self, file: str) -> str:
        """How a match of `file` is shown: bare for one file, its path under the directory otherwise."""
        return "" if self.kind == "f" else str(PurePosixPath(file).relative_to(self.target))


async def _grep_targets(host: Host | None, path: str, pattern: str, ctx: ToolContext) -> GrepTargets:
    compile_pattern(pattern)  # RE2 decides what is accepted, exactly as locally
    expression = translate(pattern)
    target, kind = await _allowed(host, path, ctx)
    if kind == "-":
        raise BadCall(f"no such file or directory: {path}")
    files, found = ([str(target)], 1) if kind == "f" else await _files(host, target, ctx) if kind == "d" else ([], 0)
    return GrepTargets(expression, target, kind, files, found)


def _grep_parts(host: Host | None, targets: GrepTargets, result: Result, head: int) -> list[str]:
    """The grep script's output after its first `head` parts, three per file; the refusals it reports raised."""
    parts = result.stdout.split("\0")
    expression = targets.expression
    if result.exit_status == 0 and parts[head] == "no-utf8":
        raise ToolError(
            f"grep_log: {reach.host_name(host)} has no working C.UTF-8 locale, which this pattern needs for "
            f"{expression.characters} (one character, not one byte); rewrite it without"
        )
    parts = parts[head:]
    if result.exit_status != 0 or len(parts) != 3 * len(targets.files) + 1:
        raise reach.failed(host, "grep", result)
    if bad := [parts[3 * k] for k in range(len(targets.files)) if parts[3 * k + 1] == "not-utf8"]:
        raise ToolError(
            f"grep_log: on {reach.host_name(host)}, {printable_path(Path(bad[0]))} is not valid UTF-8 text, where "
            f"{expression.characters} cannot be matched one character at a time; rewrite the pattern without it"
        )
    return parts


async def grep(host: Host | None, path: str, pattern: str, max_matches: int, ctx: ToolContext) -> str:
    """grep_log without a window, oldest first: the first max_matches matching lines, every match counted."""
    check_count("max_matches", max_matches)
    targets = await _grep_targets(host, path, pattern, ctx)
    files, expression = targets.files, targets.expression
    if not files:
        return grep_text(pattern, targets.where, [], [])
    argv = ["sh", "-c", _GREP_SCRIPT, "sh", expression.expression, str(max_matches), expression.locale, *files]
    budget = max_matches * (_LINE_BYTES + 16) + sum(len(f) + 16 for f in files) + 1024
    result = await reach.run(ctx, host, argv, timeout_s=_TIMEOUT_S, max_bytes=budget)
    parts = _grep_parts(host, targets, result, 0)
    shown: list[str] = []
    searched: list[FileMatches] = []
    for k in range(len(files)):
        file, count, matches = parts[3 * k : 3 * k + 3]
        name = targets.name(file)
        listed = 0
        for line in matches.split("\n"):  # only newlines end a line (str.splitlines also cuts at \v, \f…)
            lineno, _, text = line.partition(":")
            if len(shown) < max_matches and lineno.isdigit():
                shown.append(Match(name, int(lineno), None, text).shown())
                listed += 1
        searched.append(FileMatches(name or str(targets.target), int(count) if count.isdigit() else 0, listed))
    return grep_text(pattern, targets.where, searched, shown, unsearched=targets.found - len(files))


# -- windowed and newest-first reads ---------------------------------------------------------------------------

_NUMBERED_RE = re.compile(r"(\d+)([:-])(.*)", re.S)  # grep -n: "N:" a match, "N-" a line before one


def _ring_matches(file: str, ring: str, full: bool, clock: Clock) -> list[Match]:
    """The matches in one file's ring, each with its time: its own, or that of the line before it that has one
    (within the context grep printed; none across a gap in the line numbers). A full ring's first line is cut."""
    lines = ring.split("\n")[1 if full else 0 :]
    found: list[Match] = []
    current: datetime | None = None
    previous = -1
    for line in lines:  # only newlines end a line (str.splitlines also cuts at \v, \f…)
        numbered = _NUMBERED_RE.match(line)
        if numbered is None:
            continue  # grep's "--" between groups, a cut line
        number, text = int(numbered[1]), numbered[3]
        if number != previous + 1:
            current = None
        previous = number
        current = line_time(text, clock) or current
        if numbered[2] == ":":
            found.append(Match(file, number, current, text))
    return found


async def _ring(host: Host | None, targets: GrepTargets, ctx: ToolContext) -> tuple[Clock, list[FileRing]]:
    """Every file's count of matching lines and its newest matches (those the ring kept), with their times."""
    files, expression = targets.files, targets.expression
    ring = max(_MIN_RING, _RING_BYTES // max(len(files), 1))
    argv = ["sh", "-c", _RING_SCRIPT, "sh", expression.expression, expression.locale, str(ring), *files]
    budget = len(files) * (ring + 64) + sum(len(f) for f in files) + 1024
    result = await reach.run(ctx, host, argv, timeout_s=_TIMEOUT_S, max_bytes=budget)
    clock_text, _, _ = result.stdout.partition("\0")
    parts = _grep_parts(host, targets, result, 1)
    clock = Clock.parse(clock_text)
    rings = []
    for k, file in enumerate(files):
        count, text = parts[3 * k + 1], parts[3 * k + 2]
        full = len(text.encode()) >= ring
        rings.append(
            FileRing(targets.name(file), int(count or 0), _ring_matches(targets.name(file), text, full, clock))
        )
    return clock, rings


async def grep_window(
    host: Host | None,
    path: str,
    pattern: str,
    max_matches: int,
    window: tuple[str | None, str | None],
    newest_first: bool,
    ctx: ToolContext,
) -> str:
    """grep_log with since/until or newest_first: the files' newest matches, windowed by their times."""
    check_count("max_matches", max_matches)
    Window.check(*window)
    targets = await _grep_targets(host, path, pattern, ctx)
    if not targets.files:
        return grep_text(pattern, targets.where, [], [])
    clock, rings = await _ring(host, targets, ctx)
    return window_grep_text(
        pattern,
        targets.where,
        rings,
        Window.of(*window, clock),
        clock,
        max_matches,
        newest_first,
        unsearched=targets.found - len(targets.files),
    )


async def histogram(
    host: Host | None, path: str, pattern: str, window: tuple[str, str | None], bucket: str, ctx: ToolContext
) -> str:
    """log_histogram: the matching lines in the window (until: the host's now), counted per bucket."""
    width = duration(bucket, "bucket")
    Window.check(*window)
    targets = await _grep_targets(host, path, pattern, ctx)
    if not targets.files:
        return f"no files under {targets.target} to count /{pattern}/ in"
    clock, rings = await _ring(host, targets, ctx)
    since, until = window
    window_ = Window.of(since, until or clock.now.isoformat(), clock)
    return histogram_text(pattern, targets.where, rings, window_, clock, width)


async def tail_window(
    host: Host | None, path: str, lines: int, window: tuple[str | None, str | None], ctx: ToolContext
) -> str:
    """tail_log with since/until: the file read from its end, the last `lines` lines whose time is in the window
    (a line with no time takes that of the line that starts its entry)."""
    check_count("lines", lines)
    Window.check(*window)
    file = await _regular_file(host, path, ctx)
    argv = ["sh", "-c", _TAC_SCRIPT, "sh", str(file)]
    result = await reach.run(ctx, host, argv, timeout_s=_TIMEOUT_S, max_bytes=_WINDOW_READ_BYTES)
    clock_text, _, rest = result.stdout.partition("\0")
    size, sep, text = rest.partition("\0")
    if (result.exit_status != 0 and not result.truncated) or not sep or not size.strip().isdigit():
        raise reach.failed(host, f"tail {file}", result)
    clock = Clock.parse(clock_text)
    newest_first = text.split("\n")
    newest_first = newest_first[:-1]  # after the last \n: nothing, or a line the read cut
    return tail_window_text(
        str(file),
        newest_first,
        lines,
        Window.of(*window, clock),
        clock,
        int(size),
        cut_at=_WINDOW_READ_BYTES if result.truncated else None,
    )


async def list_files(host: Host | None, ctx: ToolContext) -> str:
    """list_logs: the regular files under the host's log directories, newest write first."""
    dirs = _host_log_dirs(host, ctx)
    resolved = await resolve(host, ctx, dirs)
    roots = sorted({str(r) for kind, r in resolved if kind == "d"})
    missing = [d for d, (kind, _) in zip(dirs, resolved, strict=True) if kind != "d"]
    entries: list[LogFile] = []
    clock = None
    if roots:
        argv = ["sh", "-c", _LIST_SCRIPT, "sh", *roots]
        result = await reach.run(ctx, host, argv, timeout_s=_TIMEOUT_S, max_bytes=8 * 1024 * 1024)
        clock_text, sep, listing = result.stdout.partition("\0")
        if not sep or (result.exit_status != 0 and not listing):
            raise reach.failed(host, "find", result)
        clock = Clock.parse(clock_text)
        for entry in listing.split("\0")[:-1]:
            mtime, _, rest = entry.partition("\t")
            size, _, name = rest.partition("\t")
            if size.isdigit() and name:
                entries.append(LogFile(printable_path(Path(name)), int(size), float(mtime)))
    return list_logs_text(reach.host_name(host), dirs, missing, entries, clock)


# -- clean_logs ------------------------------------------------------------------------------------


def _ns(mtime: str) -> int:
    """find's %T@ ("1700000000.1234567890") as integer nanoseconds."""
    seconds, _, fraction = mtime.partition(".")
    return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])


@dataclass(frozen=True)
class HostScan:
    scan: Scan
    now: float  # the host's clock
    mtimes: dict[str, str]  # path -> mtime exactly as find printed it (what the delete script compares)


async def _candidates(host: Host | None, path: str, older_than_days: int, ctx: ToolContext) -> HostScan:
    if older_than_days < 0:
        raise ToolError(f"older_than_days: must be 0 or more, got {older_than_days}")
    root, kind = await _allowed(host, path, ctx)
    if kind != "d":
        raise ToolError(f"not a directory: {path} (clean_logs works on a log directory)")
    result = await reach.run(
        ctx, host, ["sh", "-c", _SCAN_SCRIPT, "sh", str(root)], timeout_s=_TIMEOUT_S, max_bytes=32 * 1024 * 1024
    )
    clock, sep, listing = result.stdout.partition("\0")
    if result.truncated:
        raise ToolError(f"{reach.host_name(host)}: {root} holds too many entries to list; clean a subdirectory")
    if not sep or (result.exit_status != 0 and not listing):
        raise reach.failed(host, f"find {root}", result)
    now = float(clock.strip())
    cutoff_ns = int((now - older_than_days * 86_400) * 1e9)
    found: list[Candidate] = []
    present: set[str] = set()
    mtimes: dict[str, str] = {}
    for entry in listing.split("\0")[:-1]:
        fields = entry.split("\t", 4)
        if len(fields) != 5 or not fields[1].isdigit() or not fields[2].isdigit():
            continue
        kind, inode, size, mtime, p = fields
        present.add(printable_path(Path(p)))
        if kind != "f" or not is_rotated(PurePosixPath(p).name):
            continue
        c = Candidate(Path(p), int(size), int(inode), _ns(mtime))
        if c.mtime_ns < cutoff_ns:
            found.append(c)
            mtimes[p] = mtime
    found.sort(key=lambda c: str(c.path))
    return HostScan(Scan(Path(str(root)), found, frozenset(present)), now, mtimes)


async def _delete(
    host: Host | None, scanned: HostScan, chosen: list[Candidate], outcome: Outcome, ctx: ToolContext
) -> None:
    now = scanned.now
    for start in range(0, len(chosen), _DELETE_BATCH):
        batch = chosen[start : start + _DELETE_BATCH]
        args = [a for c in batch for a in (str(c.path), str(c.inode), str(c.size), scanned.mtimes[str(c.path)])]
        result = await reach.run(ctx, host, ["sh", "-c", _DELETE_SCRIPT, "sh", *args], timeout_s=_TIMEOUT_S)
        statuses = iter(result.stdout.split("\0"))
        for c in batch:
            status = next(statuses, "")
            if status == "deleted":
                outcome.deleted.append(c)
            elif status == "gone":
                outcome.gone.append(file_line(c, now))
            elif status == "changed":
                outcome.changed.append(file_line(c, now))
            elif status == "failed":
                outcome.failed.append(f"  could not delete {printable_path(c.path)}: {next(statuses, '').strip()}")
            else:  # the command died part-way: say so for every file it did not answer for
                outcome.failed.append(
                    f"  could not delete {printable_path(c.path)}: no answer from {reach.host_name(host)} "
                    f"(exit {result.exit_status})"
                )


async def clean(
    host: Host | None, path: str, older_than_days: int, confirmed_by: str, approved_preview: str, ctx: ToolContext
) -> str:
    """clean_logs on `host`: what the approved preview stands for (tools/builtin/log_cleanup.py), deleted there."""
    scanned = await _candidates(host, path, older_than_days, ctx)
    outcome = Outcome()
    chosen, unapproved, unnamed = choose(scanned.scan, approved_preview, outcome)
    await _delete(host, scanned, chosen, outcome, ctx)
    return clean_report(scanned.scan, outcome, unapproved, unnamed, older_than_days, confirmed_by, scanned.now)


async def clean_preview(host: Host | None, path: str, older_than_days: int, ctx: ToolContext) -> str:
    scanned = await _candidates(host, path, older_than_days, ctx)
    return preview_text(scanned.scan, older_than_days, scanned.now)
