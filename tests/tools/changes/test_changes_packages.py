"""tools/changes/packages.py: dpkg.log and apt history.log parsed in the host's own offset, the window, and the
fixed command over the real sshd (tests/support/sshserver.py) reading a seeded dpkg.log."""

from __future__ import annotations

import subprocess
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from functools import partial
from pathlib import Path

import pytest

from tests.support.sshserver import SshServer
from tests.tools.remote.test_host_tools_ssh import host_for
from tools.api import ToolError
from tools.changes.gather import Source, gather
from tools.changes.model import Change, Cut, timeline, utc_minute
from tools.changes.packages import (
    HostReport,
    host_argv,
    host_changes,
    in_window,
    parse_apt_history,
    parse_dpkg_log,
    parse_offset,
    parse_report,
    remote_low,
    report_changes,
    stamp_bounds,
)
from tools.remote.inventory import Inventory, SshSettings
from tools.remote.pool import SshPool

UTC1 = timezone(timedelta(hours=1))
IST = timezone(timedelta(hours=5, minutes=30))

DPKG = """\
2026-12-02 14:03:11 startup archives unpack
2026-12-02 14:03:12 upgrade nginx:amd64 1.24.0-1 1.24.0-2
2026-12-02 14:03:12 status half-configured nginx:amd64 1.24.0-1
2026-12-02 14:03:12 status unpacked nginx:amd64 1.24.0-2
2026-12-02 14:03:13 install libfoo1:amd64 <none> 2.1-3
2026-12-02 14:03:13 configure nginx:amd64 1.24.0-2 <none>
2026-12-02 14:03:14 status installed nginx:amd64 1.24.0-2
2026-12-02 14:05:00 remove oldtool:all 0.9 <none>
2026-12-02 14:05:01 purge oldtool:all 0.9 <none>
2026-12-02 25:61:00 upgrade broken:amd64 1 2
garbage line without fields
2026-12-02 14:06:00 upgrade
12-02 14:06:00 upgrade half:amd64 1 2
"""

APT = """\
Start-Date: 2026-12-02  14:03:11
Commandline: apt-get upgrade -y
Requested-By: alice (1000)
Upgrade: nginx:amd64 (1.24.0-1, 1.24.0-2), nginx-common:all (1.24.0-1, 1.24.0-2)
Install: libfoo1:amd64 (2.1-3, automatic)
End-Date: 2026-12-02  14:03:15

Start-Date: 2026-12-02  14:05:00
Commandline: apt-get purge oldtool
Remove: oldtool:all (0.9)
Purge: oldtool:all (0.9)
End-Date: 2026-12-02  14:05:02

Upgrade: orphan:amd64 (1, 2)

Start-Date: not a date
Upgrade: bad:amd64 (1, 2)
Start-Date: 2026-12-02  14:07:00
Upgrade: odd:amd64 (only-one)
Install: ok:amd64 (1.0)
"""


def whats(changes: list[Change]) -> list[str]:
    return [c.what for c in changes]


def test_dpkg_log_actions_become_changes_and_the_rest_is_skipped() -> None:
    changes = parse_dpkg_log(DPKG, UTC, "web-03")
    assert whats(changes) == [
        "nginx 1.24.0-1 → 1.24.0-2",
        "libfoo1 installed 2.1-3",
        "oldtool removed (was 0.9)",
        "oldtool purged (was 0.9)",
    ]
    assert changes[0] == Change(
        at=datetime(2026, 12, 2, 14, 3, 12, tzinfo=UTC),
        source="host",
        target="web-03",
        what="nginx 1.24.0-1 → 1.24.0-2",
        ref="dpkg.log",
    )


@pytest.mark.parametrize(
    ("offset", "utc"),
    [
        ("+0100", datetime(2026, 12, 2, 13, 3, 12, tzinfo=UTC)),
        ("-0530", datetime(2026, 12, 2, 19, 33, 12, tzinfo=UTC)),
        ("+0000", datetime(2026, 12, 2, 14, 3, 12, tzinfo=UTC)),
    ],
)
def test_dpkg_times_are_read_in_the_host_offset(offset: str, utc: datetime) -> None:
    assert parse_dpkg_log(DPKG, parse_offset(offset), "h")[0].at == utc


