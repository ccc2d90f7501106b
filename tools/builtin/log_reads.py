"""Reading log files on this machine, confined to the configured log directories: tail_log's and grep_log's local
code (run in a worker process), the path rule, what counts as a rotated log, and RE2 compiling grep_log's pattern."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import re2

from tools.builtin.host import human_bytes
from tools.registry import Category, ToolContext, ToolError, tool

MAX_TAIL_LINES = 5_000
MAX_LINE_CHARS = 500  # a line shown is cut here
MAX_GREP_FILES = 1_000
MAX_TAIL_BYTES = 8 * 1024 * 1024  # tail_log reads at most this much from the end of a file
MAX_DECOMPRESSED_BYTES = 1024 * 1024 * 1024  # a compressed log is read through; larger than this is refused
MAX_GREP_LINE_CHARS = 64 * 1024  # grep_log searches only this much of a longer line
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


def allowed_path(path: str, ctx: ToolContext) -> Path:
    """`path` resolved (symlinks followed) and inside one of ctx.log_dirs; a relative path is looked up in each."""
    if not path.strip():
        raise ToolError("path: must not be empty")
    roots = [d.resolve() for d in ctx.log_dirs]
    raw = Path(path).expanduser()
    candidates = [raw] if raw.is_absolute() else [root / raw for root in roots]
    inside = [p for p in (c.resolve() for c in candidates) if any(p.is_relative_to(root) for root in roots)]
    if inside:
        return next((p for p in inside if p.exists()), inside[0])
    dirs = ", ".join(str(d) for d in ctx.log_dirs)
    raise ToolError(f"path is outside the allowed log directories ({dirs}): {path}")


_OPENERS: dict[str, Any] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def _open_text(path: Path) -> IO[str]:
    opener = _OPENERS.get(path.suffix)
    if opener is not None:
        return cast(IO[str], opener(path, "rt", encoding="utf-8", errors="replace"))
    return path.open("r", encoding="utf-8", errors="replace")


def clip(line: str) -> str:
    line = line.rstrip("\n")
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " …"


@dataclass(frozen=True)
class Tail:
    """The end of a file as lines; `bounded` says the read stopped at MAX_TAIL_BYTES before the file's start."""

    lines: list[str]
    bounded: bool


def _last_lines(path: Path, n: int) -> Tail:
    if path.suffix in _OPENERS:
        return _last_lines_compressed(path, n)
    # Read backwards in blocks, at most MAX_TAIL_BYTES, so a huge or newline-free log costs only its tail.
    chunks: list[bytes] = []
    newlines = 0
    read = 0
    with path.open("rb") as f:
        pos = f.seek(0, os.SEEK_END)
        while pos > 0 and newlines <= n and read < MAX_TAIL_BYTES:
            step = min(64 * 1024, pos, MAX_TAIL_BYTES - read)
            pos -= step
            f.seek(pos)
            chunk = f.read(step)
            chunks.append(chunk)
            newlines += chunk.count(b"\n")
            read += len(chunk)
    data = b"".join(reversed(chunks))
    lines = data.decode("utf-8", errors="replace").splitlines()
    bounded = pos > 0 and newlines <= n  # stopped by the byte bound, not by having enough lines
    if pos > 0 and len(lines) > n:
        lines = lines[-n:]  # the first line read may be a partial one; it is not needed
    elif bounded and lines:
        lines[0] = "… " + lines[0]  # a partial line: it started before what was read
    return Tail(lines[-n:], bounded)


def _last_lines_compressed(path: Path, n: int) -> Tail:
    """Decompress the whole stream (the only way to its end), keeping at most MAX_TAIL_BYTES of it."""
    buf = bytearray()
    total = 0
    dropped = False
    with _OPENERS[path.suffix](path, "rb") as f:
        while chunk := f.read(1024 * 1024):
            total += len(chunk)
            if total > MAX_DECOMPRESSED_BYTES:
                raise ToolError(
                    f"{path.name} decompresses to more than {human_bytes(MAX_DECOMPRESSED_BYTES)}; "
                    "tail_log stops there (grep_log searches it)"
                )
            buf += chunk
            if len(buf) > 2 * MAX_TAIL_BYTES:
                del buf[:-MAX_TAIL_BYTES]
                dropped = True
    if len(buf) > MAX_TAIL_BYTES:
        del buf[:-MAX_TAIL_BYTES]
        dropped = True
    lines = bytes(buf).decode("utf-8", errors="replace").splitlines()
    bounded = dropped and len(lines) <= n
    if dropped and len(lines) > n:
        lines = lines[-n:]
    elif bounded and lines:
        lines[0] = "… " + lines[0]
    return Tail(lines[-n:], bounded)


