"""The team's runbooks: Markdown files with YAML front matter under the configured `dirs`, loaded and kept current.

A runbook is read only from `dirs` (docs/context.md, Runbooks): a file or a symlinked directory that resolves
outside them is refused, and so is a file over 64 KiB (its size is checked before it is read, and at most
64 KiB + 1 bytes are read), a file that is not UTF-8, bad front matter, an unknown key, or a `match` with
nothing in it. Front matter is bounded before any value is built from it: no alias (`*name`), at most
MAX_DEPTH levels and MAX_NODES values, so a few hundred bytes can't expand into gigabytes or a RecursionError.
A problem never prints a bad value, only what kind of value it is. Each problem is one line naming the file
and why (whatever PyYAML raised); the good runbooks still load.

`RunbookLibrary.current()` re-reads only what changed: it lists the directories and stats each file
(mtime_ns, size, inode), and parses again only a file whose stat changed. Nothing changed: the same
`Runbooks` object comes back, without reading a file.
"""

from __future__ import annotations

import datetime
import os
import re
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bot.core.errors import OpsloopError

MAX_BYTES = 64 * 1024
TITLE_MAX = 200
KEYWORD_MAX = 200
SUFFIX = ".md"

MAX_DEPTH = 8  # mappings and lists inside one another; a runbook's front matter nests 3 deep (match.labels)
MAX_NODES = 1000  # keys and values in one front matter, counted as written
KEY_SHOWN = 60  # a key longer than this (or not one printable line) is named by its kind, not printed

TOP_KEYS = ("title", "match")
MATCH_KEYS = ("alertname", "labels", "keywords")

# yaml.safe_load's loader, with libyaml's C parser when PyYAML has it (several times faster on a cold load:
# bench/RESULTS.md, Runbooks). Both build only plain YAML types (SafeConstructor); a `!!python/...` tag is an
# error, never an object.
SAFE_LOADER: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# What a value is, in YAML's words (SafeConstructor builds only these): bool before int, which it subclasses
_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "true/false"),
    ((int, float), "a number"),
    (dict, "a mapping"),
    (list, "a list"),
    (datetime.date, "a date"),
    (bytes, "binary data"),
    (set, "a set"),
    (type(None), "null"),
)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# A top-level ordered list item: at most three spaces of indent (deeper is a sub-item or code), 1. or 1)
_STEP = re.compile(r"^ {0,3}\d{1,9}[.)](?:[ \t]|$)")
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_TOOL_NAME = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")  # snake_case with an underscore, as tool names are


@dataclass(frozen=True)
class Match:
    """What a runbook matches: alert names, labels that must all equal the alert's, keywords in the task."""

    alertnames: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    keywords: tuple[str, ...] = ()
    folded_keywords: tuple[str, ...] = field(default=(), repr=False, compare=False)


@dataclass(frozen=True)
class Runbook:
    """One loaded runbook: its name (the file's stem), title, match rules and Markdown body (the steps)."""

    name: str
    path: Path
    title: str
    match: Match
    body: str
    steps: int


