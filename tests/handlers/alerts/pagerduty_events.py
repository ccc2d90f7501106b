"""PagerDuty v3 webhook events for tests, shaped as PagerDuty's developer documentation's examples (its
"Webhooks v3 overview" and event payload examples: `{"event": {id, event_type, resource_type, occurred_at, agent,
client, data}}`, the incident under `data`, a note's incident under `data.incident`), and signed as PagerDuty signs
them: `X-PagerDuty-Signature: v1=<hex HMAC-SHA256 of the exact body>`, several values during a secret rotation."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

SECRET = "pd-webhook-secret-0123456789abcdef"
INCIDENT = "PGR0VU2"
SERVICE = "PF9KMXH"
POLICY = "PRQZNG7"
ACCOUNT = "https://acme.pagerduty.com"


def _ref(kind: str, id_: str, summary: str, path: str) -> dict[str, Any]:
    return {
        "html_url": f"{ACCOUNT}/{path}/{id_}",
        "id": id_,
        "self": f"https://api.pagerduty.com/{path}/{id_}",
        "summary": summary,
        "type": f"{kind}_reference",
    }


AGENT = _ref("user", "PLH1HKV", "Tenex Engineer", "users")


def incident(
    *, id_: str = INCIDENT, status: str = "triggered", priority: str | None = "P1", service: str = SERVICE
) -> dict[str, Any]:
    return {
        "id": id_,
        "type": "incident",
        "self": f"https://api.pagerduty.com/incidents/{id_}",
        "html_url": f"{ACCOUNT}/incidents/{id_}",
        "number": 1234,
        "status": status,
        "incident_key": "d3640fbd41094207a1c11e58e46b1662",
        "created_at": "2026-12-01T10:00:00Z",
        "title": "checkout 5xx",
        "service": _ref("service", service, "checkout-api", "services"),
        "assignees": [_ref("user", "PTUXL6G", "User 123", "users")],
        "escalation_policy": _ref("escalation_policy", POLICY, "Checkout on-call", "escalation_policies"),
        "teams": [_ref("team", "PFCVPS0", "Engineering", "teams")],
        "priority": _ref("priority", "PSO75BM", priority, "account/subdomain/priorities") if priority else None,
        "urgency": "high",
        "conference_bridge": {"conference_number": "+1 1234123412,,987654321#", "conference_url": ""},
        "resolve_reason": None,
        "body": {"type": "incident_body", "details": "5xx ratio 12% on /checkout since 10:00 UTC"},
    }


def event(kind: str, *, event_id: str, data: dict[str, Any] | None = None, **incident_kw: Any) -> dict[str, Any]:
    """One v3 event; `incident.annotated`'s data is a note naming the incident."""
    if data is None:
        data = incident(**incident_kw)
    return {
        "event": {
            "id": event_id,
            "event_type": kind,
            "resource_type": "incident",
            "occurred_at": "2026-12-01T10:01:00.000Z",
            "agent": AGENT,
            "client": {"name": "PagerDuty"},
            "data": data,
        }
    }


def note(content: str, *, event_id: str, id_: str = INCIDENT) -> dict[str, Any]:
    data = {
        "incident": _ref("incident", id_, "checkout 5xx", "incidents"),
        "id": "P0ZAOK5",
        "content": content,
        "trigger_log_entry": None,
        "type": "incident_note",
    }
    return event("incident.annotated", event_id=event_id, data=data)


def signature(body: bytes, *secrets: str) -> str:
    return ",".join(f"v1={hmac.new(s.encode(), body, hashlib.sha256).hexdigest()}" for s in secrets or (SECRET,))


def signed(payload: dict[str, Any], *secrets: str) -> tuple[bytes, dict[str, str]]:
    """The body as PagerDuty sends it and its headers."""
    body = json.dumps(payload).encode()
    return body, {
        "Content-Type": "application/json",
        "User-Agent": "PagerDuty-Webhook/V3.0",
        "X-PagerDuty-Signature": signature(body, *secrets),
        "X-Webhook-Id": payload["event"]["id"],
    }