def _existing_file(path: Path, shown: str) -> Path:
    if not path.exists():
        raise ToolError(f"no such file: {shown}")
    if not path.is_file():
        raise ToolError(f"not a regular file: {shown}")
    return path


def check_lines(lines: int) -> None:
    if not 1 <= lines <= MAX_TAIL_LINES:
        raise ToolError(f"lines: must be between 1 and {MAX_TAIL_LINES}, got {lines}")


@tool(category=Category.READ_ONLY, timeout_s=60, isolated=True)
def local_tail_log(path: str, lines: int = 100, *, ctx: ToolContext) -> str:
    """tail_log on this machine."""
    check_lines(lines)
    file = _existing_file(allowed_path(path, ctx), path)
    tail = _last_lines(file, lines)
    return tail_text(str(file), tail, file.stat().st_size)


def tail_text(shown: str, tail: Tail, size: int) -> str:
    header = f"{shown} (last {len(tail.lines)} lines, {human_bytes(size)})"
    if tail.bounded:
        header += (
            f"; read only the last {human_bytes(MAX_TAIL_BYTES)}, which holds fewer lines than asked (very long lines)"
        )
    return header + "\n" + "\n".join(clip(line) for line in tail.lines)


def _files_under(path: Path, ctx: ToolContext) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    count = 0
    for p in sorted(path.rglob("*")):
        if count >= MAX_GREP_FILES:
            return
        try:
            inside = allowed_path(str(p), ctx)  # a symlink may point out of the allowed directories
        except ToolError:
            continue
        if inside.is_file():
            count += 1
            yield p


def _bounded_lines(f: IO[str]) -> Iterator[tuple[str, bool]]:
    """Each line, cut to MAX_GREP_LINE_CHARS (the rest is skipped unread into memory), and whether it was cut."""
    while line := f.readline(MAX_GREP_LINE_CHARS):
        cut = len(line) == MAX_GREP_LINE_CHARS and not line.endswith("\n")
        if cut:
            while (rest := f.readline(MAX_GREP_LINE_CHARS)) and not rest.endswith("\n"):
                pass
        yield line, cut


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
    options.log_errors = False  # the error goes to the model, not to the worker's stderr
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


@tool(category=Category.READ_ONLY, timeout_s=60, isolated=True)
def local_grep_log(path: str, pattern: str, max_matches: int = 200, *, ctx: ToolContext) -> str:
    """grep_log on this machine."""
    check_max_matches(max_matches)
    regex = compile_pattern(pattern)
    target = allowed_path(path, ctx)
    if not target.exists():
        raise ToolError(f"no such file or directory: {path}")
    shown: list[str] = []
    total = 0
    files = 0
    long_lines = 0
    for file in _files_under(target, ctx):
        files += 1
        prefix = "" if file == target else f"{file.relative_to(target)}:"
        try:
            with _open_text(file) as f:
                for lineno, (line, cut) in enumerate(_bounded_lines(f), 1):
                    long_lines += cut
                    if regex.search(line[:-1] if line.endswith("\n") else line):  # $ as in Python
                        total += 1
                        if len(shown) < max_matches:
                            shown.append(f"{prefix}{lineno}: {clip(line)}")
        except (OSError, EOFError) as e:
            shown.append(f"{prefix} unreadable: {e}")
    where = str(target) if target.is_file() else f"{files} files under {target}"
    return grep_text(pattern, where, total, shown, long_lines)


def grep_text(pattern: str, where: str, total: int, shown: list[str], long_lines: int = 0) -> str:
    more = f", showing the first {len(shown)}" if total > len(shown) else ""
    if long_lines:
        more += f"; {long_lines} lines longer than {MAX_GREP_LINE_CHARS} chars were searched in their start only"
    return f"{total} matching lines for /{pattern}/ in {where}{more}\n" + "\n".join(shown)
