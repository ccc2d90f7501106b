"""journal and kernel_events on real journal files (tests.support.journal: written by systemd-journal-remote from
fixture entries, read by the real journalctl), here and on an inventory host over a real sshd."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import journal as fixture
from tests.support.config_readers import load_hosts, tool_context
from tests.support.sshserver import SshServer
from tools import Tool, ToolContext, ToolError, ToolRegistry
from tools.builtin import journal, kernel_events
from tools.builtin.journal import iso
from tools.config import build_registry
from tools.remote import SshHosts
from tools.remote.inventory import Host, HostsConfigError, Inventory, SshSettings

NOW = int(time.time())
HOUR = 3_600
HERE = socket.gethostname()

OOM = (
    "Out of memory: Killed process 3120 (java) total-vm:8388608kB, anon-rss:6291456kB, file-rss:0kB, "
    "shmem-rss:0kB, UID:1001 pgtables:12800kB oom_score_adj:0"
)
CGROUP_OOM = "Memory cgroup out of memory: Killed process 3304 (java) total-vm:4194304kB, anon-rss:2097152kB"
SEGFAULT = (
    "nginx[2211]: segfault at 0 ip 000055d0c1a2b3c4 sp 00007ffd9a8b7c60 error 4 in nginx[55d0c1a00000+f0000] "
    "likely on CPU 1 (core 1, socket 0)"
)
EXT4 = "EXT4-fs error (device nvme0n1p1): ext4_find_entry:1588: inode #2: comm nginx: reading directory lblock 0"
LINUX = "Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) 12.2.0) #1 SMP"
TIMEOUT = "upstream timed out (110: Connection timed out) while reading response header from upstream"


def entries() -> list[dict[str, str]]:
    e, k = fixture.entry, fixture.kernel
    return [
        k(LINUX, at=NOW - 50 * HOUR, priority=5, boot=fixture.EARLIER_BOOT),
        k(LINUX, at=NOW - 20 * HOUR, priority=5),
        e(
            "Started nginx.service - A high performance web server.",
            at=NOW - 3 * HOUR,
            unit="init.scope",
            identifier="systemd",
            pid=1,
        ),
        e("nginx starting", at=NOW - 3 * HOUR + 1, unit="nginx.service", pid=2210),
        k(EXT4, at=NOW - 5 * HOUR, priority=2),
        k(SEGFAULT, at=NOW - 3 * HOUR, priority=6),
        k(
            "java invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0",
            at=NOW - 2 * HOUR,
            priority=4,
        ),
        k(OOM, at=NOW - 2 * HOUR + 1),
        k(CGROUP_OOM, at=NOW - HOUR - 60),
        k("e1000e: eth0 NIC Link is Up 1000 Mbps Full Duplex, Flow Control: None", at=NOW - 90 * 60, priority=6),
        e(f"*1 {TIMEOUT}", at=NOW - 50 * 60, unit="nginx.service", priority=3, pid=2211),
        e('127.0.0.1 - - "GET /health HTTP/1.1" 200 2', at=NOW - 40 * 60, unit="nginx.service", pid=2211),
        e(
            "request failed: database is locked",
            at=NOW - 30 * 60,
            unit="api.service",
            identifier="api",
            priority=4,
            pid=3001,
        ),
        e(
            "(root) CMD (command -v debian-sa1 > /dev/null && debian-sa1 1 1)",
            at=NOW - 20 * 60,
            unit="cron.service",
            identifier="CRON",
            pid=3100,
        ),
        e(f"*2 {TIMEOUT}", at=NOW - 10 * 60, unit="nginx.service", priority=3, pid=2211),
    ]


@pytest.fixture(scope="module")
def journal_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if (reason := fixture.missing_reason()) is not None:
        pytest.skip(reason)
    return fixture.write_journal(tmp_path_factory.mktemp("journal"), entries())


def here(t: Tool, journal_dir: Path) -> Tool:
    return t.bind(ToolContext(journal_dir=journal_dir))


def last_hour() -> dict[str, str]:
    return {"since": iso(NOW - HOUR), "until": iso(NOW)}


def at(offset_s: int) -> str:
    return iso(NOW - offset_s)


# -- journal --------------------------------------------------------------------------------------------------


@pytest.mark.processes
async def test_journal_shows_a_units_entries_in_the_window_newest_first(journal_dir: Path) -> None:
    out = await here(journal, journal_dir).run({"unit": "nginx", **last_hour()})
    assert out.splitlines() == [
        f"3 entries for unit nginx in the journal of {HERE} between {at(HOUR)} and {at(0)}, newest first",
        f"{at(600)} err nginx[2211]: *2 {TIMEOUT}",
        f'{at(2400)} info nginx[2211]: 127.0.0.1 - - "GET /health HTTP/1.1" 200 2',
        f"{at(3000)} err nginx[2211]: *1 {TIMEOUT}",
    ]


@pytest.mark.processes
async def test_journal_oldest_first_cut_at_lines_says_how_many_were_left_out(journal_dir: Path) -> None:
    out = await here(journal, journal_dir).run({"unit": "nginx", "lines": 1, "newest_first": False, **last_hour()})
    assert out.splitlines() == [
        f"3 entries for unit nginx in the journal of {HERE} between {at(HOUR)} and {at(0)}, showing the oldest 1 "
        "(2 left out by lines)",
        f"{at(3000)} err nginx[2211]: *1 {TIMEOUT}",
    ]


@pytest.mark.processes
async def test_journal_pattern_is_matched_in_messages_with_re2(journal_dir: Path) -> None:
    out = await here(journal, journal_dir).run({"pattern": r"(?i)timed OUT \(\d+", **last_hour()})
    assert out.splitlines() == [
        f"2 entries for messages matching /(?i)timed OUT \\(\\d+/ in the journal of {HERE} between {at(HOUR)} and "
        f"{at(0)}, newest first",
        f"{at(600)} err nginx[2211]: *2 {TIMEOUT}",
        f"{at(3000)} err nginx[2211]: *1 {TIMEOUT}",
    ]


@pytest.mark.processes
async def test_journal_priority_keeps_that_priority_and_more_important(journal_dir: Path) -> None:
    out = await here(journal, journal_dir).run({"priority": "warning", **last_hour()})
    assert out.splitlines() == [
        f"3 entries for priority warning or more important in the journal of {HERE} between {at(HOUR)} and "
        f"{at(0)}, newest first",
        f"{at(600)} err nginx[2211]: *2 {TIMEOUT}",
        f"{at(1800)} warning api[3001]: request failed: database is locked",
        f"{at(3000)} err nginx[2211]: *1 {TIMEOUT}",
    ]
    by_number = await here(journal, journal_dir).run({"priority": "4", "identifier": "api", **last_hour()})
    assert by_number.splitlines()[1:] == [f"{at(1800)} warning api[3001]: request failed: database is locked"]


@pytest.mark.processes
async def test_journal_with_the_default_window_reads_the_last_hour(journal_dir: Path) -> None:
    out = await here(journal, journal_dir).run({"identifier": "CRON"})
    assert out.splitlines()[1:] == [
        f"{at(1200)} info CRON[3100] (cron.service): (root) CMD (command -v debian-sa1 > /dev/null && debian-sa1 1 1)"
    ]


@pytest.mark.processes
async def test_an_empty_window_names_what_was_asked(journal_dir: Path) -> None:
    out = await here(journal, journal_dir).run(
        {"unit": "nginx.service", "priority": "err", "since": at(8 * HOUR), "until": at(6 * HOUR)}
    )
    assert out == (
        f"no entries for unit nginx.service, priority err or more important in the journal of {HERE} between "
        f"{at(8 * HOUR)} and {at(6 * HOUR)}"
    )


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"priority": "loud"}, "priority: 'loud' is not 0-7 or one of emerg, alert, crit, err, warning, notice"),
        ({"priority": "8"}, "priority: '8' is not 0-7"),
        ({"unit": "-rf"}, "unit: '-rf' is not a valid unit name"),
        ({"identifier": "a b"}, "identifier: 'a b' is not a syslog identifier"),
        ({"lines": 0}, "lines: must be between 1 and 1000, got 0"),
        ({"since": "yesterday"}, "since: expected an ISO 8601 time"),
        ({"since": "1h", "until": "2h"}, "since .* must be before until"),
        ({"pattern": "(a)\\1"}, "backreference"),
    ],
)
async def test_bad_arguments_are_refused_in_one_line(args: dict[str, Any], error: str) -> None:
    with pytest.raises(ToolError, match=error):
        await journal.bind(ToolContext()).run(args)


# -- kernel_events --------------------------------------------------------------------------------------------


@pytest.mark.processes
async def test_kernel_events_groups_oom_kills_segfaults_and_ext4_errors_with_the_latest_of_each(
    journal_dir: Path,
) -> None:
    out = await here(kernel_events, journal_dir).run({"since": at(24 * HOUR), "until": at(0)})
    assert out.splitlines() == [
        f"kernel events on {HERE} between {at(24 * HOUR)} and {at(0)} (7 kernel messages read)",
        f"OOM kills: 2, latest: {at(HOUR + 60)} err kernel: {CGROUP_OOM}",
        f"segfaults and traps: 1, latest: {at(3 * HOUR)} info kernel: {SEGFAULT}",
        f"filesystem errors: 1, latest: {at(5 * HOUR)} crit kernel: {EXT4}",
        f"boots: 1, latest: {at(20 * HOUR)} notice kernel: {LINUX}",
        "boot IDs in the window (1, oldest first):",
        f"  {fixture.BOOT} first {at(20 * HOUR)} last {at(HOUR + 60)}",
    ]


@pytest.mark.processes
async def test_kernel_events_across_boots_lists_each_boot(journal_dir: Path) -> None:
    out = await here(kernel_events, journal_dir).run({"since": "3d"})
    assert f"boots: 2, latest: {at(20 * HOUR)} notice kernel: {LINUX}" in out.splitlines()
    assert out.splitlines()[-3:] == [
        "boot IDs in the window (2, oldest first):",
        f"  {fixture.EARLIER_BOOT} first {at(50 * HOUR)} last {at(50 * HOUR)}",
        f"  {fixture.BOOT} first {at(20 * HOUR)} last {at(HOUR + 60)}",
    ]


@pytest.mark.processes
async def test_kernel_events_in_a_quiet_window_say_none_were_found(journal_dir: Path) -> None:
    quiet = await here(kernel_events, journal_dir).run({"since": at(95 * 60), "until": at(85 * 60)})
    assert quiet.splitlines()[1] == (
        "no kernel events (OOM kills, segfaults and traps, read-only remounts, filesystem errors, disk I/O errors, "
        f"hung tasks and lockups, kernel bugs and panics, boots) in the journal of {HERE} between {at(95 * 60)} "
        f"and {at(85 * 60)}"
    )
    empty = await here(kernel_events, journal_dir).run({"since": at(30 * 60), "until": at(0)})
    assert empty == f"no kernel messages in the journal of {HERE} between {at(30 * 60)} and {at(0)}"


# -- config -----------------------------------------------------------------------------------------------------


def test_the_journal_directory_is_configured_here_and_per_host(tmp_path: Path) -> None:
    assert tool_context({"journal": {"dir": str(tmp_path)}}).journal_dir == tmp_path.resolve()
    assert tool_context({}).journal_dir is None
    _, (host,) = load_hosts({"hosts": [{"name": "logs-1", "journal_dir": "/var/log/journal/remote/"}]})
    assert host.journal_dir == "/var/log/journal/remote"
    with pytest.raises(HostsConfigError, match=r"hosts\[0\]\.journal_dir: 'journal' must be an absolute path"):
        load_hosts({"hosts": [{"name": "logs-1", "journal_dir": "journal"}]})


# -- over SSH ---------------------------------------------------------------------------------------------------


@pytest.fixture
async def remote(sshd: SshServer, journal_dir: Path) -> AsyncIterator[ToolRegistry]:
    """The real registry with one inventory host, the test sshd, whose journal_dir is the fixture journal."""
    host = Host(
        name="web-03",
        address=sshd.address,
        port=sshd.port,
        identity_file=sshd.client_key,
        known_hosts=sshd.known_hosts,
        journal_dir=str(journal_dir),
    )
    registry = await build_registry(
        {"journal": {"dir": str(journal_dir)}}, reaches={"ssh": SshHosts(Inventory(SshSettings(), (host,)))}
    )
    yield registry
    await registry.aclose()


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("journal", {"unit": "nginx", **last_hour()}),
        ("journal", {"pattern": "timed out", "priority": "err", **last_hour()}),
        ("journal", {"unit": "nginx", "since": at(8 * HOUR), "until": at(6 * HOUR)}),
        ("kernel_events", {"since": at(24 * HOUR), "until": at(0)}),
    ],
)
async def test_on_a_host_over_ssh_the_answer_equals_the_local_one(
    remote: ToolRegistry, name: str, args: dict[str, Any]
) -> None:
    tool = remote.get(name)
    assert tool is not None
    there = await tool.run({"host": "web-03", **args})
    local = await tool.run({"host": "self", **args})
    assert there == local.replace(f" {HERE} ", " web-03 ")
    assert "web-03" in there
