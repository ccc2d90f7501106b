"""The configured Prometheus HTTP API: PromQL queries answered as compact text per series, the metrics it has, and
the alerts firing and pending now."""

from __future__ import annotations

import contextlib
import json
import re
import time
from datetime import datetime
from typing import Any

import aiohttp

from tools.api import BadCall, some_names
from tools.builtin.prometheus_series import Measure, Threshold, format_matrix, iso, num, series_name
from tools.builtin.prometheus_units import unit_of, with_unit
from tools.registry import Category, ToolContext, ToolError, tool

MAX_SERIES = 100  # of an instant vector
TOP_MAX = 30  # series a range query shows in full
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_RELATIVE_RE = re.compile(r"(?:now)?\s*-\s*(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_time(value: str, now: float | None = None) -> str:
    """'now', 'now-1h' and '-30m' become a unix timestamp; RFC 3339 and unix times pass through as they are."""
    text = value.strip()
    now = time.time() if now is None else now
    if text == "now":
        return f"{now:.3f}"
    m = _RELATIVE_RE.fullmatch(text)
    if m:
        return f"{now - float(m.group(1)) * _UNITS[m.group(2)]:.3f}"
    if not text:
        raise ToolError("time: must not be empty")
    return text


def _shown(when: str) -> str:
    """A time as parse_time passed it on, for the reader: a unix time as UTC ISO, RFC 3339 as given."""
    try:
        return iso(when)
    except ValueError:
        return when


MAX_RESPONSE_BYTES = 8 * 2**20


async def _api(
    ctx: ToolContext, endpoint: str, form: list[tuple[str, str]] | dict[str, str], *, method: str = "POST"
) -> tuple[Any, str]:
    """The `data` of a successful answer and the server's warnings and infos as lines; a ToolError otherwise."""
    if not ctx.prometheus_url:
        raise ToolError("no Prometheus URL is configured (set url in [tools.prometheus])")
    url = f"{ctx.prometheus_url.rstrip('/')}/api/v1/{endpoint}"
    timeout = aiohttp.ClientTimeout(total=ctx.http_timeout_s)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.request(
                method, url, data=form if method == "POST" else None, params=form if method == "GET" else None
            ) as resp,
        ):
            raw = bytearray()
            async for chunk in resp.content.iter_chunked(1 << 16):
                raw += chunk
                if len(raw) > MAX_RESPONSE_BYTES:
                    break
            status = resp.status
        if len(raw) > MAX_RESPONSE_BYTES:  # parsing it would stall the event loop; the model can't read it anyway
            raise ToolError(
                f"Prometheus answered more than {MAX_RESPONSE_BYTES // 2**20} MiB; narrow the query "
                "(fewer series: add label matchers or aggregate with sum/topk; a larger step)"
            )
        text = bytes(raw).decode("utf-8", "replace")
    except TimeoutError:
        raise ToolError(f"Prometheus at {ctx.prometheus_url} did not answer within {ctx.http_timeout_s:g}s") from None
    except aiohttp.ClientError as e:
        raise ToolError(f"cannot reach Prometheus at {ctx.prometheus_url}: {e}") from None
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ToolError(f"Prometheus answered HTTP {status} without a JSON body: {text[:200]!r}")
    if body.get("status") != "success":
        raise ToolError(f"Prometheus {body.get('errorType', 'error')}: {body.get('error', f'HTTP {status}')}")
    notes = "".join(f"\n{kind[:-1]}: {note}" for kind in ("warnings", "infos") for note in body.get(kind) or ())
    return body.get("data"), notes