@pytest.mark.parametrize("text", ["", "0100", "+01", "+0160", "+2400", "UTC", "+0100 extra"])
def test_a_bad_offset_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a UTC offset"):
        parse_offset(text)


def test_apt_history_blocks_become_changes_at_their_start() -> None:
    changes = parse_apt_history(APT, IST, "web-03")
    assert whats(changes) == [
        "nginx 1.24.0-1 → 1.24.0-2",
        "nginx-common 1.24.0-1 → 1.24.0-2",
        "libfoo1 installed 2.1-3",
        "oldtool removed (was 0.9)",
        "oldtool purged (was 0.9)",
        "ok installed 1.0",
    ]
    assert changes[0].at == datetime(2026, 12, 2, 8, 33, 11, tzinfo=UTC)
    assert changes[0].ref == "apt: apt-get upgrade -y" and changes[-1].ref == "apt history.log"


def test_a_tail_cut_mid_block_skips_the_partial_block() -> None:
    cut = APT[APT.index("Requested-By") :]
    assert whats(parse_apt_history(cut, UTC, "h"))[0] == "oldtool removed (was 0.9)"
    assert whats(parse_dpkg_log(DPKG[25:], UTC, "h"))[0] == "nginx 1.24.0-1 → 1.24.0-2"


def test_the_window_keeps_dpkg_over_apt_and_adds_a_boot_inside_it() -> None:
    since = datetime(2026, 12, 2, 14, 4, tzinfo=UTC)
    until = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)
    booted = datetime(2026, 12, 2, 14, 30, tzinfo=UTC)
    report = HostReport(offset=UTC, booted=booted, dpkg=DPKG, apt=APT)
    assert whats(report_changes(report, "h", since, until)) == [
        "oldtool removed (was 0.9)",
        "oldtool purged (was 0.9)",
        "booted",
    ]
    apt_only = HostReport(offset=UTC, booted=booted - timedelta(days=1), dpkg=None, apt=APT)
    assert whats(report_changes(apt_only, "h", since, until)) == [
        "oldtool removed (was 0.9)",
        "oldtool purged (was 0.9)",
        "ok installed 1.0",
    ]


def dpkg_lines(first: datetime, count: int, step: timedelta) -> str:
    """`count` upgrade lines (each with a status line after it, as dpkg writes) `step` apart from `first`, a
    naive local time as dpkg.log has it."""
    out = []
    for i in range(count):
        stamp = (first + i * step).strftime("%Y-%m-%d %H:%M:%S")
        out += [f"{stamp} upgrade p{i}:amd64 1.{i} 1.{i + 1}", f"{stamp} status installed p{i}:amd64 1.{i + 1}"]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("offset", ["+0000", "+0100", "-0530", "+1345", "-1200"])
def test_the_dpkg_window_skip_answers_what_parsing_everything_then_windowing_does(offset: str) -> None:
    tz = parse_offset(offset)
    log = dpkg_lines(datetime(2026, 12, 1, 20, 0), 2000, timedelta(seconds=97))  # 2 days, across midnights
    every = parse_dpkg_log(log, tz, "h")
    assert len(every) == 2000
    for since, until in [
        (datetime(2026, 12, 2, 23, 30, tzinfo=UTC), datetime(2026, 12, 3, 0, 30, tzinfo=UTC)),
        (datetime(2026, 12, 2, 1, 0, 0, 400_000, tzinfo=UTC), datetime(2026, 12, 2, 9, 0, 0, 999_999, tzinfo=UTC)),
        (datetime(2026, 12, 1, 0, 0, tzinfo=UTC), datetime(2026, 12, 9, 0, 0, tzinfo=UTC)),  # the whole log
        (datetime(2026, 12, 5, 0, 0, tzinfo=UTC), datetime(2026, 12, 6, 0, 0, tzinfo=UTC)),  # none of it
    ]:
        windowed = parse_dpkg_log(log, tz, "h", since, until)
        assert windowed == in_window(every, since, until)
        assert all(since <= c.at <= until for c in windowed)


