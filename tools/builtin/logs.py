"""Reading and cleaning log files, confined to the configured log directories."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, cast

import re2

from tools.builtin import reach
from tools.builtin.host import human_bytes
from tools.registry import Category, ToolContext, ToolError, tool
from tools.remote.ere import translate
from tools.remote.inventory import Host

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
_LOG_NAMES = frozenset({"messages", "secure", "cron", "dmesg", "debug", "kern", "auth", "daemon", "mail", "user",
                        "boot", "btmp", "wtmp", "spooler"})


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


def _clip(line: str) -> str:
    line = line.rstrip("\n")
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " …"


@dataclass(frozen=True)
class _Tail:
    """The end of a file as lines; `bounded` says the read stopped at MAX_TAIL_BYTES before the file's start."""

    lines: list[str]
    bounded: bool


def _last_lines(path: Path, n: int) -> _Tail:
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
    return _Tail(lines[-n:], bounded)


def _last_lines_compressed(path: Path, n: int) -> _Tail:
    """Decompress the whole stream (the only way to its end), keeping at most MAX_TAIL_BYTES of it."""
    buf = bytearray()
    total = 0
    dropped = False
    with _OPENERS[path.suffix](path, "rb") as f:
        while chunk := f.read(1024 * 1024):
            total += len(chunk)
            if total > MAX_DECOMPRESSED_BYTES:
                raise ToolError(f"{path.name} decompresses to more than {human_bytes(MAX_DECOMPRESSED_BYTES)}; "
                                "tail_log stops there (grep_log searches it)")
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
    return _Tail(lines[-n:], bounded)


def _existing_file(path: Path, shown: str) -> Path:
    if not path.exists():
        raise ToolError(f"no such file: {shown}")
    if not path.is_file():
        raise ToolError(f"not a regular file: {shown}")
    return path


def _check_lines(lines: int) -> None:
    if not 1 <= lines <= MAX_TAIL_LINES:
        raise ToolError(f"lines: must be between 1 and {MAX_TAIL_LINES}, got {lines}")


@tool(category=Category.READ_ONLY, timeout_s=60, isolated=True)
def _local_tail_log(path: str, lines: int = 100, *, ctx: ToolContext) -> str:
    """tail_log on this machine."""
    _check_lines(lines)
    file = _existing_file(allowed_path(path, ctx), path)
    tail = _last_lines(file, lines)
    return _tail_text(str(file), tail, file.stat().st_size)


