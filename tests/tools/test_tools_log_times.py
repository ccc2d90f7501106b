"""Logs over a time window: the times a line starts with, since/until, and the windowed, newest-first and
bucketed reads of grep_log, tail_log and log_histogram on real files; list_logs."""

from __future__ import annotations

import gzip
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from tools import Tool, ToolContext
from tools.api import BadCall
from tools.builtin import grep_log, list_logs, log_histogram, tail_log
from tools.builtin.log_times import Clock, line_time, when

NOW = Clock(datetime(2026, 12, 5, 15, 0, tzinfo=timezone(timedelta(hours=1))))
T = datetime(2026, 12, 5, 14, 3, 11, tzinfo=UTC)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("2026-12-05T14:03:11Z GET /", T),
        ("2026-12-05T14:03:11.250+00:00 x", T.replace(microsecond=250_000)),
        ("2026-12-05 15:03:11 local, no zone", T),  # the host's zone: UTC+1
        ("2026-12-05T15:03:11+0100 web-1 nginx[42]: journald short-iso", T),
        ("[2026-12-05 14:03:11,000Z] bracketed", T),
        ("2026/12/05 15:03:11 [error] 7#7: nginx error log", T),
        ("Dec  5 15:03:11 web-1 sshd[9]: syslog", T),
        ('10.0.0.1 - bob [05/Dec/2026:14:03:11 +0000] "GET / HTTP/1.1" 502', T),
        (
            "Dec 24 10:00:00 last year's: the most recent Dec 24 not in the future",
            datetime(2025, 12, 24, 9, tzinfo=UTC),
        ),
        ("  at com.example.Main(Main.java:10)", None),
        ("2026-02-30 10:00:00 not a day", None),
        ("request 2026-12-05T14:03:11Z later in the line", None),
    ],
)
def test_the_time_a_line_starts_with(line: str, expected: datetime | None) -> None:
    assert line_time(line, NOW) == expected


def test_since_and_until_are_an_iso_time_or_a_duration_before_now() -> None:
    assert when("30m", "since", NOW) == NOW.now - timedelta(minutes=30)
    assert when("3d", "since", NOW) == NOW.now - timedelta(days=3)
    assert when("2026-12-05T14:03:11Z", "since", NOW) == T
    assert when("2026-12-05 15:03:11", "until", NOW) == T
    with pytest.raises(BadCall, match=r"^since: expected an ISO 8601 time .* got 'yesterday'$"):
        when("yesterday", "since", NOW)


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    """app.log: one INFO line a minute on 2026-12-05 from 12:00Z to 13:59Z; at 13:50..13:59 an ERROR with a stack
    trace line (no time of its own) that also matches; app.log.1.gz the hour before'd; plain.log no times."""
    d = tmp_path / "log"
    d.mkdir()
    start = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    lines = []
    for i in range(120):
        t = start + timedelta(minutes=i)
        lines.append(f"{t:%Y-%m-%dT%H:%M:%SZ} INFO request {i}")
        if i >= 110:
            lines += [f"{t:%Y-%m-%dT%H:%M:%SZ} ERROR upstream timed out {i}", "  at Upstream.read ERROR-frame"]
    (d / "app.log").write_text("\n".join(lines) + "\n")
    with gzip.open(d / "app.log.1.gz", "wt") as f:
        f.write("".join(f"{start - timedelta(minutes=60 - i):%Y-%m-%dT%H:%M:%SZ} ERROR old {i}\n" for i in range(3)))
    (d / "plain.log").write_text("ERROR no time here\nERROR nor here\n")
    return d


def bound(t: Tool, logs: Path) -> Tool:
    return t.bind(ToolContext(log_dirs=(logs,)))


@pytest.mark.processes
async def test_grep_log_newest_first_in_a_window_counts_all_and_shows_the_newest(logs: Path) -> None:
    args = {"path": "app.log", "pattern": "ERROR", "since": "2026-12-05T13:55:00Z", "newest_first": True}
    out = await bound(grep_log, logs).run({**args, "max_matches": 3})
    assert out.splitlines() == [
        f"10 matching lines for /ERROR/ in {logs / 'app.log'} between 2026-12-05T13:55:00+00:00 and now "
        "(20 in all), showing the newest 3",
        "140: " + "  at Upstream.read ERROR-frame",  # the trace line, at its entry's time
        "139: 2026-12-05T13:59:00Z ERROR upstream timed out 119",
        "137: " + "  at Upstream.read ERROR-frame",
    ]


@pytest.mark.processes
async def test_grep_log_newest_first_without_a_window_keeps_the_end_of_the_file(logs: Path) -> None:
    out = await bound(grep_log, logs).run(
        {"path": "app.log", "pattern": "timed out", "newest_first": True, "max_matches": 2}
    )
    assert out.splitlines() == [
        f"10 matching lines for /timed out/ in {logs / 'app.log'}, showing the newest 2",
        "139: 2026-12-05T13:59:00Z ERROR upstream timed out 119",
        "136: 2026-12-05T13:58:00Z ERROR upstream timed out 118",
    ]


