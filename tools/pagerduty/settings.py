"""What the PagerDuty reach reads from `[pagerduty]` (tools/pagerduty/reach.py parses it): plain, picklable data
that the tools, the note sender and the changes reach's source find without importing the reach."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from bot.config.reader import Reader, setting
from tools.reach import Hidden, matching

# The alert labels that name a run's PagerDuty incident and service (the PagerDuty alert source sets them).
INCIDENT_LABEL = "pagerduty_incident_id"
SERVICE_LABEL = "pagerduty_service_id"

_email = matching(re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+"), "is not an email address")
_service_ids = matching(re.compile(r"[A-Z0-9]{1,20}"), "is not a PagerDuty service id (like PIJ90N7)")


def _emails(emails: Mapping[str, str], r: Reader, key: str) -> Mapping[str, str]:
    return {user: email for user, email in emails.items() if _email(email, r, f"{key}.{user}")}


@dataclass(frozen=True)
class PagerDutyConfig:
    """`[pagerduty]`: the REST token (None: unset), who each Slack approver is to PagerDuty (`from`: Slack user id
    → email), the Events v2 routing key for change events (None: none sent), the services named for `opsloop
    check` and `recent_changes`, the ids `[alerts.pagerduty] routes` names (`opsloop check` reads each), the email
    notes are written as, and where the two APIs are (another region's, or a test's fake). The token, the routing
    key and the routes are not read from [pagerduty]: the reach sets them."""

    token_env: str = setting("OPSLOOP_PAGERDUTY_TOKEN", "the variable holding the REST API token", kind="env_name")
    token: Hidden | None = None
    from_emails: Mapping[str, str] = setting(
        doc="Slack user id = the approver's PagerDuty email", key="from", factory=dict, check=_emails
    )
    notes_from: str = setting("", "the PagerDuty user's email notes are written as (their From)", check=_email)
    events_routing_key_env: str = setting(
        "OPSLOOP_PAGERDUTY_ROUTING_KEY", "the variable holding the Events v2 routing key", kind="env_name"
    )
    routing_key: Hidden | None = None
    services: tuple[str, ...] = setting(
        (), "the service ids `opsloop check` and recent_changes read", check=_service_ids
    )
    routes: tuple[str, ...] = ()  # the service or escalation policy ids [alerts.pagerduty] routes pages by
    base_url: str = setting("https://api.pagerduty.com", "the REST API", kind="url")
    events_url: str = setting("https://events.pagerduty.com", "the Events v2 API", kind="url")


def incident_of(labels: Mapping[str, str]) -> tuple[str, str] | None:
    """The (incident id, service id) a run's alert labels name; None when they name no incident. The service id
    may be ""."""
    incident = str(labels.get(INCIDENT_LABEL, "")).strip()
    return (incident, str(labels.get(SERVICE_LABEL, "")).strip()) if incident else None
