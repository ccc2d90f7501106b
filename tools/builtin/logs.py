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
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from tools.builtin.host import human_bytes
from tools.registry import Category, ToolContext, ToolError, tool

MAX_TAIL_LINES = 5_000
MAX_LINE_CHARS = 500  # a line shown is cut here
MAX_GREP_FILES = 1_000
MAX_TAIL_BYTES = 8 * 1024 * 1024  # tail_log reads at most this much from the end of a file
MAX_DECOMPRESSED_BYTES = 1024 * 1024 * 1024  # a compressed log is read through; larger than this is refused
MAX_GREP_LINE_CHARS = 64 * 1024  # grep_log searches only this much of a longer line
LISTED_FILES = 50  # clean_logs previews name this many files; the list digest covers all of them

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


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True, isolated=True)
def tail_log(path: str, lines: int = 100, *, ctx: ToolContext) -> str:
    """The last lines of a log file (.gz/.bz2/.xz are decompressed).

    Args:
        path: the log file, absolute or relative to an allowed log directory.
        lines: how many lines from the end, 1 to 5000.
    """
    if not 1 <= lines <= MAX_TAIL_LINES:
        raise ToolError(f"lines: must be between 1 and {MAX_TAIL_LINES}, got {lines}")
    file = _existing_file(allowed_path(path, ctx), path)
    tail = _last_lines(file, lines)
    header = f"{file} (last {len(tail.lines)} lines, {human_bytes(file.stat().st_size)})"
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


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True, isolated=True)
def grep_log(path: str, pattern: str, max_matches: int = 200, *, ctx: ToolContext) -> str:
    """Lines matching a regular expression in a log file, or in every file under a log directory.

    Args:
        path: a log file or directory, absolute or relative to an allowed log directory.
        pattern: a Python regular expression, searched in each line (use (?i) for case-insensitive).
        max_matches: stop listing after this many matching lines, 1 to 5000 (all are still counted).
    """
    if not 1 <= max_matches <= MAX_TAIL_LINES:
        raise ToolError(f"max_matches: must be between 1 and {MAX_TAIL_LINES}, got {max_matches}")
    try:
        regex = re.compile(pattern)
    except re.error as e:
        raise ToolError(f"pattern: invalid regular expression: {e}") from None
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
                    if regex.search(line):
                        total += 1
                        if len(shown) < max_matches:
                            shown.append(f"{prefix}{lineno}: {_clip(line)}")
        except (OSError, EOFError) as e:
            shown.append(f"{prefix} unreadable: {e}")
    where = str(target) if target.is_file() else f"{files} files under {target}"
    more = f", showing the first {len(shown)}" if total > len(shown) else ""
    if long_lines:
        more += f"; {long_lines} lines longer than {MAX_GREP_LINE_CHARS} chars were searched in their start only"
    return f"{total} matching lines for /{pattern}/ in {where}{more}\n" + "\n".join(shown)


# -- clean_logs: the run deletes only what the approved preview listed -------------------------------------


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


def _candidate(p: Path) -> _Candidate | None:
    try:
        st = p.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):  # symlinks are never followed
        return None
    return _Candidate(p, st.st_size, st.st_ino, st.st_mtime_ns)


def _cleanup_candidates(path: str, older_than_days: int, ctx: ToolContext) -> tuple[Path, list[_Candidate]]:
    if older_than_days < 0:
        raise ToolError(f"older_than_days: must be 0 or more, got {older_than_days}")
    root = allowed_path(path, ctx)
    if not root.is_dir():
        raise ToolError(f"not a directory: {path} (clean_logs works on a log directory)")
    cutoff_ns = int((time.time() - older_than_days * 86_400) * 1e9)
    found: list[_Candidate] = []
    for dirpath, _dirs, names in os.walk(root):  # os.walk does not follow directory symlinks
        for name in names:
            if is_rotated(name) and (c := _candidate(Path(dirpath) / name)) and c.mtime_ns < cutoff_ns:
                found.append(c)
    found.sort(key=lambda c: str(c.path))
    return root, found


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


