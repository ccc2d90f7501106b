"""Every host tool on an inventory host, over a real OpenSSH server on 127.0.0.1 (tests.support.sshserver.SshServer).

The server runs on this machine, so a remote call sees the same files as a local one, and both run the same
commands: every host tool's output on the host must be *equal* to the local one (the health tools' sampled
numbers aside). The transport itself
(timeouts, drops, host keys, jumps) is tests/tools/remote/test_ssh.py's.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bot.run.summary import handle_number
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import ALICE, BOB, bot_env, result_text, text_of, tool_results
from tests.support.sshserver import SshServer
from tests.tools.test_tools_services import FAKE_SYSTEMCTL, UNITS
from tools import PermissionDenied, ToolError, ToolRegistry
from tools.builtin.log_reads import compile_pattern
from tools.builtin.reach import HOST_HELP
from tools.config import build_registry
from tools.remote import SshHosts
from tools.remote.ere import translate
from tools.remote.inventory import Host, Inventory, SshSettings

DAY = 86_400
Servers = Callable[..., SshServer]


def host_for(server: SshServer, name: str = "web-03", **fields: Any) -> Host:
    values: dict[str, Any] = {
        "address": server.address,
        "port": server.port,
        "identity_file": server.client_key,
        "known_hosts": server.known_hosts,
    }
    return Host(name=name, **{**values, **fields})


def age(path: Path, days: float) -> Path:
    t = time.time() - days * DAY
    os.utime(path, (t, t))
    return path


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    d = tmp_path / "log"
    (d / "app").mkdir(parents=True)
    (d / "app.log").write_text(
        "".join(f"line {i} {'ERROR' if i % 7 == 0 else 'ok'} id={i * 3}\n" for i in range(1, 301))
    )
    (d / "app" / "worker.log").write_text("Error: boom\nfine\nerror again\n")
    with gzip.open(d / "app.log.2.gz", "wt") as f:
        f.write("old ERROR 1\nold ok\n")
    for name, size in {"app.log.1": 100, "app/worker.log-20240101": 300, "old.old": 40, "recent.log.1": 50}.items():
        (d / name).write_bytes(b"x" * size)
        age(d / name, 1 if name.startswith("recent") else 30)
    age(d / "app.log.2.gz", 30)
    return d


@pytest.fixture
async def tools(sshd: SshServer, logs: Path) -> AsyncIterator[ToolRegistry]:
    """The real registry with one inventory host (the test sshd) whose log_dirs is `logs`."""
    inventory = Inventory(
        SshSettings(), (host_for(sshd, log_dirs=(str(logs),), restart_allowlist=("nginx",)), host_for(sshd, "db-01"))
    )
    registry = await build_registry(
        {"logs": {"dirs": [str(logs)]}, "services": {"restart_allowlist": ["api"]}},
        reaches={"ssh": SshHosts(inventory)},
    )
    yield registry
    await registry.aclose()


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def call(registry: ToolRegistry, name: str, args: dict[str, Any], **kw: Any) -> str:
    """Run `name` with `args`; a host tool with no host named runs on "self" (the inventory makes host required)."""
    t = registry.get(name)
    assert t is not None
    if "host" in t.input_schema["properties"]:
        args = {"host": "self", **args}
    return await t.run(args, **kw)


# -- same output as locally ----------------------------------------------------------------------------------


SHAPES = {
    "check_disk": ({}, [r"disk usage on {host}", r"mount\s+fs\s+size\s+used\s+avail\s+use%\s+inodes\s+iused\s+iuse%"]),
    "check_memory": (
        {},
        [
            r"memory on {host}",
            r"total \S+, used \S+, available \S+ \(\d+\.\d% in use\)",
            r"swap total \S+, used \S+ \(\d+\.\d% in use\)",
        ],
    ),
    "check_cpu": (
        {},
        [
            r"cpu on {host}",
            r"cpu \d+\.\d% \(per core: \d+%(, \d+%)*\)",
            r"load average \d+\.\d\d \d+\.\d\d \d+\.\d\d \(1, 5, 15 min\)",
            r"cores \d+ logical.*",
        ],
    ),
    "list_top_processes": (
        {"sort_by": "memory", "limit": 5},
        [r"top 5 of \d+ processes on {host} by memory", r"pid\s+user\s+cpu%\s+rss\s+command"],
    ),
}


@pytest.mark.parametrize("name", list(SHAPES))
async def test_a_health_tool_on_a_host_has_the_local_shape(tools: ToolRegistry, name: str) -> None:
    args, head = SHAPES[name]
    local = (await call(tools, name, args)).splitlines()
    remote = (await call(tools, name, {**args, "host": "web-03"})).splitlines()
    for lines, host in ((local, re.escape(os.uname().nodename)), (remote, "web-03")):
        for line, pattern in zip(lines, head, strict=False):
            assert re.fullmatch(pattern.format(host=host), line), (line, pattern)
    assert len(remote) >= len(head)
    if name == "check_disk":  # the same filesystems, the same columns
        assert [line.split()[:2] for line in remote[1:3]] == [line.split()[:2] for line in local[1:3]]
        assert remote[2].split()[2] == local[2].split()[2]  # the root filesystem's size
    if name == "check_memory":
        assert remote[1].split(",")[0] == local[1].split(",")[0]  # total memory
    if name == "check_cpu":
        assert remote[3].split()[1] == local[3].split()[1]  # logical cores
        assert remote[1].count("%") == local[1].count("%")
    if name == "list_top_processes":
        rows = [line.split(None, 4) for line in remote[2:7]]  # then the line naming its own processes
        assert len(rows) == 5 and all(r[0].isdigit() and re.fullmatch(r"\d+\.\d", r[2]) for r in rows)


# Each host tool, with arguments that answer and arguments that are refused: the same answer here and on a host.
SAME_ANSWER = [
    ("check_disk", {}),
    ("check_memory", {}),
    ("check_cpu", {}),
    ("list_top_processes", {"sort_by": "memory", "limit": 3}),
    ("list_top_processes", {"limit": 0}),
    ("tail_log", {"path": "app.log", "lines": 5}),
    ("tail_log", {"path": "app.log.2.gz"}),
    ("tail_log", {"path": "app"}),
    ("tail_log", {"path": "nope.log"}),
    ("tail_log", {"path": "/etc/passwd"}),
    ("tail_log", {"path": "app.log", "lines": 0}),
    ("grep_log", {"path": ".", "pattern": "(?i)error", "max_matches": 4}),
    ("grep_log", {"path": "app.log", "pattern": r"\pL"}),
    ("grep_log", {"path": "app.log", "pattern": r"(a)\1"}),
    ("grep_log", {"path": "../..", "pattern": "x"}),
    ("clean_logs", {"path": ".", "older_than_days": 7}),
    ("clean_logs", {"path": "app.log"}),
]
_SAMPLED = {"check_disk", "check_memory", "check_cpu", "list_top_processes"}  # numbers that move between calls


async def _answer(registry: ToolRegistry, name: str, args: dict[str, Any], host: str, shown_as: str) -> str:
    t = registry.get(name)
    assert t is not None
    try:
        out = await (t.dry_run if name == "clean_logs" else t.run)({**args, "host": host})
    except ToolError as e:
        out = f"error: {e}"
    text = str(out).replace(shown_as, "HOST")
    if name in _SAMPLED and not text.startswith("error"):
        text = re.sub(r"\d+(\.\d+)?", "N", text)
        if name == "list_top_processes":
            text = "\n".join(text.splitlines()[:2])  # which processes lead may change between the calls
    return text


@pytest.mark.parametrize(("name", "args"), SAME_ANSWER)
async def test_every_host_tool_answers_the_same_here_and_on_a_host(
    tools: ToolRegistry, name: str, args: dict[str, Any]
) -> None:
    here = await _answer(tools, name, args, "self", socket.gethostname())
    assert await _answer(tools, name, args, "web-03", "web-03") == here


async def test_tail_log_on_a_host_equals_the_local_output(tools: ToolRegistry, logs: Path) -> None:
    for args in (
        {"path": "app.log", "lines": 5},
        {"path": str(logs / "app.log"), "lines": 1},
        {"path": "app.log.2.gz", "lines": 10},
        {"path": "app/worker.log"},
    ):
        local = await call(tools, "tail_log", args)
        assert await call(tools, "tail_log", {**args, "host": "web-03"}) == local
    assert (await call(tools, "tail_log", {"path": "app.log", "lines": 2, "host": "web-03"})).splitlines()[1:] == [
        "line 299 ok id=897",
        "line 300 ok id=900",
    ]


GREPS = [
    ("app.log", r"ERROR id=\d{2}$"),
    ("app.log", r"(?i)error"),
    ("app.log", r"(?:line 1\d+?) ok"),
    ("app.log", r"id=[^0-8\s]+$"),
    ("app.log", "nothing-matches"),
    ("app.log", r"line [\d]+ ERROR id=2\d\b"),
    (".", r"(?i)error"),
    ("app", "^(Error|fine)"),
    ("app.log.2.gz", "ERROR"),
    ("app.log", r"a\.b|\(x\)|\{"),
]


@pytest.mark.parametrize(("path", "pattern"), GREPS)
async def test_grep_log_on_a_host_equals_the_local_output(tools: ToolRegistry, path: str, pattern: str) -> None:
    args = {"path": path, "pattern": pattern, "max_matches": 7}
    local = await call(tools, "grep_log", args)
    assert await call(tools, "grep_log", {**args, "host": "web-03"}) == local


def test_patterns_translate_to_an_ere_that_matches_the_same_lines() -> None:
    assert translate(r"(?i)\d+(?:ms)?? t").expression == "[0-9]+([Mm]([Ss]|(\u017f)))? [Tt]"
    assert translate(r"[\]\-a^\d]x{2,}?\.").expression == r"[]0-9a^-]x{2,}\."
    assert translate(r"a{b}x{,3}").expression == r"a\{b\}x\{,3\}"  # RE2 reads both as literal text
    assert translate(r"[[:alpha:]]\w").expression == "[A-Za-z][0-9A-Z_a-z]"
    assert (translate("[^a]").locale, translate(r"\bé+").locale) == ("C.UTF-8", "C")
    with pytest.raises(
        ToolError, match="a newline, which never occurs inside a line, is not supported \\(it runs as grep -E"
    ):
        translate("a\nb")
    with pytest.raises(ToolError, match=r"the Unicode class \\pL is not supported \(it runs as grep -E on the host\)"):
        translate(r"\pL")


# Lines that tell the translations apart: POSIX classes, case folding beyond ASCII (the Kelvin sign, the long s),
# tabs, vertical tabs, punctuation, non-ASCII letters, braces that are and are not counts.
TABLE_LINES = [
    "worker upstream timed out",
    "code 503",
    "code 5034",
    "user=bob logged in",
    "x{,3}y",
    "xxy",
    "xy",
    "ERROR disk full",
    "error: disk",
    "Error\tdisk",
    "\u212aelvin scale",
    "\u017fhort s",
    "naïve café 42",
    "tab\there",
    "vt\vhere",
    "a.b (x) {y} [z] ^c$ |p|",
    "id=123 took 45ms",
    "id=7 took 3s",
    "über straße",
    "数据库 down",
    "aaa",
    "a{2}b",
    "end\\",
    "-flag --opt",
    "plain",
]
TABLE = [
    r"[[:alpha:]]+ upstream",
    r"[[:digit:]]{3}$",
    r"[^[:space:]]+ logged",
    r"x{,3}y",
    r"x{1,2}y",
    r"x{2}y",
    r"\d{2,}",
    r"\D+",
    r"\w+ \w+",
    r"\W",
    r"\s",
    r"\S+\s\S+",
    r"\bdisk\b",
    r"\Bisk",
    r"^code \d+$",
    r"\Acode",
    r"full\z",
    r"took \d+m?s",
    r"took \d+?m??s",
    r"(?:id|code)=?\d",
    r"(?P<n>ERROR|Error)",
    r"(?i)error",
    r"(?i)kelvin",
    r"(?i)short",
    r"(?i)[k-l]",
    r"(?i)[^a-z ]",
    r"[[:upper:]]{5}",
    r"[[:punct:]]{2}",
    r"[[:^alpha:]]",
    r"[[:xdigit:]]{3}",
    r"[[:blank:]]",
    r"[[:space:]]",
    r"[[:cntrl:]]",
    r"\t",
    r"\x7b\x7d",
    r"\{y\}",
    r"\.b",
    r"\^c\$",
    r"\|p\|",
    r"[]\[]",
    r"[\^-]",
    r"a{2}b|a\{2\}",
    r"ï",
    r"é+ \d",
    r"[éü]",
    r"数据+",
    r"straße$",
    r"caf.",
    r"^.{4} ",
    r"^[^a-z]",
    r"(a|b)+",
    r"(|x)y",
    r"\\$",
    r"--opt",
    r"^-",
    r"a(?i)AA",
    r"(?i:ERROR) disk",
    r"\Qa.b\E",
    r"\b\d+ms",
    r"(?i)é",
    r"\pL",
    r"\b.",
    r"^*x",
    "",
]
REFUSED = {
    r"(?i)é": "case-insensitive matching of the non-ASCII letter",
    r"\pL": "the Unicode class",
    r"\b.": r"\\b \(an ASCII word boundary\) together with \.",
    r"^*x": r"a repeated anchor \(\^\*\)",
}


async def test_grep_log_counts_the_lines_re2_matches_or_refuses_naming_the_construct(
    tools: ToolRegistry, logs: Path
) -> None:
    """The ERE grep runs matches exactly the lines RE2 (the pattern's own syntax) matches, here and on a host."""
    (logs / "table.log").write_text("".join(f"{line}\n" for line in TABLE_LINES), encoding="utf-8")
    differ, refused = [], {}
    at_once = asyncio.Semaphore(8)  # each call is a local sh or an SSH channel

    async def compare(pattern: str) -> None:
        args = {"path": "table.log", "pattern": pattern, "max_matches": 100}
        regex = compile_pattern(pattern)
        expected = [f"{n}: {line}" for n, line in enumerate(TABLE_LINES, 1) if regex.search(line)]
        async with at_once:
            try:
                local = await call(tools, "grep_log", args)
            except ToolError as e:
                refused[pattern] = str(e)
                with pytest.raises(ToolError, match=re.escape(str(e))):
                    await call(tools, "grep_log", {**args, "host": "web-03"})
                return
            remote = await call(tools, "grep_log", {**args, "host": "web-03"})
        if remote != local or local.split("\n")[1:] != expected:  # splitlines would also cut at \v
            differ.append((pattern, expected, local, remote))

    await asyncio.gather(*(compare(p) for p in TABLE))
    assert differ == []
    assert set(refused) == set(REFUSED)
    for pattern, error in refused.items():
        assert re.match(f"grep_log: {REFUSED[pattern]}.* is not supported \\(it runs as grep -E", error), error


async def test_the_issue_patterns_count_as_locally(tools: ToolRegistry, logs: Path) -> None:
    (logs / "t.log").write_text("upstream upstream\n200 ok\nid 404\nx{,3}y\nuser logged in\nxy\nxxy\n")
    counts = {}
    for pattern in (r"[[:alpha:]]+ upstream", r"[[:digit:]]{3}$", r"[^[:space:]]+ logged", r"x{,3}y"):
        out = await call(tools, "grep_log", {"path": "t.log", "pattern": pattern, "host": "web-03"})
        counts[pattern] = int(out.split()[0])
    assert counts == {r"[[:alpha:]]+ upstream": 1, r"[[:digit:]]{3}$": 1, r"[^[:space:]]+ logged": 1, r"x{,3}y": 1}


async def test_a_pattern_that_needs_characters_is_refused_on_a_file_that_is_not_utf8(
    tools: ToolRegistry, logs: Path
) -> None:
    (logs / "raw.log").write_bytes(b"ok line\nbad \xff\xfe byte\n")
    with pytest.raises(ToolError, match=r"grep_log: on web-03, .*raw.log is not valid UTF-8 text, where \. cannot"):
        await call(tools, "grep_log", {"path": "raw.log", "pattern": "bad . byte", "host": "web-03"})
    args = {"path": "raw.log", "pattern": r"\bbyte|ok"}  # bytes in the C locale: exact on any file
    assert await call(tools, "grep_log", {**args, "host": "web-03"}) == await call(tools, "grep_log", args)


async def test_clean_logs_preview_on_a_host_equals_the_local_one_and_deletes_exactly_it(
    tools: ToolRegistry, logs: Path
) -> None:
    t = tools.get("clean_logs")
    assert t is not None
    args = {"path": str(logs), "older_than_days": 7}
    local = await t.dry_run({**args, "host": "self"})
    remote = await t.dry_run({**args, "host": "web-03"})
    assert remote == local and remote is not None
    size = 100 + 300 + (logs / "app.log.2.gz").stat().st_size
    assert remote.splitlines()[0].startswith(f"would delete 3 rotated log files older than 7 days under {logs}, ")
    out = await t.run({**args, "host": "web-03"}, confirmed_by="U1", approved_preview=remote)
    assert out.splitlines()[0] == (
        f"deleted 3 rotated log files older than 7 days under {logs}, freed {size}B ({size} bytes); approved by U1"
    )
    assert files_under(logs) == ["app.log", "app/worker.log", "old.old", "recent.log.1"]  # live, not a log, too recent


async def test_clean_logs_on_a_host_leaves_alone_what_changed_or_went_since_the_preview(
    tools: ToolRegistry, logs: Path
) -> None:
    t = tools.get("clean_logs")
    assert t is not None
    args = {"path": str(logs), "older_than_days": 7, "host": "web-03"}
    preview = await t.dry_run(args)
    assert preview is not None
    with (logs / "app.log.1").open("ab") as f:  # written to after the preview
        f.write(b"more")
    (logs / "app.log.2.gz").unlink()
    late = logs / "late.log.1"  # new since the preview: never approved
    late.write_bytes(b"y")
    age(late, 30)
    out = await t.run(args, confirmed_by="U1", approved_preview=preview)
    lines = out.splitlines()
    assert lines[0] == (
        f"deleted 1 rotated log files older than 7 days under {logs}, freed 300B (300 bytes); approved by U1"
    )
    assert (
        "left alone: changed since the preview (1 files; call clean_logs again for a new preview and "
        "approval):" in lines
    )
    assert any(line.startswith(f"  {logs / 'app.log.1'}  100B  30d old") for line in lines)
    assert "left alone: gone since the preview (1 files):" in lines
    assert any("not deleted, not in the approved preview (1 files" in line for line in lines)
    assert (logs / "app.log.1").exists() and late.exists()
    assert not (logs / "app/worker.log-20240101").exists()


# -- services ----------------------------------------------------------------------------------------------


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "systemctl"
    script.write_text(FAKE_SYSTEMCTL.format(python=sys.executable))
    script.chmod(0o755)
    (bin_dir / "units.json").write_text(json.dumps(UNITS))
    return bin_dir


async def test_service_tools_on_a_host_use_its_own_allowlist(
    ssh_servers: Servers, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = ssh_servers(path=f"{fake_bin}:/usr/bin:/bin")
    monkeypatch.setenv("PATH", f"{fake_bin}:/usr/bin:/bin")  # localhost runs the same stand-in
    inventory = Inventory(SshSettings(), (host_for(server, restart_allowlist=("nginx",)), host_for(server, "db-01")))
    registry = await build_registry({"services": {"restart_allowlist": ["api"]}}, reaches={"ssh": SshHosts(inventory)})
    try:
        local = await call(registry, "service_status", {"unit": "nginx"})
        assert await call(registry, "service_status", {"unit": "nginx", "host": "web-03"}) == local
        restart = registry.get("restart_service")
        assert restart is not None
        await restart.check({"unit": "nginx", "host": "web-03"})  # web-03's own allowlist
        with pytest.raises(
            PermissionDenied,
            match=r"restarting 'api' on web-03 is not allowed by policy "
            r"\(restart_allowlist of \[\[hosts\]\] 'web-03': nginx\)",
        ):
            await restart.check({"unit": "api", "host": "web-03"})
        await restart.check({"unit": "api", "host": "db-01"})  # no list of its own: [tools.services]
        with pytest.raises(PermissionDenied, match=r"tools.services.restart_allowlist: api"):
            await restart.check({"unit": "nginx", "host": "db-01"})
        out = await restart.run({"unit": "nginx", "host": "web-03"}, confirmed_by="U1")
        assert out.splitlines()[0] == "restarted nginx; approved by U1; now active (running)"
        calls = (fake_bin / "calls.log").read_text().splitlines()
        assert "--no-pager restart -- nginx" in calls
        with pytest.raises(ToolError, match="not a valid unit name"):
            await call(registry, "service_status", {"unit": "; touch /tmp/x", "host": "web-03"})
    finally:
        await registry.aclose()


# -- nothing but the fixed command, nowhere but the inventory ----------------------------------------------


async def test_hostile_arguments_run_nothing_and_reach_nothing_outside_log_dirs(
    tools: ToolRegistry, logs: Path, tmp_path: Path, sshd: SshServer
) -> None:
    planted = tmp_path / "pwned"
    secret = tmp_path / "secret.log"
    secret.write_text("password=hunter2\n")
    (logs / "escape.log").symlink_to(secret)  # a symlink out of log_dirs, on the host
    hostile = [
        f"; touch {planted}",
        f"$(touch {planted})",
        f"`touch {planted}`",
        f"app.log\ntouch {planted}",
        "-e",
        "--",
        "../secret.log",
        "escape.log",
        str(secret),
        f"app.log; touch {planted}",
        "/etc/passwd",
    ]
    for path in hostile:
        for name, args in (("tail_log", {"path": path}), ("grep_log", {"path": path, "pattern": "."})):
            with pytest.raises(ToolError) as e:
                await call(tools, name, {**args, "host": "web-03"})
            assert "outside the allowed log directories" in str(e.value) or "no such file" in str(e.value), path
    for pattern in (f"$(touch {planted})", f"; touch {planted}", "-e", "--", f"`touch {planted}`", "'\"\\\\"):
        out = await call(tools, "grep_log", {"path": "app.log", "pattern": pattern, "host": "web-03"})
        assert out.startswith("0 matching lines for /")
    with pytest.raises(ToolError, match="backreference"):
        await call(tools, "grep_log", {"path": "app.log", "pattern": r"(a)\1", "host": "web-03"})
    with pytest.raises(ToolError, match="outside the allowed log directories"):
        await call(tools, "clean_logs", {"path": "..", "host": "web-03"}, confirmed_by="U1", approved_preview="")
    assert not planted.exists() and secret.exists()
    assert "pwned" not in {Path(p).name for p in files_under(tmp_path)}


async def test_a_host_outside_the_inventory_is_never_contacted(tools: ToolRegistry, sshd: SshServer) -> None:
    connections = sshd.log_text().count("Connection from")

    async def attempt(name: str, args: dict[str, Any]) -> None:
        if name == "restart_service":
            t = tools.get(name)
            assert t is not None
            await t.check(args)
        else:
            await call(tools, name, args)

    for name, args in (
        ("check_disk", {}),
        ("tail_log", {"path": "app.log"}),
        ("service_status", {"unit": "nginx"}),
        ("restart_service", {"unit": "nginx"}),
    ):
        for host in ("web-3", "127.0.0.1:22", "10.0.3.7", "db-1", "web-03.example"):  # refused before any packet
            with pytest.raises(ToolError) as e:
                await attempt(name, {**args, "host": host})
            if host == "web-3":
                assert str(e.value) == (
                    "'web-3' is not in the host inventory (closest: web-03); opsloop "
                    "connects only to inventory hosts, and list_hosts lists them"
                )
    assert sshd.log_text().count("Connection from") == connections


async def test_host_descriptions_name_a_small_inventory_and_host_has_no_default(tools: ToolRegistry) -> None:
    for name in ("check_disk", "tail_log", "grep_log", "clean_logs", "service_status", "restart_service"):
        t = tools.get(name)
        assert t is not None
        assert t.input_schema["properties"]["host"] == {
            "type": ["string", "null"],
            "description": f"{HOST_HELP} Hosts: web-03, db-01, self.",
        }
    assert tools.api_schemas() == tools.api_schemas()


# -- end to end: preview, approve, exactly the listed files gone ---------------------------------------------


async def test_clean_logs_on_a_host_through_the_app_deletes_what_was_approved_and_reports_what_changed(
    tmp_path: Path, sshd: SshServer, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    logs = tmp_path / "remote-log"
    logs.mkdir()
    kept = logs / "app.log.1"
    kept.write_bytes(b"x" * 1_000)
    age(kept, 30)
    grown = logs / "app.log.2"
    grown.write_bytes(b"x" * 2_000)
    age(grown, 30)
    live = logs / "app.log"
    live.write_text("live\n")
    local_logs = tmp_path / "local-log"
    local_logs.mkdir()
    config = (
        f'[tools]\nmodules = ["tools.builtin"]\n[tools.logs]\ndirs = [{json.dumps(str(local_logs))}]\n'
        f'[[hosts]]\nname = "web-03"\naddress = "127.0.0.1"\nport = {sshd.port}\n'
        f"identity_file = {json.dumps(str(sshd.client_key))}\nknown_hosts = {json.dumps(str(sshd.known_hosts))}\n"
        f"log_dirs = [{json.dumps(str(logs))}]\n"
    )
    args = {"path": str(logs), "older_than_days": 7, "host": "web-03"}
    fake_anthropic.script(
        reply(text("Cleaning old rotated logs on web-03."), tool_use("clean_logs", args)),
        reply(text("Deleted one; the other changed.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        channel, ts = await env.mention("web-03 is out of disk, clean its logs", user=ALICE)
        card = await env.card(channel, ts, timeout=30)
        shown = text_of(card)
        assert f"would delete 2 rotated log files older than 7 days under {logs}" in shown
        assert f"{kept}  1000B  30d old  #" in shown and f"{grown}  2.0K  30d old  #" in shown
        assert f"{live}  " not in shown
        with grown.open("ab") as f:  # written to between the preview and the click
            f.write(b"late")
        await env.approve(card, BOB)
        await env.wait_final(channel, ts, timeout=30)
        (result,) = tool_results((await env.requests(2))[1])
        handle, _, out = result_text(result).partition("\n")
        assert handle.startswith("#1 clean_logs ") and handle_number(handle) == 1, handle
        assert out.splitlines()[:4] == [
            f"deleted 1 rotated log files older than 7 days under {logs}, freed 1000B (1000 bytes); approved by "
            f"{out.splitlines()[0].rsplit('approved by ', 1)[1]}",
            f"  {kept}  1000B  30d old",
            "left alone: changed since the preview (1 files; call clean_logs again for a new preview and approval):",
            f"  {grown}  2.0K  30d old",
        ]
        assert BOB in out.splitlines()[0] or "bob" in out.splitlines()[0]
        assert not kept.exists() and grown.exists() and live.exists()
        fake_anthropic.assert_complete()


# -- opsloop check ---------------------------------------------------------------------------------------------


async def test_opsloop_check_probes_every_host_and_fails_naming_the_unknown_key(
    ssh_servers: Servers,
    tmp_path: Path,
    fake_slack: FakeSlack,
    fake_anthropic: FakeAnthropic,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bot.app.check import check
    from bot.app.settings import load_settings
    from tests.conftest import API_KEY

    good, other = ssh_servers(), ssh_servers()
    (tmp_path / "empty").write_text("")

    def entry(name: str, server: SshServer, known_hosts: Path, jump: str = "") -> str:
        return (
            f'[[hosts]]\nname = "{name}"\naddress = "127.0.0.1"\nport = {server.port}\n'
            f"identity_file = {json.dumps(str(server.client_key))}\nknown_hosts = {json.dumps(str(known_hosts))}\n"
            + (f'jump = "{jump}"\n' if jump else "")
        )

    config = tmp_path / "opsloop.toml"
    config.write_text(
        entry("web-01", good, good.known_hosts)
        + entry("web-02", other, tmp_path / "empty")
        + entry("web-03", good, good.known_hosts, jump="web-01")
    )
    env = {
        "SLACK_BOT_TOKEN": fake_slack.bot_token,
        "SLACK_APP_TOKEN": fake_slack.app_token,
        "SLACK_API_URL": fake_slack.api_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
        "OPSLOOP_DB": str(tmp_path / "opsloop.db"),
    }
    fake_anthropic.script(reply(text("pong")), reply(text("pong")))
    assert await check(load_settings(config, env=env)) == 1  # run would start; a host can't be used now: exit 1
    captured = capsys.readouterr()
    table = [line for line in captured.out.splitlines() if line.startswith(("host ", "web-0"))]
    assert table[0].split() == ["host", "address", "via", "result"]
    assert re.fullmatch(rf"web-01\s+127\.0\.0\.1:{good.port}\s+-\s+ok \(\d+ ms\)", table[1])
    fp = re.escape(other.host_fingerprint())
    assert re.fullmatch(rf"web-02\s+127\.0\.0\.1:{other.port}\s+-\s+host key unknown {fp}", table[2])
    assert re.fullmatch(rf"web-03\s+127\.0\.0\.1:{good.port}\s+web-01\s+ok \(\d+ ms\)", table[3])
    err = captured.err.splitlines()
    assert any(line.startswith("opsloop: error: host web-02: host key unknown: ") for line in err)
    assert (
        f"opsloop: error: host web-02: to verify its key, run: ssh-keyscan -p {other.port} -t ed25519 127.0.0.1" in err
    )


WINDOWED = [  # each with what its answer's first line holds (a window, newest first) on top of being the same
    (
        "grep_log",
        {"path": "timed.log", "pattern": "ERROR", "since": "2026-12-05T13:55:00Z", "newest_first": True},
        "10 matching lines for /ERROR/ in ",
    ),
    (
        "grep_log",
        {"path": ".", "pattern": "(?i)error", "until": "2026-12-05T13:00:00Z", "max_matches": 3},
        " between the start and 2026-12-05T13:00:00+00:00 (",
    ),
    ("grep_log", {"path": "app.log", "pattern": "ERROR", "newest_first": True, "max_matches": 3}, "the newest 3"),
    (
        "tail_log",
        {"path": "timed.log", "lines": 5, "since": "2026-12-05T13:00:00Z", "until": "2026-12-05T13:52:00Z"},
        "(last 5 lines between 2026-12-05T13:00:00+00:00 and 2026-12-05T13:52:00+00:00",
    ),
    ("tail_log", {"path": "app.log", "since": "2026-12-05T00:00:00Z"}, "no timestamps recognised"),
    (
        "log_histogram",
        {
            "path": "timed.log",
            "pattern": "ERROR",
            "since": "2026-12-05T13:00:00Z",
            "until": "2026-12-05T14:00:00Z",
            "bucket": "2m",
        },
        "per 2m",
    ),
    ("log_histogram", {"path": "timed.log", "pattern": "x", "since": "soon"}, "error: since: expected an ISO 8601"),
    ("list_logs", {}, "log files under "),
]


@pytest.mark.parametrize(("name", "args", "holds"), WINDOWED)
async def test_windowed_log_reads_answer_the_same_here_and_on_a_host(
    tools: ToolRegistry, logs: Path, name: str, args: dict[str, Any], holds: str
) -> None:
    lines = []
    for i in range(60):
        t = f"2026-12-05T13:{i:02d}:00Z"
        lines += [f"{t} INFO {i}"] + ([f"{t} ERROR timed out {i}", "  at frame ERROR"] if i >= 50 else [])
    (logs / "timed.log").write_text("\n".join(lines) + "\n")
    here = await _answer(tools, name, args, "self", socket.gethostname())
    assert holds in here.splitlines()[0]
    assert await _answer(tools, name, args, "web-03", "web-03") == here
