"""What every change source answers (`Change`, `Cut`, `SourceFailure`) and the one timeline they become, newest first.

Every text field comes from outside opsloop (a commit subject, a package name, a ConfigMap's manager, a CI
summary), so it is data: `timeline` puts each one on one line, redacts it (bot.core.redact), writes out the
characters a reader could miss or that reorder text (bot.core.reveal, the rule the CLI and cards
use), and neutralises Slack's markup brackets, so `<!channel>` reads as text wherever it ends up.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from bot.core.redact import redact
from bot.core.reveal import reveal
from tools.api import truncate_output

SOURCES = ("kubernetes", "host", "git", "webhook", "pagerduty")
FIELD_MAX = 300  # one field of one line; a 5 KB commit subject would crowd out every other change
TIMELINE_MAX = 12_000  # the whole answer, as any tool output (tools.api.MAX_OUTPUT_CHARS)
_LINE_BREAKS = re.compile(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+")


@dataclass(frozen=True)
class Change:
    """One thing that changed: when (aware, kept in UTC), which source saw it, on what, what, and where to look."""

    at: datetime
    source: str  # one of SOURCES
    target: str  # "prod-eu/web deployment/api", "web-03", "deploy-config (main)", "checkout-api (prod)"
    what: str  # "image api:1.41 → api:1.42, revision 3"
    ref: str = ""  # "replicaset/api-7d9f", "a1b2c3d", "https://ci.example.com/runs/1"

    def __post_init__(self) -> None:
        if self.at.tzinfo is None or self.at.utcoffset() is None:
            raise ValueError(f"Change.at must carry a time zone, got {self.at.isoformat()}")
        if self.source not in SOURCES:
            raise ValueError(f"Change.source must be one of {', '.join(SOURCES)}, got {self.source!r}")
        object.__setattr__(self, "at", self.at.astimezone(UTC))


@dataclass(frozen=True)
class Cut:
    """A source's answer that is not whole: the changes it could list, and what is missing and why."""

    changes: Sequence[Change]
    why: str  # "git log's output passed 512 KiB: 40 commits listed without their files"


@dataclass(frozen=True)
class SourceFailure:
    """A source that could not answer (a cluster down, a host unreachable, a repository missing), and why; with
    `cut`, one that answered only in part (its changes are in the timeline) and what is missing."""

    source: str
    target: str
    why: str
    cut: bool = False

    def line(self) -> str:
        if self.cut:
            return f"{data(self.source)} {data(self.target)} was cut: {data(self.why)}"
        return f"could not read {data(self.source)} {data(self.target)}: {data(self.why)}"


def utc_minute(at: datetime) -> str:
    """`2026-12-02 14:08 UTC`."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def relative(at: datetime, anchor: datetime) -> str:
    """How far `at` is from `anchor`: `12 min before`, `3 min after`, `2 h 5 min before`, `at the start`."""
    seconds = (at - anchor).total_seconds()
    side = "before" if seconds < 0 else "after"
    minutes = int(abs(seconds) // 60)
    if minutes == 0:
        return "at the start" if abs(seconds) < 1 else f"under 1 min {side}"
    if minutes < 60:
        return f"{minutes} min {side}"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min {side}" if minutes else f"{hours} h {side}"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h {side}" if hours else f"{days} d {side}"


def data(text: object, *, limit: int = FIELD_MAX) -> str:
    """Outside text made safe for one timeline field: one line, redacted, hidden characters written out, Slack's
    `<…>` markup neutralised, at most `limit` characters.

    Only `<` and `>` are escaped (they open every mention, link and `<!channel>`): a lone `&` forms no markup,
    and escaping it too would show `&amp;` once Slack's own escaping of tool output runs over it."""
    one_line = _LINE_BREAKS.sub(" ", str(text)).replace("\t", " ").strip()
    shown = reveal(redact(one_line)).replace("<", "&lt;").replace(">", "&gt;")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _line(change: Change, anchor: datetime) -> str:
    parts = [utc_minute(change.at), relative(change.at, anchor), change.source, data(change.target), data(change.what)]
    if change.ref:
        parts.append(data(change.ref))
    return " · ".join(parts)