def format_result(
    data: dict[str, Any], *, asked: str, top: int = 10, by: Measure = "max", threshold: Threshold | None = None
) -> str:
    """The compact text for a query's `data`: a line per vector sample, a summary per matrix series (see
    format_matrix); values in the unit their metric's name says, beside the raw number. `asked` (the query and
    its time or window) names what matched nothing when no series came back."""
    kind = data.get("resultType")
    result = data.get("result")
    if kind in {"scalar", "string"}:
        t, v = result  # type: ignore[misc]
        return f"{kind} {num(v) if kind == 'scalar' else repr(v)} at {iso(t)}"
    if kind == "matrix" and isinstance(result, list):
        return format_matrix(result, asked=asked, top=top, by=by, threshold=threshold)
    if kind != "vector" or not isinstance(result, list):
        raise ToolError(f"unexpected Prometheus result type {kind!r}")
    if not result:
        return f"vector: no series for {asked} (the query matched nothing)"
    lines = [f"vector: {len(result)} series"]
    times = {s["value"][0] for s in result}
    if len(times) == 1:
        lines[0] += f" at {iso(times.pop())}"
    for s in result[:MAX_SERIES]:
        value = with_unit(num(s["value"][1]), unit_of(s["metric"].get("__name__", "")))
        lines.append(f"{series_name(s['metric'])} {value}")
    if len(result) > MAX_SERIES:
        lines.append(f"… {len(result) - MAX_SERIES} more series not shown; narrow the query")
    return "\n".join(lines)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def prometheus_query(query: str, time: str | None = None, *, ctx: ToolContext) -> str:
    """Evaluate a PromQL query at one instant (now by default) on the configured Prometheus.

    Returns the result type, how many series, and one line per series (its labels and value), at most 100 series;
    a query that matches nothing says "no series". Values whose metric name gives a unit (_bytes, _seconds, _ratio,
    _percent) show it in parentheses beside the raw number. Prometheus' own warnings follow. Use it for a current
    value, e.g. the error rate right now, before a range query shows when it changed.

    Args:
        query: the PromQL expression, e.g. sum by (job) (rate(http_requests_total{code=~"5.."}[5m])).
        time: evaluation time: RFC 3339, a unix timestamp, "now" or relative like "now-1h".
    """
    form = {"query": query}
    if time is not None:
        form["time"] = parse_time(time)
    data, notes = await _api(ctx, "query", form)
    asked = f"{query} at {_shown(form['time'])}" if time is not None else f"{query} now"
    return format_result(data or {}, asked=asked) + notes


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def prometheus_query_range(
    query: str,
    start: str,
    end: str = "now",
    step: str = "60s",
    threshold: float | None = None,
    above: bool = True,
    sort_by: Measure = "max",
    top: int = 10,
    *,
    ctx: ToolContext,
) -> str:
    """Evaluate a PromQL query over a time range on the configured Prometheus and summarise each series.

    Returns per series its labels, point count, first, last, min and max (with their times) and mean; with a
    threshold, when it first went above it (or below, with above=false), or that it never did; then points sampled
    evenly over the whole window, each with its UTC time. Values whose metric name gives a unit (_bytes, _seconds,
    _ratio, _percent) show it beside the raw number. Only the top series by sort_by are shown (highest first;
    lowest first for min), at most 30; a line counts the rest and gives the range of their measure. Fewer points,
    then fewer series, are shown when the output would pass its limit, and it says so. Use it to find when a
    metric changed, e.g. when the 5xx rate rose, to line it up with recent_changes.

    Args:
        query: the PromQL expression.
        start: range start: RFC 3339, a unix timestamp, or relative like "now-1h".
        end: range end, same formats; "now" by default.
        step: resolution, a duration like "60s" or "5m", or seconds.
        threshold: report when each series first crossed this value.
        above: true (default): crossing means going above the threshold; false: going below it.
        sort_by: the measure that picks the series shown: max, min, mean, first, last, or increase (last - first).
        top: how many series to show in full, 1 to 30 (default 10).
    """
    if not 1 <= top <= TOP_MAX:
        raise BadCall(f"top: must be between 1 and {TOP_MAX}, got {top}")
    form = {"query": query, "start": parse_time(start), "end": parse_time(end), "step": step}
    data, notes = await _api(ctx, "query_range", form)
    mark = None if threshold is None else Threshold(value=threshold, above=above)
    asked = f"{query} between {_shown(form['start'])} and {_shown(form['end'])}"
    return format_result(data or {}, asked=asked, top=top, by=sort_by, threshold=mark) + notes


