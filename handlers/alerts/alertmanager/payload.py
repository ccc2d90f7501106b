"""Alertmanager's webhook payload (version 4): checked field by field, and what a group's notification says."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bot.core.json_body import BadJson, first_unstorable, read_json
from bot.core.titles import alert_title
from bot.run.prompts import quoted_markers
from handlers import messages, mrkdwn
from handlers.alerts.source import Alert, BadPayload

MAX_ALERTS = 1000  # alerts in one notification
TASK_MAX = 8000  # characters of an alert's text the model gets
KEY_LABELS = ("alertname", "severity", "instance", "job", "namespace", "service", "pod", "cluster")
ANNOTATIONS = ("summary", "description", "runbook_url")  # shown first, by name
_FRACTION = re.compile(r"(\.\d{6})\d+")  # Alertmanager writes nanoseconds; datetime keeps microseconds


def validate(body: bytes) -> dict[str, Any]:
    """Alertmanager's webhook payload version 4, checked field by field; raises BadPayload."""
    try:
        payload = read_json(body)
    except BadJson as e:
        raise BadPayload(str(e)) from None
    if not isinstance(payload, dict):
        raise BadPayload("body is not a JSON object")
    if payload.get("version") != "4":
        raise BadPayload(f'version: expected "4", got {payload.get("version")!r}')
    if not isinstance(payload.get("groupKey"), str) or not payload["groupKey"]:
        raise BadPayload("groupKey: expected a non-empty string")
    if payload.get("status") not in ("firing", "resolved"):
        raise BadPayload("status: expected firing or resolved")
    alerts = payload.get("alerts")
    if not isinstance(alerts, list) or not alerts or len(alerts) > MAX_ALERTS:
        raise BadPayload(f"alerts: expected a list of 1 to {MAX_ALERTS} alerts")
    for i, a in enumerate(alerts):
        if not isinstance(a, dict):
            raise BadPayload(f"alerts[{i}]: expected an object")
        if a.get("status") not in ("firing", "resolved"):
            raise BadPayload(f"alerts[{i}].status: expected firing or resolved")
        for key in ("labels", "annotations"):
            value = a.setdefault(key, {})
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise BadPayload(f"alerts[{i}].{key}: expected an object of strings")
        for key in ("startsAt", "fingerprint"):
            if not isinstance(a.get(key), str) or not a[key]:
                raise BadPayload(f"alerts[{i}].{key}: expected a non-empty string")
        if "generatorURL" in a and not isinstance(a["generatorURL"], str):
            raise BadPayload(f"alerts[{i}].generatorURL: expected a string")
    if problem := first_unstorable(payload):
        raise BadPayload(problem)
    return payload


def parse_time(text: Any) -> float | None:
    """An RFC 3339 time (`2026-12-01T10:00:00.123456789Z`) as epoch seconds; None for anything else."""
    if not isinstance(text, str) or not text or text.startswith("0001-"):
        return None
    try:
        when = datetime.fromisoformat(_FRACTION.sub(r"\1", text.replace("Z", "+00:00")))
    except ValueError:
        return None
    return when.timestamp() if when.tzinfo is not None else None


def _expr(generator_url: str) -> str:
    """The PromQL expression in a Prometheus generatorURL (`/graph?g0.expr=…`), or ""."""
    try:
        return parse_qs(urlsplit(generator_url).query).get("g0.expr", [""])[0]
    except ValueError:
        return ""


