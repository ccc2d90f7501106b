"""What the log tools decide before any command runs and how they word the answer: their limits, what counts as a
rotated log, and the texts of tail_log and grep_log."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.builtin.host import human_bytes
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
    return bool(compressed or rotated) and _log_stem(stem)


def _log_stem(stem: str) -> bool:
    lower = stem.lower()
    return lower.endswith("log") or lower in _LOG_NAMES


def clip(line: str) -> str:
    line = line.rstrip("\n")
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " …"


def check_lines(lines: int) -> None:
    if not 1 <= lines <= MAX_TAIL_LINES:
        raise ToolError(f"lines: must be between 1 and {MAX_TAIL_LINES}, got {lines}")


def tail_text(shown: str, lines: list[str], size: int) -> str:
    return f"{shown} (last {len(lines)} lines, {human_bytes(size)})\n" + "\n".join(clip(line) for line in lines)


def check_max_matches(max_matches: int) -> None:
    if not 1 <= max_matches <= MAX_TAIL_LINES:
        raise ToolError(f"max_matches: must be between 1 and {MAX_TAIL_LINES}, got {max_matches}")


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


def grep_text(pattern: str, where: str, searched: list[FileMatches], shown: list[str], *, unsearched: int = 0) -> str:
    """What grep_log found and what it covered: for a directory, the files searched in order with their counts,
    those past MAX_GREP_FILES left unsearched, and the files whose matches were cut at max_matches."""
    total = sum(f.matched for f in searched)
    more = f", showing the first {len(shown)}" if total > len(shown) else ""
    lines = [f"{total} matching lines for /{pattern}/ in {where}{more}"]
    if len(searched) > 1 or unsearched:
        lines.append("searched in path order: " + _named([f"{f.name} ({f.matched})" for f in searched]))
    if unsearched:
        lines.append(f"not searched: {unsearched} files past the first {MAX_GREP_FILES} (name a subdirectory)")
    lines += shown
    if cut := [f"{f.name} ({f.matched - f.listed})" for f in searched if f.matched > f.listed and len(searched) > 1]:
        lines.append("matching lines not shown (raise max_matches or name one file): " + _named(cut))
    return "\n".join(lines)
