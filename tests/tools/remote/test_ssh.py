"""Hosts over SSH against a real OpenSSH server on 127.0.0.1: the pool, the remote command, the inventory, list_hosts.

Every server is tests.support.sshserver.SshServer (the `sshd`/`ssh_servers` fixtures); nothing here leaves loopback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import secrets
import shutil
import socket
import subprocess
import textwrap
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from bot.app.settings import load_settings
from bot.config.settings import ConfigError
from tests.support.config_readers import load_hosts
from tests.support.sshserver import SshServer, fingerprint, keygen
from tools import ToolError
from tools.config import build_registry
from tools.remote import SshHosts
from tools.remote.command import remote_command
from tools.remote.inventory import Host, HostsConfigError, Inventory, SshCredentials, SshSettings
from tools.remote.pool import Failure, Result, SshError, SshPool, _classify

Servers = Callable[..., SshServer]


def host_for(server: SshServer, name: str = "web-03", **fields: Any) -> Host:
    """An inventory entry for `server`: its port, its client key, its known_hosts."""
    values: dict[str, Any] = {
        "address": server.address,
        "port": server.port,
        "identity_file": server.client_key,
        "known_hosts": server.known_hosts,
    }
    return Host(name=name, **{**values, **fields})


def pool_for(*hosts: Host, credentials: SshCredentials | None = None, **ssh: Any) -> SshPool:
    return SshPool(Inventory(SshSettings(**ssh), hosts), credentials)


@pytest.fixture
async def closing() -> AsyncIterator[list[SshPool]]:
    """Pools appended here are closed after the test."""
    pools: list[SshPool] = []
    yield pools
    for pool in pools:
        await pool.close()


def marker() -> str:
    """A unique `sleep` duration: its command line finds exactly the processes this test started."""
    return f"97.{secrets.randbelow(10**6):06d}"


def processes_with(text: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if text in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


async def wait_for(predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
    """Until `predicate()` is true (observable state), or fail."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


@pytest.fixture
def no_orphans() -> Iterator[list[str]]:
    """Markers appended here must have no process left when the test ends (any found is killed by pid)."""
    markers: list[str] = []
    yield markers
    left = [p for m in markers for p in processes_with(f"sleep {m}")]
    for p in left:
        p.kill()
    assert left == []


# -- running commands ---------------------------------------------------------------------------


async def test_a_command_returns_its_output_and_exit_status(sshd: SshServer, closing: list[SshPool]) -> None:
    host = host_for(sshd)
    pool = pool_for(host)
    closing.append(pool)
    result = await pool.run(host, ["sh", "-c", "echo out; echo err >&2; exit 3"], timeout_s=10)
    assert result == Result(exit_status=3, stdout="out\n", stderr="err\n", truncated=False)
    assert await pool.run(host, ["printf", "%s", "ok"], timeout_s=10) == Result(0, "ok", "", False)


HOSTILE = [
    "; touch {f}",
    "$(touch {f})",
    "`touch {f}`",
    "| touch {f}",
    "&& touch {f}",
    "\ntouch {f}\n",
    "'; touch {f}; '",
    '"; touch {f}; "',
    "-e",
    "--",
    "-n",
    "*",
    "~",
    "$HOME",
    "${IFS}",
    "\\",
    "a b\tc",
    "'",
    '"',
    "$'\\x41'",
    "> {f}",
    "< /etc/passwd",
    "%s%n",
    "ünïcødé ✓",
    "",
]


async def test_hostile_arguments_arrive_as_literal_arguments(
    sshd: SshServer, closing: list[SshPool], tmp_path: Path
) -> None:
    planted = tmp_path / "pwned"
    args = [a.replace("{f}", str(planted)) for a in HOSTILE]
    host = host_for(sshd)
    pool = pool_for(host)
    closing.append(pool)
    result = await pool.run(host, ["printf", "%s\\0", *args], timeout_s=10)
    assert result.exit_status == 0
    assert result.stdout.split("\0")[:-1] == args
    assert not planted.exists()