def test_dpkg_lines_on_the_window_ends_are_kept_in_the_host_offset() -> None:
    ist = parse_offset("+0530")
    log = dpkg_lines(datetime(2026, 12, 2, 14, 3, 10), 5, timedelta(seconds=1))  # 14:03:10 … 14:03:14 local
    since = datetime(2026, 12, 2, 8, 33, 11, tzinfo=UTC)  # 14:03:11 IST, to the second: kept
    until = datetime(2026, 12, 2, 8, 33, 13, tzinfo=UTC)  # 14:03:13 IST: kept
    assert whats(parse_dpkg_log(log, ist, "h", since, until)) == ["p1 1.1 → 1.2", "p2 1.2 → 1.3", "p3 1.3 → 1.4"]
    assert parse_dpkg_log(log, ist, "h", since, until)[0].at == since
    # an end between two seconds: the line after `since` is in, the line before it out; `until` rounds down
    later, earlier = since + timedelta(microseconds=1), until + timedelta(microseconds=999_999)
    assert whats(parse_dpkg_log(log, ist, "h", later, earlier)) == ["p2 1.2 → 1.3", "p3 1.3 → 1.4"]
    assert stamp_bounds(later, earlier, ist) == ("2026-12-02 14:03:12", "2026-12-02 14:03:13")
    assert stamp_bounds(later, earlier, parse_offset("-0100")) == ("2026-12-02 07:33:12", "2026-12-02 07:33:13")


def test_a_dpkg_line_outside_the_window_is_skipped_even_when_malformed_and_one_inside_still_checked() -> None:
    since = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
    until = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)
    assert whats(parse_dpkg_log(DPKG, UTC, "h", since, until)) == whats(parse_dpkg_log(DPKG, UTC, "h"))
    assert parse_dpkg_log(DPKG, UTC, "h", since + timedelta(hours=1), until + timedelta(hours=1)) == []
    padded = "   2026-12-02 14:03:12 upgrade nginx:amd64 1 2  \n2026-12-02 14:61:00 upgrade bad:amd64 1 2\n"
    assert whats(parse_dpkg_log(padded, UTC, "h", since, until)) == ["nginx 1 → 2"]  # stripped as before


def test_apt_blocks_that_started_outside_the_window_are_skipped() -> None:
    since = datetime(2026, 12, 2, 8, 35, tzinfo=UTC)  # 14:05 IST: the second block's start, exactly
    until = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    windowed = parse_apt_history(APT, IST, "web-03", since, until)
    assert windowed == in_window(parse_apt_history(APT, IST, "web-03"), since, until)
    assert whats(windowed) == ["oldtool removed (was 0.9)", "oldtool purged (was 0.9)", "ok installed 1.0"]
    assert whats(parse_apt_history(APT, IST, "web-03", since - timedelta(hours=1), since - timedelta(seconds=1))) == [
        "nginx 1.24.0-1 → 1.24.0-2",
        "nginx-common 1.24.0-1 → 1.24.0-2",
        "libfoo1 installed 2.1-3",
    ]


@pytest.mark.parametrize("offset", ["-1459", "-0530", "+0000", "+1459"])
def test_the_remote_bound_is_below_the_window_start_in_every_offset(offset: str) -> None:
    since = datetime(2026, 12, 2, 14, 0, 0, 500_000, tzinfo=UTC)
    low = remote_low(since)
    assert low == "2026-12-01 23:00:00"
    assert stamp_bounds(since, since + timedelta(hours=1), parse_offset(offset))[0] > low


def test_the_report_sections_cannot_be_forged_by_a_log_line() -> None:
    mark = "=opsloop-abc"
    text = (
        f"-0530\nbtime 1796220000\n{mark} present\n2026-12-02 14:03:12 upgrade a:amd64 1 2\n"
        f"=opsloop-xyz missing\n\n{mark} missing\n"
    )
    report = parse_report(text, mark)
    assert report.offset == timezone(-timedelta(hours=5, minutes=30))
    assert report.booted == datetime.fromtimestamp(1796220000, UTC)
    assert report.dpkg is not None and "=opsloop-xyz missing" in report.dpkg and report.apt is None
    assert parse_report(
        f"+0100\nbooted 2026-12-02 10:00:00\n{mark} missing\n{mark} missing\n", mark
    ).booted == datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    with pytest.raises(ValueError, match="the host printed no offset and boot time"):
        parse_report("no\n", mark)


def test_a_hostile_package_line_is_data_in_the_timeline() -> None:
    line = "2026-12-02 14:03:12 upgrade <!channel>:amd64 1 xoxb-123456789012-1234567890123-abcdefabcdefabcdefabcdef"
    changes = parse_dpkg_log(line, UTC, "web-03")
    text = timeline(changes, [], anchor=changes[0].at, now=changes[0].at)
    assert "<!channel>" not in text and "xoxb-123456789012" not in text and "&lt;!channel&gt; 1 → " in text


