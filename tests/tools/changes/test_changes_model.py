"""tools/changes/model.py: the Change record and the timeline (order, times, failures, untrusted text, bounds)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from tools.changes.model import TIMELINE_MAX, Change, SourceFailure, data, relative, timeline

START = datetime(2026, 12, 2, 14, 20, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return START + timedelta(minutes=minutes)


def test_the_timeline_is_newest_first_with_utc_times_relative_to_the_start_then_failures() -> None:
    changes = [
        Change(
            at=at(-12),
            source="kubernetes",
            target="prod/web deployment/api",
            what="image api:1.41 → api:1.42, revision 3",
            ref="replicaset/api-7d9f",
        ),
        Change(at=at(3), source="git", target="deploy-config (main)", what="commit by alice: hotfix", ref="a1b2c3d"),
        Change(at=at(-75), source="host", target="web-03", what="nginx 1.24.0-1 → 1.24.0-2", ref="dpkg.log"),
        Change(
            at=at(-30).astimezone(timezone(timedelta(hours=1))),
            source="webhook",
            target="checkout-api (prod)",
            what="deploy checkout-api 1.43",
        ),
    ]
    failures = [SourceFailure("kubernetes", "staging/web", "cannot reach cluster staging: no answer within 10s")]
    assert timeline(changes, failures, anchor=START, now=at(5)).splitlines() == [
        "4 changes, newest first; now is 2026-12-02 14:25 UTC, times relative to the start at 2026-12-02 14:20 UTC",
        "2026-12-02 14:23 UTC · 3 min after · git · deploy-config (main) · commit by alice: hotfix · a1b2c3d",
        "2026-12-02 14:08 UTC · 12 min before · kubernetes · prod/web deployment/api · "
        "image api:1.41 → api:1.42, revision 3 · replicaset/api-7d9f",
        "2026-12-02 13:50 UTC · 30 min before · webhook · checkout-api (prod) · deploy checkout-api 1.43",
        "2026-12-02 13:05 UTC · 1 h 15 min before · host · web-03 · nginx 1.24.0-1 → 1.24.0-2 · dpkg.log",
        "could not read kubernetes staging/web: cannot reach cluster staging: no answer within 10s",
    ]


def test_no_changes_says_so_and_still_lists_failures() -> None:
    assert timeline([], [SourceFailure("host", "db-01", "connection refused")], anchor=START, now=at(1)) == (
        "no changes found; now is 2026-12-02 14:21 UTC, the start was 2026-12-02 14:20 UTC\n"
        "could not read host db-01: connection refused"
    )


@pytest.mark.parametrize(
    ("minutes", "text"),
    [
        (0, "at the start"),
        (0.5, "under 1 min after"),
        (-0.5, "under 1 min before"),
        (-12, "12 min before"),
        (3, "3 min after"),
        (-60, "1 h before"),
        (-125, "2 h 5 min before"),
        (-3 * 24 * 60 - 60, "3 d 1 h before"),
        (2 * 24 * 60, "2 d after"),
    ],
)
def test_relative_times(minutes: float, text: str) -> None:
    assert relative(at(minutes), START) == text


def test_a_change_needs_an_aware_time_and_a_known_source() -> None:
    with pytest.raises(ValueError, match="time zone"):
        Change(at=datetime(2026, 12, 2, 14, 0), source="git", target="t", what="w")
    with pytest.raises(ValueError, match="source"):
        Change(at=START, source="slack", target="t", what="w")
    assert (
        Change(at=START.astimezone(timezone(timedelta(hours=-5))), source="git", target="t", what="w").at.tzinfo is UTC
    )


def test_untrusted_text_is_one_line_redacted_revealed_and_not_markup() -> None:
    token = "xoxb-123456789012-1234567890123-" + "a" * 24
    shown = data(f"<!channel> <@U123> <https://evil.example|click>\nfake line\u2028more {token} a\u200bb & c")
    assert "\n" not in shown and "\u2028" not in shown and token not in shown
    assert shown.startswith("&lt;!channel&gt; &lt;@U123&gt; &lt;https://evil.example|click&gt; fake line more ")
    assert shown.endswith("a\u27e8U+200B\u27e9b & c")


def test_a_long_field_is_cut_and_the_whole_timeline_is_bounded() -> None:
    assert data("x" * 1000) == "x" * 299 + "…"
    changes = [Change(at=at(-i / 10), source="git", target="repo", what="y" * 250) for i in range(500)]
    text = timeline(changes, [SourceFailure("host", "web-03", "down")], anchor=START, now=START)
    assert len(text) <= TIMELINE_MAX and "truncated" in text
    assert text.splitlines()[1].startswith("2026-12-02 14:20 UTC · at the start") and text.endswith(
        "could not read host web-03: down"
    )


def test_over_the_cap_the_newest_and_the_oldest_are_whole_lines_around_a_count_of_what_is_not_shown() -> None:
    changes = [Change(at=at(-i), source="git", target="repo", what=f"change {i} " + "y" * 100) for i in range(500)]
    failures = [SourceFailure("host", "web-03", "down"), SourceFailure("host", "web-04", "refused")]
    text = timeline(changes, failures, anchor=START, now=START)
    assert len(text) <= TIMELINE_MAX
    lines = text.splitlines()
    assert lines[0].startswith("500 changes, newest first")
    assert lines[-2:] == ["could not read host web-03: down", "could not read host web-04: refused"]
    notes = [n for n, line in enumerate(lines) if line.startswith("… [truncated: ")]
    assert len(notes) == 1
    note = lines[notes[0]]
    shown = [int(line.split(" · ")[4].split()[1]) for line in lines[1 : notes[0]] + lines[notes[0] + 1 : -2]]
    newest, oldest = shown[: notes[0] - 1], shown[notes[0] - 1 :]
    assert newest == list(range(len(newest))) and oldest == list(range(500 - len(oldest), 500))
    assert note == f"… [truncated: {500 - len(shown)} of 500 changes not shown] …"
    assert lines[1] == "2026-12-02 14:20 UTC · at the start · git · repo · change 0 " + "y" * 100
    assert 50 < len(shown) < 120 and abs(len(newest) - len(oldest)) <= 1  # the room split in halves


class Counted(str):
    """A field that counts how often the timeline reads it as text (`data` does str() of every field)."""

    reads = 0

    def __str__(self) -> str:
        Counted.reads += 1
        return str.__str__(self)


def test_only_the_lines_that_can_be_shown_are_formatted() -> None:
    changes = [
        Change(at=at(-i), source="git", target="repo", what=Counted(f"change {i} " + "y" * 100)) for i in range(5000)
    ]
    Counted.reads = 0
    text = timeline(changes, [], anchor=START, now=START)
    shown = len(text.splitlines()) - 2  # the first line and the note
    assert "of 5000 changes not shown" in text and 50 < shown < 120
    assert Counted.reads <= shown + 3  # and the lines that were tried and did not fit: one per side, one to check


def test_a_timeline_just_under_the_cap_is_whole_even_where_half_lines_would_not_fit() -> None:
    def changes(n: int, last: int) -> list[Change]:
        return [
            Change(at=at(-1 - i), source="git", target="r", what="w" * (290 if i < n - 1 else last)) for i in range(n)
        ]

    whole = timeline(changes(36, 290), [], anchor=START, now=START)  # lines of ~340 characters, over the cap
    assert "truncated" in whole
    n = 35
    short = len(timeline(changes(n, 1), [], anchor=START, now=START))
    text = timeline(changes(n, 1 + TIMELINE_MAX - short - 20), [], anchor=START, now=START)
    assert len(text) == TIMELINE_MAX - 20  # neither half holds its whole lines, the whole text fits
    assert "truncated" not in text and len(text.splitlines()) == 1 + n


def test_failed_sources_the_cap_leaves_out_are_counted_too() -> None:
    failures = [SourceFailure("host", f"web-{i:03d}", "connection refused " + "z" * 80) for i in range(300)]
    text = timeline([Change(at=START, source="git", target="r", what="w")], failures, anchor=START, now=START)
    assert len(text) <= TIMELINE_MAX and "· git · r · w" in text
    note = next(line for line in text.splitlines() if line.startswith("… [truncated: "))
    kept = sum(1 for line in text.splitlines() if line.startswith("could not read host web-"))
    assert note == f"… [truncated: 0 of 1 change and {300 - kept} of 300 failed or cut sources not shown] …"