def _tail_text(shown: str, tail: _Tail, size: int) -> str:
    header = f"{shown} (last {len(tail.lines)} lines, {human_bytes(size)})"
    if tail.bounded:
        header += (f"; read only the last {human_bytes(MAX_TAIL_BYTES)}, which holds fewer lines than asked "
                   "(very long lines)")
    return header + "\n" + "\n".join(_clip(line) for line in tail.lines)


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
    "(?=": "a lookahead (?=…)", "(?!": "a negative lookahead (?!…)", "(?<=": "a lookbehind (?<=…)",
    "(?<!": "a negative lookbehind (?<!…)", "(?>": "an atomic group (?>…)", "(?(": "a conditional group (?(…)…|…)",
    "(?#": "a comment group (?#…)",
}
_ESCAPES = {
    "\\Z": "\\Z (write \\z or $ for the end of the line)", "\\u": "a \\u escape (write \\x{…})",
    "\\U": "a \\U escape (write \\x{…})", "\\N": "a named character \\N{…} (write \\x{…})",
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
        return (f"grep_log: the pattern needs more than the {human_bytes(MAX_REGEX_MEM)} this linear-time matcher "
                "allows a pattern; simplify it (fewer or smaller counted repetitions)")
    construct = _construct(pattern, error)
    if construct is None:
        return f"grep_log: the pattern is not supported by this linear-time matcher (RE2): {error}"
    return (f"grep_log: the pattern uses {construct}, which this linear-time matcher does not support; "
            "rewrite it without")


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


def _check_max_matches(max_matches: int) -> None:
    if not 1 <= max_matches <= MAX_TAIL_LINES:
        raise ToolError(f"max_matches: must be between 1 and {MAX_TAIL_LINES}, got {max_matches}")


@tool(category=Category.READ_ONLY, timeout_s=60, isolated=True)
def _local_grep_log(path: str, pattern: str, max_matches: int = 200, *, ctx: ToolContext) -> str:
    """grep_log on this machine."""
    _check_max_matches(max_matches)
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
                            shown.append(f"{prefix}{lineno}: {_clip(line)}")
        except (OSError, EOFError) as e:
            shown.append(f"{prefix} unreadable: {e}")
    where = str(target) if target.is_file() else f"{files} files under {target}"
    return _grep_text(pattern, where, total, shown, long_lines)


def _grep_text(pattern: str, where: str, total: int, shown: list[str], long_lines: int = 0) -> str:
    more = f", showing the first {len(shown)}" if total > len(shown) else ""
    if long_lines:
        more += f"; {long_lines} lines longer than {MAX_GREP_LINE_CHARS} chars were searched in their start only"
    return f"{total} matching lines for /{pattern}/ in {where}{more}\n" + "\n".join(shown)


# -- clean_logs: the run deletes only what the approved preview listed -------------------------------------
#
# The preview names each file (up to LISTED_FILES) with a tag: a hash of its path, inode, size and mtime, so
# the run recognises "the same file" and nothing else; a list digest covers every file, named or not. The
# approved preview reaches the run as `approved_preview` (the text the approver saw, from the Decision). Every
# file the preview stood for ends up deleted or reported: changed since the preview, gone since the preview,
# or (when the digest no longer holds) counted as covered only by the digest; a file it did not stand for is
# never deleted and is reported as not in the approved preview.


@dataclass(frozen=True)
class _Candidate:
    """A file clean_logs would delete, with what identifies this very file: inode, size and mtime."""

    path: Path
    size: int
    inode: int
    mtime_ns: int

    @property
    def identity(self) -> str:
        return f"{self.path}\0{self.inode}\0{self.size}\0{self.mtime_ns}"

    @property
    def tag(self) -> str:
        """16 hex digits naming this path at this inode, size and mtime; shown on its preview line."""
        return hashlib.sha256(self.identity.encode("utf-8", "surrogateescape")).hexdigest()[:16]

    def age_days(self, now: float) -> float:
        return (now - self.mtime_ns / 1e9) / 86_400


def _as_candidate(p: Path, st: os.stat_result) -> _Candidate | None:
    if not stat.S_ISREG(st.st_mode):  # symlinks are never followed
        return None
    return _Candidate(p, st.st_size, st.st_ino, st.st_mtime_ns)


@dataclass(frozen=True)
class _Scan:
    """A walk of the directory: the candidates, and every entry's path as shown (to tell changed from gone)."""

    root: Path
    cands: list[_Candidate]
    present: frozenset[str]


def _cleanup_candidates(path: str, older_than_days: int, ctx: ToolContext) -> _Scan:
    if older_than_days < 0:
        raise ToolError(f"older_than_days: must be 0 or more, got {older_than_days}")
    root = allowed_path(path, ctx)
    if not root.is_dir():
        raise ToolError(f"not a directory: {path} (clean_logs works on a log directory)")
    cutoff_ns = int((time.time() - older_than_days * 86_400) * 1e9)
    found: list[_Candidate] = []
    present: set[str] = set()
    for dirpath, dirs, names in os.walk(root):  # os.walk does not follow directory symlinks
        present.update(_shown(Path(dirpath) / name) for name in dirs)
        for name in names:
            p = Path(dirpath) / name
            present.add(_shown(p))
            if not is_rotated(name):
                continue
            try:
                st = p.lstat()
            except FileNotFoundError:
                continue
            if (c := _as_candidate(p, st)) and c.mtime_ns < cutoff_ns:
                found.append(c)
    found.sort(key=lambda c: str(c.path))
    return _Scan(root, found, frozenset(present))


def list_digest(cands: list[_Candidate]) -> str:
    """32 hex digits over every candidate's path, inode, size and mtime: the whole list a preview stands for."""
    material = "\n".join(c.identity for c in sorted(cands, key=lambda c: str(c.path)))
    return hashlib.sha256(material.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _shown(path: Path) -> str:
    """A path as one printable line: control characters (a newline in a hostile file name) escaped."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in str(path))


def _line(c: _Candidate, now: float, *, tag: bool = False) -> str:
    text = f"  {_shown(c.path)}  {human_bytes(c.size)}  {c.age_days(now):.0f}d old"
    return f"{text}  #{c.tag}" if tag else text


_COUNT_RE = re.compile(r"^would delete (\d+) rotated log files ")
_DIGEST_RE = re.compile(r"; list digest ([0-9a-f]{32})$")
# A named file's preview line; the path is greedy, so a hostile name that imitates the tail cannot end it early.
_ENTRY_RE = re.compile(r"^(?P<text>  (?P<shown>.+)  \S+  -?\d+d old)  #(?P<tag>[0-9a-f]{16})$")


@dataclass(frozen=True)
class _Named:
    """One file an approved preview named: its tag, its path as shown and its line (without the tag)."""

    tag: str
    shown: str
    text: str


@dataclass(frozen=True)
class _Approved:
    """What an approved clean_logs preview stands for: its list digest, how many files, the ones it names."""

    digest: str | None
    count: int
    named: tuple[_Named, ...]

    @classmethod
    def parse(cls, preview: str) -> _Approved:
        first, _, rest = preview.partition("\n")
        m = _DIGEST_RE.search(first)
        n = _COUNT_RE.match(first)
        named = tuple(_Named(e["tag"], e["shown"], e["text"]) for line in rest.splitlines()
                      if (e := _ENTRY_RE.match(line)))
        return cls(m.group(1) if m else None, int(n.group(1)) if n else 0, named)


@dataclass
class _Outcome:
    deleted: list[_Candidate] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # preview-time lines of approved files that changed
    gone: list[str] = field(default_factory=list)  # ... that are no longer there
    failed: list[str] = field(default_factory=list)


def _delete(chosen: list[_Candidate], outcome: _Outcome, now: float) -> None:
    """Unlink each file that is still the very file approved (same path, inode, size, mtime, a regular file)."""
    for c in chosen:
        try:
            current = _as_candidate(c.path, c.path.lstat())
        except FileNotFoundError:
            outcome.gone.append(_line(c, now))
            continue
        if current != c:  # replaced (a symlink, another file) or written to since the list was made
            outcome.changed.append(_line(c, now))
            continue
        try:
            c.path.unlink()
        except FileNotFoundError:
            outcome.gone.append(_line(c, now))
            continue
        except OSError as e:
            outcome.failed.append(f"  could not delete {_shown(c.path)}: {e.strerror or e}")
            continue
        outcome.deleted.append(c)


def _choose(scan: _Scan, approved_preview: str, outcome: _Outcome) -> tuple[list[_Candidate], list[_Candidate], int]:
    """(the files to delete, the ones not approved, how many the preview covered only by its digest).

    Approved files that are no longer candidates are recorded in `outcome` as changed or gone."""
    approved = _Approved.parse(approved_preview)
    if approved.digest is not None and approved.digest == list_digest(scan.cands):
        return scan.cands, [], 0  # exactly the approved list, including files the preview did not name
    by_tag = {c.tag: c for c in scan.cands}
    chosen = [by_tag[n.tag] for n in approved.named if n.tag in by_tag]
    missing = [n for n in approved.named if n.tag not in by_tag]
    for n in missing:  # still there in some form (another file, a symlink, newer): changed; else gone
        (outcome.changed if n.shown in scan.present else outcome.gone).append(n.text)
    taken, reported = {c.tag for c in chosen}, {n.shown for n in missing}
    unapproved = [c for c in scan.cands if c.tag not in taken and _shown(c.path) not in reported]
    return chosen, unapproved, max(approved.count - len(approved.named), 0)


def _clean_report(scan: _Scan, outcome: _Outcome, unapproved: list[_Candidate], unnamed: int,
                  older_than_days: int, confirmed_by: str, now: float) -> str:
    freed = sum(c.size for c in outcome.deleted)
    out = [f"deleted {len(outcome.deleted)} rotated log files older than {older_than_days} days under "
           f"{_shown(scan.root)}, freed {human_bytes(freed)} ({freed} bytes); approved by {confirmed_by}",
           *_listing([_line(c, now) for c in outcome.deleted])]
    again = "call clean_logs again for a new preview and approval"
    if outcome.changed:
        out.append(f"left alone: changed since the preview ({len(outcome.changed)} files; {again}):")
        out += _listing(outcome.changed)
    if outcome.gone:
        out.append(f"left alone: gone since the preview ({len(outcome.gone)} files):")
        out += _listing(outcome.gone)
    if unnamed:
        out.append(f"left alone: the {unnamed} files the approved preview covered only by its list digest, not by "
                   f"name (the list changed since the preview, so they cannot be told from new files; {again})")
    if unapproved:
        if unnamed:
            out.append(f"not deleted, not named in the approved preview ({len(unapproved)} files: new, changed, or "
                       f"among the {unnamed} it covered only by its list digest; {again}):")
        else:
            out.append(f"not deleted, not in the approved preview ({len(unapproved)} files, new or changed since it "
                       f"was made; {again}):")
        out += _listing([_line(c, now) for c in unapproved])
    return "\n".join(out + outcome.failed)


@tool(category=Category.DESTRUCTIVE, timeout_s=120, isolated=True)
def _local_clean_logs(path: str, older_than_days: int = 7, *, confirmed_by: str, approved_preview: str,
                      ctx: ToolContext) -> str:
    """clean_logs on this machine."""
    scan = _cleanup_candidates(path, older_than_days, ctx)
    outcome = _Outcome()
    now = time.time()
    chosen, unapproved, unnamed = _choose(scan, approved_preview, outcome)
    _delete(chosen, outcome, now)
    return _clean_report(scan, outcome, unapproved, unnamed, older_than_days, confirmed_by, now)


def _listing(lines: list[str], limit: int = 200) -> list[str]:
    shown = lines[:limit]
    if len(lines) > limit:
        shown.append(f"  … and {len(lines) - limit} more")
    return shown


@_local_clean_logs.dry_run
def _local_clean_logs_preview(path: str, older_than_days: int = 7, *, ctx: ToolContext) -> str:
    """Every file the run may delete: named (with a tag for this very file) up to LISTED_FILES, all in the digest."""
    return _preview_text(_cleanup_candidates(path, older_than_days, ctx), older_than_days, time.time())


def _preview_text(scan: _Scan, older_than_days: int, now: float) -> str:
    root, cands = scan.root, scan.cands
    if not cands:
        return f"would delete nothing: no rotated logs older than {older_than_days} days under {_shown(root)}"
    total = sum(c.size for c in cands)
    head = (f"would delete {len(cands)} rotated log files older than {older_than_days} days under {_shown(root)}, "
            f"{human_bytes(total)} ({total} bytes); list digest {list_digest(cands)}")
    lines = [_line(c, now, tag=True) for c in cands[:LISTED_FILES]]
    if len(cands) > LISTED_FILES:
        lines.append(f"  … and {len(cands) - LISTED_FILES} more, covered by the list digest")
    return "\n".join([head, *lines])


# -- on an inventory host: the same tools as fixed commands over SSH ----------------------------------------
#
# Paths are resolved on the host (realpath) and checked here against that host's log_dirs (default: [tools.logs]
# dirs), then only the resolved path is used. grep_log's pattern is compiled by RE2 here first (what RE2 refuses
# is refused; GNU grep -E would accept backreferences), then translated to a POSIX ERE for `grep -E`. Every
# command is a fixed program or a fixed `sh -c` script whose model-given values arrive as quoted "$@" arguments.

_REMOTE_TIMEOUT_S = 45.0  # one remote command, under the tools' own 60 s (clean_logs: 120 s, several commands)
_REMOTE_LINE_BYTES = 2_000  # a remote line is cut here on the host (then to MAX_LINE_CHARS here)
_DELETE_BATCH = 100  # files checked and deleted per remote command

# For each argument: its type (d directory, f regular file, o other, - missing; symlinks followed) and its
# resolved path, each ending in \0.
_RESOLVE_SCRIPT = (
    'for p do if [ -d "$p" ]; then t=d; elif [ -f "$p" ]; then t=f; elif [ -e "$p" ]; then t=o; else t=-; fi; '
    "printf '%s\\0' \"$t\"; realpath -m -z -- \"$p\" 2>/dev/null || printf '\\0'; done"
)
_DECOMPRESS = ('dec() { case $1 in *.gz) gzip -dc -- "$1";; *.bz2) bzip2 -dc -- "$1";; *.xz) xz -dc -- "$1";; '
               '*.zst) zstd -dc -- "$1";; *) cat -- "$1";; esac; }; ')
_TAIL_SCRIPT = (
    _DECOMPRESS + 'stat -L -c %s -- "$1" || exit 1; printf \'\\0\'; '
    f'case $1 in *.gz|*.bz2|*.xz|*.zst) dec "$1" | tail -n "$2";; *) tail -n "$2" -- "$1";; esac '
    f"| cut -b 1-{_REMOTE_LINE_BYTES}"
)
# $1 pattern (an ERE), $2 how many lines may still be listed, $3 the locale it matches in (C: bytes; C.UTF-8:
# characters, checked to work, else "no-utf8"); then the files. Per file: its path, its number of matching lines
# (or "not-utf8": C.UTF-8 and a line that is not valid UTF-8) and the matches still listable (NUMBER:LINE), each
# ending in \0. The locale is never the host's own: the ERE names every class explicitly (tools/remote/ere.py).
_GREP_SCRIPT = (
    _DECOMPRESS + 'pat=$1; left=$2; LC_ALL=$3; export LC_ALL; shift 3; '
    "if [ \"$LC_ALL\" != C ] && [ \"$(printf '\\303\\251\\n' | grep -c -x -e .)\" != 1 ]; then "
    "printf 'no-utf8\\0'; exit 0; fi; for f do "
    'if [ "$LC_ALL" != C ] && dec "$f" 2>/dev/null | grep -I -q -v -x -e ".*"; then '
    "printf '%s\\0not-utf8\\0\\0' \"$f\"; continue; fi; "
    'n=$(dec "$f" 2>/dev/null | grep -E -I -c -e "$pat"); n=${n:-0}; printf \'%s\\0%s\\0\' "$f" "$n"; '
    'if [ "$n" -gt 0 ] && [ "$left" -gt 0 ]; then '
    f'dec "$f" 2>/dev/null | grep -E -I -n -m "$left" -e "$pat" | cut -b 1-{_REMOTE_LINE_BYTES}; '
    'left=$((left - n)); fi; printf \'\\0\'; done'
)
# The host's clock, then every entry under $1 on its filesystem: type, inode, size, mtime, path.
_SCAN_SCRIPT = "date +%s.%N; printf '\\0'; find \"$1\" -xdev -mindepth 1 -printf '%y\\t%i\\t%s\\t%T@\\t%p\\0'"
# Arguments in fours (path, inode, size, mtime as find printed it): each is removed only if it is still that
# very regular file; one status per file, each ending in \0 (failed is followed by rm's message).
_DELETE_SCRIPT = (
    'while [ "$#" -ge 4 ]; do p=$1; want=$(printf \'f\\t%s\\t%s\\t%s\' "$2" "$3" "$4"); shift 4; '
    "cur=$(find \"$p\" -maxdepth 0 -printf '%y\\t%i\\t%s\\t%T@' 2>/dev/null); "
    "if [ -z \"$cur\" ]; then printf 'gone\\0'; elif [ \"$cur\" != \"$want\" ]; then printf 'changed\\0'; "
    "elif err=$(rm -- \"$p\" 2>&1); then printf 'deleted\\0'; else printf 'failed\\0%s\\0' \"$err\"; fi; done"
)


def _host_log_dirs(host: Host, ctx: ToolContext) -> list[str]:
    return list(host.log_dirs) if host.log_dirs is not None else [str(d) for d in ctx.log_dirs]


async def _resolve_on(host: Host, ctx: ToolContext, paths: list[str]) -> list[tuple[str, str]]:
    """(type, resolved path) for each of `paths`, as the host sees them."""
    result = await reach.remote(ctx, host, ["sh", "-c", _RESOLVE_SCRIPT, "sh", *paths], timeout_s=_REMOTE_TIMEOUT_S)
    parts = result.stdout.split("\0")
    if result.exit_status != 0 or len(parts) != 2 * len(paths) + 1:
        raise reach.failed(host, "realpath", result)
    return [(parts[2 * i], parts[2 * i + 1]) for i in range(len(paths))]


async def _remote_allowed(host: Host, path: str, ctx: ToolContext) -> tuple[PurePosixPath, str]:
    """`path` resolved on `host` and inside one of its log_dirs (resolved there too), with its type (d, f, o, -)."""
    if not path.strip():
        raise ToolError("path: must not be empty")
    dirs = _host_log_dirs(host, ctx)
    raw = PurePosixPath(path)
    candidates = [str(raw)] if raw.is_absolute() else [str(PurePosixPath(d) / raw) for d in dirs]
    resolved = await _resolve_on(host, ctx, [*dirs, *candidates])
    roots = [PurePosixPath(r) for kind, r in resolved[:len(dirs)] if kind == "d" and r.startswith("/")]
    inside = [(PurePosixPath(r), kind) for kind, r in resolved[len(dirs):]
              if r.startswith("/") and any(PurePosixPath(r).is_relative_to(root) for root in roots)]
    if inside:
        return next((c for c in inside if c[1] != "-"), inside[0])
    raise ToolError(f"{host.name}: path is outside the allowed log directories ({', '.join(dirs)}): {path}")


async def _remote_tail(host: Host, path: str, lines: int, ctx: ToolContext) -> str:
    file, kind = await _remote_allowed(host, path, ctx)
    if kind == "-":
        raise ToolError(f"no such file: {path}")
    if kind != "f":
        raise ToolError(f"not a regular file: {path}")
    result = await reach.remote(ctx, host, ["sh", "-c", _TAIL_SCRIPT, "sh", str(file), str(lines)],
                                timeout_s=_REMOTE_TIMEOUT_S, max_bytes=lines * (_REMOTE_LINE_BYTES + 1) + 64)
    size, sep, text = result.stdout.partition("\0")
    if result.exit_status != 0 or not sep or not size.strip().isdigit():
        raise reach.failed(host, f"tail {file}", result)
    return _tail_text(str(file), _Tail(text.splitlines()[-lines:], False), int(size))


async def _remote_files(host: Host, root: PurePosixPath, ctx: ToolContext) -> list[str]:
    """Regular files under `root` on the host (symlinks are not followed), sorted, at most MAX_GREP_FILES."""
    result = await reach.remote(ctx, host, ["find", str(root), "-type", "f", "-print0"],
                                timeout_s=_REMOTE_TIMEOUT_S, max_bytes=8 * 1024 * 1024)
    if result.exit_status != 0 and not result.stdout:
        raise reach.failed(host, f"find {root}", result)
    entries = result.stdout.split("\0")[:-1]  # a cut-off last entry has no \0 after it
    return sorted(entries, key=PurePosixPath)[:MAX_GREP_FILES]  # in the order the local walk takes


async def _remote_grep(host: Host, path: str, pattern: str, max_matches: int, ctx: ToolContext) -> str:
    compile_pattern(pattern)  # RE2 decides what is accepted, exactly as locally
    expression = translate(pattern)
    target, kind = await _remote_allowed(host, path, ctx)
    if kind == "-":
        raise ToolError(f"no such file or directory: {path}")
    files = [str(target)] if kind == "f" else await _remote_files(host, target, ctx) if kind == "d" else []
    if not files:
        return _grep_text(pattern, str(target) if kind == "f" else f"0 files under {target}", 0, [])
    argv = ["sh", "-c", _GREP_SCRIPT, "sh", expression.expression, str(max_matches), expression.locale, *files]
    budget = max_matches * (_REMOTE_LINE_BYTES + 16) + sum(len(f) + 16 for f in files) + 1024
    result = await reach.remote(ctx, host, argv, timeout_s=_REMOTE_TIMEOUT_S, max_bytes=budget)
    parts = result.stdout.split("\0")
    if result.exit_status == 0 and parts[0] == "no-utf8":
        raise ToolError(f"grep_log: {host.name} has no working C.UTF-8 locale, which this pattern needs for "
                        f"{expression.characters} (one character, not one byte); rewrite it without")
    if result.exit_status != 0 or len(parts) != 3 * len(files) + 1:
        raise reach.failed(host, "grep", result)
    if bad := [parts[3 * k] for k in range(len(files)) if parts[3 * k + 1] == "not-utf8"]:
        raise ToolError(f"grep_log: on {host.name}, {_shown(Path(bad[0]))} is not valid UTF-8 text, where "
                        f"{expression.characters} cannot be matched as it is here (an undecodable byte reads as "
                        "one character here, as nothing there); rewrite the pattern without it")
    shown: list[str] = []
    total = 0
    for k in range(len(files)):
        file, count, matches = parts[3 * k:3 * k + 3]
        total += int(count) if count.isdigit() else 0
        prefix = "" if kind == "f" else f"{PurePosixPath(file).relative_to(target)}:"
        for line in matches.split("\n"):  # only newlines end a line (str.splitlines also cuts at \v, \f…)
            lineno, _, text = line.partition(":")
            if len(shown) < max_matches and lineno.isdigit():
                shown.append(f"{prefix}{lineno}: {_clip(text)}")
    where = str(target) if kind == "f" else f"{len(files)} files under {target}"
    return _grep_text(pattern, where, total, shown)


# -- clean_logs on a host ------------------------------------------------------------------------------------


def _ns(mtime: str) -> int:
    """find's %T@ ("1700000000.1234567890") as integer nanoseconds."""
    seconds, _, fraction = mtime.partition(".")
    return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])


