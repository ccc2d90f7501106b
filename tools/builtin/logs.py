"""Reading and cleaning log files, confined to the configured log directories."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
import stat
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tools.builtin.host import human_bytes
from tools.registry import Category, ToolContext, ToolError, tool

MAX_TAIL_LINES = 5_000
MAX_LINE_CHARS = 500
MAX_GREP_FILES = 1_000

_DATE = r"(?:19|20)\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])"
_COMPRESSED = r"\.(?:gz|bz2|xz|zst)"
ROTATED_RE = re.compile(rf"\.\d+(?:{_COMPRESSED})?$|{_COMPRESSED}$|\.old$|-{_DATE}")


def is_rotated(name: str) -> bool:
    """A rotated or compressed log (app.log.1, app.log.2.gz, x.gz, x.old, app.log-20240131); never a live *.log."""
    return not name.endswith(".log") and ROTATED_RE.search(name) is not None


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


def _open_text(path: Path) -> IO[str]:
    opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}.get(path.suffix)
    if opener is not None:
        return opener(path, "rt", encoding="utf-8", errors="replace")  # type: ignore[operator]
    return path.open("r", encoding="utf-8", errors="replace")


def _clip(line: str) -> str:
    line = line.rstrip("\n")
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " …"


def _last_lines(path: Path, n: int) -> list[str]:
    if path.suffix in (".gz", ".bz2", ".xz"):
        with _open_text(path) as f:
            return list(deque(f, maxlen=n))
    # Read backwards in blocks so a multi-gigabyte log costs only its tail.
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        pos = f.tell()
        data = b""
        while pos > 0 and data.count(b"\n") <= n:
            step = min(64 * 1024, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
    return lines[-n:]


def _existing_file(path: Path, shown: str) -> Path:
    if not path.exists():
        raise ToolError(f"no such file: {shown}")
    if not path.is_file():
        raise ToolError(f"not a regular file: {shown}")
    return path


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
def tail_log(path: str, lines: int = 100, *, ctx: ToolContext) -> str:
    """The last lines of a log file (.gz/.bz2/.xz are decompressed).

    Args:
        path: the log file, absolute or relative to an allowed log directory.
        lines: how many lines from the end, 1 to 5000.
    """
    if not 1 <= lines <= MAX_TAIL_LINES:
        raise ToolError(f"lines: must be between 1 and {MAX_TAIL_LINES}, got {lines}")
    file = _existing_file(allowed_path(path, ctx), path)
    got = _last_lines(file, lines)
    header = f"{file} (last {len(got)} lines, {human_bytes(file.stat().st_size)})"
    return header + "\n" + "\n".join(_clip(line) for line in got)


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


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
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
    for file in _files_under(target, ctx):
        files += 1
        prefix = "" if file == target else f"{file.relative_to(target)}:"
        try:
            with _open_text(file) as f:
                for lineno, line in enumerate(f, 1):
                    if regex.search(line):
                        total += 1
                        if len(shown) < max_matches:
                            shown.append(f"{prefix}{lineno}: {_clip(line)}")
        except (OSError, EOFError) as e:
            shown.append(f"{prefix} unreadable: {e}")
    where = str(target) if target.is_file() else f"{files} files under {target}"
    more = f", showing the first {len(shown)}" if total > len(shown) else ""
    return f"{total} matching lines for /{pattern}/ in {where}{more}\n" + "\n".join(shown)


@dataclass(frozen=True)
class _Candidate:
    path: Path
    size: int
    age_days: float


def _cleanup_candidates(path: str, older_than_days: int, ctx: ToolContext) -> tuple[Path, list[_Candidate]]:
    if older_than_days < 0:
        raise ToolError(f"older_than_days: must be 0 or more, got {older_than_days}")
    root = allowed_path(path, ctx)
    if not root.is_dir():
        raise ToolError(f"not a directory: {path} (clean_logs works on a log directory)")
    now = time.time()
    cutoff = now - older_than_days * 86_400
    found: list[_Candidate] = []
    for dirpath, _dirs, names in os.walk(root):  # os.walk does not follow directory symlinks
        for name in sorted(names):
            if not is_rotated(name):
                continue
            p = Path(dirpath) / name
            st = p.lstat()
            if not stat.S_ISREG(st.st_mode) or st.st_mtime >= cutoff:  # symlinks are never followed
                continue
            found.append(_Candidate(p, st.st_size, (now - st.st_mtime) / 86_400))
    found.sort(key=lambda c: str(c.path))
    return root, found


def _listing(cands: list[_Candidate], limit: int = 200) -> list[str]:
    lines = [f"  {c.path}  {human_bytes(c.size)}  {c.age_days:.0f}d old" for c in cands[:limit]]
    if len(cands) > limit:
        lines.append(f"  … and {len(cands) - limit} more")
    return lines


@tool(category=Category.DESTRUCTIVE, timeout_s=120, idempotent=True)
def clean_logs(path: str, older_than_days: int = 7, *, confirmed_by: str, ctx: ToolContext) -> str:
    """Delete rotated and compressed logs older than N days under a log directory (never live *.log files).

    Args:
        path: a log directory, absolute or relative to an allowed log directory.
        older_than_days: only files last modified more than this many days ago.
    """
    root, cands = _cleanup_candidates(path, older_than_days, ctx)
    freed = 0
    deleted: list[_Candidate] = []
    failed: list[str] = []
    for c in cands:
        try:
            c.path.unlink()
        except FileNotFoundError:
            continue
        except OSError as e:
            failed.append(f"  could not delete {c.path}: {e.strerror or e}")
            continue
        freed += c.size
        deleted.append(c)
    head = (f"deleted {len(deleted)} rotated log files older than {older_than_days} days under {root}, "
            f"freed {human_bytes(freed)} ({freed} bytes); approved by {confirmed_by}")
    return "\n".join([head, *_listing(deleted), *failed])


@clean_logs.dry_run
def _clean_logs_preview(path: str, older_than_days: int = 7, *, ctx: ToolContext) -> str:
    root, cands = _cleanup_candidates(path, older_than_days, ctx)
    total = sum(c.size for c in cands)
    if not cands:
        return f"would delete nothing: no rotated logs older than {older_than_days} days under {root}"
    head = (f"would delete {len(cands)} rotated log files older than {older_than_days} days under {root}, "
            f"{human_bytes(total)} ({total} bytes)")
    return "\n".join([head, *_listing(cands)])
