"""The PagerDuty calls opsloop makes: REST (`Authorization: Token token=…`, the `From` header on writes) and Events
v2's change/enqueue. Every call is bounded in time; 429 (with Retry-After) and 5xx are retried with capped
backoff a few times inside one call (the note sender's own retries cover longer outages), and what PagerDuty
still refuses is a `PagerDutyError` with its status and its message, never the token."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp

from bot.core.redact import redact
from tools.api import ToolError
from tools.pagerduty.settings import PagerDutyConfig

TIMEOUT_S = 15.0
ATTEMPTS = 4  # one call: the first try and three retries of a 429, a 5xx or a dropped connection
MAX_BACKOFF_S = 8.0
PAGE = 100  # change events per page
MAX_CHANGE_EVENTS = 500  # per read: a timeline shows far fewer
RETRIED = frozenset({429, 500, 502, 503, 504})


class PagerDutyError(ToolError):
    """PagerDuty answered with an error (`status` 0: no answer at all)."""

    def __init__(self, message: str, status: int = 0, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.retry_after = status, retry_after

    @property
    def transient(self) -> bool:
        return self.status == 0 or self.status in RETRIED


@dataclass(frozen=True)
class Note:
    id: str
    content: str


@dataclass(frozen=True)
class PagerChange:
    """One PagerDuty change event: when, its summary, the services it is on, a link."""

    at: datetime
    summary: str
    services: tuple[str, ...]
    id: str = ""
    source: str = ""


def _backoff(attempt: int, retry_after: float | None) -> float:
    return min(max(min(MAX_BACKOFF_S, 0.25 * 2.0**attempt), retry_after or 0.0), 60.0)


def _message(status: int, body: str) -> str:
    """PagerDuty's error text: `error.message` and its `errors` list, else the body's start."""
    try:
        err = json.loads(body).get("error", {})
        text = "; ".join([str(err.get("message", "")), *map(str, err.get("errors", []) or [])]).strip("; ")
    except (ValueError, AttributeError):
        text = ""
    return redact(text or body[:300] or f"HTTP {status}")


class PagerDuty:
    """One configured account's REST and Events v2 endpoints; a session per call (calls are few)."""

    def __init__(self, config: PagerDutyConfig, *, attempts: int = ATTEMPTS, sleep: Any = asyncio.sleep) -> None:
        self.config, self.attempts, self.sleep = config, attempts, sleep

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        from_email: str | None = None,
        events: bool = False,
    ) -> dict[str, Any]:
        """One call, retried on 429/5xx/no answer up to `attempts` times; the JSON answer ({} when empty)."""
        if not events and not self.config.token:
            raise PagerDutyError(f"{self.config.token_env} is not set: opsloop has no PagerDuty REST API token")
        url = (self.config.events_url if events else self.config.base_url).rstrip("/") + path
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if not events:
            headers |= {
                "Accept": "application/vnd.pagerduty+json;version=2",
                "Authorization": f"Token token={self.config.token}",
            }
        if from_email:
            headers["From"] = from_email
        data = json.dumps(body).encode() if body is not None else None
        last = PagerDutyError("no attempt made")
        for attempt in range(self.attempts):
            if attempt:
                await self.sleep(_backoff(attempt, last.retry_after))
            try:
                async with (
                    aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session,
                    session.request(method, url, params=params, data=data, headers=headers) as r,
                ):
                    text = await r.text()
                    if r.status < 300:
                        return json.loads(text) if text.strip() else {}
                    retry_after = r.headers.get("Retry-After", "")
                    last = PagerDutyError(
                        f"PagerDuty {method} {path}: HTTP {r.status}: {_message(r.status, text)}",
                        r.status,
                        float(retry_after) if retry_after.replace(".", "", 1).isdigit() else None,
                    )
            except (aiohttp.ClientError, TimeoutError, ValueError) as e:
                last = PagerDutyError(f"PagerDuty {method} {path}: no answer ({type(e).__name__}: {redact(str(e))})")
            if not last.transient:
                raise last
        raise last

    async def me(self) -> str:
        """Who the token is (GET /users/me): `name <email>`; an account-level token has no user (a 400 here)."""
        user = (await self.request("GET", "/users/me")).get("user", {})
        return f"{user.get('name', '?')} <{user.get('email', '?')}>"

    async def service(self, service_id: str) -> str:
        """The service's name (GET /services/{id}); a PagerDutyError (404) when there is none."""
        return str((await self.request("GET", f"/services/{service_id}")).get("service", {}).get("name", service_id))

    async def escalation_policy(self, policy_id: str) -> str:
        """The escalation policy's name (GET /escalation_policies/{id}); a PagerDutyError (404) when there is none."""
        found = (await self.request("GET", f"/escalation_policies/{policy_id}")).get("escalation_policy", {})
        return str(found.get("name", policy_id))

    async def notes(self, incident_id: str) -> list[Note]:
        """The incident's notes (GET /incidents/{id}/notes: PagerDuty lists them all, unpaged)."""
        found = (await self.request("GET", f"/incidents/{incident_id}/notes")).get("notes", [])
        return [Note(str(n.get("id", "")), str(n.get("content", ""))) for n in found]

    async def add_note(self, incident_id: str, content: str, from_email: str) -> Note:
        body = {"note": {"content": content}}
        note = (await self.request("POST", f"/incidents/{incident_id}/notes", body=body, from_email=from_email))["note"]
        return Note(str(note.get("id", "")), str(note.get("content", "")))

    async def set_status(self, incident_id: str, status: str, from_email: str) -> dict[str, Any]:
        """PUT /incidents/{id} with `status` (acknowledged/resolved): the incident as PagerDuty answers it."""
        body = {"incident": {"type": "incident_reference", "status": status}}
        answer = await self.request("PUT", f"/incidents/{incident_id}", body=body, from_email=from_email)
        return dict(answer.get("incident", {}))

    async def change_events(self, since: datetime, until: datetime) -> tuple[list[PagerChange], bool]:
        """The account's change events in [since, until] (GET /change_events, paged), and whether more were left
        than MAX_CHANGE_EVENTS."""
        found: list[PagerChange] = []
        offset = 0
        while True:
            params = {
                "since": since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),  # the form PagerDuty's API documents
                "until": until.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "limit": str(PAGE),
                "offset": str(offset),
            }
            page = await self.request("GET", "/change_events", params=params)
            for e in page.get("change_events", []):
                at = datetime.fromisoformat(str(e.get("timestamp", "")).replace("Z", "+00:00"))
                services = tuple(str(s.get("id", "")) for s in e.get("services", []) if isinstance(s, dict))
                found.append(
                    PagerChange(at, str(e.get("summary", "")), services, str(e.get("id", "")), str(e.get("source", "")))
                )
            offset += PAGE
            if not page.get("more") or len(found) >= MAX_CHANGE_EVENTS:
                return found[:MAX_CHANGE_EVENTS], bool(page.get("more")) or len(found) > MAX_CHANGE_EVENTS

    async def send_change(
        self, summary: str, *, source: str, at: datetime, details: Mapping[str, str], link: str
    ) -> None:
        """POST /v2/change/enqueue on the routing key's service (the Events API answers 202)."""
        if not self.config.routing_key:
            raise PagerDutyError(f"{self.config.events_routing_key_env} is not set: no change events are sent")
        payload = {
            "summary": summary[:1024],
            "timestamp": at.astimezone(UTC).isoformat(),
            "source": source,
            "custom_details": dict(details),
        }
        body: dict[str, Any] = {"routing_key": str(self.config.routing_key), "payload": payload}
        if link:
            body["links"] = [{"href": link, "text": "Slack thread"}]
        await self.request("POST", "/v2/change/enqueue", body=body, events=True)
