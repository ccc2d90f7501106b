"""What a run knows of the alert that started it, read from the Alertmanager payload stored with its group:
the alert's name, the group's common labels and when it started (the earliest `startsAt`, epoch seconds)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

_FRACTION = re.compile(r"(\.\d{6})\d+")  # Alertmanager writes nanoseconds; datetime keeps microseconds


@dataclass(frozen=True)
class AlertFacts:
    alertname: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    started_at: float | None = None  # epoch seconds


def parse_time(text: Any) -> float | None:
    """An RFC 3339 time (`2026-12-01T10:00:00.123456789Z`) as epoch seconds; None for anything else."""
    if not isinstance(text, str) or not text or text.startswith("0001-"):
        return None
    try:
        when = datetime.fromisoformat(_FRACTION.sub(r"\1", text.replace("Z", "+00:00")))
    except ValueError:
        return None
    return when.timestamp() if when.tzinfo is not None else None


def alert_facts(payload: str) -> AlertFacts | None:
    """The facts of a stored webhook payload (validated when it came in, redacted JSON); None when it is not one."""
    try:
        data = json.loads(payload) if payload else None
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("alerts"), list):
        return None
    alerts = [a for a in data["alerts"] if isinstance(a, dict) and isinstance(a.get("labels"), dict)]
    if not alerts:
        return None
    common = {k: v for k, v in alerts[0]["labels"].items() if isinstance(k, str) and isinstance(v, str)}
    for a in alerts[1:]:
        common = {k: v for k, v in common.items() if a["labels"].get(k) == v}
    name = common.get("alertname") or alerts[0]["labels"].get("alertname")
    starts = [t for t in (parse_time(a.get("startsAt")) for a in alerts) if t is not None]
    return AlertFacts(
        alertname=name if isinstance(name, str) and name else None,
        labels=common,
        started_at=min(starts) if starts else None,
    )