async def test_output_is_cut_on_the_host_at_max_bytes(sshd: SshServer, closing: list[SshPool]) -> None:
    host = host_for(sshd)
    pool = pool_for(host)
    closing.append(pool)
    result = await pool.run(host, ["seq", "1", "1000000"], timeout_s=10, max_bytes=100)
    assert result.truncated and result.stdout == "".join(f"{i}\n" for i in range(1, 100))[:100]
    exact = await pool.run(host, ["printf", "%s", "x" * 100], timeout_s=10, max_bytes=100)
    assert exact == Result(0, "x" * 100, "", truncated=False)
    noisy = await pool.run(host, ["sh", "-c", "seq 1 1000000 >&2; exit 4"], timeout_s=10)
    assert noisy.exit_status == 4 and 0 < len(noisy.stderr) <= 16_000


@pytest.mark.parametrize("shell", ["sh", "bash", "dash", "zsh"])
def test_the_remote_command_keeps_exit_status_and_bounds_under_each_shell(shell: str, tmp_path: Path) -> None:
    """The script goes through `sh -c`; the login shell in front of it only has to parse one quoted word."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    command = remote_command(["sh", "-c", "printf 1234567890; echo oops >&2; exit 7"], timeout_s=5, max_bytes=4)
    done = subprocess.run([shell, "-c", command], capture_output=True, timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (7, b"12345", b"oops\n")


async def test_a_command_past_its_timeout_is_killed_on_the_host(
    sshd: SshServer, closing: list[SshPool], no_orphans: list[str]
) -> None:
    m1, m2 = marker(), marker()
    no_orphans += [m1, m2]
    host = host_for(sshd)
    pool = pool_for(host)
    closing.append(pool)
    # A child in the background too: `timeout` kills the whole process group, not just the program.
    with pytest.raises(SshError) as e:
        await pool.run(host, ["sh", "-c", f"sleep {m1} & sleep {m2}; wait"], timeout_s=1)
    assert e.value.failure is Failure.TIMEOUT
    assert str(e.value) == "web-03: timeout: sh ran past 1s and was killed on the host"
    await wait_for(lambda: not processes_with(f"sleep {m1}") and not processes_with(f"sleep {m2}"))
    assert (await pool.run(host, ["echo", "next"], timeout_s=5)).stdout == "next\n"


async def test_opsloop_closes_the_channel_when_its_own_timeout_fires(
    sshd: SshServer, closing: list[SshPool], no_orphans: list[str]
) -> None:
    m = marker()
    no_orphans.append(m)
    host = host_for(sshd)
    pool = SshPool(Inventory(SshSettings(), (host,)), grace_s=-1.5)  # opsloop gives up before the host does
    closing.append(pool)
    with pytest.raises(SshError, match=r"did not finish within 0\.5s; opsloop closed its channel") as e:
        await pool.run(host, ["sleep", m], timeout_s=2)
    assert e.value.failure is Failure.TIMEOUT
    await wait_for(lambda: not processes_with(f"sleep {m}"))  # the host's own timeout still ends it


# -- connections --------------------------------------------------------------------------------


async def test_the_connection_prefers_aes_gcm(closing: list[SshPool]) -> None:
    """AES-GCM is asked for first: asyncssh's ChaCha20 costs ~5x its CPU a packet (tools/remote/pool.py)."""
    with SshServer(log_level="DEBUG1") as server:
        host = host_for(server)
        pool = pool_for(host)
        closing.append(pool)
        await pool.run(host, ["true"], timeout_s=10)
        ciphers = re.findall(r"kex: (?:client->server|server->client) cipher: (\S+)", server.log_text())
    assert ciphers == ["aes128-gcm@openssh.com", "aes128-gcm@openssh.com"]


async def test_calls_share_one_connection(sshd: SshServer, closing: list[SshPool]) -> None:
    host = host_for(sshd)
    pool = pool_for(host)
    closing.append(pool)
    await pool.run(host, ["true"], timeout_s=5)
    await pool.run(host, ["true"], timeout_s=5)
    await asyncio.gather(*(pool.run(host, ["true"], timeout_s=5) for _ in range(3)))
    assert (sshd.accepted_logins(), pool.connections_made(host)) == (1, 1)


async def test_an_idle_connection_is_closed_and_reopened_on_the_next_call(
    sshd: SshServer, closing: list[SshPool]
) -> None:
    host = host_for(sshd)
    pool = pool_for(host, idle_timeout_s=0.2)
    closing.append(pool)
    await pool.run(host, ["true"], timeout_s=5)
    await wait_for(lambda: "Received disconnect from" in sshd.log_text())
    await pool.run(host, ["true"], timeout_s=5)
    assert (sshd.accepted_logins(), pool.connections_made(host)) == (2, 2)


