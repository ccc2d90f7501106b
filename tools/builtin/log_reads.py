"""What the log tools decide before any command runs and how they word the answer: their limits, what counts as a
rotated log, RE2 compiling grep_log's pattern (what it accepts), and the texts of tail_log and grep_log."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import re2

from tools.builtin.host import human_bytes
from tools.registry import ToolError

MAX_TAIL_LINES = 5_000
MAX_LINE_CHARS = 500  # a line shown is cut here
MAX_GREP_FILES = 1_000
LISTED_FILES = 50  # clean_logs previews name this many files; the list digest covers all of them
MAX_REGEX_MEM = 16 * 1024 * 1024  # what RE2 may use for one grep_log pattern (program plus DFA cache)

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


# -- grep_log: RE2, linear in the line's length whatever the pattern ----------------------------------------

# What RE2 refuses that Python's re accepts, by the text of RE2's error ("<kind>: <fragment>").
_PERL_OPERATORS = {
    "(?=": "a lookahead (?=…)",
    "(?!": "a negative lookahead (?!…)",
    "(?<=": "a lookbehind (?<=…)",
    "(?<!": "a negative lookbehind (?<!…)",
    "(?>": "an atomic group (?>…)",
    "(?(": "a conditional group (?(…)…|…)",
    "(?#": "a comment group (?#…)",
}
_ESCAPES = {
    "\\Z": "\\Z (write \\z or $ for the end of the line)",
    "\\u": "a \\u escape (write \\x{…})",
    "\\U": "a \\U escape (write \\x{…})",
    "\\N": "a named character \\N{…} (write \\x{…})",
}
_BACKREF_RE = re.compile(r"\\[1-9]\d*")


def _regex_options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_REGEX_MEM  # a pattern needing more is refused at compile time
    options.log_errors = False  # the error goes to the model, not to stderr
    return options


def compile_pattern(pattern: str) -> Any:
    """`pattern` compiled by RE2: matching costs time linear in the text, never a backtracking blow-up.
    Python's syntax minus what needs backtracking; a refusal is a ToolError naming the construct."""
    try:
        return re2.compile(pattern, _regex_options())
    except re2.error as e:
        raise ToolError(_refusal(pattern, _error_text(e))) from None
    except UnicodeError:
        raise ToolError("pattern: invalid regular expression: not valid Unicode (a lone surrogate)") from None


def _error_text(e: Exception) -> str:
    arg = e.args[0] if e.args else ""
    return arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)


def _refusal(pattern: str, error: str) -> str:
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as e:
        return f"pattern: invalid regular expression: {e}"  # Python's message: the syntax the model writes
    if error.startswith("pattern too large"):
        return (
            f"grep_log: the pattern needs more than the {human_bytes(MAX_REGEX_MEM)} this linear-time matcher "
            "allows a pattern; simplify it (fewer or smaller counted repetitions)"
        )
    construct = _construct(pattern, error)
    if construct is None:
        return f"grep_log: the pattern is not supported by this linear-time matcher (RE2): {error}"
    return (
        f"grep_log: the pattern uses {construct}, which this linear-time matcher does not support; rewrite it without"
    )


def _construct(pattern: str, error: str) -> str | None:
    kind, _, fragment = error.partition(": ")
    if kind == "invalid escape sequence":
        if _BACKREF_RE.fullmatch(fragment):
            return f"a backreference ({fragment})"
        return _ESCAPES.get(fragment, f"the escape {fragment}")
    if kind == "invalid perl operator":
        if fragment in _PERL_OPERATORS:
            return _PERL_OPERATORS[fragment]
        if fragment == "(?P":
            return "a named backreference (?P=…)" if "(?P=" in pattern else None
        if fragment.startswith("(?"):
            return f"the inline flag group {fragment}…) (RE2 has only the flags i, m, s and U)"
    if kind == "bad repetition operator" and fragment.endswith("+"):
        return f"a possessive quantifier ({fragment})"
    if kind == "invalid repetition size":
        return f"a repetition count of more than 1000 in all ({fragment}; nested counts multiply)"
    return None


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
