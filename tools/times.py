"""The one reading of a tool's `since`/`until`: an ISO 8601 time, or a duration before now ("30m", "2h", "3d";
s, m, h, d, w). The log tools, the journal and the Kubernetes reads all take it, so a model learns it once."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo

from tools.api import BadCall

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
SPAN_RE = re.compile(r"(\d{1,6})\s*([smhdw])")


def span(value: str) -> timedelta | None:
    """ "30m" as a timedelta; None when `value` isn't a duration."""
    m = SPAN_RE.fullmatch(value.strip())
    return timedelta(seconds=int(m[1]) * UNITS[m[2]]) if m else None


def when(value: str, name: str, now: datetime, zone: tzinfo = UTC) -> datetime:
    """`value` as an aware time: a duration before `now`, or an ISO 8601 time (without a zone: in `zone`); a
    one-line BadCall naming the argument for anything else."""
    if (before := span(value)) is not None:
        return now - before
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise BadCall(
            f"{name}: expected an ISO 8601 time (e.g. 2026-12-05T14:03:00Z) or a duration before now "
            f'(e.g. "30m", "2h", "3d"), got {value!r}'
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=zone)
