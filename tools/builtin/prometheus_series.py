"""A range result (a matrix) as bounded text: per series its first, last, min, max and mean, when it first crossed a
threshold, and points sampled evenly over the whole window with their times; the top N series by a measure, and
what the rest amount to."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from tools.api import MAX_OUTPUT_CHARS
from tools.builtin.prometheus_units import unit_of, with_unit

Measure = Literal["max", "min", "mean", "last", "first", "increase"]
BUDGET = MAX_OUTPUT_CHARS - 1_000  # room for the server's warnings; the registry's cut then never falls
POINTS = (61, 31, 16, 8, 0)  # points shown per series (61: an hour at one a minute), fewer until the output fits


def iso(t: float | str) -> str:
    return datetime.fromtimestamp(float(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def num(v: str) -> str:
    """Prometheus sample values are strings; shorten long floats (to the millisecond past a million), keep
    NaN/Inf as sent."""
    try:
        f = float(v)
    except ValueError:
        return v
    if not math.isfinite(f):
        return v
    if f.is_integer() and abs(f) < 1e15:
        return str(int(f))
    if 1e6 <= abs(f) < 1e15:  # timestamps, byte counts: six significant digits would make 1.79617e+09 of a time
        return f"{f:.3f}".rstrip("0").rstrip(".")
    return f"{f:.6g}"


def series_name(metric: dict[str, str]) -> str:
    """{'__name__': 'up', 'job': 'node'} -> 'up{job="node"}' (PromQL notation)."""
    name = metric.get("__name__", "")
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{labels}}}" if labels or not name else name


@dataclass(frozen=True)
class Threshold:
    value: float
    above: bool

    def crossed(self, v: float) -> bool:
        return v > self.value if self.above else v < self.value

    @property
    def words(self) -> str:
        return f"{'above' if self.above else 'below'} {num(str(self.value))}"


@dataclass(frozen=True)
class Series:
    metric: dict[str, str]
    points: list[tuple[float, str]]  # (unix time, raw value) as Prometheus sent them
    finite: list[tuple[float, float]]  # the points with a finite value

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Series:
        points = [(float(t), str(v)) for t, v in raw.get("values") or ()]
        finite = [(t, f) for t, v in points if math.isfinite(f := _float(v))]
        return cls(metric=raw.get("metric") or {}, points=points, finite=finite)

    def measure(self, by: Measure) -> float | None:
        values = [v for _, v in self.finite]
        if not values:
            return None
        if by in ("max", "min"):
            return max(values) if by == "max" else min(values)
        if by == "mean":
            return sum(values) / len(values)
        first, last = values[0], values[-1]
        return first if by == "first" else last if by == "last" else last - first

    def onset(self, threshold: Threshold) -> tuple[float, float] | None:
        """The first point beyond the threshold (time, value), or None."""
        return next(((t, v) for t, v in self.finite if threshold.crossed(v)), None)


def _float(v: str) -> float:
    try:
        return float(v)
    except ValueError:
        return math.nan


def _sample(points: list[tuple[float, str]], k: int) -> list[tuple[float, str]]:
    """`k` points spread evenly over the whole list, its first and last included."""
    n = len(points)
    if n <= k:
        return points
    return [points[i] for i in sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})]


def _describe(s: Series, k: int, threshold: Threshold | None, clock: str) -> list[str]:
    name = series_name(s.metric)
    if not s.points:
        return [f"{name}: no points"]
    unit = unit_of(s.metric.get("__name__", ""))
    lines = [f"{name}: {len(s.points)} points {iso(s.points[0][0])} .. {iso(s.points[-1][0])}"]
    if s.finite:
        low = min(s.finite, key=lambda p: p[1])
        high = max(s.finite, key=lambda p: p[1])
        mean = sum(v for _, v in s.finite) / len(s.finite)
        shown = [
            f"first={with_unit(num(str(s.finite[0][1])), unit)}",
            f"last={with_unit(num(str(s.finite[-1][1])), unit)}",
            f"min={with_unit(num(str(low[1])), unit)} at {iso(low[0])}",
            f"max={with_unit(num(str(high[1])), unit)} at {iso(high[0])}",
            f"mean={with_unit(num(str(mean)), unit)}",
        ]
        lines.append("  " + " ".join(shown))
    else:
        lines.append("  no finite values (all NaN or Inf)")
    if threshold is not None:
        onset = s.onset(threshold)
        if onset is None:
            lines.append(f"  never {threshold.words}")
        elif onset[0] == s.points[0][0]:
            lines.append(f"  already {threshold.words} at the first point, {iso(onset[0])}")
        else:
            value = with_unit(num(str(onset[1])), unit)
            lines.append(f"  first {threshold.words} at {iso(onset[0])} (value {value})")
    if k:
        sample = _sample(s.points, k)
        which = f"{len(sample)} of {len(s.points)}, evenly spaced" if len(sample) < len(s.points) else "all"
        shown_points = ", ".join(f"{datetime.fromtimestamp(t, UTC).strftime(clock)} {num(v)}" for t, v in sample)
        lines.append(f"  points ({which}): {shown_points}")
    return lines


def _rest(rest: list[Series], by: Measure, threshold: Threshold | None) -> str:
    measures = [m for s in rest if (m := s.measure(by)) is not None]
    line = f"… {len(rest)} more series not shown"
    if measures:
        line += f", their {by} from {num(str(min(measures)))} to {num(str(max(measures)))}"
    if threshold is not None:
        onsets = [o[0] for s in rest if (o := s.onset(threshold))]
        line += f"; {len(onsets)} of them {threshold.words}" + (f" (first at {iso(min(onsets))})" if onsets else "")
    return line + "; raise top or narrow the query to see them"


def format_matrix(
    result: list[dict[str, Any]], *, asked: str, top: int, by: Measure, threshold: Threshold | None
) -> str:
    """The text for a matrix: the `top` series by `by` (highest first; lowest first for min), fitted to BUDGET by
    showing fewer points, then fewer series, and saying so; with none, `asked` (the query and window) named."""
    if not result:
        return f"matrix: no series for {asked} (the query matched nothing in the window)"
    series = [Series.of(raw) for raw in result]
    ranked = sorted(
        series,
        key=lambda s: (s.measure(by) is None, (m if by == "min" else -m) if (m := s.measure(by)) is not None else 0),
    )
    times = [t for s in series for t, _ in s.points[:1] + s.points[-1:]]
    same_day = bool(times) and iso(min(times))[:10] == iso(max(times))[:10]
    clock, clock_words = ("%H:%M:%S", "HH:MM:SS") if same_day else ("%m-%dT%H:%M", "MM-DDTHH:MM")
    head = f"matrix: {len(series)} series"
    if times:
        head += f", {iso(min(times))} .. {iso(max(times))}"
    shown = min(top, len(series))
    if len(series) > 1:
        head += f"; by {by}, {'lowest' if by == 'min' else 'highest'} first"
    text = ""
    while shown:
        for k in POINTS if shown <= 5 else POINTS[1:]:
            lines = [head + (f", point times {clock_words} UTC" if k else "")]
            for s in ranked[:shown]:
                lines += _describe(s, k, threshold, clock)
            if shown < len(series):
                lines.append(_rest(ranked[shown:], by, threshold))
            if k == 0:
                lines.append("(points left out to fit the output limit; a shorter window or fewer series shows them)")
            text = "\n".join(lines)
            if len(text) <= BUDGET:
                return text
        shown -= 1
    return text
