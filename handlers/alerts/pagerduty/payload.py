"""PagerDuty's v3 webhook payload: one event per request (`{"event": {...}}`), checked field by field, and what
each event of an incident says: `incident.triggered` opens the incident's thread, the others update it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.core.json_body import BadJson, first_unstorable, read_json
from bot.run.prompts import quoted_markers
from handlers import mrkdwn
from handlers.alerts.alertmanager.payload import parse_time
from handlers.alerts.source import Alert, BadPayload
from handlers.messages import escape

TASK_MAX = 8000  # characters of an incident's text the model gets
FIELD_MAX = 300  # characters of one name (a title, an agent) in a line
TRIGGERED = "incident.triggered"
# The events that update an incident's thread: (what happened, as a line says it).
UPDATES = {
    "incident.acknowledged": "acknowledged",
    "incident.unacknowledged": "unacknowledged (the acknowledgement timed out)",
    "incident.reassigned": "reassigned",
    "incident.escalated": "escalated",
    "incident.delegated": "delegated to another escalation policy",
    "incident.priority_updated": "priority changed",
    "incident.annotated": "annotated",
    "incident.resolved": "resolved",
    "incident.reopened": "reopened",
}


def validate(body: bytes) -> dict[str, Any]:
    """A v3 webhook body: `event` with its `id`, `event_type` and `data` (an incident, or for
    `incident.annotated` a note naming its incident); raises BadPayload."""
    try:
        payload = read_json(body)
    except BadJson as e:
        raise BadPayload(str(e)) from None
    if not isinstance(payload, dict) or not isinstance(payload.get("event"), dict):
        raise BadPayload("event: expected an object")
    event = payload["event"]
    for key in ("id", "event_type"):
        if not isinstance(event.get(key), str) or not event[key]:
            raise BadPayload(f"event.{key}: expected a non-empty string")
    data = event.get("data")
    if not isinstance(data, dict):
        raise BadPayload("event.data: expected an object")
    if event["event_type"] in (TRIGGERED, *UPDATES):
        incident = data.get("incident") if data.get("type") == "incident_note" else data
        if not isinstance(incident, dict) or not isinstance(incident.get("id"), str) or not incident["id"]:
            raise BadPayload("event.data: expected an incident (or a note naming one) with a non-empty id")
        for key in ("title", "status", "html_url", "urgency", "created_at"):
            if key in data and not isinstance(data[key], str | None):
                raise BadPayload(f"event.data.{key}: expected a string")
        for key in ("service", "escalation_policy", "priority", "agent"):
            where = event if key == "agent" else data
            if where.get(key) is not None and not isinstance(where[key], dict):
                raise BadPayload(f"event.{'' if key == 'agent' else 'data.'}{key}: expected an object")
    if problem := first_unstorable(payload):
        raise BadPayload(problem)
    return payload


def handled(payload: Mapping[str, Any]) -> bool:
    """Does this event open or update an incident's thread (others are answered and dropped)?"""
    return payload["event"]["event_type"] in (TRIGGERED, *UPDATES)


def _text(value: Any, limit: int = FIELD_MAX) -> str:
    return " ".join(str(value).split())[:limit] if value is not None else ""


def _ref(data: Mapping[str, Any], key: str, field: str = "summary") -> str:
    ref = data.get(key)
    return _text(ref.get(field)) if isinstance(ref, dict) else ""


def incident(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The event's incident (a note's `incident` reference for `incident.annotated`)."""
    data: dict[str, Any] = payload["event"]["data"]
    return data["incident"] if data.get("type") == "incident_note" else data


def service_ids(payload: Mapping[str, Any]) -> tuple[str, str]:
    """(service id, escalation policy id) of the event's incident ("" when it does not say)."""
    data = incident(payload)
    return _ref(data, "service", "id"), _ref(data, "escalation_policy", "id")


def _number(data: Mapping[str, Any]) -> str:
    return f"#{data['number']}" if isinstance(data.get("number"), int) else data["id"]


def title(payload: Mapping[str, Any]) -> str:
    """The run's title: `[P1] checkout 5xx (#1234)`."""
    data = incident(payload)
    priority = _ref(data, "priority")
    name = _text(data.get("title") or data.get("summary")) or "PagerDuty incident"
    return f"{f'[{priority}] ' if priority else ''}{name} ({_number(data)})"


def _details(data: Mapping[str, Any]) -> str:
    body = data.get("body")
    details = body.get("details") if isinstance(body, dict) else None
    if details is None:
        return ""
    return details if isinstance(details, str) else str(details)