@dataclass(frozen=True)
class Problem:
    """A file (or directory) that did not load, and why, as one line."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True)
class Runbooks:
    """One snapshot of the library: the good runbooks ordered by file name, and every problem found."""

    runbooks: tuple[Runbook, ...] = ()
    problems: tuple[Problem, ...] = ()

    def get(self, name: str) -> Runbook | None:
        """The runbook called `name` (a file's stem), never a path: `../x` is simply not a name."""
        for runbook in self.runbooks:
            if runbook.name == name:
                return runbook
        return None


def _outside_fences(body: str) -> Iterator[str]:
    """The lines of `body` outside fenced code blocks (the fence lines left out too)."""
    fence = ""
    for line in body.splitlines():
        opened = _FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
        elif opened:
            fence = opened.group(1)
        else:
            yield line


def count_steps(body: str) -> int:
    """Top-level numbered list items (`1.` or `1)`) outside code fences; an item indented to the previous
    item's text is a sub-item."""
    steps, content_col = 0, 0
    for line in _outside_fences(body):
        indent = len(line) - len(line.lstrip(" "))
        item = _STEP.match(line)
        if item and (content_col == 0 or indent < content_col):
            steps += 1
            content_col = item.end() + len(line[item.end() :]) - len(line[item.end() :].lstrip(" \t"))
        elif line.strip() and indent == 0:
            content_col = 0  # a paragraph at the margin ends the list
    return steps


def backticked_tools(runbook: Runbook) -> set[str]:
    """Tool-like names (`check_disk`, `clean_logs()`) written in backticks in the steps, outside code fences."""
    names: set[str] = set()
    for line in _outside_fences(runbook.body):
        for span in _INLINE_CODE.findall(line):
            word = span.strip().removesuffix("()")
            if _TOOL_NAME.match(word):
                names.add(word)
    return names


class FrontMatterTooBig(OpsloopError):
    """Front matter whose values would be too many, too deep, or repeated by an alias: refused before it is built."""


def load_front_matter(text: str) -> Any:
    """The YAML value of `text`, built only once its node tree is known to be bounded: FrontMatterTooBig for an
    alias (`*name` repeats a whole tree; aliases of aliases make millions of values from a few hundred bytes),
    more than MAX_DEPTH levels or more than MAX_NODES values; yaml.YAMLError for bad YAML. The tree is
    walked without recursion; the value is built by SAFE_LOADER's constructor (plain YAML types only)."""
    loader = SAFE_LOADER(text)
    try:
        try:
            root = loader.get_single_node()
        except RecursionError:  # pure-Python PyYAML (no libyaml) composes one level per recursion
            raise FrontMatterTooBig(f"nested deeper than {MAX_DEPTH} levels") from None
        if root is None:
            return None
        seen: set[int] = set()
        todo: list[tuple[yaml.Node, int]] = [(root, 1)]
        while todo:
            node, depth = todo.pop()
            line = f"(line {node.start_mark.line + 2})"  # the front matter starts on the file's line 2
            if id(node) in seen:
                raise FrontMatterTooBig(f"anchors and aliases (&name, *name) are not allowed {line}")
            seen.add(id(node))
            if len(seen) > MAX_NODES:
                raise FrontMatterTooBig(f"more than {MAX_NODES} keys and values {line}")
            if isinstance(node, yaml.CollectionNode):
                if depth > MAX_DEPTH:
                    raise FrontMatterTooBig(f"nested deeper than {MAX_DEPTH} levels {line}")
                kids = node.value if isinstance(node, yaml.SequenceNode) else [n for kv in node.value for n in kv]
                todo += [(kid, depth + 1) for kid in kids]
        return loader.construct_document(root)
    finally:
        loader.dispose()


def parse(path: Path, data: bytes) -> Runbook | Problem:
    """One runbook from a file's bytes, or the first problem that stops it loading."""
    if len(data) > MAX_BYTES:
        return Problem(path, f"over 64 KiB ({len(data)}+ bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return Problem(path, f"not UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start})")
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    lines = text.split("\n")
    if lines[0].rstrip() != "---":
        return Problem(path, "no front matter: the first line must be ---")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
    if end is None:
        return Problem(path, "front matter is not closed: no second --- line")
    try:
        meta = load_front_matter("\n".join(lines[1:end]))
    except (yaml.YAMLError, FrontMatterTooBig) as e:
        return Problem(path, f"bad front matter: {_yaml_problem(e, first_line=2)}")
    except Exception as e:  # a value PyYAML reads but can't build (2026-02-30)
        return Problem(path, f"bad front matter: {type(e).__name__}: {' '.join(str(e).split())[:200]}")
    body = "\n".join(lines[end + 1 :]).strip("\n")
    problems = _check_meta(meta)
    if problems:
        return Problem(path, "; ".join(problems))
    assert isinstance(meta, dict)
    return Runbook(
        name=path.stem, path=path, title=meta["title"], match=_match(meta["match"]), body=body, steps=count_steps(body)
    )


