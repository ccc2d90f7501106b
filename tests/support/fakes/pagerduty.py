"""A stateful fake PagerDuty for tests: the REST API (`Authorization: Token token=…`) and Events v2's
change/enqueue, on one loopback port, every request and every answer checked against PagerDuty's own OpenAPI
(a trimmed copy: tests/support/data/pagerduty_openapi.json).

    async with FakePagerDuty(token="pd-token") as pd:
        pd.add_user("alice@example.com", "Alice")
        pd.add_service("PSVC001", "checkout", routing_key="R0UTING")
        pd.add_escalation_policy("PPOL001", "web on-call")
        pd.add_incident("PINC001", service="PSVC001")
        pd.fail("POST", "/incidents/PINC001/notes", 429, times=1, retry_after=0)
        pd.drop_after_accept("POST", "/incidents/PINC001/notes")  # stored, then the connection is cut
        pd.on_note = kill_opsloop  # (incident id, note) once stored, before the answer (awaited when async)
        ... pd.url (REST), pd.events_url (Events v2: POST {events_url}/v2/change/enqueue) ...
        assert pd.problems == []  # every request and answer matched the OpenAPI documents

Incidents keep their status and notes; a write's `From` must be a known user's email (else a 400 with
PagerDuty's "Requester User Not Found"; a 404 on PUT /incidents/{id}, whose documents list no 400); a bad token
is a 401; a routing key maps a change event to its service. `requests` records every call (method, path, query,
headers, body).
"""

from __future__ import annotations

import inspect
import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
from aiohttp import web

SCHEMA = json.loads((Path(__file__).parent.parent / "data" / "pagerduty_openapi.json").read_text())


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class Incident:
    id: str
    number: int
    service: str
    status: str = "triggered"
    notes: list[dict[str, Any]] = field(default_factory=list)


def _operation(api: str, method: str, path: str) -> tuple[dict[str, Any], dict[str, str]] | None:
    """The OpenAPI operation a request is, and its path parameters."""
    for template, ops in SCHEMA[api]["paths"].items():
        pattern = "^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template)) + "$"
        if (m := re.match(pattern, path)) and method.lower() in ops:
            return ops[method.lower()], m.groupdict()
    return None


