"""The log tools: tail_log, grep_log and clean_logs, on this machine or an inventory host alike
(tools/builtin/log_files.py), confined to the configured log directories."""

from __future__ import annotations

from tools.builtin import log_files, reach
from tools.registry import Category, ToolContext, tool


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def tail_log(path: str, lines: int = 100, host: str | None = None, *, ctx: ToolContext) -> str:
    """The last lines of a log file (.gz/.bz2/.xz are decompressed).

    Args:
        path: the log file, absolute or relative to an allowed log directory.
        lines: how many lines from the end, 1 to 5000.
        host: an inventory name (see list_hosts) or "localhost" (the machine opsloop runs on).
    """
    return await log_files.tail(reach.target(host, ctx), path, lines, ctx)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def grep_log(
    path: str, pattern: str, max_matches: int = 200, host: str | None = None, *, ctx: ToolContext
) -> str:
    """Lines matching a regular expression in a log file, or in every file under a log directory.

    Args:
        path: a log file or directory, absolute or relative to an allowed log directory.
        pattern: a regular expression in Python's syntax, searched in each line (use (?i) for case-insensitive);
            matched in linear time (RE2), so backreferences, lookaround and possessive quantifiers are refused.
        max_matches: stop listing after this many matching lines, 1 to 5000 (all are still counted).
        host: an inventory name (see list_hosts) or "localhost" (the machine opsloop runs on).
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
    """Delete rotated and compressed logs older than N days under a log directory (never live *.log files).

    Args:
        path: a log directory, absolute or relative to an allowed log directory.
        older_than_days: only files last modified more than this many days ago.
        host: an inventory name (see list_hosts) or "localhost" (the machine opsloop runs on).
    """
    return await log_files.clean(reach.target(host, ctx), path, older_than_days, confirmed_by, approved_preview, ctx)


@clean_logs.dry_run
async def _clean_logs_preview(path: str, older_than_days: int = 7, host: str | None = None, *, ctx: ToolContext) -> str:
    """Every file the run may delete: named with a tag up to LISTED_FILES, all in the list digest."""
    return await log_files.clean_preview(reach.target(host, ctx), path, older_than_days, ctx)