def load_file(path: Path, roots: Sequence[Path]) -> Runbook | Problem:
    """Read one file found under `roots` (resolved directories): contained, regular, at most 64 KiB + 1 bytes."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError) as e:  # a dangling or looping symlink
        return Problem(path, f"cannot be read: {_os_reason(e)}")
    if not _inside(real, roots):
        return Problem(path, f"leads outside dirs (to {real})")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        return Problem(path, f"cannot be read: {_os_reason(e)}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Problem(path, "not a regular file")
        if st.st_size > MAX_BYTES:
            return Problem(path, f"over 64 KiB ({st.st_size} bytes)")
        chunks, left = [], MAX_BYTES + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        return Problem(path, f"cannot be read: {_os_reason(e)}")
    finally:
        os.close(fd)
    return parse(path, b"".join(chunks))


Signature = tuple[int, int, int, int]  # mtime_ns, size, inode, device of the file a path leads to


class RunbookLibrary:
    """The runbooks under `dirs`, re-read when a file changes: `current()` is cheap when nothing did."""

    def __init__(self, dirs: Iterable[str | os.PathLike[str]]) -> None:
        self.dirs = tuple(Path(d) for d in dirs)
        self.reads = 0  # files parsed so far: what "only changed files are re-read" is measured by
        self._seen: dict[Path, tuple[Signature | None, Runbook | Problem]] = {}
        self._snapshot: Runbooks | None = None
        self._listing: tuple[object, ...] | None = None
        self._lock = threading.Lock()  # the tools call current() from worker threads, maybe two at once

    def current(self) -> Runbooks:
        """The runbooks as the files are now; a file whose stat is unchanged is not read again."""
        with self._lock:
            return self._current()

    def _current(self) -> Runbooks:
        roots, problems = self._roots()
        found, dir_problems = self._walk(roots)
        problems += dir_problems
        sigs = [(path, _signature(path)) for path in found]
        listing = (*sigs, *problems)
        if self._snapshot is not None and listing == self._listing:
            return self._snapshot
        seen: dict[Path, tuple[Signature | None, Runbook | Problem]] = {}
        for path, sig in sigs:
            cached = self._seen.get(path)
            if cached is not None and sig is not None and cached[0] == sig:
                seen[path] = cached
            else:
                self.reads += 1
                seen[path] = (sig, load_file(path, roots))
        self._seen, self._listing = seen, listing
        self._snapshot = _snapshot([result for _, result in seen.values()], problems)
        return self._snapshot

    def _roots(self) -> tuple[list[Path], list[Problem]]:
        roots, problems = [], []
        for d in self.dirs:
            try:
                real = d.resolve(strict=True)
            except (OSError, RuntimeError) as e:
                problems.append(Problem(d, f"runbook directory cannot be read: {_os_reason(e)}"))
                continue
            if not real.is_dir():
                problems.append(Problem(d, "runbook directory is not a directory"))
                continue
            roots.append(real)
        return roots, problems

    def _walk(self, roots: Sequence[Path]) -> tuple[list[Path], list[Problem]]:
        """Every *.md under the roots (symlinked directories are not followed; one leading outside is a
        problem), each file once, in a stable order."""
        found: dict[Path, None] = {}
        problems: list[Problem] = []

        def unreadable(e: OSError) -> None:
            problems.append(Problem(Path(e.filename or "?"), f"cannot be listed: {_os_reason(e)}"))

        for root in roots:
            for top, dirnames, filenames in os.walk(root, onerror=unreadable, followlinks=False):
                here = Path(top)
                for d in sorted(dirnames):
                    link = here / d
                    if link.is_symlink() and not _inside(_resolve(link), roots):
                        problems.append(Problem(link, "a symlinked directory that leads outside dirs"))
                dirnames.sort()
                for name in sorted(filenames):
                    if name.endswith(SUFFIX) and not name.startswith("."):
                        found.setdefault(here / name, None)
        return list(found), problems


def _snapshot(results: Sequence[Runbook | Problem], problems: list[Problem]) -> Runbooks:
    """Good runbooks ordered by file name (then path); a second file with a name already taken is a problem."""
    good = sorted((r for r in results if isinstance(r, Runbook)), key=lambda r: (r.path.name, str(r.path)))
    bad = [r for r in results if isinstance(r, Problem)]
    kept: dict[str, Runbook] = {}
    for runbook in good:
        first = kept.get(runbook.name)
        if first is not None:
            bad.append(Problem(runbook.path, f"a runbook named {runbook.name!r} is already loaded from {first.path}"))
        else:
            kept[runbook.name] = runbook
    return Runbooks(runbooks=tuple(kept.values()), problems=tuple(sorted(problems + bad, key=str)))


def _check_meta(meta: Any) -> list[str]:
    """Every problem with the front matter's keys and values, in the order a reader would fix them."""
    if not isinstance(meta, dict):
        return ["front matter must be a mapping with title and match"]
    problems = [f"unknown key {_path('', k)!r} (allowed: title, match)" for k in meta if k not in TOP_KEYS]
    title = meta.get("title")
    if title is None:
        problems.append("title is missing")
    elif not isinstance(title, str) or not title.strip():
        problems.append("title must be a non-empty string")
    elif "\n" in title or not title.isprintable():
        problems.append("title must be one line of printable text")
    elif len(title) > TITLE_MAX:
        problems.append(f"title is over {TITLE_MAX} characters")
    match = meta.get("match")
    if match is None:
        problems.append("match is missing: give at least one of alertname, labels, keywords")
    elif not isinstance(match, dict):
        problems.append("match must be a mapping with alertname, labels or keywords")
    else:
        problems += _check_match(match)
    return problems