async def test_at_most_max_sessions_per_host_run_at_once(
    ssh_servers: Servers, closing: list[SshPool], tmp_path: Path
) -> None:
    server = ssh_servers(max_sessions=2)  # a third session on the connection would be refused by sshd
    host = host_for(server)
    pool = pool_for(host, max_sessions_per_host=2)
    closing.append(pool)
    running = tmp_path / "running"
    running.mkdir()
    script = f"touch {running}/$$; ls {running} | wc -l; sleep 0.3; rm {running}/$$"
    results = await asyncio.gather(*(pool.run(host, ["sh", "-c", script], timeout_s=10) for _ in range(6)))
    assert [r.exit_status for r in results] == [0] * 6
    assert max(int(r.stdout) for r in results) <= 2
    assert pool.connections_made(host) == 1


async def test_a_dropped_connection_fails_the_call_and_the_next_call_reconnects(
    sshd: SshServer, closing: list[SshPool], no_orphans: list[str]
) -> None:
    m = marker()
    no_orphans.append(m)
    host = host_for(sshd)
    pool = pool_for(host)
    closing.append(pool)
    call = asyncio.create_task(pool.run(host, ["sleep", m], timeout_s=3))
    await wait_for(lambda: processes_with(f"sleep {m}"))
    assert sshd.drop_connections() == 1
    with pytest.raises(SshError) as e:
        await call
    assert e.value.failure is Failure.DROPPED and "the next call reconnects" in str(e.value)
    assert (await pool.run(host, ["echo", "back"], timeout_s=5)).stdout == "back\n"
    assert (sshd.accepted_logins(), pool.connections_made(host)) == (2, 2)
    await wait_for(lambda: not processes_with(f"sleep {m}"))  # its `timeout` still ended the orphaned sleep


async def test_a_connection_that_dropped_while_idle_is_replaced_without_an_error(
    sshd: SshServer, closing: list[SshPool]
) -> None:
    host = host_for(sshd)
    pool = pool_for(host)
    closing.append(pool)
    await pool.run(host, ["true"], timeout_s=5)
    sshd.drop_connections()
    assert (await pool.run(host, ["echo", "again"], timeout_s=5)).stdout == "again\n"
    assert sshd.accepted_logins() == 2


async def test_a_jump_host_tunnels_to_the_host_behind_it(ssh_servers: Servers, closing: list[SshPool]) -> None:
    bastion_server, web_server = ssh_servers(), ssh_servers()
    bastion = host_for(bastion_server, "bastion")
    web = host_for(web_server, "web-03", jump="bastion")
    pool = pool_for(bastion, web)
    closing.append(pool)
    assert (await pool.run(web, ["echo", "behind"], timeout_s=5)).stdout == "behind\n"
    await pool.run(web, ["true"], timeout_s=5)
    assert (bastion_server.accepted_logins(), web_server.accepted_logins()) == (1, 1)
    assert pool.inventory.via(web) == "bastion"


async def test_a_jump_chain_of_two_hops(ssh_servers: Servers, closing: list[SshPool]) -> None:
    edge_server, bastion_server, db_server = ssh_servers(), ssh_servers(), ssh_servers()
    edge = host_for(edge_server, "edge")
    bastion = host_for(bastion_server, "bastion", jump="edge")
    db = host_for(db_server, "db-1", jump="bastion")
    pool = pool_for(edge, bastion, db)
    closing.append(pool)
    assert (await pool.run(db, ["echo", "deep"], timeout_s=5)).stdout == "deep\n"
    assert [s.accepted_logins() for s in (edge_server, bastion_server, db_server)] == [1, 1, 1]
    assert pool.inventory.via(db) == "edge > bastion"


