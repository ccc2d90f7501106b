"""What the PagerDuty reach reads from `[pagerduty]` (tools/pagerduty/reach.py parses it): plain, picklable data
that the tools, the note sender and the changes reach's source find without importing the reach."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


class HiddenToken(str):
    """A token that never shows itself in a repr."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Secret('***')"


DEFAULT_TOKEN_ENV = "OPSLOOP_PAGERDUTY_TOKEN"
DEFAULT_ROUTING_KEY_ENV = "OPSLOOP_PAGERDUTY_ROUTING_KEY"
BASE_URL = "https://api.pagerduty.com"
EVENTS_URL = "https://events.pagerduty.com"
# The alert labels that name a run's PagerDuty incident and service (the PagerDuty alert source sets them).
INCIDENT_LABEL = "pagerduty_incident_id"
SERVICE_LABEL = "pagerduty_service_id"


@dataclass(frozen=True)
class PagerDutyConfig:
    """`[pagerduty]`: the REST token (None: unset), who each Slack approver is to PagerDuty (`from`: Slack user id
    → email), the Events v2 routing key for change events (None: none sent), the services named for `opsloop
    check` and `recent_changes`, the ids `[alerts.pagerduty] routes` names (`opsloop check` reads each), the email
    notes are written as, and where the two APIs are (another region's, or a test's fake)."""

    token_env: str = DEFAULT_TOKEN_ENV
    token: HiddenToken | None = None
    from_emails: Mapping[str, str] = field(default_factory=dict, hash=False)
    notes_from: str = ""  # the PagerDuty user's email notes are written as (its From)
    events_routing_key_env: str = DEFAULT_ROUTING_KEY_ENV
    routing_key: HiddenToken | None = None
    services: tuple[str, ...] = ()
    routes: tuple[str, ...] = ()  # the service or escalation policy ids [alerts.pagerduty] routes pages by
    base_url: str = BASE_URL
    events_url: str = EVENTS_URL


def incident_of(labels: Mapping[str, str]) -> tuple[str, str] | None:
    """The (incident id, service id) a run's alert labels name; None when they name no incident. The service id
    may be ""."""
    incident = str(labels.get(INCIDENT_LABEL, "")).strip()
    return (incident, str(labels.get(SERVICE_LABEL, "")).strip()) if incident else None
