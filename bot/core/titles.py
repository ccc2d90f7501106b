"""A run's title as people see it on App Home and in `opsloop runs`: for an Alertmanager group, the alert's name,
where it fires and its status ("DiskFull web-03 (firing)"), never the raw groupKey. Pure, so the store's
migration can derive it for runs stored before titles were."""

from __future__ import annotations

import re
from typing import Any

TITLE_MAX = 150
# The labels that say where an alert fires, most telling first; two at most are shown.
WHERE_LABELS = ("instance", "host", "pod", "service", "deployment", "namespace", "cluster")
_PORT = re.compile(r":\d{1,5}$")  # instance="web-03:9100": the host is what a person names


def alert_title(payload: dict[str, Any]) -> str:
    """'DiskFull web-03 (firing)', 'HighLatency api prod +2 more (firing)' from a (validated) webhook payload."""
    alerts = [a for a in payload.get("alerts") or [] if isinstance(a, dict)]
    firing = [a for a in alerts if a.get("status") == "firing"]
    first = (firing or alerts or [{}])[0]
    raw_labels, raw_common = first.get("labels"), payload.get("commonLabels")
    labels: dict[str, Any] = raw_labels if isinstance(raw_labels, dict) else {}
    common: dict[str, Any] = raw_common if isinstance(raw_common, dict) else {}
    name = str(labels.get("alertname") or common.get("alertname") or "alert")
    where: list[str] = []
    for key in WHERE_LABELS:
        value = _PORT.sub("", str(labels.get(key) or "")) if key == "instance" else str(labels.get(key) or "")
        if value and value not in where:
            where.append(value)
    more = f"+{len(firing) - 1} more" if len(firing) > 1 else ""
    status = str(payload.get("status") or "firing")
    text = " ".join(" ".join([name, *where[:2], more, f"({status})"]).split())
    return text if len(text) <= TITLE_MAX else text[: TITLE_MAX - 1] + "…"
