"""Time in the log tools: the `since`/`until` a model gives (an ISO 8601 time or a duration before now), and the
time a log line starts with (ISO 8601, nginx's error log, syslog, nginx/Apache common log, journald's short-iso).

Times are read against the host's own clock and UTC offset (`Clock`), so a line without a zone is the host's
local time and "30m" is thirty minutes before the host's now, wherever opsloop runs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

from tools.api import BadCall
from tools.times import UNITS as _UNITS
from tools.times import span
from tools.times import when as _when

_MONTHS = {
    m: i for i, m in enumerate(["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1)
}
_ZONE = r"(Z|[+-]\d\d:?\d\d)?"
# 2026-12-05T14:03:11.123+01:00, 2026-12-05 14:03:11, 2026/12/05 14:03:11 (nginx's error log), optionally in [ ]
_ISO_RE = re.compile(rf"\[?(\d{{4}})[-/](\d\d)[-/](\d\d)[T ](\d\d):(\d\d)(?::(\d\d)(?:[.,](\d{{1,9}}))?)?\s?{_ZONE}")
_SYSLOG_RE = re.compile(r"([A-Z][a-z]{2}) {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d)")
_CLF_RE = re.compile(r"\[(\d\d)/([A-Z][a-z]{2})/(\d{4}):(\d\d):(\d\d):(\d\d) ([+-]\d{4})\]")
CLF_REACH = 200  # the common log format's [time] is looked for in a line's first characters


@dataclass(frozen=True)
class Clock:
    """A host's now and its UTC offset (what a time without a zone is read in)."""

    now: datetime  # aware

    @property
    def zone(self) -> timezone:
        offset = self.now.utcoffset() or timedelta(0)
        return timezone(offset)

    @classmethod
    def parse(cls, text: str) -> Clock:
        """From `date +'%s %z'` as the host printed it."""
        seconds, _, offset = text.strip().partition(" ")
        zone = _zone(offset) or UTC
        return cls(datetime.fromtimestamp(int(seconds), zone))


def _zone(text: str | None) -> timezone | None:
    if not text:
        return None
    if text == "Z":
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4])))


def when(value: str, name: str, clock: Clock) -> datetime:
    """`since`/`until` read against the host's clock: a duration before its now, or an ISO 8601 time (no zone: the
    host's); a one-line BadCall for anything else."""
    return _when(value, name, clock.now, clock.zone)


def line_time(line: str, clock: Clock) -> datetime | None:
    """The time `line` starts with, or None: ISO 8601 / short-iso and syslog at the start, the common log format's
    [05/Dec/2026:14:03:11 +0000] within its first CLF_REACH characters. Syslog has no year: the most recent such
    date not more than a day after the host's now."""
    head = line.lstrip()
    try:
        if m := _ISO_RE.match(head):
            fraction = int((m[7] or "0")[:6].ljust(6, "0"))
            numbers = (int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), int(m[6] or 0), fraction)
            return datetime(*numbers, tzinfo=_zone(m[8]) or clock.zone)
        if (m := _SYSLOG_RE.match(head)) and m[1] in _MONTHS:
            rest = (_MONTHS[m[1]], int(m[2]), int(m[3]), int(m[4]), int(m[5]))
            year = clock.now.astimezone(clock.zone).year
            found = datetime(year, *rest, tzinfo=clock.zone)
            return found.replace(year=year - 1) if found > clock.now + timedelta(days=1) else found
        if (m := _CLF_RE.search(line, 0, CLF_REACH)) and m[2] in _MONTHS:
            day = (int(m[3]), _MONTHS[m[2]], int(m[1]))
            return datetime(*day, int(m[4]), int(m[5]), int(m[6]), tzinfo=_zone(m[7]))
    except ValueError:  # 2026-02-30, Feb 29 in a year without one: not a time
        return None
    return None


@dataclass(frozen=True)
class Window:
    """[since, until] on a host's clock; either end may be open."""

    since: datetime | None
    until: datetime | None

    @classmethod
    def of(cls, since: str | None, until: str | None, clock: Clock) -> Window:
        start = when(since, "since", clock) if since else None
        end = when(until, "until", clock) if until else None
        if start is not None and end is not None and start > end:
            raise BadCall(f"since ({since}) is after until ({until})")
        return cls(start, end)

    @staticmethod
    def check(since: str | None, until: str | None) -> None:
        """A BadCall for a since/until that no clock could read, before any command runs."""
        Window.of(since, until, Clock(datetime.now(UTC)))

    @property
    def open(self) -> bool:
        return self.since is None and self.until is None

    def holds(self, t: datetime) -> bool:
        return (self.since is None or t >= self.since) and (self.until is None or t <= self.until)

    def describe(self, clock: Clock) -> str:
        def show(t: datetime | None, fallback: str) -> str:
            return t.astimezone(clock.zone).isoformat(timespec="seconds") if t is not None else fallback

        return f"between {show(self.since, 'the start')} and {show(self.until, 'now')}"


def duration(value: str, name: str) -> timedelta:
    """A duration such as "1m", "15m", "1h" (s, m, h, d, w); a one-line BadCall for anything else."""
    length = span(value)
    if not length:
        raise BadCall(f'{name}: expected a duration such as "1m", "5m", "1h" or "1d", got {value!r}')
    return length


def show_duration(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    whole = (f"{seconds // _UNITS[u]}{u}" for u in "wdhm" if seconds % _UNITS[u] == 0 and seconds >= _UNITS[u])
    return next(whole, f"{seconds}s")
