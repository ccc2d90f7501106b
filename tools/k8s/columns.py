"""The cells every Kubernetes view shares: ages, labels, images, pod status, and kubectl-style padded
columns. Pure functions of dicts (wire format); render, describe and diff build on these."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from tools.api import BadCall

MAX_ROWS = 200
ARROW = "→"
NONE = "(none)"
REVISION = "deployment.kubernetes.io/revision"
CHANGE_CAUSE = "kubernetes.io/change-cause"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"


# -- small helpers ---------------------------------------------------------------------------------
def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


_SINCE_RE = re.compile(r"(\d+)\s*(s|m|h|d)")
_SINCE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """'30m', '2h', '90s', '1d' before now, or an ISO 8601 time ('2024-05-01T10:00:00Z'; no zone: UTC)."""
    now = now or datetime.now(UTC)
    raw = text.strip()
    if m := _SINCE_RE.fullmatch(raw):
        return now - timedelta(seconds=int(m.group(1)) * _SINCE_UNITS[m.group(2)])
    t = parse_time(raw)
    if t is None:
        raise BadCall(f"since: {text!r} is neither a duration before now (30m, 2h, 1d) nor an ISO 8601 time")
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def when_text(t: datetime, now: datetime | None = None) -> str:
    """'2024-05-01T10:00:00Z (25m ago)'."""
    return f"{t.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')} ({age(t.isoformat(), now)} ago)"


def age(text: str | None, now: datetime | None = None) -> str:
    """'2024-05-01T10:00:00Z' → '3d4h', like kubectl's AGE column."""
    t = parse_time(text)
    if t is None:
        return "<unknown>"
    s = max(0, int(((now or datetime.now(UTC)) - t).total_seconds()))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 48:
        return f"{h}h{m % 60}m" if h < 8 and m % 60 else f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    return f"{d}d" if d < 365 * 2 else f"{d // 365}y"


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def labels_text(labels: Mapping[str, Any] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or NONE


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], *, limit: int = MAX_ROWS, what: str = "rows") -> str:
    """Columns padded like kubectl's (3 spaces apart); more than `limit` rows end with a note."""
    rows = [[str(c) if c not in (None, "") else "<none>" for c in r] for r in rows]
    shown = rows[:limit]
    widths = [max(len(h), *(len(r[i]) for r in shown)) if shown else len(h) for i, h in enumerate(header)]
    lines = ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [list(header), *shown]]
    if len(rows) > limit:
        lines.append(f"… {len(rows) - limit} more {what} not shown; narrow with a selector or a name")
    return "\n".join(lines)


def images(pod_spec: Mapping[str, Any] | None) -> str:
    return ",".join(str(c.get("image", "?")) for c in (pod_spec or {}).get("containers") or []) or NONE


def container_names(pod_spec: Mapping[str, Any] | None) -> str:
    return ",".join(str(c.get("name", "?")) for c in (pod_spec or {}).get("containers") or []) or NONE


# -- pods --------------------------------------------------------------------------------------------
def pod_status(pod: Mapping[str, Any]) -> str:
    """The STATUS column as kubectl computes it: the first waiting/terminated container reason wins."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        state = cs.get("state") or {}
        if "terminated" in state and state["terminated"].get("exitCode") == 0:
            continue
        if "terminated" in state:
            t = state["terminated"]
            return f"Init:{t.get('reason') or 'Error'}" if t.get("reason") else f"Init:ExitCode:{t.get('exitCode')}"
        if "waiting" in state and state["waiting"].get("reason") not in (None, "PodInitializing"):
            return f"Init:{state['waiting']['reason']}"
        total = len((pod.get("spec") or {}).get("initContainers") or [])
        return f"Init:{i}/{total}"
    for cs in reversed(status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            t = state["terminated"]
            reason = t.get("reason") or (
                f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode')}"
            )
    if meta(pod).get("deletionTimestamp"):
        reason = "Terminating"
    return str(reason)


def pod_ready(pod: Mapping[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or []) or len(statuses)
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def pod_restarts(pod: Mapping[str, Any], now: datetime | None = None) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    count = sum(int(c.get("restartCount") or 0) for c in statuses)
    last = [parse_time(((c.get("lastState") or {}).get("terminated") or {}).get("finishedAt")) for c in statuses]
    latest = max((t for t in last if t is not None), default=None)
    if count and latest is not None:
        return f"{count} ({age(latest.isoformat(), now)} ago)"
    return str(count)


def template_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}


def selector_text(obj: Mapping[str, Any]) -> str:
    sel = (obj.get("spec") or {}).get("selector") or {}
    if isinstance(sel, Mapping) and "matchLabels" in sel:
        return labels_text(sel.get("matchLabels"))
    return labels_text(sel) if isinstance(sel, Mapping) else str(sel)


def one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- nodes -----------------------------------------------------------------------------------------------------
PRESSURES = ("DiskPressure", "MemoryPressure", "PIDPressure", "NetworkUnavailable")


def node_problems(node: Mapping[str, Any]) -> list[str]:
    """What is wrong with a node by its conditions: `NotReady (NodeStatusUnknown)`, `DiskPressure
    (KubeletHasDiskPressure: …)`; empty for a healthy node."""
    out = []
    for c in (node.get("status") or {}).get("conditions") or []:
        kind, status = c.get("type"), c.get("status")
        if (kind == "Ready" and status != "True") or (kind in PRESSURES and status == "True"):
            name = "NotReady" if kind == "Ready" else str(kind)
            why = ": ".join(one_line(str(x), 100) for x in (c.get("reason"), c.get("message")) if x)
            out.append(f"{name} ({why})" if why else name)
    return out


def pod_unhealthy(pod: Mapping[str, Any]) -> bool:
    """Pending, evicted, failed or unknown: a pod whose node may explain its state."""
    status = pod.get("status") or {}
    return status.get("phase") not in ("Running", "Succeeded") or status.get("reason") == "Evicted"