@dataclass(frozen=True)
class _RemoteScan:
    scan: _Scan
    now: float  # the host's clock
    mtimes: dict[str, str]  # path -> mtime exactly as find printed it (what the delete script compares)


async def _remote_candidates(host: Host, path: str, older_than_days: int, ctx: ToolContext) -> _RemoteScan:
    if older_than_days < 0:
        raise ToolError(f"older_than_days: must be 0 or more, got {older_than_days}")
    root, kind = await _remote_allowed(host, path, ctx)
    if kind != "d":
        raise ToolError(f"not a directory: {path} (clean_logs works on a log directory)")
    result = await reach.remote(ctx, host, ["sh", "-c", _SCAN_SCRIPT, "sh", str(root)],
                                timeout_s=_REMOTE_TIMEOUT_S, max_bytes=32 * 1024 * 1024)
    clock, sep, listing = result.stdout.partition("\0")
    if result.truncated:
        raise ToolError(f"{host.name}: {root} holds too many entries to list; clean a subdirectory")
    if not sep or (result.exit_status != 0 and not listing):
        raise reach.failed(host, f"find {root}", result)
    now = float(clock.strip())
    cutoff_ns = int((now - older_than_days * 86_400) * 1e9)
    found: list[_Candidate] = []
    present: set[str] = set()
    mtimes: dict[str, str] = {}
    for entry in listing.split("\0")[:-1]:
        fields = entry.split("\t", 4)
        if len(fields) != 5 or not fields[1].isdigit() or not fields[2].isdigit():
            continue
        kind, inode, size, mtime, p = fields
        present.add(_shown(Path(p)))
        if kind != "f" or not is_rotated(PurePosixPath(p).name):
            continue
        c = _Candidate(Path(p), int(size), int(inode), _ns(mtime))
        if c.mtime_ns < cutoff_ns:
            found.append(c)
            mtimes[p] = mtime
    found.sort(key=lambda c: str(c.path))
    return _RemoteScan(_Scan(Path(str(root)), found, frozenset(present)), now, mtimes)