def _check_match(match: Mapping[Any, Any]) -> list[str]:
    problems = [
        f"unknown key {_path('match.', k)!r} (allowed: {', '.join(MATCH_KEYS)})" for k in match if k not in MATCH_KEYS
    ]
    if not any(match.get(k) is not None for k in MATCH_KEYS):
        problems.append("match has none of alertname, labels, keywords")
    if "alertname" in match:
        names = match["alertname"]
        names = [names] if isinstance(names, str) else names
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
            problems.append("match.alertname must be a non-empty string or a list of them")
    if "labels" in match:
        labels = match["labels"]
        if not isinstance(labels, dict) or not labels:
            problems.append("match.labels must be a non-empty mapping of label names to strings")
        else:
            for k, v in labels.items():
                if not isinstance(k, str) or not k:
                    problems.append(f"match.labels: a key must be a non-empty string, not {_kind(k)}")
                elif not isinstance(v, str):
                    problems.append(f"{_path('match.labels.', k)} must be a string, not {_kind(v)} (quote it)")
    if "keywords" in match:
        keywords = match["keywords"]
        if not isinstance(keywords, list) or not keywords:
            problems.append("match.keywords must be a non-empty list of strings")
        else:
            for i, k in enumerate(keywords):
                if not isinstance(k, str) or not k.strip():
                    problems.append(f"match.keywords[{i}] must be a non-empty string")
                elif len(k) > KEYWORD_MAX:
                    problems.append(f"match.keywords[{i}] is over {KEYWORD_MAX} characters")
    return problems


def _match(raw: Mapping[str, Any]) -> Match:
    names = raw.get("alertname") or ()
    keywords = tuple(raw.get("keywords") or ())
    return Match(
        alertnames=(names,) if isinstance(names, str) else tuple(names),
        labels=tuple(sorted((raw.get("labels") or {}).items())),
        keywords=keywords,
        folded_keywords=tuple(k.casefold() for k in keywords),
    )


def _kind(value: Any) -> str:
    """What a YAML value is, for a problem: never the value itself (an alias-built list can be gigabytes)."""
    if isinstance(value, str):
        return f"a string of {len(value)} characters" if value else "an empty string"
    return next((name for kind, name in _KINDS if isinstance(value, kind)), type(value).__name__)


def _path(prefix: str, key: Any) -> str:
    """`match.labels.team`: a key as written when it is one short line of text, else `match.labels.<its kind>`."""
    if isinstance(key, str) and key.isprintable() and 0 < len(key) <= KEY_SHOWN:
        return prefix + key
    return f"{prefix}<{_kind(key)}>"


def _yaml_problem(e: Exception, *, first_line: int) -> str:
    """PyYAML's message on one line, with the line number in the file (the front matter starts on line 2)."""
    problem = getattr(e, "problem", None) or getattr(e, "context", None) or str(e)
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f" (line {mark.line + first_line})" if mark is not None else ""
    return " ".join(str(problem).split()) + where


def _inside(real: Path, roots: Sequence[Path]) -> bool:
    return any(real == root or real.is_relative_to(root) for root in roots)


def _resolve(path: Path) -> Path:
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError):
        return path


def _signature(path: Path) -> Signature | None:
    """The stat of the file `path` leads to, or None when it cannot be statted (then it is read every time)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)


def _os_reason(e: BaseException) -> str:
    return e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