# -- over the real sshd ---------------------------------------------------------------------------------------


@pytest.fixture
async def pool(sshd: SshServer) -> AsyncIterator[SshPool]:
    p = SshPool(Inventory(SshSettings(), (host_for(sshd),)))
    yield p
    await p.close()


def local_offset() -> timezone:
    done = subprocess.run(["date", "+%z"], capture_output=True, text=True, check=True)
    return parse_offset(done.stdout)


async def test_host_changes_reads_a_seeded_dpkg_log_over_ssh(pool: SshPool, tmp_path: Path) -> None:
    tz = local_offset()  # the sshd runs here: the host's offset is this machine's
    now = datetime.now(tz).replace(microsecond=0)
    stamp = (now - timedelta(minutes=12)).strftime("%Y-%m-%d %H:%M:%S")
    old = (now - timedelta(days=2)).strftime("%Y-%m-%d %H:%M:%S")
    dpkg = tmp_path / "dpkg.log"
    dpkg.write_text(
        f"{old} upgrade curl:amd64 8.4-1 8.5-1\n{stamp} upgrade nginx:amd64 1.24.0-1 1.24.0-2\n"
        f"{stamp} status installed nginx:amd64 1.24.0-2\n"
    )
    host = pool.inventory.resolve("web-03")
    assert host is not None
    changes = await host_changes(
        pool,
        host,
        now - timedelta(hours=2),
        now + timedelta(minutes=1),
        dpkg_log=str(dpkg),
        apt_history=str(tmp_path / "none.log"),
    )
    assert isinstance(changes, list)  # a log shorter than its tail is never cut
    assert [c for c in changes if c.what != "booted"] == [
        Change(
            at=now - timedelta(minutes=12),
            source="host",
            target="web-03",
            what="nginx 1.24.0-1 → 1.24.0-2",
            ref="dpkg.log",
        )
    ]


def boot_time() -> datetime:
    btime = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime"))
    return datetime.fromtimestamp(int(btime.split()[1]), UTC)


async def test_host_changes_over_ssh_reports_the_boot_when_in_the_window(pool: SshPool, tmp_path: Path) -> None:
    dpkg = tmp_path / "dpkg.log"
    dpkg.write_text("")
    booted = boot_time()
    host = pool.inventory.resolve("web-03")
    assert host is not None
    changes = await host_changes(
        pool,
        host,
        booted - timedelta(minutes=1),
        booted + timedelta(minutes=1),
        dpkg_log=str(dpkg),
        apt_history=str(tmp_path / "none.log"),
    )
    assert changes == [Change(at=booted, source="host", target="web-03", what="booted", ref="boot time")]
    later = await host_changes(pool, host, booted + timedelta(minutes=1), datetime.now(UTC), dpkg_log=str(dpkg))
    assert later == []


async def test_the_host_leaves_out_dpkg_lines_older_than_any_offset_allows(pool: SshPool, tmp_path: Path) -> None:
    tz = local_offset()
    now = datetime.now(tz).replace(microsecond=0)

    def stamp(ago: timedelta) -> str:
        return (now - ago).strftime("%Y-%m-%d %H:%M:%S")

    dpkg = tmp_path / "dpkg.log"
    dpkg.write_text(
        "".join(f"{stamp(timedelta(days=3, minutes=i))} upgrade old{i}:amd64 1 2\n" for i in range(200))
        + f"  {stamp(timedelta(days=3))} upgrade padded:amd64 1 2\n"  # not starting with a digit: sent
        + "garbage\n"
        + f"{stamp(timedelta(hours=16, minutes=1))} upgrade margin:amd64 1 2\n"  # within the margin: sent
        + f"{stamp(timedelta(minutes=12))} upgrade nginx:amd64 1.24.0-1 1.24.0-2\n"
        + f"{stamp(timedelta(minutes=12))} status installed nginx:amd64 1.24.0-2\n"
        + f"{stamp(timedelta(minutes=12))} configure nginx:amd64 1.24.0-2 <none>\n"
        + f"{stamp(timedelta(minutes=11))} remove gone:amd64 1 <none>\n"
    )
    host = pool.inventory.resolve("web-03")
    assert host is not None
    since, until = now - timedelta(hours=2), now + timedelta(minutes=1)
    argv = host_argv(dpkg_log=str(dpkg), apt_history=str(tmp_path / "none.log"), mark="=m", since=since)
    sent = (await pool.run(host, argv, timeout_s=20)).stdout
    assert "old" not in sent and "padded" in sent and "garbage" in sent and "margin" in sent and "nginx" in sent
    assert " status " not in sent and " configure " not in sent and "remove gone" in sent  # only changes are sent
    whole = (await pool.run(host, [*argv[:-1], ""], timeout_s=20)).stdout  # no bound: the whole tail, as before
    assert "old199" in whole
    changes = await host_changes(pool, host, since, until, dpkg_log=str(dpkg), apt_history=str(tmp_path / "x"))
    assert isinstance(changes, list)  # a log shorter than its tail is never cut
    assert whats([c for c in changes if c.what != "booted"]) == ["gone removed (was 1)", "nginx 1.24.0-1 → 1.24.0-2"]