async def _remote_delete(host: Host, scanned: _RemoteScan, chosen: list[_Candidate], outcome: _Outcome,
                         ctx: ToolContext) -> None:
    now = scanned.now
    for start in range(0, len(chosen), _DELETE_BATCH):
        batch = chosen[start:start + _DELETE_BATCH]
        args = [a for c in batch for a in (str(c.path), str(c.inode), str(c.size), scanned.mtimes[str(c.path)])]
        result = await reach.remote(ctx, host, ["sh", "-c", _DELETE_SCRIPT, "sh", *args],
                                    timeout_s=_REMOTE_TIMEOUT_S)
        statuses = iter(result.stdout.split("\0"))
        for c in batch:
            status = next(statuses, "")
            if status == "deleted":
                outcome.deleted.append(c)
            elif status == "gone":
                outcome.gone.append(_line(c, now))
            elif status == "changed":
                outcome.changed.append(_line(c, now))
            elif status == "failed":
                outcome.failed.append(f"  could not delete {_shown(c.path)}: {next(statuses, '').strip()}")
            else:  # the command died part-way: say so for every file it did not answer for
                outcome.failed.append(f"  could not delete {_shown(c.path)}: no answer from {host.name} "
                                      f"(exit {result.exit_status})")


# -- the tools -----------------------------------------------------------------------------------------------


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def tail_log(path: str, lines: int = 100, host: str = "localhost", *, ctx: ToolContext) -> str:
    """The last lines of a log file (.gz/.bz2/.xz are decompressed).

    Args:
        path: the log file, absolute or relative to an allowed log directory.
        lines: how many lines from the end, 1 to 5000.
        host: an inventory name (see list_hosts) or "localhost" (the machine opsloop runs on).
    """
    found = reach.target(host, ctx)
    if found is None:
        return await reach.local(_local_tail_log, {"path": path, "lines": lines}, ctx)
    _check_lines(lines)
    return await _remote_tail(found, path, lines, ctx)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def grep_log(path: str, pattern: str, max_matches: int = 200, host: str = "localhost", *,
                   ctx: ToolContext) -> str:
    """Lines matching a regular expression in a log file, or in every file under a log directory.

    Args:
        path: a log file or directory, absolute or relative to an allowed log directory.
        pattern: a regular expression in Python's syntax, searched in each line (use (?i) for case-insensitive);
            matched in linear time (RE2), so backreferences, lookaround and possessive quantifiers are refused.
        max_matches: stop listing after this many matching lines, 1 to 5000 (all are still counted).
        host: an inventory name (see list_hosts) or "localhost" (the machine opsloop runs on).
    """
    found = reach.target(host, ctx)
    if found is None:
        return await reach.local(_local_grep_log, {"path": path, "pattern": pattern, "max_matches": max_matches},
                                 ctx)
    _check_max_matches(max_matches)
    return await _remote_grep(found, path, pattern, max_matches, ctx)


