"""The log tools: tail_log, grep_log and clean_logs, on this machine or an inventory host alike
(tools/builtin/log_files.py), confined to the configured log directories."""

from __future__ import annotations

from tools.builtin import log_files, reach
from tools.registry import Category, ToolContext, tool


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def tail_log(path: str, lines: int = 100, host: str | None = None, *, ctx: ToolContext) -> str:
    """The last lines of one log file on one host; rotated .gz, .bz2, .xz and .zst files are decompressed.

    Returns a header with the file's path, how many lines are shown and its size, then the lines, oldest first,
    each cut to 500 characters. Only files under the configured log directories can be read, at most 5,000
    lines; the output is bounded at about 12,000 characters (head and tail kept). Use it to see what a service
    logged last, e.g. right after service_status shows it failing; grep_log is better to find one error.

    Args:
        path: the log file, absolute or relative to an allowed log directory.
        lines: how many lines from the end, 1 to 5000.
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
    """
    return await log_files.tail(reach.target(host, ctx), path, lines, ctx)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def grep_log(
    path: str, pattern: str, max_matches: int = 200, host: str | None = None, *, ctx: ToolContext
) -> str:
    """Lines matching a regular expression in one log file, or in every file under a log directory, on one host.

    Returns a header with how many lines matched in all and where (the file, or "N files under DIR"); for a
    directory, the files searched in path order with each one's count, the files past the first 1,000 that were
    not searched, and the files whose matches were not shown once max_matches was reached. Each match is
    "file:line number: text", the text cut to 500 characters; rotated and compressed files are searched too. An
    empty result still says what was searched. Use it to find when an error started, e.g. grep_log("nginx",
    "upstream timed out").

    Args:
        path: a log file or directory, absolute or relative to an allowed log directory.
        pattern: a regular expression in Python's syntax, searched in each line (use (?i) for case-insensitive);
            matched in linear time (RE2), so backreferences, lookaround and possessive quantifiers are refused.
        max_matches: stop listing after this many matching lines, 1 to 5000 (all are still counted).
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
    """
    return await log_files.grep(reach.target(host, ctx), path, pattern, max_matches, ctx)


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
