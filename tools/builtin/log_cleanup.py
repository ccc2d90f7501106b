"""clean_logs' approval binding (the scan and the deletes are in tools/builtin/log_files.py): the run deletes
only what the approved preview listed (each file by a tag over its path, inode, size and mtime; the list by a
digest)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from tools.builtin.host import human_bytes
from tools.builtin.log_reads import LISTED_FILES

#
# The preview names each file (up to LISTED_FILES) with a tag: a hash of its path, inode, size and mtime, so
# the run recognises "the same file" and nothing else; a list digest covers every file, named or not. The
# approved preview reaches the run as `approved_preview` (the text the approver saw, from the Decision). Every
# file the preview stood for ends up deleted or reported: changed since the preview, gone since the preview,
# or (when the digest no longer holds) counted as covered only by the digest; a file it did not stand for is
# never deleted and is reported as not in the approved preview.


@dataclass(frozen=True)
class Candidate:
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


@dataclass(frozen=True)
class Scan:
    """A walk of the directory: the candidates, and every entry's path as shown (to tell changed from gone)."""

    root: Path
    cands: list[Candidate]
    present: frozenset[str]


def list_digest(cands: list[Candidate]) -> str:
    """32 hex digits over every candidate's path, inode, size and mtime: the whole list a preview stands for."""
    material = "\n".join(c.identity for c in sorted(cands, key=lambda c: str(c.path)))
    return hashlib.sha256(material.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def printable_path(path: Path) -> str:
    """A path as one printable line: control characters (a newline in a hostile file name) escaped."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in str(path))


def file_line(c: Candidate, now: float, *, tag: bool = False) -> str:
    text = f"  {printable_path(c.path)}  {human_bytes(c.size)}  {c.age_days(now):.0f}d old"
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
        named = tuple(
            _Named(e["tag"], e["shown"], e["text"]) for line in rest.splitlines() if (e := _ENTRY_RE.match(line))
        )
        return cls(m.group(1) if m else None, int(n.group(1)) if n else 0, named)


@dataclass
class Outcome:
    deleted: list[Candidate] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # preview-time lines of approved files that changed
    gone: list[str] = field(default_factory=list)  # ... that are no longer there
    failed: list[str] = field(default_factory=list)


def choose(scan: Scan, approved_preview: str, outcome: Outcome) -> tuple[list[Candidate], list[Candidate], int]:
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
    unapproved = [c for c in scan.cands if c.tag not in taken and printable_path(c.path) not in reported]
    return chosen, unapproved, max(approved.count - len(approved.named), 0)


def clean_report(
    scan: Scan,
    outcome: Outcome,
    unapproved: list[Candidate],
    unnamed: int,
    older_than_days: int,
    confirmed_by: str,
    now: float,
) -> str:
    freed = sum(c.size for c in outcome.deleted)
    out = [
        f"deleted {len(outcome.deleted)} rotated log files older than {older_than_days} days under "
        f"{printable_path(scan.root)}, freed {human_bytes(freed)} ({freed} bytes); approved by {confirmed_by}",
        *_listing([file_line(c, now) for c in outcome.deleted]),
    ]
    again = "call clean_logs again for a new preview and approval"
    if outcome.changed:
        out.append(f"left alone: changed since the preview ({len(outcome.changed)} files; {again}):")
        out += _listing(outcome.changed)
    if outcome.gone:
        out.append(f"left alone: gone since the preview ({len(outcome.gone)} files):")
        out += _listing(outcome.gone)
    if unnamed:
        out.append(
            f"left alone: the {unnamed} files the approved preview covered only by its list digest, not by "
            f"name (the list changed since the preview, so they cannot be told from new files; {again})"
        )
    if unapproved:
        if unnamed:
            out.append(
                f"not deleted, not named in the approved preview ({len(unapproved)} files: new, changed, or "
                f"among the {unnamed} it covered only by its list digest; {again}):"
            )
        else:
            out.append(
                f"not deleted, not in the approved preview ({len(unapproved)} files, new or changed since it "
                f"was made; {again}):"
            )
        out += _listing([file_line(c, now) for c in unapproved])
    return "\n".join(out + outcome.failed)


def _listing(lines: list[str], limit: int = 200) -> list[str]:
    shown = lines[:limit]
    if len(lines) > limit:
        shown.append(f"  … and {len(lines) - limit} more")
    return shown


def preview_text(scan: Scan, older_than_days: int, now: float) -> str:
    where, cands = printable_path(scan.root), scan.cands
    if not cands:
        return f"would delete nothing: no rotated logs older than {older_than_days} days under {where}"
    total = sum(c.size for c in cands)
    head = (
        f"would delete {len(cands)} rotated log files older than {older_than_days} days under {where}, "
        f"{human_bytes(total)} ({total} bytes); list digest {list_digest(cands)}"
    )
    lines = [file_line(c, now, tag=True) for c in cands[:LISTED_FILES]]
    if len(cands) > LISTED_FILES:
        lines.append(f"  … and {len(cands) - LISTED_FILES} more, covered by the list digest")
    return "\n".join([head, *lines])
