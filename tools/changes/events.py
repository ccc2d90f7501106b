"""Change events as CI/CD, flag services or Terraform runs POST them to `/changes` (docs/context.md, What changed): the
checks, with every problem named by its field (`[2].at` in a list, `at` for one object), and the row the store keeps.

Pure: no HTTP, no store call. One object or a non-empty list; a list is all or nothing (any problem refuses it
whole). `at` and `summary` are required and `at` carries a zone and is a date in UTC (years 1 to 9999); unknown
fields are refused (a typo'd `sumary` would otherwise store an event without its summary). Every string (label
names and values too) is valid Unicode without NUL: a lone UTF-16 surrogate (`"\\ud800"` in JSON) can't be
stored, and a NUL is cut by C strings; both are the sender's error, named by field. Sizes are bounded so one
event cannot crowd a timeline or the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from bot.core.json_body import unstorable
from tools.changes.model import Change
from tools.changes.store import StoredChange

MAX_EVENTS = 1000  # in one POST
TEXT_MAX = {"at": 64, "id": 200, "source": 100, "service": 200, "environment": 100, "summary": 1000, "url": 2000}
LABELS_MAX = 50
LABEL_KEY_MAX = 100
LABEL_VALUE_MAX = 200
FIELDS = ("id", "at", "source", "service", "environment", "summary", "url", "labels")


def event_change(event: StoredChange) -> Change:
    """A change event as a timeline entry: the service (and environment) as target, the summary and who sent it."""
    target = event.service or event.source or "change event"
    if event.environment:
        target += f" ({event.environment})"
    what = event.summary + (f" (from {event.source})" if event.source and event.service else "")
    at = datetime.fromtimestamp(event.at, UTC)
    return Change(at=at, source="webhook", target=target, what=what, ref=event.url or event.id or "")


def _where(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _text(raw: Mapping[str, Any], name: str, prefix: str, problems: list[str], *, required: bool = False) -> str | None:
    value = raw.get(name)
    where = _where(prefix, name)
    if value is None:
        if required:
            problems.append(f"{where}: required")
        return None
    if not isinstance(value, str):
        problems.append(f"{where}: expected a string, got {type(value).__name__}")
        return None
    if required and not value.strip():
        problems.append(f"{where}: must not be empty")
        return None
    if len(value) > TEXT_MAX[name]:
        problems.append(f"{where}: longer than {TEXT_MAX[name]} characters")
        return None
    if (bad := unstorable(value)) is not None:
        problems.append(f"{where}: {bad}")
        return None
    return value


def _at(raw: Mapping[str, Any], prefix: str, problems: list[str]) -> datetime | None:
    text = _text(raw, "at", prefix, problems, required=True)
    if text is None:
        return None
    where = _where(prefix, "at")
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        problems.append(f"{where}: not an ISO 8601 time (e.g. 2026-12-02T14:08:00Z)")
        return None
    if at.tzinfo is None or at.utcoffset() is None:
        problems.append(f"{where}: needs a time zone (e.g. 2026-12-02T14:08:00Z or +01:00)")
        return None
    try:
        return at.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is in year 0 in UTC
        problems.append(f"{where}: out of range (in UTC it must fall in the years 1 to 9999)")
        return None


def _url(value: str | None, prefix: str, problems: list[str]) -> str | None:
    if value is None:
        return None
    try:
        parts = urlsplit(value)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in value):
        problems.append(f"{_where(prefix, 'url')}: expected an http(s) URL")
        return None
    return value


def _labels(raw: Mapping[str, Any], prefix: str, problems: list[str]) -> dict[str, str]:
    value = raw.get("labels")
    where = _where(prefix, "labels")
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(f"{where}: expected an object of strings, got {type(value).__name__}")
        return {}
    if len(value) > LABELS_MAX:
        problems.append(f"{where}: more than {LABELS_MAX} labels")
        return {}
    labels = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key or len(key) > LABEL_KEY_MAX:
            problems.append(f"{where}: a label name must be 1 to {LABEL_KEY_MAX} characters")
        elif (bad := unstorable(key)) is not None:
            problems.append(f"{where}: a label name {bad}")
        elif not isinstance(item, str):
            problems.append(f"{where}.{key}: expected a string, got {type(item).__name__}")
        elif len(item) > LABEL_VALUE_MAX:
            problems.append(f"{where}.{key}: longer than {LABEL_VALUE_MAX} characters")
        elif (bad := unstorable(item)) is not None:
            problems.append(f"{where}.{key}: {bad}")
        else:
            labels[key] = item
    return labels


def parse_event(raw: Any, prefix: str = "") -> tuple[StoredChange | None, list[str]]:
    """One event object: (the event as the store keeps it, `at` in epoch seconds and "" for no id, []) or (None,
    its problems, each naming its field under `prefix`)."""
    if not isinstance(raw, Mapping):
        return None, [f"{prefix or 'event'}: expected an object, got {type(raw).__name__}"]
    problems = [
        f"{_where(prefix, str(k))}: unknown field (fields: {', '.join(FIELDS)})" for k in raw if k not in FIELDS
    ]
    at = _at(raw, prefix, problems)
    summary = _text(raw, "summary", prefix, problems, required=True)
    event_id = _text(raw, "id", prefix, problems)
    source, service, environment = (_text(raw, name, prefix, problems) for name in ("source", "service", "environment"))
    if event_id is not None and not event_id.strip():
        problems.append(f"{_where(prefix, 'id')}: must not be empty")
    url = _url(_text(raw, "url", prefix, problems), prefix, problems)
    labels = _labels(raw, prefix, problems)
    if problems or at is None or summary is None:
        return None, problems
    event = StoredChange(event_id or "", at.timestamp(), summary, source, service, environment, url, labels)
    return event, []


def parse_events(payload: Any) -> tuple[list[StoredChange], list[str]]:
    """A POSTed body (already JSON-decoded): one object or a list. (events, []) or ([], every problem)."""
    if isinstance(payload, Mapping):
        event, problems = parse_event(payload)
        return ([event] if event else []), problems
    if not isinstance(payload, list):
        return [], [f"body: expected an event object or a list of them, got {type(payload).__name__}"]
    if not payload:
        return [], ["body: an empty list (no events)"]
    if len(payload) > MAX_EVENTS:
        return [], [f"body: more than {MAX_EVENTS} events in one request"]
    events, problems = [], []
    for i, raw in enumerate(payload):
        event, found = parse_event(raw, f"[{i}]")
        problems += found
        if event is not None:
            events.append(event)
    return ([] if problems else events), problems