_DIGEST_RE = re.compile(r"; list digest ([0-9a-f]{32})$")
_TAG_RE = re.compile(r"  #([0-9a-f]{16})$")


@dataclass(frozen=True)
class _Approved:
    """What an approved clean_logs preview stands for: its list digest and the tags of the files it names."""

    digest: str | None
    tags: frozenset[str]

    @classmethod
    def parse(cls, preview: str) -> _Approved:
        first, _, rest = preview.partition("\n")
        m = _DIGEST_RE.search(first)
        tags = frozenset(t.group(1) for line in rest.splitlines() if (t := _TAG_RE.search(line)))
        return cls(m.group(1) if m else None, tags)


@tool(category=Category.DESTRUCTIVE, timeout_s=120, idempotent=True, isolated=True)
def clean_logs(path: str, older_than_days: int = 7, *, confirmed_by: str, approved_preview: str,
               ctx: ToolContext) -> str:
    """Delete rotated and compressed logs older than N days under a log directory (never live *.log files).

    Args:
        path: a log directory, absolute or relative to an allowed log directory.
        older_than_days: only files last modified more than this many days ago.
    """
    root, cands = _cleanup_candidates(path, older_than_days, ctx)
    approved = _Approved.parse(approved_preview)
    if approved.digest is not None and approved.digest == list_digest(cands):
        chosen, skipped = cands, []  # exactly the approved list, including files the preview did not name
    else:
        chosen = [c for c in cands if c.tag in approved.tags]
        skipped = [c for c in cands if c.tag not in approved.tags]
    now = time.time()
    deleted: list[_Candidate] = []
    changed: list[_Candidate] = []
    failed: list[str] = []
    for c in chosen:
        if _candidate(c.path) != c:  # replaced or written to since the list was made
            changed.append(c)
            continue
        try:
            c.path.unlink()
        except FileNotFoundError:
            continue
        except OSError as e:
            failed.append(f"  could not delete {_shown(c.path)}: {e.strerror or e}")
            continue
        deleted.append(c)
    freed = sum(c.size for c in deleted)
    out = [f"deleted {len(deleted)} rotated log files older than {older_than_days} days under {_shown(root)}, "
           f"freed {human_bytes(freed)} ({freed} bytes); approved by {confirmed_by}",
           *_listing(deleted, now)]
    if skipped or changed:
        out.append(f"not deleted, not in the approved preview ({len(skipped) + len(changed)} files, new or changed "
                   "since it was made; call clean_logs again for a new preview and approval):")
        out += _listing(skipped + changed, now)
    return "\n".join(out + failed)


def _listing(cands: list[_Candidate], now: float, limit: int = 200) -> list[str]:
    lines = [_line(c, now) for c in cands[:limit]]
    if len(cands) > limit:
        lines.append(f"  … and {len(cands) - limit} more")
    return lines


@clean_logs.dry_run
def _clean_logs_preview(path: str, older_than_days: int = 7, *, ctx: ToolContext) -> str:
    """Every file the run may delete: named (with a tag for this very file) up to LISTED_FILES, all in the digest."""
    root, cands = _cleanup_candidates(path, older_than_days, ctx)
    if not cands:
        return f"would delete nothing: no rotated logs older than {older_than_days} days under {_shown(root)}"
    now = time.time()
    total = sum(c.size for c in cands)
    head = (f"would delete {len(cands)} rotated log files older than {older_than_days} days under {_shown(root)}, "
            f"{human_bytes(total)} ({total} bytes); list digest {list_digest(cands)}")
    lines = [_line(c, now, tag=True) for c in cands[:LISTED_FILES]]
    if len(cands) > LISTED_FILES:
        lines.append(f"  … and {len(cands) - LISTED_FILES} more, covered by the list digest")
    return "\n".join([head, *lines])