NAMES_MAX = 200  # metric names or label values one call lists
_LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


async def _metadata(ctx: ToolContext, name: str | None = None) -> dict[str, list[dict[str, str]]]:
    data, _ = await _api(ctx, "metadata", {"metric": name} if name else {}, method="GET")
    return data if isinstance(data, dict) else {}


def _about(name: str, metadata: dict[str, list[dict[str, str]]]) -> str:
    """`name (type): help`, from the first target's metadata; recording rules and stale metrics have none."""
    meta = (metadata.get(name) or [{}])[0]
    help_text = " ".join(str(meta.get("help", "")).split())
    help_text = help_text if len(help_text) <= 160 else help_text[:159] + "…"
    return f"{name} ({meta.get('type') or 'no type'})" + (f": {help_text}" if help_text else "")


async def _names(ctx: ToolContext, pattern: str, limit: int) -> str:
    form = []
    if pattern:
        if "`" in pattern:
            raise BadCall("pattern: must not contain a backtick")
        # Prometheus matches it (Go's RE2: linear time, whatever the pattern), anchored, so .* on both sides.
        form.append(("match[]", f"{{__name__=~`(?i).*(?:{pattern}).*`}}"))
    names, _ = await _api(ctx, "label/__name__/values", form, method="GET")
    names = sorted(names or ())
    asked = f"matching {pattern!r}" if pattern else "in all"
    if not names:
        return f"no metric names {asked} on this Prometheus"
    metadata = await _metadata(ctx)
    lines = [f"{len(names)} metric names {asked}" + (f", the first {limit} shown" if len(names) > limit else "")]
    lines += [_about(name, metadata) for name in names[:limit]]
    if len(names) > limit:
        lines.append(f"… {len(names) - limit} more not shown; a narrower pattern finds them")
    return "\n".join(lines)


async def _labels(ctx: ToolContext, metric: str) -> str:
    series, _ = await _api(ctx, "series", [("match[]", metric)], method="GET")
    if not series:
        return f"no series for {metric} on this Prometheus"
    values: dict[str, set[str]] = {}
    for labels in series:
        for key, value in labels.items():
            if key != "__name__":
                values.setdefault(key, set()).add(value)
    names = sorted({labels.get("__name__", "") for labels in series})
    metadata = await _metadata(ctx, names[0]) if len(names) == 1 and names[0] else {}
    lines = [f"{metric}: {len(series)} series" + (f"; {_about(names[0], metadata)}" if metadata else "")]
    if len(names) > 1:
        lines.append(f"metric names: {some_names(names)}")
    for key in sorted(values):
        shown = sorted(values[key])
        lines.append(f"{key} ({len(shown)} values): {some_names(shown)}")
    return "\n".join(lines)


async def _label_values(ctx: ToolContext, label: str, metric: str | None, limit: int) -> str:
    if not _LABEL_RE.fullmatch(label):
        raise BadCall(f"label: {label!r} is not a label name (letters, digits, _)")
    values, _ = await _api(ctx, f"label/{label}/values", [("match[]", metric)] if metric else [], method="GET")
    values = sorted(values or ())
    where = f" on {metric}" if metric else ""
    if not values:
        return f"no values of label {label}{where} on this Prometheus"
    lines = [f"{len(values)} values of {label}{where}" + (f", the first {limit} shown" if len(values) > limit else "")]
    lines += values[:limit]
    if len(values) > limit:
        lines.append(f"… {len(values) - limit} more not shown")
    return "\n".join(lines)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def prometheus_metrics(
    pattern: str = "", metric: str | None = None, label: str | None = None, limit: int = 50, *, ctx: ToolContext
) -> str:
    """List what the configured Prometheus holds: metric names, a metric's labels, or a label's values.

    With pattern (a substring or RE2 regex, case-insensitive; empty: all), returns the metric names that match,
    sorted, each with its type and help text (none for recording rules). With metric (a name or a selector like
    up{job="api"}) alone, returns how many series it has and each label's values (the first ten of each). With
    label, returns that label's values, on metric's series when metric is given. Lists at most limit entries
    (1 to 200, default 50) and says how many more there are. Use it before writing a query, to find the metric
    and the label values that exist instead of guessing them.

    Args:
        pattern: part of the metric names to find, e.g. "http_requests" or "disk.*bytes".
        metric: a metric name or series selector whose labels (or, with label, whose label values) to list.
        label: a label name, e.g. "instance", whose values to list.
        limit: how many names or values to list, 1 to 200.
    """
    if not 1 <= limit <= NAMES_MAX:
        raise BadCall(f"limit: must be between 1 and {NAMES_MAX}, got {limit}")
    if label is not None:
        return await _label_values(ctx, label, metric, limit)
    if metric is not None:
        return await _labels(ctx, metric)
    return await _names(ctx, pattern, limit)