@pytest.mark.processes
async def test_grep_log_in_a_directory_windows_each_file_and_names_one_without_times(logs: Path) -> None:
    args = {"path": ".", "pattern": "ERROR old|ERROR no", "until": "2026-12-05T11:01:30Z"}
    out = await bound(grep_log, logs).run(args)
    assert out.splitlines() == [
        f"2 matching lines for /ERROR old|ERROR no/ in 3 files under {logs} between the start and "
        "2026-12-05T11:01:30+00:00 (5 in all)",
        "searched in path order: app.log (0 of 0), app.log.1.gz (2 of 3), plain.log (0 of 2)",
        "no timestamps recognised in plain.log: the window could not apply to its 2 matching lines (not counted, "
        "not shown); search it without since/until",
        "app.log.1.gz:1: 2026-12-05T11:00:00Z ERROR old 0",
        "app.log.1.gz:2: 2026-12-05T11:01:00Z ERROR old 1",
    ]


@pytest.mark.processes
async def test_an_empty_window_says_what_was_searched_and_where_the_newest_match_is(logs: Path) -> None:
    args = {"path": "app.log", "pattern": "timed out", "since": "2026-12-06T00:00:00Z"}
    assert (await bound(grep_log, logs).run(args)).splitlines() == [
        f"0 matching lines for /timed out/ in {logs / 'app.log'} between 2026-12-06T00:00:00+00:00 and now (10 in all)",
        "the newest matching line is at 2026-12-05T13:59:00+00:00",
    ]


@pytest.mark.processes
async def test_a_bad_since_is_refused_in_one_line(logs: Path) -> None:
    with pytest.raises(BadCall, match=r"^until: expected an ISO 8601 time"):
        await bound(grep_log, logs).run({"path": "app.log", "pattern": "x", "until": "last tuesday"})


@pytest.mark.processes
async def test_tail_log_in_a_window_keeps_a_trace_with_its_entry(logs: Path) -> None:
    args = {"path": "app.log", "lines": 4, "since": "2026-12-05T13:00:00Z", "until": "2026-12-05T13:51:30Z"}
    out = await bound(tail_log, logs).run(args)
    assert out.splitlines() == [
        f"{logs / 'app.log'} (last 4 lines between 2026-12-05T13:00:00+00:00 and 2026-12-05T13:51:30+00:00, 5.1K)",
        "  at Upstream.read ERROR-frame",
        "2026-12-05T13:51:00Z INFO request 111",
        "2026-12-05T13:51:00Z ERROR upstream timed out 111",
        "  at Upstream.read ERROR-frame",
    ]


@pytest.mark.processes
async def test_tail_log_says_when_a_file_has_no_times(logs: Path) -> None:
    out = await bound(tail_log, logs).run({"path": "plain.log", "since": "1h"})
    assert out.startswith(f"{logs / 'plain.log'}: no timestamps recognised in the 2 lines read from its end")


@pytest.mark.processes
async def test_log_histogram_names_the_onset_and_the_peak(logs: Path) -> None:
    args = {
        "path": "app.log",
        "pattern": "timed out",
        "since": "2026-12-05T13:40:00Z",
        "until": "2026-12-05T13:59:59Z",
        "bucket": "5m",
    }
    out = await bound(log_histogram, logs).run(args)
    assert out.splitlines() == [
        f"10 matching lines for /timed out/ in {logs / 'app.log'} between 2026-12-05T13:40:00+00:00 and "
        "2026-12-05T13:59:59+00:00, per 5m",
        "first: 2026-12-05 13:50 (5); peak: 2026-12-05 13:50 (5)",
        "2026-12-05 13:40      0",
        "2026-12-05 13:45      0",
        "2026-12-05 13:50      5 " + "#" * 30,
        "2026-12-05 13:55      5 " + "#" * 30,
    ]


@pytest.mark.processes
async def test_log_histogram_widens_a_bucket_to_at_most_60_rows(logs: Path) -> None:
    args = {"path": "app.log", "pattern": "x", "since": "2026-12-04T00:00:00Z", "until": "2026-12-05T00:00:00Z"}
    out = await bound(log_histogram, logs).run(args)
    assert "per 30m (widened from 1m: at most 60 buckets)" in out.splitlines()[0]


@pytest.mark.processes
async def test_list_logs_lists_newest_first_with_size(logs: Path) -> None:
    for k, name in enumerate(["plain.log", "app.log.1.gz", "app.log"]):
        os.utime(logs / name, (1_700_000_000 + k * 60, 1_700_000_000 + k * 60))
    out = (await bound(list_logs, logs).run({})).splitlines()
    assert out[0].startswith(f"3 log files under {logs} on ")
    assert [row.split()[-1] for row in out[1:]] == [str(logs / n) for n in ("app.log", "app.log.1.gz", "plain.log")]
