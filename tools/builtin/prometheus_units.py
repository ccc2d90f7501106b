"""Units of a Prometheus value, read only from its metric's name (the Prometheus naming conventions): `_bytes` as
KiB/MiB/GiB, `_seconds` as ms/s/h, a `_timestamp_seconds` or `_time_seconds` as a UTC time, `_ratio` and
`_percent` as %. A name that says nothing, or no name at all (a computed result), gets the raw number alone."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

_BYTE_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def _bytes(v: float) -> str:
    size, unit = abs(v), "B"
    for next_unit in _BYTE_UNITS:
        if size < 1024:
            break
        size, unit = size / 1024, next_unit
    return f"{math.copysign(size, v):.3g} {unit}"


def _seconds(v: float) -> str:
    if abs(v) < 1:
        return f"{v * 1000:.3g} ms"
    if abs(v) < 3600:
        return f"{v:.3g} s"
    return f"{v / 3600:.3g} h"


def _time(v: float) -> str:
    try:
        return datetime.fromtimestamp(v, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return ""


def _ratio(v: float) -> str:
    return f"{v * 100:.3g}%"


def _percent(v: float) -> str:
    return f"{v:.3g}%"


def _base_name(name: str) -> tuple[str, bool]:
    """The metric part of a name and whether it is per second: a recording rule's `level:metric:operations` names
    its metric in the middle, and a `rate`/`irate` operation makes the value per second."""
    parts = name.split(":")
    if len(parts) == 3 and parts[1]:
        return parts[1], "rate" in parts[2]
    return name, False


def unit_of(name: str) -> Callable[[float], str] | None:
    """The formatter the metric's name calls for (None: the name says no unit). A histogram's or summary's `_count`
    and `_bucket` are counts; its `_sum` has the metric's unit; a counter's `_total` the unit before it."""
    base, per_second = _base_name(name)
    if base.endswith(("_count", "_bucket")):
        return None
    for suffix in ("_sum", "_total"):
        base = base.removesuffix(suffix)
    if base.endswith(("_timestamp_seconds", "_time_seconds")) and not per_second:
        return _time
    by_suffix = (("_bytes", _bytes), ("_seconds", _seconds), ("_ratio", _ratio), ("_percent", _percent))
    formatter = next((f for suffix, f in by_suffix if base.endswith(suffix)), None)
    if formatter is None or not per_second:
        return formatter
    return lambda v: f"{formatter(v)}/s"


def with_unit(raw: str, unit: Callable[[float], str] | None) -> str:
    """`raw` (as shown) followed by the value in its unit in parentheses, when the name gives one and it is finite."""
    if unit is None:
        return raw
    try:
        value = float(raw)
    except ValueError:
        return raw
    shown = unit(value) if math.isfinite(value) else ""
    return f"{raw} ({shown})" if shown else raw
