"""PromQL queries against the configured Prometheus HTTP API, answered as compact text per series."""

from __future__ import annotations

import json
import math
import re
import time
from datetime import UTC, datetime
from typing import Any

import aiohttp

from tools.registry import Category, ToolContext, ToolError, tool

MAX_SERIES = 100
MAX_POINTS = 120
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


def _ts(t: float | str) -> str:
    return datetime.fromtimestamp(float(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _num(v: str) -> str:
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


def format_result(data: dict[str, Any]) -> str:
    """The compact text for a query's `data`: one line per vector sample, a summary line per matrix series."""
    kind = data.get("resultType")
    result = data.get("result")
    if kind in {"scalar", "string"}:
        t, v = result  # type: ignore[misc]
        return f"{kind} {_num(v) if kind == 'scalar' else repr(v)} at {_ts(t)}"
    if kind not in ("vector", "matrix") or not isinstance(result, list):
        raise ToolError(f"unexpected Prometheus result type {kind!r}")
    if not result:
        return f"{kind}: no series (the query matched nothing)"
    lines = [f"{kind}: {len(result)} series"]
    if kind == "vector":
        times = {s["value"][0] for s in result}
        if len(times) == 1:
            lines[0] += f" at {_ts(times.pop())}"
        for s in result[:MAX_SERIES]:
            lines.append(f"{series_name(s['metric'])} {_num(s['value'][1])}")
    else:
        for s in result[:MAX_SERIES]:
            values = s.get("values", [])
            if not values:
                lines.append(f"{series_name(s['metric'])}: no points")
                continue
            nums = [float(v) for _, v in values if v not in ("NaN", "+Inf", "-Inf")]
            stats = f" min={_num(str(min(nums)))} max={_num(str(max(nums)))}" if nums else ""
            lines.append(
                f"{series_name(s['metric'])}: {len(values)} points {_ts(values[0][0])} .. {_ts(values[-1][0])}"
                f"{stats} last={_num(values[-1][1])}"
            )
            shown = values[-MAX_POINTS:]
            prefix = f"  (last {MAX_POINTS}) " if len(values) > MAX_POINTS else "  "
            lines.append(prefix + " ".join(_num(v) for _, v in shown))
    if len(result) > MAX_SERIES:
        lines.append(f"… {len(result) - MAX_SERIES} more series not shown; narrow the query")
    return "\n".join(lines)


MAX_RESPONSE_BYTES = 8 * 2**20


async def _api(ctx: ToolContext, endpoint: str, form: dict[str, str]) -> str:
    if not ctx.prometheus_url:
        raise ToolError("no Prometheus URL is configured (set url in [tools.prometheus])")
    url = f"{ctx.prometheus_url.rstrip('/')}/api/v1/{endpoint}"
    timeout = aiohttp.ClientTimeout(total=ctx.http_timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.post(url, data=form) as resp:
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
    out = format_result(body.get("data") or {})
    for kind in ("warnings", "infos"):
        for note in body.get(kind) or ():
            out += f"\n{kind[:-1]}: {note}"
    return out


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def prometheus_query(query: str, time: str | None = None, *, ctx: ToolContext) -> str:
    """Evaluate a PromQL query at one instant (now by default) on the configured Prometheus.

    Returns the result type, how many series, and one line per series (its labels and value), at most 100 series;
    a query that matches nothing says "no series". Prometheus' own warnings follow. Use it for a current value,
    e.g. the error rate right now, before a range query shows when it changed.

    Args:
        query: the PromQL expression, e.g. sum by (job) (rate(http_requests_total{code=~"5.."}[5m])).
        time: evaluation time: RFC 3339, a unix timestamp, "now" or relative like "now-1h".
    """
    form = {"query": query}
    if time is not None:
        form["time"] = parse_time(time)
    return await _api(ctx, "query", form)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def prometheus_query_range(
    query: str, start: str, end: str = "now", step: str = "60s", *, ctx: ToolContext
) -> str:
    """Evaluate a PromQL query over a time range on the configured Prometheus.

    Returns, per series (at most 100): its labels, how many points, the min, max and last values, and the values
    themselves (the last 120 when there are more). A query that matches nothing says "no series". Use it to
    find when a metric changed, e.g. when the 5xx rate rose, to line it up with recent_changes.

    Args:
        query: the PromQL expression.
        start: range start: RFC 3339, a unix timestamp, or relative like "now-1h".
        end: range end, same formats; "now" by default.
        step: resolution, a duration like "60s" or "5m", or seconds.
    """
    form = {"query": query, "start": parse_time(start), "end": parse_time(end), "step": step}
    return await _api(ctx, "query_range", form)
