"""What a run knows of the alert that started it, read from the payload stored with its group by its source
(handlers/alerts/): the alert's name, the labels its alerts share and when it started (epoch seconds)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from handlers.alerts.sources import SOURCES


@dataclass(frozen=True)
class AlertFacts:
    alertname: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    started_at: float | None = None  # epoch seconds


def alert_facts(source: str, payload: str) -> AlertFacts | None:
    """The facts of a stored payload (validated when it came in, redacted JSON); None when there is none."""
    reader = next((s for s in SOURCES if s.name == source), None)
    try:
        alert = reader.alert(json.loads(payload)) if reader is not None and hasattr(reader, "alert") else None
    except (ValueError, LookupError, TypeError, AttributeError):
        return None
    if alert is None:
        return None
    return AlertFacts(alertname=alert.name or None, labels=alert.labels, started_at=alert.started_at)