@tool(category=Category.DESTRUCTIVE, timeout_s=120, idempotent=True)
async def clean_logs(path: str, older_than_days: int = 7, host: str = "localhost", *, confirmed_by: str,
                     approved_preview: str, ctx: ToolContext) -> str:
    """Delete rotated and compressed logs older than N days under a log directory (never live *.log files).

    Args:
        path: a log directory, absolute or relative to an allowed log directory.
        older_than_days: only files last modified more than this many days ago.
        host: an inventory name (see list_hosts) or "localhost" (the machine opsloop runs on).
    """
    found = reach.target(host, ctx)
    args = {"path": path, "older_than_days": older_than_days}
    if found is None:
        return await reach.local(_local_clean_logs, args, ctx, confirmed_by=confirmed_by,
                                 approved_preview=approved_preview)
    scanned = await _remote_candidates(found, path, older_than_days, ctx)
    outcome = _Outcome()
    chosen, unapproved, unnamed = _choose(scanned.scan, approved_preview, outcome)
    await _remote_delete(found, scanned, chosen, outcome, ctx)
    return _clean_report(scanned.scan, outcome, unapproved, unnamed, older_than_days, confirmed_by, scanned.now)


@clean_logs.dry_run
async def _clean_logs_preview(path: str, older_than_days: int = 7, host: str = "localhost", *,
                              ctx: ToolContext) -> str:
    """Every file the run may delete, on this machine or the host: named with a tag up to LISTED_FILES."""
    found = reach.target(host, ctx)
    if found is None:
        return await reach.local(_local_clean_logs, {"path": path, "older_than_days": older_than_days}, ctx,
                                 role="preview")
    scanned = await _remote_candidates(found, path, older_than_days, ctx)
    return _preview_text(scanned.scan, older_than_days, scanned.now)