async def test_a_jump_host_that_is_down_is_named_in_the_error(sshd: SshServer, closing: list[SshPool]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    bastion = Host(name="bastion", address="127.0.0.1", port=closed_port, known_hosts=sshd.known_hosts)
    web = host_for(sshd, jump="bastion")
    pool = pool_for(bastion, web)
    closing.append(pool)
    with pytest.raises(SshError) as e:
        await pool.run(web, ["true"], timeout_s=5)
    assert e.value.failure is Failure.REFUSED
    assert str(e.value) == (
        f"web-03: connection refused: through jump host bastion: connection refused: "
        f"127.0.0.1:{closed_port} refused the connection"
    )
    assert sshd.accepted_logins() == 0


# -- refusals -----------------------------------------------------------------------------------


async def test_a_changed_host_key_is_refused_naming_the_offered_fingerprint(
    sshd: SshServer, closing: list[SshPool], tmp_path: Path
) -> None:
    other = keygen(tmp_path / "other_host_key")
    known = tmp_path / "known_hosts"
    other_pub = other.with_name(other.name + ".pub").read_text().split()[:2]
    known.write_text(f"[127.0.0.1]:{sshd.port} {' '.join(other_pub)}\n")
    host = host_for(sshd, known_hosts=known)
    pool = pool_for(host)
    closing.append(pool)
    with pytest.raises(SshError) as e:
        await pool.run(host, ["touch", str(tmp_path / "ran")], timeout_s=5)
    fp = sshd.host_fingerprint()
    assert (e.value.failure, e.value.fingerprint) == (Failure.HOST_KEY_MISMATCH, fp)
    assert str(e.value).startswith(
        f"web-03: host key mismatch: 127.0.0.1:{sshd.port} offered ssh-ed25519 key {fp}, "
        f"which is not the key {known} has for [127.0.0.1]:{sshd.port}"
    )
    assert sshd.accepted_logins() == 0 and not (tmp_path / "ran").exists()


@pytest.mark.parametrize("known_hosts", ["empty", "missing"])
async def test_an_unknown_host_key_is_refused_with_its_fingerprint_and_the_keyscan_line(
    sshd: SshServer, closing: list[SshPool], tmp_path: Path, known_hosts: str
) -> None:
    known = tmp_path / "known_hosts"
    if known_hosts == "empty":
        known.write_text("")
    host = host_for(sshd, known_hosts=known)
    pool = pool_for(host)
    closing.append(pool)
    with pytest.raises(SshError) as e:
        await pool.run(host, ["true"], timeout_s=5)
    fp = sshd.host_fingerprint()
    scan = f"ssh-keyscan -p {sshd.port} -t ed25519 127.0.0.1"
    assert (e.value.failure, e.value.fingerprint, e.value.keyscan) == (Failure.HOST_KEY_UNKNOWN, fp, scan)
    assert str(e.value) == (
        f"web-03: host key unknown: 127.0.0.1:{sshd.port} offered ssh-ed25519 key {fp}, and "
        f"{known} has no key for [127.0.0.1]:{sshd.port}; verify it, then add it with "
        f"`{scan} >> {known}` (opsloop never accepts a new key by itself)"
    )
    assert sshd.accepted_logins() == 0
    # The line works: what it prints is the key that was offered.
    scanned = (await asyncio.to_thread(subprocess.run, scan.split(), capture_output=True, text=True, timeout=30)).stdout
    (tmp_path / "scanned.pub").write_text(scanned.split(None, 1)[1])
    assert fingerprint(tmp_path / "scanned.pub") == fp
    known.write_text(scanned)
    trusting = pool_for(host)
    closing.append(trusting)
    assert (await trusting.run(host, ["echo", "trusted"], timeout_s=5)).stdout == "trusted\n"


async def test_a_key_the_server_does_not_accept_is_auth_failed(sshd: SshServer, closing: list[SshPool]) -> None:
    stranger = sshd.new_client_key("stranger", authorize=False)
    host = host_for(sshd, identity_file=stranger)
    pool = pool_for(host)
    closing.append(pool)
    with pytest.raises(SshError) as e:
        await pool.run(host, ["true"], timeout_s=5)
    assert e.value.failure is Failure.AUTH
    assert str(e.value) == f"web-03: auth failed: 127.0.0.1:{sshd.port} refused user {sshd.user!r} with {stranger}"


class SilentServer:
    """Accepts TCP on 127.0.0.1 and never says a word (no SSH banner): a hung sshd or a black-holing proxy."""

    def __init__(self) -> None:
        self.accepted = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> SilentServer:
        async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepted += 1
            self._writers.append(writer)

        self._server = await asyncio.start_server(hold, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for w in self._writers:
            w.close()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


async def test_a_server_that_never_answers_times_out_within_connect_timeout(
    closing: list[SshPool], tmp_path: Path
) -> None:
    async with SilentServer() as silent:
        host = Host(name="hung", address="127.0.0.1", port=silent.port, known_hosts=tmp_path / "kh")
        pool = pool_for(host, connect_timeout_s=0.5)
        closing.append(pool)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(SshError) as e:
            await pool.run(host, ["true"], timeout_s=5)
        assert loop.time() - started < 5  # the connect timeout, not the command's or a TCP default
        assert e.value.failure is Failure.TIMEOUT
        assert str(e.value) == f"hung: timeout: no SSH session with 127.0.0.1:{silent.port} within 0.5s"
        assert silent.accepted == 1


async def test_a_host_that_just_failed_fails_fast_then_is_tried_again(closing: list[SshPool], tmp_path: Path) -> None:
    async with SilentServer() as silent:
        host = Host(name="hung", address="127.0.0.1", port=silent.port, known_hosts=tmp_path / "kh")
        pool = pool_for(host, connect_timeout_s=0.3, fail_fast_s=60)
        closing.append(pool)
        with pytest.raises(SshError):
            await pool.run(host, ["true"], timeout_s=5)
        for _ in range(3):
            with pytest.raises(SshError, match=r"within 0.3s \(failed \d+s ago; opsloop tries again in \d+s\)") as e:
                await pool.run(host, ["true"], timeout_s=5)
            assert e.value.failure is Failure.TIMEOUT
        assert silent.accepted == 1  # the fast failures never touched the network
        retrying = pool_for(host, connect_timeout_s=0.3, fail_fast_s=0)  # no breaker: every call connects
        closing.append(retrying)
        for _ in range(2):
            with pytest.raises(SshError, match=r"within 0.3s$"):
                await retrying.run(host, ["true"], timeout_s=5)
        assert silent.accepted == 3


def test_connect_failures_are_classified_for_opsloop_check(tmp_path: Path) -> None:
    """DNS can only be shown offline: a real lookup would leave loopback."""
    host = Host(name="web-03", address="web-03.example", known_hosts=tmp_path / "kh")
    inventory = Inventory(SshSettings(), (host,))
    login = inventory.login(host)
    from tools.remote.pool import _Client, _Link

    client = _Client(_Link(host=host, sessions=asyncio.Semaphore(1)))
    cases = {
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"): Failure.DNS,
        ConnectionRefusedError(111, "Connection refused"): Failure.REFUSED,
        OSError(113, "No route to host"): Failure.UNREACHABLE,
        TimeoutError(): Failure.TIMEOUT,
    }
    for exc, failure in cases.items():
        assert _classify(exc, host, login, client, known_hosts_path=login.known_hosts, via="").failure is failure
    dns = _classify(
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
        host,
        login,
        client,
        known_hosts_path=login.known_hosts,
        via="",
    )
    assert str(dns) == "web-03: DNS: cannot resolve 'web-03.example': Name or service not known"


async def test_probe_all_reports_each_host_for_opsloop_check(
    ssh_servers: Servers, closing: list[SshPool], tmp_path: Path
) -> None:
    good, other = ssh_servers(), ssh_servers()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    mismatch = tmp_path / "mismatch"  # the good server's key, listed for the other one
    mismatch.write_text(f"[127.0.0.1]:{other.port} {' '.join(good.known_hosts_line().split()[1:])}\n")
    hosts = (
        host_for(good, "ok-1"),
        host_for(other, "unknown-1", known_hosts=tmp_path / "empty"),
        host_for(other, "mismatch-1", known_hosts=mismatch),
        host_for(good, "auth-1", identity_file=other.client_key),
        Host(name="down-1", address="127.0.0.1", port=closed_port, known_hosts=tmp_path / "empty"),
        host_for(good, "via-1", jump="ok-1"),
    )
    pool = pool_for(*hosts)
    closing.append(pool)
    results = await pool.probe_all(concurrency=3)
    assert [(r.host, r.failure, r.via) for r in results] == [
        ("ok-1", Failure.OK, ""),
        ("unknown-1", Failure.HOST_KEY_UNKNOWN, ""),
        ("mismatch-1", Failure.HOST_KEY_MISMATCH, ""),
        ("auth-1", Failure.AUTH, ""),
        ("down-1", Failure.REFUSED, ""),
        ("via-1", Failure.OK, "ok-1"),
    ]
    assert results[1].keyscan == f"ssh-keyscan -p {other.port} -t ed25519 127.0.0.1"
    assert results[2].fingerprint == other.host_fingerprint()


# -- secrets ------------------------------------------------------------------------------------


async def test_a_passphrase_protected_key_opens_with_the_passphrase_from_the_environment_and_never_shows(
    sshd: SshServer, closing: list[SshPool], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    passphrase = "correct horse " + secrets.token_hex(8)
    key = sshd.new_client_key("locked", passphrase=passphrase)
    key_body = [line for line in key.read_text().splitlines() if not line.startswith("-----")]
    config = tmp_path / "opsloop.toml"
    config.write_text(
        textwrap.dedent(f"""
        [ssh]
        identity_file = "{key}"
        known_hosts = "{sshd.known_hosts}"
        [[hosts]]
        name = "web-03"
        address = "127.0.0.1"
        port = {sshd.port}
        [[hosts]]
        name = "web-04"
        address = "127.0.0.1"
        port = {sshd.port}
        passphrase_env = "WEB04_PASSPHRASE"
    """)
    )
    caplog.set_level(logging.DEBUG)
    settings = load_settings(config, env={"OPSLOOP_SSH_PASSPHRASE": passphrase, "WEB04_PASSPHRASE": "wrong"})
    hosts = settings.reaches["ssh"]
    pool = SshPool(hosts.inventory, hosts.credentials)
    closing.append(pool)
    web03, web04 = hosts.inventory.get("web-03"), hosts.inventory.get("web-04")
    assert web03 is not None and web04 is not None
    assert (await pool.run(web03, ["echo", "unlocked"], timeout_s=10)).stdout == "unlocked\n"
    with pytest.raises(SshError) as wrong:
        await pool.run(web04, ["true"], timeout_s=10)
    assert str(wrong.value) == (
        f"web-04: auth failed: identity file {key}: the passphrase in $WEB04_PASSPHRASE does not decrypt it"
    )
    bare = SshPool(load_settings(config, env={}).reaches["ssh"].inventory)
    closing.append(bare)
    with pytest.raises(SshError) as unset:
        await bare.run(web03, ["true"], timeout_s=10)
    assert str(unset.value) == (
        f"web-03: auth failed: identity file {key}: it is encrypted and $OPSLOOP_SSH_PASSPHRASE is not set"
    )
    shown = "\n".join(
        [
            caplog.text,
            repr(settings),
            str(settings),
            str(wrong.value),
            repr(wrong.value),
            str(unset.value),
            repr(pool.credentials),
        ]
    )
    assert "ssh.connected host=web-03" in caplog.text  # the log was captured, at DEBUG, asyncssh's included
    assert passphrase not in shown and "correct horse" not in shown
    assert not any(line in shown for line in key_body)


# -- the inventory ------------------------------------------------------------------------------


def inventory() -> Inventory:
    return Inventory(
        SshSettings(),
        (
            Host(name="bastion", address="bastion.corp.example", groups=("infra",)),
            Host(name="web-01", address="10.0.3.6", jump="bastion", groups=("web", "prod")),
            Host(name="web-02", address="10.0.3.7", port=2222, jump="bastion", groups=("web", "prod")),
            Host(name="db-01", address="10.0.4.2", jump="web-01", groups=("db",)),
        ),
    )


def test_names_outside_the_inventory_are_refused_naming_the_closest() -> None:
    inv = inventory()
    assert inv.resolve("web-02") == inv.get("web-02")
    assert inv.resolve("localhost") is None and inv.resolve("127.0.0.1") is None
    with pytest.raises(ToolError) as e:
        inv.resolve("web-1")
    assert str(e.value) == (
        "'web-1' is not in the host inventory (closest: web-01, web-02); opsloop connects only "
        "to inventory hosts, and list_hosts lists them"
    )
    with pytest.raises(ToolError, match="it is the address of 'web-02': use host='web-02'"):
        inv.resolve("10.0.3.7")
    with pytest.raises(ToolError, match=r"'evil.example' is not in the host inventory \(known: bastion, web-01"):
        inv.resolve("evil.example")
    with pytest.raises(ToolError, match="no \\[\\[hosts\\]\\] are configured, so only 'self'"):
        Inventory().resolve("web-01")


async def test_the_pool_never_connects_to_a_host_built_outside_the_inventory(
    sshd: SshServer, closing: list[SshPool]
) -> None:
    pool = pool_for(host_for(sshd, "web-03"))
    closing.append(pool)
    with pytest.raises(ToolError, match="'evil' is not in the host inventory"):
        await pool.run(host_for(sshd, "evil"), ["true"], timeout_s=5)
    with pytest.raises(ToolError, match="'web-03' is not in the host inventory"):  # same name, other address
        await pool.run(dataclasses.replace(host_for(sshd, "web-03"), port=22), ["true"], timeout_s=5)
    assert "Connection from" not in sshd.log_text()


def test_the_jump_chain_is_resolved_outermost_first() -> None:
    inv = inventory()
    db = inv.get("db-01")
    assert db is not None
    assert [h.name for h in inv.chain(db)] == ["bastion", "web-01"]
    assert inv.via(db) == "bastion > web-01"


def test_load_hosts_reads_defaults_and_overrides(tmp_path: Path) -> None:
    ssh, hosts = load_hosts(
        {
            "ssh": {
                "user": "opsloop",
                "identity_file": "keys/id",
                "known_hosts": "/etc/opsloop/known_hosts",
                "connect_timeout_s": 5,
                "max_sessions_per_host": 2,
            },
            "hosts": [
                {"name": "bastion"},
                {
                    "name": "web-03",
                    "address": "10.0.3.7",
                    "port": 2222,
                    "user": "deploy",
                    "jump": "bastion",
                    "groups": ["web"],
                    "log_dirs": ["/var/log/", "/srv/app/logs"],
                    "restart_allowlist": ["nginx.service"],
                    "passphrase_env": "WEB_KEY_PASS",
                },
            ],
            "tools": {"ignored": True},
        },
        base_dir=tmp_path,
    )
    assert ssh == SshSettings(
        user="opsloop",
        identity_file=tmp_path / "keys/id",
        known_hosts=Path("/etc/opsloop/known_hosts"),
        connect_timeout_s=5.0,
        max_sessions_per_host=2,
    )
    assert hosts == (
        Host(name="bastion", address="bastion"),
        Host(
            name="web-03",
            address="10.0.3.7",
            port=2222,
            user="deploy",
            jump="bastion",
            groups=("web",),
            log_dirs=("/var/log", "/srv/app/logs"),
            restart_allowlist=("nginx.service",),
            passphrase_env="WEB_KEY_PASS",
        ),
    )
    inv = Inventory(ssh, hosts)
    assert inv.login(hosts[1]).user == "deploy" and inv.login(hosts[0]).user == "opsloop"
    assert inv.passphrase_envs() == ("OPSLOOP_SSH_PASSPHRASE", "WEB_KEY_PASS")


def test_load_hosts_names_every_problem() -> None:
    with pytest.raises(HostsConfigError) as e:
        load_hosts(
            {
                "ssh": {"user": "ops", "agent": "yes", "max_sessions_per_host": 0},
                "hosts": [
                    {"name": "a", "jump": "b"},
                    {"name": "b", "jump": "a"},
                    {"name": "web", "jump": "bastoin", "port": 70000, "colour": "red"},
                    {"name": "web"},
                    {"name": "localhost"},
                    {"address": "10.0.0.1"},
                    {"name": "c", "address": "-oProxyCommand=evil", "log_dirs": ["var/log"]},
                    {"name": "bastion"},
                ],
            }
        )
    assert e.value.problems == [
        "ssh.agent: unknown key (known: user, identity_file, known_hosts, connect_timeout_s, max_sessions_per_host, "
        "passphrase_env, idle_timeout_s, fail_fast_s)",
        "ssh.max_sessions_per_host: expected an integer from 1 to 64, got 0",
        "hosts[2].colour: unknown key (known: name, address, port, user, identity_file, known_hosts, "
        "connect_timeout_s, jump, groups, log_dirs, restart_allowlist, journal_dir, passphrase_env, read_dirs, "
        "usage_dirs)",
        "hosts[2].port: expected an integer from 1 to 65535, got 70000",
        "hosts[5]: missing required key 'name'",
        "hosts[6].address: '-oProxyCommand=evil' is not a host name or IP address",
        "hosts[6].log_dirs[0]: 'var/log' must be an absolute path on that host",
        "hosts[3].name: duplicate host name 'web' (also hosts[2])",
        "hosts[4].name: 'localhost' is reserved for the machine opsloop runs on",
        "hosts[0].jump: the jump chain loops: a > b > a",
        "hosts[1].jump: the jump chain loops: b > a > b",
        "hosts[2].jump: 'bastoin' is not the name of a [[hosts]] entry (did you mean 'bastion'?)",
    ]


def test_opsloop_config_accepts_ssh_and_hosts_and_reports_their_problems(tmp_path: Path) -> None:
    config = tmp_path / "opsloop.toml"
    config.write_text('[ssh]\nuser = "opsloop"\n[[hosts]]\nname = "web-03"\naddress = "10.0.3.7"\n')
    inventory = load_settings(config, env={}).reaches["ssh"].inventory
    assert inventory.names == ("web-03",) and inventory.ssh.user == "opsloop"
    config.write_text('[ssh]\nusr = "opsloop"\n[[hosts]]\nname = "web-03"\njump = "nope"\n')
    with pytest.raises(ConfigError) as e:
        load_settings(config, env={})
    assert e.value.problems == [
        "ssh.usr: unknown key (known: user, identity_file, known_hosts, connect_timeout_s, max_sessions_per_host, "
        "passphrase_env, idle_timeout_s, fail_fast_s)",
        "hosts[0].jump: 'nope' is not the name of a [[hosts]] entry",
    ]


# -- list_hosts ---------------------------------------------------------------------------------


async def test_list_hosts_lists_the_inventory_with_groups_address_and_jump() -> None:
    registry = await build_registry({}, reaches={"ssh": SshHosts(inventory())})
    try:
        list_hosts = registry.get("list_hosts")
        assert list_hosts is not None
        assert await list_hosts.run({}) == textwrap.dedent("""\
            4 of 4 inventory hosts; localhost is the machine opsloop runs on (no SSH)
            name     address               via               groups
            bastion  bastion.corp.example  -                 infra
            web-01   10.0.3.6              bastion           web, prod
            web-02   10.0.3.7:2222         bastion           web, prod
            db-01    10.0.4.2              bastion > web-01  db""")
        assert (await list_hosts.run({"group": "db"})).splitlines()[0] == (
            "1 of 4 inventory hosts in group 'db'; localhost is the machine opsloop runs on (no SSH)"
        )
        assert await list_hosts.run({"group": "nope"}) == (
            "no host is in group 'nope' (groups: db, infra, prod, web); localhost is the machine opsloop runs on "
            "(no SSH)"
        )
    finally:
        await registry.aclose()
    bare = await build_registry({})
    tool = bare.get("list_hosts")
    assert tool is not None
    assert await tool.run({}) == (
        "no [[hosts]] are configured: localhost is the machine opsloop runs on (no SSH) "
        "and the only host the host tools can reach"
    )


async def test_an_argument_with_a_nul_byte_is_refused_before_any_connection(
    sshd: SshServer, closing: list[SshPool]
) -> None:
    host = host_for(sshd)
    pool = pool_for(host)
    closing.append(pool)
    with pytest.raises(ToolError, match="web-03: remote_command: every argument must be a string without NUL"):
        await pool.run(host, ["cat", "/var/log/syslog\0/etc/shadow"], timeout_s=5)
    assert "Connection from" not in sshd.log_text()


def test_a_missing_host_names_at_most_ten_of_a_large_inventory_and_where_the_rest_are() -> None:
    inventory = Inventory(SshSettings(), tuple(Host(name=f"web-{i:02d}") for i in range(1, 13)))
    assert inventory.described() == (
        "one of the inventory's 12 hosts (web-01, web-02, web-03, web-04, web-05, web-06, web-07, web-08, web-09, "
        "web-10 and 2 more (list_hosts lists them)) or 'self' (the machine opsloop runs on)"
    )
    small = Inventory(SshSettings(), (Host(name="web-01"), Host(name="db-01")))
    assert small.described() == "one of the inventory's 2 hosts (web-01, db-01) or 'self' (the machine opsloop runs on)"