async def test_only_the_tail_of_a_big_log_is_read(pool: SshPool, tmp_path: Path) -> None:
    now = datetime.now(local_offset()).replace(microsecond=0)
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    dpkg = tmp_path / "dpkg.log"
    dpkg.write_text("".join(f"{stamp} upgrade p{i}:amd64 1 2\n" for i in range(5000)))  # ~200 KB
    host = pool.inventory.resolve("web-03")
    assert host is not None
    answer = await host_changes(
        pool, host, now - timedelta(minutes=5), now + timedelta(minutes=5), dpkg_log=str(dpkg), tail_bytes=4096
    )
    assert isinstance(answer, Cut)  # every line has the same stamp: the lines cut off are in the window
    names = [c.what.split()[0] for c in answer.changes if c.what != "booted"]
    assert 50 < len(names) < 4096 // 30 and "p4999" in names and "p0" not in names


async def test_a_host_without_package_logs_fails_with_one_reason(pool: SshPool, tmp_path: Path) -> None:
    host = pool.inventory.resolve("web-03")
    assert host is not None
    start = time.monotonic()
    with pytest.raises(ToolError, match="no package log on the host"):
        await host_changes(
            pool,
            host,
            datetime.now(UTC) - timedelta(hours=1),
            datetime.now(UTC),
            dpkg_log=str(tmp_path / "a"),
            apt_history=str(tmp_path / "b"),
        )
    assert time.monotonic() - start < 20


async def test_history_log_is_sent_and_read_only_when_the_host_has_no_dpkg_log(pool: SshPool, tmp_path: Path) -> None:
    tz = local_offset()
    now = datetime.now(tz).replace(microsecond=0)
    stamp = (now - timedelta(minutes=12)).strftime("%Y-%m-%d %H:%M:%S")
    started = (now - timedelta(minutes=20)).strftime("%Y-%m-%d  %H:%M:%S")
    dpkg, history = tmp_path / "dpkg.log", tmp_path / "history.log"
    dpkg.write_text(f"{stamp} upgrade nginx:amd64 1.24.0-1 1.24.0-2\n")
    history.write_text(f"Start-Date: {started}\nCommandline: apt-get install -y jq\nInstall: jq:amd64 (1.6-2)\n\n")
    host = pool.inventory.resolve("web-03")
    assert host is not None
    since, until = now - timedelta(hours=1), now + timedelta(minutes=1)
    argv = host_argv(dpkg_log=str(dpkg), apt_history=str(history), mark="=m", since=since)
    sent = (await pool.run(host, argv, timeout_s=20)).stdout
    assert "nginx" in sent and "jq" not in sent and "=m unread" in sent  # dpkg.log is the source: history unsent
    both = await host_changes(pool, host, since, until, dpkg_log=str(dpkg), apt_history=str(history))
    assert isinstance(both, list)  # a log shorter than its tail is never cut
    assert whats([c for c in both if c.what != "booted"]) == ["nginx 1.24.0-1 → 1.24.0-2"]
    dpkg.unlink()
    only_apt = await host_changes(pool, host, since, until, dpkg_log=str(dpkg), apt_history=str(history))
    assert isinstance(only_apt, list)  # a log shorter than its tail is never cut
    assert whats([c for c in only_apt if c.what != "booted"]) == ["jq installed 1.6-2"]