def _note(changes_out: int, changes: int, failures_out: int, failures: int) -> str:
    """The line that stands for what the cap left out of the middle of the timeline."""
    what = f"{changes_out} of {changes} change" + ("" if changes == 1 else "s")
    if failures_out:
        what += f" and {failures_out} of {failures} failed or cut sources"
    return f"\n… [truncated: {what} not shown] …\n"


def timeline(
    changes: Iterable[Change], failures: Iterable[SourceFailure], *, anchor: datetime, now: datetime, covered: str = ""
) -> str:
    """The changes newest first, one line each (time, relative to `anchor`, source, target, what, reference),
    then one line per source that failed or was cut; bounded like any tool output. `covered` (the window and the
    sources read) follows the first line, so an empty timeline says what it looked at.

    Within TIMELINE_MAX it is the whole text (redacted again as a whole, as any tool output). Over it, as
    truncate_output does, the head and the tail are kept, each half of the room, but in whole lines: the newest
    changes after the first line, the oldest and the failures at the end, and between them one line saying how
    many changes (and failures) are not shown. Lines are formatted (redacted, revealed, escaped) only as they
    are needed to fill the room, not every change of a busy window."""
    ordered = sorted(changes, key=lambda c: (c.at, c.source, c.target, c.what, c.ref), reverse=True)
    failed = sorted(failures, key=lambda f: (f.source, f.target, f.why))
    count = f"{len(ordered)} change" + ("" if len(ordered) == 1 else "s")
    head = (
        f"{count}, newest first; now is {utc_minute(now)}, times relative to the start at {utc_minute(anchor)}"
        if ordered
        else f"no changes found; now is {utc_minute(now)}, the start was {utc_minute(anchor)}"
    ) + (f"\n{covered}" if covered else "")
    total = 1 + len(ordered) + len(failed)
    shown: dict[int, str] = {}

    def line(i: int) -> str:
        if i not in shown:
            if i == 0:
                shown[i] = head
            elif i <= len(ordered):
                shown[i] = _line(ordered[i - 1], anchor)
            else:
                shown[i] = failed[i - 1 - len(ordered)].line()
        return shown[i]

    keep = TIMELINE_MAX - len(_note(len(ordered), len(ordered), len(failed), len(failed)))
    room = [(keep + 1) // 2, keep - (keep + 1) // 2]  # the head's and the tail's, as truncate_output splits

    def fill(indices: range, room: int) -> tuple[int, int]:
        """Lines from `indices` while "\n".join of them fits in `room`: (how many, their length)."""
        taken = length = 0
        for i in indices:
            cost = len(line(i)) + (1 if taken else 0)
            if length + cost > room:
                break
            taken, length = taken + 1, length + cost
        return taken, length

    front, front_len = fill(range(total), room[0])
    back, back_len = fill(range(total - 1, front - 1, -1), room[1])
    gap = range(front, total - back)
    length = front_len + back_len + (1 if front and back else 0)
    for i in gap:  # the whole text may still fit where the halves' whole lines did not: look until it cannot
        length += len(line(i)) + 1
        if length > TIMELINE_MAX:
            break
    else:
        return truncate_output("\n".join(line(i) for i in range(total)), TIMELINE_MAX)
    changes_out = sum(1 for i in gap if 1 <= i <= len(ordered))
    note = _note(changes_out, len(ordered), len(gap) - changes_out, len(failed))
    text = (
        redact("\n".join(line(i) for i in range(front)))
        + note
        + redact("\n".join(line(i) for i in range(total - back, total)))
    )
    return text if len(text) <= TIMELINE_MAX else truncate_output(text, TIMELINE_MAX)
