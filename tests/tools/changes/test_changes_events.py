"""tools/changes/events.py: the change events POSTed to /changes, checked field by field (docs/context.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tools.changes.events import event_change, parse_events
from tools.changes.model import Change, timeline
from tools.changes.store import StoredChange

GOOD = {
    "id": "gha-123456",
    "at": "2026-12-02T14:08:00Z",
    "source": "github-actions",
    "service": "checkout-api",
    "environment": "prod",
    "summary": "deploy checkout-api 1.43",
    "url": "https://ci.example.com/runs/123456",
    "labels": {"team": "payments"},
}
AT = datetime(2026, 12, 2, 14, 8, tzinfo=UTC)


def test_the_contract_example_is_one_event() -> None:
    assert parse_events(GOOD) == (
        [
            StoredChange(
                id="gha-123456",
                at=AT.timestamp(),
                summary="deploy checkout-api 1.43",
                source="github-actions",
                service="checkout-api",
                environment="prod",
                url="https://ci.example.com/runs/123456",
                labels={"team": "payments"},
            )
        ],
        [],
    )


def test_only_at_and_summary_are_required() -> None:
    events, problems = parse_events([{"at": "2026-12-02T15:08:00+01:00", "summary": "flag on"}])
    assert problems == [] and events == [StoredChange(id="", at=AT.timestamp(), summary="flag on")]


def test_an_event_becomes_a_timeline_change() -> None:
    (event,), _ = parse_events(GOOD)
    assert event_change(event) == Change(
        at=AT,
        source="webhook",
        target="checkout-api (prod)",
        what="deploy checkout-api 1.43 (from github-actions)",
        ref="https://ci.example.com/runs/123456",
    )
    (bare,), _ = parse_events({"at": "2026-12-02T14:08:00Z", "summary": "x", "id": "e1"})
    assert (event_change(bare).target, event_change(bare).ref) == ("change event", "e1")


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        ({"summary": "x"}, "at: required"),
        ({"at": "2026-12-02T14:08:00", "summary": "x"}, "at: needs a time zone (e.g. 2026-12-02T14:08:00Z or +01:00)"),
        ({"at": "yesterday", "summary": "x"}, "at: not an ISO 8601 time (e.g. 2026-12-02T14:08:00Z)"),
        ({"at": 1796220000, "summary": "x"}, "at: expected a string, got int"),
        ({"at": "2026-12-02T14:08:00Z"}, "summary: required"),
        ({"at": "2026-12-02T14:08:00Z", "summary": "  "}, "summary: must not be empty"),
        ({"at": "2026-12-02T14:08:00Z", "summary": "x" * 1001}, "summary: longer than 1000 characters"),
        (
            {"at": "2026-12-02T14:08:00Z", "summary": "x", "sumary": "y"},
            "sumary: unknown field (fields: id, at, source, service, environment, summary, url, labels)",
        ),
        ({"at": "2026-12-02T14:08:00Z", "summary": "x", "url": "javascript:alert(1)"}, "url: expected an http(s) URL"),
        (
            {"at": "2026-12-02T14:08:00Z", "summary": "x", "labels": ["a"]},
            "labels: expected an object of strings, got list",
        ),
        (
            {"at": "2026-12-02T14:08:00Z", "summary": "x", "labels": {"team": 3}},
            "labels.team: expected a string, got int",
        ),
        ({"at": "2026-12-02T14:08:00Z", "summary": "x", "id": ""}, "id: must not be empty"),
        ({"at": "2026-12-02T14:08:00Z", "summary": "a\0b"}, "summary: contains a NUL character"),
    ],
)
def test_a_bad_event_names_its_field(event: dict[str, Any], problem: str) -> None:
    assert parse_events(event) == ([], [problem])


def test_a_list_is_all_or_nothing_and_names_the_index() -> None:
    body = [GOOD, {"at": "2026-12-02T14:08:00", "summary": "x"}, GOOD, "nope", {"summary": "y"}]
    assert parse_events(body) == (
        [],
        [
            "[1].at: needs a time zone (e.g. 2026-12-02T14:08:00Z or +01:00)",
            "[3]: expected an object, got str",
            "[4].at: required",
        ],
    )


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ([], "body: an empty list (no events)"),
        ("deploy", "body: expected an event object or a list of them, got str"),
        (None, "body: expected an event object or a list of them, got NoneType"),
        ([GOOD] * 1001, "body: more than 1000 events in one request"),
    ],
)
def test_a_body_that_is_not_events_is_refused(body: Any, problem: str) -> None:
    assert parse_events(body) == ([], [problem])


def test_many_labels_are_refused() -> None:
    assert parse_events({**GOOD, "labels": {f"k{i}": "v" for i in range(51)}})[1] == ["labels: more than 50 labels"]


def test_a_hostile_summary_is_data_in_the_timeline() -> None:
    (event,), _ = parse_events(
        {**GOOD, "summary": "<!here> deploy\nfake line xoxb-123456789012-1234567890123-abcdefabcdefabcdefabcdef"}
    )
    text = timeline([event_change(event)], [], anchor=AT, now=AT)
    assert len(text.splitlines()) == 2 and "<!here>" not in text and "xoxb-123456789012" not in text
