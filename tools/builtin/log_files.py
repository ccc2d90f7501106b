"""tail_log, grep_log and clean_logs, on this machine or an inventory host alike: fixed `sh -c` scripts run through
tools.builtin.reach.run, whose model-given values arrive only as quoted "$@" arguments, with paths resolved and
confined on the host itself."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tools.api import BadCall
from tools.builtin import reach
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
    check_lines,
    check_max_matches,
    clip,
    compile_pattern,
    grep_text,
    is_rotated,
    tail_text,
)
from tools.registry import ToolContext, ToolError
from tools.remote.ere import translate
from tools.remote.inventory import Host

# Paths are resolved on the host (realpath) and checked here against its log_dirs (this machine's: [tools.logs]
# dirs; an inventory host's default to those too), then only the resolved path is used. grep_log's pattern is
# compiled by RE2 here first (what RE2 refuses is refused; GNU grep -E would accept backreferences), then
# translated to a POSIX ERE for `grep -E` (tools/remote/ere.py). Every command is a fixed program or a fixed
# `sh -c` script whose model-given values arrive as quoted "$@" arguments.

_TIMEOUT_S = 45.0  # one command, under the tools' own 60 s (clean_logs: 120 s, several commands)
_LINE_BYTES = 2_000  # a line is cut here on the host (then to MAX_LINE_CHARS here)
_DELETE_BATCH = 100  # files checked and deleted per remote command

# For each argument: its type (d directory, f regular file, o other, - missing; symlinks followed) and its
# resolved path, each ending in \0.
_RESOLVE_SCRIPT = (
    'for p do if [ -d "$p" ]; then t=d; elif [ -f "$p" ]; then t=f; elif [ -e "$p" ]; then t=o; else t=-; fi; '
    "printf '%s\\0' \"$t\"; realpath -m -z -- \"$p\" 2>/dev/null || printf '\\0'; done"
)
_DECOMPRESS = (
    'dec() { case $1 in *.gz) gzip -dc -- "$1";; *.bz2) bzip2 -dc -- "$1";; *.xz) xz -dc -- "$1";; '
    '*.zst) zstd -dc -- "$1";; *) cat -- "$1";; esac; }; '
)
_TAIL_SCRIPT = (
    _DECOMPRESS + "stat -L -c %s -- \"$1\" || exit 1; printf '\\0'; "
    f'case $1 in *.gz|*.bz2|*.xz|*.zst) dec "$1" | tail -n "$2";; *) tail -n "$2" -- "$1";; esac '
    f"| cut -b 1-{_LINE_BYTES}"
)
# $1 pattern (an ERE), $2 how many lines may still be listed, $3 the locale it matches in (C: bytes; C.UTF-8:
# characters, checked to work, else "no-utf8"); then the files. Per file: its path, its number of matching lines
# (or "not-utf8": C.UTF-8 and a line that is not valid UTF-8) and the matches still listable (NUMBER:LINE), each
# ending in \0. The locale is never the host's own: the ERE names every class explicitly (tools/remote/ere.py).
_GREP_SCRIPT = (
    _DECOMPRESS + "pat=$1; left=$2; LC_ALL=$3; export LC_ALL; shift 3; "
    'if [ "$LC_ALL" != C ] && [ "$(printf \'\\303\\251\\n\' | grep -c -x -e .)" != 1 ]; then '
    "printf 'no-utf8\\0'; exit 0; fi; for f do "
    'if [ "$LC_ALL" != C ] && dec "$f" 2>/dev/null | grep -I -q -v -x -e ".*"; then '
    "printf '%s\\0not-utf8\\0\\0' \"$f\"; continue; fi; "
    'n=$(dec "$f" 2>/dev/null | grep -E -I -c -e "$pat"); n=${n:-0}; printf \'%s\\0%s\\0\' "$f" "$n"; '
    'if [ "$n" -gt 0 ] && [ "$left" -gt 0 ]; then '
    f'dec "$f" 2>/dev/null | grep -E -I -n -m "$left" -e "$pat" | cut -b 1-{_LINE_BYTES}; '
    "left=$((left - n)); fi; printf '\\0'; done"
)
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


async def _resolve_on(host: Host | None, ctx: ToolContext, paths: list[str]) -> list[tuple[str, str]]:
    """(type, resolved path) for each of `paths`, as the host sees them."""
    result = await reach.run(ctx, host, ["sh", "-c", _RESOLVE_SCRIPT, "sh", *paths], timeout_s=_TIMEOUT_S)
    parts = result.stdout.split("\0")
    if result.exit_status != 0 or len(parts) != 2 * len(paths) + 1:
        raise reach.failed(host, "realpath", result)
    return [(parts[2 * i], parts[2 * i + 1]) for i in range(len(paths))]


async def _allowed(host: Host | None, path: str, ctx: ToolContext) -> tuple[PurePosixPath, str]:
    """`path` resolved on `host` and inside one of its log_dirs (resolved there too), with its type (d, f, o, -)."""
    if not path.strip():
        raise BadCall("path: must not be empty")
    dirs = _host_log_dirs(host, ctx)
    raw = PurePosixPath(path)
    candidates = [str(raw)] if raw.is_absolute() else [str(PurePosixPath(d) / raw) for d in dirs]
    resolved = await _resolve_on(host, ctx, [*dirs, *candidates])
    roots = [PurePosixPath(r) for kind, r in resolved[: len(dirs)] if kind == "d" and r.startswith("/")]
    inside = [
        (PurePosixPath(r), kind)
        for kind, r in resolved[len(dirs) :]
        if r.startswith("/") and any(PurePosixPath(r).is_relative_to(root) for root in roots)
    ]
    if inside:
        return next((c for c in inside if c[1] != "-"), inside[0])
    raise ToolError(f"{reach.host_name(host)}: path is outside the allowed log directories ({', '.join(dirs)}): {path}")


async def tail(host: Host | None, path: str, lines: int, ctx: ToolContext) -> str:
    check_lines(lines)
    file, kind = await _allowed(host, path, ctx)
    if kind == "-":
        raise BadCall(f"no such file: {path}")
    if kind != "f":
        raise ToolError(f"not a regular file: {path}")
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


async def grep(host: Host | None, path: str, pattern: str, max_matches: int, ctx: ToolContext) -> str:
    check_max_matches(max_matches)
    compile_pattern(pattern)  # RE2 decides what is accepted, exactly as locally
    expression = translate(pattern)
    target, kind = await _allowed(host, path, ctx)
    if kind == "-":
        raise BadCall(f"no such file or directory: {path}")
    files, found = ([str(target)], 1) if kind == "f" else await _files(host, target, ctx) if kind == "d" else ([], 0)
    if not files:
        return grep_text(pattern, str(target) if kind == "f" else f"0 files under {target}", [], [])
    argv = ["sh", "-c", _GREP_SCRIPT, "sh", expression.expression, str(max_matches), expression.locale, *files]
    budget = max_matches * (_LINE_BYTES + 16) + sum(len(f) + 16 for f in files) + 1024
    result = await reach.run(ctx, host, argv, timeout_s=_TIMEOUT_S, max_bytes=budget)
    parts = result.stdout.split("\0")
    if result.exit_status == 0 and parts[0] == "no-utf8":
        raise ToolError(
            f"grep_log: {reach.host_name(host)} has no working C.UTF-8 locale, which this pattern needs for "
            f"{expression.characters} (one character, not one byte); rewrite it without"
        )
    if result.exit_status != 0 or len(parts) != 3 * len(files) + 1:
        raise reach.failed(host, "grep", result)
    if bad := [parts[3 * k] for k in range(len(files)) if parts[3 * k + 1] == "not-utf8"]:
        raise ToolError(
            f"grep_log: on {reach.host_name(host)}, {printable_path(Path(bad[0]))} is not valid UTF-8 text, where "
            f"{expression.characters} cannot be matched one character at a time; rewrite the pattern without it"
        )
    shown: list[str] = []
    searched: list[FileMatches] = []
    for k in range(len(files)):
        file, count, matches = parts[3 * k : 3 * k + 3]
        name = str(target) if kind == "f" else str(PurePosixPath(file).relative_to(target))
        listed = 0
        for line in matches.split("\n"):  # only newlines end a line (str.splitlines also cuts at \v, \f…)
            lineno, _, text = line.partition(":")
            if len(shown) < max_matches and lineno.isdigit():
                shown.append(f"{'' if kind == 'f' else name + ':'}{lineno}: {clip(text)}")
                listed += 1
        searched.append(FileMatches(name, int(count) if count.isdigit() else 0, listed))
    where = str(target) if kind == "f" else f"{len(files)} files under {target}"
    return grep_text(pattern, where, searched, shown, unsearched=found - len(files))


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