def _resolve(api: str, node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        _, _, kind, rest = node["$ref"].split("/", 3)
        node = SCHEMA[api]["components"][kind]
        for part in rest.split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


# PagerDuty's documents give `since`/`until` this "pattern", which is a picture of the format, not a regular
# expression (it would match only the text itself): it is read as what it says, with `format: date-time`.
_PICTURES = {"YYYY-MM-DDThh:mm:ssZ": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"}


def _errors(api: str, schema: dict[str, Any], value: Any) -> list[str]:
    if schema.get("pattern") in _PICTURES:
        schema = {**schema, "pattern": _PICTURES[schema["pattern"]]}
    root = {"allOf": [schema], "components": SCHEMA[api]["components"]}
    validator = jsonschema.Draft4Validator(root, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"[:300] for e in validator.iter_errors(value)]


def check_request(api: str, req: Request) -> list[str]:
    """What is wrong with a request by the OpenAPI documents: an unknown operation, a missing required parameter
    or header, a parameter or body that does not match its schema."""
    path = req.path.removeprefix("/v2") if api == "events" else req.path
    found = _operation(api, req.method, path)
    if found is None:
        return [f"{req.method} {req.path}: no such operation in PagerDuty's OpenAPI"]
    op, _ = found
    problems: list[str] = []
    for raw in op.get("parameters", []):
        p = _resolve(api, raw)
        where = {"query": req.query, "header": {k.lower(): v for k, v in req.headers.items()}}.get(p["in"])
        if where is None:
            continue
        name = p["name"].lower() if p["in"] == "header" else p["name"]
        if name not in where:
            if p.get("required") and name not in ("accept", "content-type"):
                problems.append(f"{req.method} {req.path}: missing required {p['in']} {p['name']}")
            continue
        schema = p.get("schema", {})
        value: Any = where[name]
        if schema.get("type") == "integer":
            value = int(value) if str(value).lstrip("-").isdigit() else value
        problems += [f"{req.method} {req.path} {p['name']}: {e}" for e in _errors(api, schema, value)]
    body_schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body_schema is not None:
        problems += [f"{req.method} {req.path} body: {e}" for e in _errors(api, body_schema, req.body)]
    elif req.body not in (None, ""):
        problems.append(f"{req.method} {req.path}: a body where the operation takes none")
    return problems


def check_response(api: str, method: str, path: str, status: int, body: Any) -> list[str]:
    """What is wrong with an answer by the OpenAPI documents (a status it does not list, a body off its schema)."""
    found = _operation(api, method, path.removeprefix("/v2") if api == "events" else path)
    if found is None:
        return []  # the request's own problem says so
    responses = found[0]["responses"]
    resp = responses.get(str(status)) or responses.get(f"{str(status)[0]}XX") or responses.get("default")
    if resp is None:  # an outage's 5xx, and a bad token's 401, are in not every operation's list: not checked
        return (
            []
            if status >= 500 or status == 401
            else [f"{method} {path}: status {status} is not one PagerDuty's OpenAPI lists"]
        )
    schema = _resolve(api, resp).get("content", {}).get("application/json", {}).get("schema")
    return [] if schema is None else [f"{method} {path} answer {status}: {e}" for e in _errors(api, schema, body)]


class FakePagerDuty:
    def __init__(
        self, *, token: str = "pd-test-token", on_note: Callable[[str, dict[str, Any]], Any] | None = None
    ) -> None:
        self.token = token
        self.on_note = on_note  # (incident id, note) of each note accepted, after it is stored, before the answer
        self.users: dict[str, dict[str, str]] = {}  # email -> user
        self.services: dict[str, str] = {}  # id -> name
        self.policies: dict[str, str] = {}  # escalation policy id -> name
        self.routing_keys: dict[str, str] = {}  # routing key -> service id
        self.incidents: dict[str, Incident] = {}
        self.change_events: list[dict[str, Any]] = []
        self.requests: list[Request] = []
        self.problems: list[str] = []
        self._failures: list[list[Any]] = []  # [method, path, status, times left, retry_after]
        self._drops: list[tuple[str, str, str]] = []
        self._ids = itertools.count(1)
        self.me = "opsloop@example.com"
        self._runner: web.AppRunner | None = None
        self.url = self.events_url = ""

    # --- the account -----------------------------------------------------------------------------------------
    def add_user(self, email: str, name: str) -> None:
        self.users[email] = {"id": f"PUSR{len(self.users) + 1:03d}", "name": name, "email": email}

    def add_service(self, service_id: str, name: str, *, routing_key: str | None = None) -> None:
        self.services[service_id] = name
        if routing_key:
            self.routing_keys[routing_key] = service_id

    def add_escalation_policy(self, policy_id: str, name: str) -> None:
        self.policies[policy_id] = name

    def add_incident(self, incident_id: str, *, service: str) -> Incident:
        self.incidents[incident_id] = Incident(incident_id, 1000 + len(self.incidents), service)
        return self.incidents[incident_id]

    def add_change_event(self, summary: str, at: datetime, services: list[str]) -> None:
        self.change_events.append(self._change(summary, at, services, {}))

    def fail(self, method: str, path: str, status: int, *, times: int = 1, retry_after: float | None = None) -> None:
        """The next `times` calls of `method path` answer `status` (PagerDuty's error body; Retry-After on a 429)."""
        self._failures.append([method, path, status, times, retry_after])

    def drop_after_accept(self, method: str, path: str, *, containing: str = "") -> None:
        """The next `method path` (whose body contains `containing`) is done (stored) and then its connection cut
        before any answer: the caller can't tell whether PagerDuty took it, as when opsloop is killed right after
        PagerDuty accepted."""
        self._drops.append((method, path, containing))

    def notes(self, incident_id: str) -> list[str]:
        return [n["content"] for n in self.incidents[incident_id].notes]

    # --- serving -----------------------------------------------------------------------------------------------
    async def __aenter__(self) -> FakePagerDuty:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = self.events_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _change(self, summary: str, at: datetime, services: list[str], details: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"PCHG{next(self._ids):04d}",
            "type": "change_event",
            "summary": summary,
            "timestamp": at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "services": [{"id": s, "type": "service_reference"} for s in services],
            "custom_details": details,
        }

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.text()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        req = Request(request.method, request.path, dict(request.query), dict(request.headers), body)
        self.requests.append(req)
        api = "events" if request.path.startswith("/v2/") else "rest"
        self.problems += check_request(api, req)
        for f in self._failures:
            if f[0] == req.method and f[1] == req.path and f[3] > 0:
                f[3] -= 1
                headers = {"Retry-After": str(f[4])} if f[4] is not None else {}
                return self._answer(api, req, f[2], self._error(api, f[2], "Injected failure"), headers)
        status, answer = self._route(api, req)
        if self.on_note is not None and status == 200 and req.method == "POST" and req.path.endswith("/notes"):
            done = self.on_note(req.path.split("/")[2], answer["note"])
            if inspect.isawaitable(done):
                await done  # e.g. kill the caller and wait for it to die: it never reads this answer
        drop = next((d for d in self._drops if d[:2] == (req.method, req.path) and d[2] in raw), None)
        if drop is not None and status < 300:
            self._drops.remove(drop)
            assert request.transport is not None
            request.transport.close()  # accepted, never answered
            raise ConnectionResetError("dropped after accept")
        return self._answer(api, req, status, answer, {})

    def _answer(self, api: str, req: Request, status: int, body: Any, headers: dict[str, str]) -> web.Response:
        self.problems += check_response(api, req.method, req.path, status, body)
        return web.json_response(body, status=status, headers=headers)

    @staticmethod
    def _error(api: str, status: int, message: str, errors: tuple[str, ...] = ()) -> dict[str, Any]:
        if api == "events":
            return {"status": "invalid event", "message": message, "errors": list(errors)}
        return {"error": {"message": message, "code": 2001 if status == 400 else status, "errors": list(errors)}}

    def _route(self, api: str, req: Request) -> tuple[int, Any]:
        if api == "events":
            key = (req.body or {}).get("routing_key", "") if isinstance(req.body, dict) else ""
            if key not in self.routing_keys:
                return 400, self._error(api, 400, "Event object is invalid", ("Invalid routing key",))
            p = req.body["payload"]
            at = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
            self.change_events.append(
                self._change(p["summary"], at, [self.routing_keys[key]], p.get("custom_details", {}))
            )
            return 202, {"status": "success", "message": "Change event processed"}
        if req.headers.get("Authorization") != f"Token token={self.token}":
            return 401, self._error(api, 401, "Authentication failed")
        writes = req.method in ("POST", "PUT")
        who = self.users.get(req.headers.get("From", ""))
        if writes and who is None:  # a 400 where the operation's documents list one (notes), else their 404
            status = 400 if req.path.endswith("/notes") else 404
            return status, self._error(api, status, "Invalid Input Provided", ("Requester User Not Found",))
        parts = req.path.strip("/").split("/")
        if req.path == "/users/me":
            return 200, {
                "user": self._user(self.users.get(self.me) or {"id": "PBOT001", "name": "opsloop", "email": self.me})
            }
        if parts[0] == "services" and len(parts) == 2:
            if parts[1] not in self.services:
                return 404, self._error(api, 404, "Not Found")
            name = self.services[parts[1]]
            policy = {"id": "PPOL001", "type": "escalation_policy_reference"}
            return 200, {"service": {"id": parts[1], "type": "service", "name": name, "escalation_policy": policy}}
        if parts[0] == "escalation_policies" and len(parts) == 2:
            if parts[1] not in self.policies:
                return 404, self._error(api, 404, "Not Found")
            policy = {"id": parts[1], "type": "escalation_policy", "name": self.policies[parts[1]]}
            return 200, {"escalation_policy": {**policy, "escalation_rules": []}}
        if req.path == "/change_events":
            since, until = (datetime.fromisoformat(req.query[k].replace("Z", "+00:00")) for k in ("since", "until"))
            found = [
                e
                for e in self.change_events
                if since <= datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")) <= until
            ]
            offset, limit = int(req.query.get("offset", 0)), int(req.query.get("limit", 25))
            page = found[offset : offset + limit]
            return 200, {"change_events": page, "offset": offset, "limit": limit, "more": offset + limit < len(found)}
        if parts[0] == "incidents" and len(parts) >= 2:
            incident = self.incidents.get(parts[1])
            if incident is None:
                return 404, self._error(api, 404, "Not Found")
            if parts[2:] == ["notes"]:
                if req.method == "GET":
                    return 200, {"notes": incident.notes}
                assert who is not None
                note = {
                    "id": f"PNOT{next(self._ids):04d}",
                    "content": req.body["note"]["content"],
                    "created_at": datetime.now(UTC).isoformat(),
                    "user": {"id": who["id"], "type": "user_reference", "summary": who["name"]},
                }
                incident.notes.append(note)
                return 200, {"note": note}
            if req.method == "PUT":
                assert who is not None
                incident.status = req.body["incident"].get("status", incident.status)
            return 200, {"incident": self._incident(incident)}
        return 404, self._error(api, 404, "Not Found")

    @staticmethod
    def _user(user: dict[str, str]) -> dict[str, Any]:
        return {"id": user["id"], "type": "user", "name": user["name"], "email": user["email"], "summary": user["name"]}

    def _incident(self, incident: Incident) -> dict[str, Any]:
        return {
            "id": incident.id,
            "type": "incident",
            "summary": f"[#{incident.number}] incident",
            "incident_number": incident.number,
            "status": incident.status,
            "title": "incident",
            "urgency": "high",
            "service": {"id": incident.service, "type": "service_reference"},
        }