def task(payload: dict[str, Any]) -> str:
    """What the model gets for a group: how many of its alerts fire, then each firing alert's (or, when none
    fires, each resolved alert's) labels, annotations, start time and the expression behind it."""
    alerts = payload["alerts"]
    firing = [a for a in alerts if a["status"] == "firing"]
    resolved = f", {len(alerts) - len(firing)} resolved" if len(alerts) > len(firing) else ""
    lines = [
        f"Alertmanager group {payload['groupKey']} is {payload['status']} (receiver "
        f"{payload.get('receiver') or '?'}), {len(firing)} alert(s) firing{resolved}:"
    ]
    shown = firing or alerts
    for i, a in enumerate(shown[:20], 1):
        labels = ", ".join(f"{k}={v}" for k, v in sorted(a["labels"].items()))
        lines.append(f"{i}. {a['labels'].get('alertname', '?')}: labels {{{labels}}}; startsAt {a['startsAt']}")
        notes = a["annotations"]
        lines += [f"   {key}: {notes[key]}" for key in ANNOTATIONS if notes.get(key)]
        if others := ", ".join(f"{k}={v}" for k, v in sorted(notes.items()) if k not in ANNOTATIONS):
            lines.append(f"   other annotations: {others}")
        if a.get("generatorURL"):
            lines.append(f"   generatorURL: {a['generatorURL']}")
            if expr := _expr(a["generatorURL"]):
                lines.append(f"   expression: {expr}")
    if len(shown) > 20:
        lines.append(f"... and {len(shown) - 20} more alerts in this group.")
    return quoted_markers("\n".join(lines))[:TASK_MAX]


def _first(payload: dict[str, Any]) -> dict[str, Any]:
    """The alert a person reads first: the first firing one (the first of all when none fires)."""
    alerts = payload["alerts"]
    return next((a for a in alerts if a.get("status") == "firing"), alerts[0])


def alert(payload: dict[str, Any]) -> Alert:
    """A (validated, or stored) notification as the desk reads it; the labels are those every alert shares."""
    alerts = [a for a in payload["alerts"] if isinstance(a, dict) and isinstance(a.get("labels"), dict)]
    common = dict(alerts[0]["labels"]) if alerts else {}
    for a in alerts[1:]:
        common = {k: v for k, v in common.items() if a["labels"].get(k) == v}
    first = payload["alerts"][0]
    name = first["labels"].get("alertname") or payload.get("commonLabels", {}).get("alertname") or ""
    sev = first["labels"].get("severity", "")
    text = first["annotations"].get("summary") or first["annotations"].get("description") or ""
    starts = [t for t in (parse_time(a.get("startsAt")) for a in alerts) if t is not None]
    return Alert(
        key=f"am:{payload['groupKey']}",
        status=payload["status"],
        firing=tuple(a["fingerprint"] for a in payload["alerts"] if a["status"] == "firing"),
        name=name,
        title=alert_title(payload),
        summary=" ".join(
            f"{name or 'alert'}{f' ({sev})' if sev else ''}: {text} [{len(payload['alerts'])} alert(s)]".split()
        )[:300],
        task=task(payload),
        labels=common,
        link=_first(payload).get("generatorURL"),
        started_at=min(starts) if starts else None,
    )


def root_message(payload: dict[str, Any], previous: str | None) -> str:
    """The root of the group's thread; `previous`: the link to its previous occurrence's thread."""
    first = _first(payload)
    labels, notes = first["labels"], first["annotations"]
    links = [
        (what, mrkdwn.plain_link(url))
        for what, url in (("Source", first.get("generatorURL")), ("Runbook", notes.get("runbook_url")))
        if url
    ]
    return messages.alert_root(
        name=mrkdwn.reveal(labels.get("alertname", "alert"), prose=True),
        severity=mrkdwn.reveal(labels.get("severity", ""), prose=True),
        status=payload["status"],
        firing=sum(a["status"] == "firing" for a in payload["alerts"]),
        labels=[(k, mrkdwn.reveal(labels[k], prose=True)) for k in KEY_LABELS if k in labels and k != "alertname"][:8],
        summary=mrkdwn.reveal(notes.get("summary", ""), prose=True),
        links=links,
        previous=previous,
    )


def note(alert: Alert, *, told_run: bool) -> str:
    """The thread's line when the group resolved or its firing set changed."""
    if alert.status == "resolved":
        return messages.alert_resolved(mrkdwn.reveal(alert.name or "alert", prose=True), told_run=told_run)
    return messages.alert_changed(list(alert.firing))