ALERTS_MAX = 50


def _alert_line(alert: dict[str, Any], now: float) -> str:
    labels = {k: v for k, v in (alert.get("labels") or {}).items() if k != "alertname"}
    line = f"  {alert.get('state', '?')} {series_name(labels)}"
    active = str(alert.get("activeAt") or "")
    if active:
        line += f" active since {active}"
        with contextlib.suppress(ValueError):  # a time Prometheus did not write in RFC 3339: shown as it is
            line += f" ({(now - time_of(active)) / 60:.0f} min)"
    line += f" value {num(str(alert.get('value', '')))}"
    summary = " ".join(str((alert.get("annotations") or {}).get("summary", "")).split())
    return line + (f"; summary: {summary[:200]}" if summary else "")


def time_of(rfc3339: str) -> float:
    """Prometheus' RFC 3339 times (nanoseconds, Z or an offset) as unix time."""
    head, _, rest = rfc3339.partition(".")
    zone = rest.lstrip("0123456789") if rest else ""
    return datetime.fromisoformat(head + (zone.replace("Z", "+00:00") or "+00:00")).timestamp()


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def prometheus_alerts(*, ctx: ToolContext) -> str:
    """List the alerts firing and pending now on the configured Prometheus, each under the rule that fires it.

    Returns, per alerting rule with active alerts (firing first): its name, group, PromQL expression and `for`
    duration; then per alert its state, labels, activeAt (RFC 3339, and how many minutes ago), the value that fired
    it and its summary annotation. At most 50 alerts are shown, and it says how many more there are; with none it
    says "no alerts firing or pending". Use it at the start of an incident to see what else is alerting, and to read
    the exact expression behind an alert before querying its metric.
    """
    data, notes = await _api(ctx, "rules", {"type": "alert"}, method="GET")
    groups = (data or {}).get("groups") or ()
    rules = [
        {**r, "group": g.get("name", "")} for g in groups for r in g.get("rules") or () if r.get("type") == "alerting"
    ]
    active = [r for r in rules if r.get("alerts")]
    alerts = [a for r in active for a in r["alerts"]]
    firing = sum(a.get("state") == "firing" for a in alerts)
    if not alerts:
        return f"no alerts firing or pending ({len(rules)} alerting rules loaded){notes}"
    lines = [
        f"{firing} alerts firing, {len(alerts) - firing} pending, from {len(active)} of {len(rules)} alerting rules"
    ]
    shown, now = 0, time.time()
    for rule in sorted(active, key=lambda r: r.get("state") != "firing"):
        if shown >= ALERTS_MAX:
            break
        expr = " ".join(str(rule.get("query", "")).split())
        lines.append(
            f"rule {rule.get('name')} (group {rule['group']}, for {num(str(rule.get('duration', 0)))}s): {expr}"
        )
        ordered = sorted(rule["alerts"], key=lambda a: (a.get("state") != "firing", str(a.get("activeAt"))))
        for alert in ordered[: ALERTS_MAX - shown]:
            lines.append(_alert_line(alert, now))
            shown += 1
    if shown < len(alerts):
        lines.append(f"… {len(alerts) - shown} more alerts not shown")
    return "\n".join(lines) + notes
