"""The log tools: tail_log, grep_log, log_histogram, list_logs and clean_logs, on this machine or an inventory
host alike (tools/builtin/log_files.py), confined to the configured log directories."""

from __future__ import annotations

from tools.builtin import log_files, reach
from tools.registry import Category, ToolContext, tool


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def tail_log(
    path: str,
    lines: int = 100,
    since: str | None = None,
    until: str | None = None,
    host: str | None = None,
    *,
    ctx: ToolContext,
) -> str:
    """The last lines of one log file on one host, optionally only those in a time window (since/until).

    Returns a header with the file's path, how many lines are shown (and the window) and its size, then the lines,
    oldest first, each cut to 500 characters; rotated .gz, .bz2, .xz and .zst files are decompressed. With since or
    until, a line's time is read from its start (ISO 8601, syslog "Dec  5 14:03:11", nginx/Apache
    "[05/Dec/2026:14:03:11 +0000]", journald short-iso); a line without one (a stack trace's) belongs to the line
    above it; the file is read from its end, at most 32 MiB, and the answer says when that cut the window short or
    when no timestamps were recognised. Only files under the configured log directories, at most 5,000 lines; the
    output is bounded at about 12,000 characters (head and tail kept). Use it to see what a service logged last or
    around an incident's start, e.g. right after service_status shows it failing; grep_log is better to find one
    error.

    Args:
        path: the log file, absolute or relative to an allowed log directory.
        lines: how many lines from the end (of the window, when one is given), 1 to 5000.
        since: only lines at or after this time: an ISO 8601 time (no zone: the host's) or a
            duration before now ("30m", "2h", "3d").
        until: only lines at or before this time: an ISO 8601 time (no zone: the host's) or a
            duration before now ("30m", "2h", "3d").
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
    """
    target = reach.target(host, ctx)
    if since or until:
        return await log_files.tail_window(target, path, lines, (since, until), ctx)
    return await log_files.tail(target, path, lines, ctx)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def grep_log(
    path: str,
    pattern: str,
    max_matches: int = 200,
    since: str | None = None,
    until: str | None = None,
    newest_first: bool = False,
    host: str | None = None,
    *,
    ctx: ToolContext,
) -> str:
    """Lines matching a regular expression in one log file, or in every file under a log directory, on one host.

    Returns a header with how many lines matched in all (and in the window, with since/until) and where (the
    file, or "N files under DIR"); for a directory, the files searched in path order with each one's count, the
    files past the first 1,000 that were not searched, and the files whose matches were not shown once
    max_matches was reached. Each match is "file:line number: text", the text cut to 500 characters; rotated and
    compressed files are searched too. With since/until or newest_first, the newest matches of each file are read
    (about 16 MiB of matching lines in all; the answer says when older ones were not counted), a line's time is read
    from its start (ISO 8601, syslog, nginx/Apache, journald short-iso; a line without one takes that of the line
    starting its entry, up to 30 lines above), and a file with no recognised timestamps is named, not silently
    dropped. An empty result still says what was searched. Use it to find when an error started, e.g.
    grep_log("nginx", "upstream timed out", since="2h", newest_first=True) for an incident's lines at the end of a
    big log.

    Args:
        path: a log file or directory, absolute or relative to an allowed log directory.
        pattern: a regular expression in Python's syntax, searched in each line (use (?i) for case-insensitive);
            matched in linear time (RE2), so backreferences, lookaround and possessive quantifiers are refused.
        max_matches: stop listing after this many matching lines, 1 to 5000 (all are still counted).
        since: only lines at or after this time: an ISO 8601 time (no zone: the host's) or a
            duration before now ("30m", "2h", "3d").
        until: only lines at or before this time: an ISO 8601 time (no zone: the host's) or a
            duration before now ("30m", "2h", "3d").
        newest_first: list the newest matches first (the last ones in the file), instead of the first ones.
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
    """
    target = reach.target(host, ctx)
    if since or until or newest_first:
        return await log_files.grep_window(target, path, pattern, max_matches, (since, until), newest_first, ctx)
    return await log_files.grep(target, path, pattern, max_matches, ctx)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def log_histogram(
    path: str,
    pattern: str,
    since: str = "1h",
    until: str | None = None,
    bucket: str = "1m",
    host: str | None = None,
    *,
    ctx: ToolContext,
) -> str:
    """How many lines matching a regular expression a log file (or the files under a log directory) holds per time
    bucket over a window: an incident's onset at a glance.

    Returns a header with the total in the window, then the first bucket with a match and the peak bucket, then one
    row per bucket ("2026-12-05 14:03  count  ###"), at most 60 rows: a finer bucket over a longer window is
    widened to fit, and the answer says so. A line's time is read as grep_log reads it (ISO 8601, syslog,
    nginx/Apache, journald short-iso); about 16 MiB of the newest matching lines are read, and the answer says
    when older ones were not counted or when a file had no recognised timestamps. Use it to see when errors started
    and peaked before reading them with grep_log, e.g. log_histogram("nginx/error.log", "upstream timed out",
    since="6h", bucket="5m").

    Args:
        path: a log file or directory, absolute or relative to an allowed log directory.
        pattern: a regular expression, as grep_log's (RE2, Python's syntax).
        since: the window's start: an ISO 8601 time (no zone: the host's) or a
            duration before now ("30m", "2h", "3d").
        until: the window's end (default: now): an ISO 8601 time (no zone: the host's) or a
            duration before now ("30m", "2h", "3d").
        bucket: the width of one row: a duration such as "1m", "5m", "1h".
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
    """
    return await log_files.histogram(reach.target(host, ctx), path, pattern, (since, until), bucket, ctx)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def list_logs(host: str | None = None, *, ctx: ToolContext) -> str:
    """The log files under a host's configured log directories (the ones tail_log and grep_log may read).

    Returns a header with how many files there are and the time zone, then one row per file: its last write time,
    its size and its path, newest write first; at most 50 rows, and the answer says how many more (older) files
    there are. Symlinks are not followed; only names, sizes and times are listed, never contents. Use it before
    tail_log or grep_log to find the right path instead of guessing one, e.g. which of nginx's logs was written
    last.

    Args:
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
    """
    return await log_files.list_files(reach.target(host, ctx), ctx)


@tool(category=Category.DESTRUCTIVE, timeout_s=120, idempotent=True)
async def clean_logs(
    path: str,
    older_than_days: int = 7,
    host: str | None = None,
    *,
    confirmed_by: str,
    approved_preview: str,
    ctx: ToolContext,
) -> str:
    """Delete rotated and compressed log files older than N days under a log directory on one host.

    Live logs (*.log and the like) and files that are not logs are never deleted. A person approves the exact
    list first: the dry run lists every file it would delete (up to 50 by name, all in a digest), and the call
    deletes only those, skipping any that changed since. Returns how many files were deleted and the bytes freed,
    and who approved it. Use it when check_disk shows a log partition nearly full of old rotated logs.

    Args:
        path: a log directory, absolute or relative to an allowed log directory.
        older_than_days: only files last modified more than this many days ago.
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
    """
    return await log_files.clean(reach.target(host, ctx), path, older_than_days, confirmed_by, approved_preview, ctx)


@clean_logs.dry_run
async def _clean_logs_preview(path: str, older_than_days: int = 7, host: str | None = None, *, ctx: ToolContext) -> str:
    """Every file the run may delete: named with a tag up to LISTED_FILES, all in the list digest."""
    return await log_files.clean_preview(reach.target(host, ctx), path, older_than_days, ctx)