def first_whole_line(log: bytes, tail: int) -> str:
    """The first line that starts inside the last `tail` bytes of `log`."""
    return log[len(log) - tail - 1 :].split(b"\n", 1)[1].decode().split("\n", 1)[0]


async def test_a_log_bigger_than_its_tail_says_it_was_cut_when_the_window_starts_before_the_tail(
    pool: SshPool, tmp_path: Path
) -> None:
    tz = local_offset()
    now = datetime.now(tz).replace(microsecond=0)
    dpkg = tmp_path / "dpkg.log"
    dpkg.write_text(dpkg_lines((now - timedelta(hours=5)).replace(tzinfo=None), 300, timedelta(minutes=1)))
    assert dpkg.stat().st_size > 4096 * 4  # 300 changes with their status lines; the tail holds about 50 of them
    first = datetime.fromisoformat(first_whole_line(dpkg.read_bytes(), 4096)[:19]).replace(tzinfo=tz)
    host = pool.inventory.resolve("web-03")
    assert host is not None
    read = partial(host_changes, pool, host, dpkg_log=str(dpkg), apt_history=str(tmp_path / "none.log"))

    changes, failures = await gather(
        [Source("host", "web-03", partial(read, tail_bytes=4096))], now - timedelta(hours=6), now
    )
    text = timeline(changes, failures, anchor=now, now=now)
    assert text.splitlines()[-1] == (
        f"host web-03 was cut: only the last 4 KiB of dpkg.log were read, from {utc_minute(first)}; "
        "earlier changes in the window are not shown"
    )
    shown = [c for c in changes if c.what != "booted"]
    assert shown and min(c.at for c in shown) == first and max(c.at for c in shown) < now

    # the window starts after the tail's first line: all of it was read, nothing to say
    fits = await read(first + timedelta(minutes=1), now, tail_bytes=4096)
    assert not isinstance(fits, Cut) and [c for c in fits if c.what != "booted"]
    # on the tail's first line exactly: a line of the same second may have been cut off
    assert isinstance(await read(first, now, tail_bytes=4096), Cut)
    # the whole log fits in the tail: never cut, however early the window starts
    whole = await read(now - timedelta(days=30), now)
    assert not isinstance(whole, Cut) and len([c for c in whole if c.what != "booted"]) == 300
    # a tail holding no whole line: cut, with no date to give
    dpkg.write_text(f"{now:%Y-%m-%d %H:%M:%S} upgrade big:amd64 1 {'2' * 5000}\n")
    undated = await read(now - timedelta(hours=6), now, tail_bytes=4096)
    assert isinstance(undated, Cut) and undated.why == (
        "only the last 4 KiB of dpkg.log were read, starting with no dated line; "
        "earlier changes in the window are not shown"
    )


async def test_a_history_log_bigger_than_its_tail_says_it_was_cut(pool: SshPool, tmp_path: Path) -> None:
    tz = local_offset()
    now = datetime.now(tz).replace(microsecond=0)
    history = tmp_path / "history.log"
    history.write_text(
        "".join(
            f"Start-Date: {(now - timedelta(minutes=200 - i)):%Y-%m-%d  %H:%M:%S}\n"
            f"Commandline: apt-get install -y p{i}\nInstall: p{i}:amd64 (1.{i})\n\n"
            for i in range(200)
        )
    )
    tail = history.read_bytes()[-4096:].decode()
    started = tail[tail.index("Start-Date: ") + 12 :].split("\n", 1)[0]
    first = datetime.fromisoformat(" ".join(started.split())).replace(tzinfo=tz)
    host = pool.inventory.resolve("web-03")
    assert host is not None
    read = partial(host_changes, pool, host, dpkg_log=str(tmp_path / "none.log"), apt_history=str(history))
    cut = await read(now - timedelta(hours=6), now, tail_bytes=4096)
    assert isinstance(cut, Cut) and cut.why == (
        f"only the last 4 KiB of history.log were read, from {utc_minute(first)}; "
        "earlier changes in the window are not shown"
    )
    assert min(c.at for c in cut.changes if c.what != "booted") == first
    assert not isinstance(await read(first + timedelta(seconds=1), now, tail_bytes=4096), Cut)