def task(payload: Mapping[str, Any]) -> str:
    """What the model gets for a page: the incident's title, service, escalation policy, urgency, priority,
    status, assignees, creation time, link and details (outside text: markers quoted, bounded)."""
    data = incident(payload)
    assignees = [_text(a.get("summary")) for a in data.get("assignees") or [] if isinstance(a, dict)]
    lines = [
        f"PagerDuty incident {_number(data)} (id {data['id']}) was triggered: "
        f"{_text(data.get('title')) or '(no title)'}",
        f"Service: {_ref(data, 'service') or '?'} (id {_ref(data, 'service', 'id') or '?'})",
        f"Escalation policy: {_ref(data, 'escalation_policy') or '?'}",
        f"Urgency: {_text(data.get('urgency')) or '?'}; priority: {_ref(data, 'priority') or 'none'}; "
        f"status: {_text(data.get('status')) or '?'}",
        f"Assigned to: {', '.join(a for a in assignees if a) or 'nobody'}",
        f"Created at: {_text(data.get('created_at')) or '?'}",
        f"Link: {_text(data.get('html_url'), 1000) or '?'}",
    ]
    if details := _details(data):
        lines.append(f"Details: {details}")
    return quoted_markers("\n".join(lines))[:TASK_MAX]


def update_line(payload: Mapping[str, Any]) -> str:
    """One line for an update: `PagerDuty #1234 acknowledged by Ada Lovelace`."""
    event = payload["event"]
    data, kind = incident(payload), event["event_type"]
    line = f"PagerDuty {_number(data)} {UPDATES[kind]}"
    if agent := _ref(event, "agent"):
        line += f" by {agent}"
    if kind == "incident.priority_updated":
        line += f": now {_ref(data, 'priority') or 'none'}"
    elif kind == "incident.reassigned":
        assignees = [_text(a.get("summary")) for a in data.get("assignees") or [] if isinstance(a, dict)]
        line += f" to {', '.join(a for a in assignees if a) or 'nobody'}"
    elif kind == "incident.annotated":
        line += f": {_text(event['data'].get('content'), 500)}"
    elif kind == "incident.resolved" and (reason := _ref(data, "resolve_reason")):
        line += f" ({reason})"
    return line


def alert(payload: dict[str, Any]) -> Alert:
    """A (validated, or stored) event as the desk reads it. The incident's key is `pd:<incident id>` and each
    event is claimed once by its id; a trigger opens (firing), a resolve resolves, a reopen fires again (a new
    occurrence once its run ended), every other event is an update."""
    event = payload["event"]
    data, kind = incident(payload), event["event_type"]
    service, policy = service_ids(payload)
    labels = {"pagerduty_incident_id": data["id"], "pagerduty_service_id": service}
    labels |= {"pagerduty_escalation_policy_id": policy} if policy else {}
    if kind == TRIGGERED:
        status, firing = "firing", ("triggered",)
        priority, service = _ref(data, "priority"), _ref(data, "service")
        line = f"PagerDuty {_number(data)} {priority} {_text(data.get('title'))} ({service})"
        text = task(payload)
    else:
        status = {"incident.resolved": "resolved", "incident.reopened": "firing"}.get(kind, "updated")
        firing, line = (f"{kind}:{event['id']}",), update_line(payload)
        text = quoted_markers(line)
    return Alert(
        key=f"pd:{data['id']}",
        status=status,
        firing=firing,
        name=f"PagerDuty page {_number(data)}: {_text(data.get('title')) or 'incident'}",
        title=title(payload),
        summary=" ".join(line.split())[:300],
        task=text,
        labels=labels,
        link=data.get("html_url") if isinstance(data.get("html_url"), str) else None,
        started_at=parse_time(data.get("created_at")),
        delivery=event["id"],
    )


def root_message(payload: dict[str, Any], previous: str | None) -> str:
    """The root of an incident's thread; `previous`: the link to its previous occurrence's thread."""
    data = incident(payload)
    head = f":pager: *{escape(title(payload))}*"
    facts = [
        ("service", _ref(data, "service")),
        ("escalation policy", _ref(data, "escalation_policy")),
        ("urgency", _text(data.get("urgency"))),
    ]
    lines = [f"{head}: PagerDuty page, {escape(_text(data.get('status')) or 'triggered')}"]
    if shown := [(k, v) for k, v in facts if v]:
        lines.append(", ".join(f"*{k}:* {escape(mrkdwn.reveal(v, prose=True))}" for k, v in shown))
    if isinstance(data.get("html_url"), str):
        lines.append(f"*PagerDuty:* {mrkdwn.plain_link(data['html_url'])}")
    if previous:
        lines.append(f"This incident was investigated before: <{previous}|the previous thread>.")
    lines.append("_opsloop is investigating in this thread._")
    return "\n".join(lines)


def note(alert: Alert, *, told_run: bool) -> str:
    """The thread's line for an update: what PagerDuty said happened, in one line."""
    return f":pager: {escape(mrkdwn.reveal(alert.summary, prose=True))}." + (
        " The investigation is told." if told_run else ""
    )
