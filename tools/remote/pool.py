"""SSH connections to inventory hosts: one per host, shared by every call and run, closed after idling.

`SshPool.run(host, argv, timeout_s=…, max_bytes=…)` runs one fixed command (tools.remote.command) over the
host's connection and returns its exit status and bounded output. Per host: at most `max_sessions_per_host`
sessions at once (a semaphore), a connection made on first use and again after it dropped, a short circuit
breaker (a host that just failed to connect fails at once with the same error for `fail_fast_s`), and a
jump chain through `jump` hosts (asyncssh `tunnel=`, over their own pooled connections).

Host keys are always checked against the host's known_hosts file, read by us on every connect (a missing
file is an empty one: every key unknown). An unknown or changed key is an SshError naming the host and the
offered key's fingerprint; there is no "accept new". The user's ~/.ssh/config is never read (a HostName or
ProxyCommand in it could send a connection somewhere the inventory does not name).

Every failure is an SshError (a ToolError: the model gets it as a tool error) with a `Failure` category
that `opsloop check` prints. Messages are ours: no key material or passphrase can reach them.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import pwd
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from bot.core.errors import OpsloopError
from tools.api import ToolError
from tools.remote.command import KILLED_BY_TIMEOUT, Result, remote_command
from tools.remote.inventory import Host, Inventory, Login, SshCredentials

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 64_000
KEEPALIVE_S = 15.0  # a connection that stops answering is noticed within 3 of these
# AES-GCM before ChaCha20-Poly1305 (asyncssh's default order): asyncssh builds four cipher contexts a packet for
# ChaCha20 and makes one AEAD call for AES-GCM, which CPUs with AES instructions run in hardware. Both are
# AEAD ciphers every OpenSSH since 6.5 offers; the CTR ones stay last for older servers.
ENCRYPTION_ALGS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
)
SESSION_RETRY_S = (0.05, 0.1, 0.2, 0.4, 0.8)  # waits before asking again for a session sshd refused
# OpenSSH answers a session it has no slot for with "open failed" (connect failed); others may say these.
_SESSION_REFUSED_CODES = (
    asyncssh.OPEN_CONNECT_FAILED,
    asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
    asyncssh.OPEN_RESOURCE_SHORTAGE,
)


class Failure(enum.StrEnum):
    """What went wrong reaching a host, in the words `opsloop check` prints."""

    OK = "ok"
    AUTH = "auth failed"
    HOST_KEY_UNKNOWN = "host key unknown"
    HOST_KEY_MISMATCH = "host key mismatch"
    TIMEOUT = "timeout"
    DNS = "DNS"
    REFUSED = "connection refused"
    UNREACHABLE = "unreachable"
    DROPPED = "connection dropped"
    PROTOCOL = "ssh error"


class SshError(ToolError):
    """A host could not be reached, or a call on it failed; `failure` says how, the message says all."""

    def __init__(
        self, host: str, failure: Failure, message: str, *, fingerprint: str | None = None, keyscan: str | None = None
    ) -> None:
        super().__init__(f"{host}: {failure.value}: {message}")
        self.host = host
        self.failure = failure
        self.detail = message
        self.fingerprint = fingerprint  # the offered host key's SHA256 fingerprint (host key errors)
        self.keyscan = keyscan  # the ssh-keyscan command to fetch an unknown key for verification


@dataclass(frozen=True)
class ProbeResult:
    """One row of `opsloop check`'s host table."""

    host: str
    address: str
    via: str
    failure: Failure
    detail: str = ""
    fingerprint: str | None = None
    keyscan: str | None = None
    ms: float | None = None

    @property
    def ok(self) -> bool:
        return self.failure is Failure.OK


class _Client(asyncssh.SSHClient):
    """Remembers the host key the server offered when it was not trusted, and tells the link about a drop."""

    def __init__(self, link: _Link) -> None:
        self.link = link
        self.offered: asyncssh.SSHKey | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        self.offered = key
        return False  # known_hosts is the only trust there is

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.lost(self)


@dataclass(eq=False)
class _Link:
    """A host's connection state: the connection, its session slots, who is using it, its last failure."""

    host: Host
    sessions: asyncio.Semaphore
    connecting: asyncio.Lock = field(default_factory=asyncio.Lock)
    conn: asyncssh.SSHClientConnection | None = None
    client: _Client | None = None
    via: _Link | None = None  # the jump link this connection tunnels through (held while it is open)
    users: int = 0  # sessions running on it plus connections tunnelled through it
    idle_timer: asyncio.TimerHandle | None = None
    failed: SshError | None = None
    failed_at: float = 0.0
    connects: int = 0  # connections made so far (tests and the benchmark count them)
    idle_s: float = 300.0

    def live(self) -> asyncssh.SSHClientConnection | None:
        if self.conn is not None and self.conn.is_closed():
            self.conn = None
        return self.conn

    def hold(self) -> None:
        self.users += 1
        self.stop_idle_timer()

    def stop_idle_timer(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    def release(self) -> None:
        self.users -= 1
        if self.users == 0 and self.conn is not None:
            self.idle_timer = asyncio.get_running_loop().call_later(self.idle_s, self.close_idle)

    def close_idle(self) -> None:
        self.idle_timer = None
        if self.users == 0 and self.conn is not None:
            log.info("ssh.idle_close host=%s", self.host.name)
            self.conn.close()  # connection_lost follows, which releases the jump link

    def lost(self, client: _Client) -> None:
        """The connection made with `client` closed (idle, dropped, or pool closing)."""
        if client is not self.client:
            return
        self.conn = None
        self.client = None
        self.stop_idle_timer()
        if self.via is not None:
            via, self.via = self.via, None
            via.release()


class _NotStarted(OpsloopError):
    """The session could not be opened on a connection that had died: safe to reconnect and retry once."""


class _SessionRefused(OpsloopError):
    """sshd refused a session ("no more sessions"): it frees a closed session's slot a moment after the close
    (once it has reaped the child), so a session opened right after another ended can find every slot taken."""


class SshPool:
    """Connections to the inventory's hosts. Create it in the event loop that uses it; `await close()` at the end."""

    def __init__(
        self, inventory: Inventory, credentials: SshCredentials | None = None, *, grace_s: float = 2.0
    ) -> None:
        self.inventory = inventory
        self.credentials = credentials or SshCredentials()
        self.grace_s = grace_s  # opsloop's own timeout is the host's plus this, then the channel is closed
        self._links: dict[str, _Link] = {}
        self._keys: dict[tuple[Path, str | None], asyncssh.SSHKey] = {}
        self._closed = False

    def __getstate__(self) -> Any:
        raise TypeError("an SSH pool holds live connections: it stays in the process that opened it")

    # -- the API -----------------------------------------------------------------------------

    async def run(
        self, host: Host, argv: Sequence[str], *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> Result:
        """Run `argv` (a fixed program and its arguments, each quoted here) on `host`, bounded on the host."""
        try:
            command = remote_command(argv, timeout_s=timeout_s, max_bytes=max_bytes)
        except ValueError as e:
            raise ToolError(f"{host.name}: {e}") from None
        link = self._link(host)
        async with link.sessions:
            link.hold()
            try:
                reconnected = False
                waits = iter(SESSION_RETRY_S)
                while True:
                    conn = await self._connection(link)
                    try:
                        return await self._exec(link, conn, command, argv, timeout_s, max_bytes)
                    except _NotStarted as e:
                        conn.close()
                        if reconnected:
                            raise SshError(
                                host.name, Failure.DROPPED, f"could not open a session: {e}; the next call reconnects"
                            ) from None
                        reconnected = True
                        log.info("ssh.reconnect host=%s reason=%s", host.name, e)
                    except _SessionRefused as e:
                        if (wait := next(waits, None)) is None:
                            limit = self.inventory.ssh.max_sessions_per_host
                            raise SshError(
                                host.name,
                                Failure.PROTOCOL,
                                f"the server refused a session: {e} (is its MaxSessions below "
                                f"max_sessions_per_host = {limit}?)",
                            ) from None
                        await asyncio.sleep(wait)
            finally:
                link.release()

    async def probe(self, host: Host) -> ProbeResult:
        """Connect to `host` (or reuse its connection) and say how that went, for `opsloop check`."""
        start = time.monotonic()
        where: dict[str, Any] = {
            "host": host.name,
            "address": f"{host.address}:{host.port}",
            "via": self.inventory.via(host),
        }
        try:
            await self._connection(self._link(host))
        except SshError as e:
            return ProbeResult(
                **where, failure=e.failure, detail=e.detail, fingerprint=e.fingerprint, keyscan=e.keyscan
            )
        return ProbeResult(**where, failure=Failure.OK, ms=(time.monotonic() - start) * 1000)

    async def probe_all(self, hosts: Iterable[Host] | None = None, *, concurrency: int = 8) -> list[ProbeResult]:
        """`probe` every host (default: the whole inventory), at most `concurrency` at once, in inventory order."""
        gate = asyncio.Semaphore(concurrency)

        async def one(h: Host) -> ProbeResult:
            async with gate:
                return await self.probe(h)

        return list(await asyncio.gather(*(one(h) for h in (self.inventory if hosts is None else hosts))))

    def connections_made(self, host: Host) -> int:
        """How many SSH connections the pool opened to `host` so far."""
        link = self._links.get(host.name)
        return link.connects if link else 0

    async def close(self) -> None:
        """Close every connection (the registry calls this on shutdown)."""
        self._closed = True
        conns = [link.conn for link in self._links.values() if link.conn is not None]
        for link in self._links.values():
            link.stop_idle_timer()
        for conn in conns:
            conn.close()
        for conn in conns:
            try:
                async with asyncio.timeout(5):
                    await conn.wait_closed()
            except TimeoutError:  # a peer that never acknowledges: drop the socket
                conn.abort()

    # -- connections -------------------------------------------------------------------------

    def _link(self, host: Host) -> _Link:
        link = self._links.get(host.name)
        if link is None:
            if self.inventory.get(host.name) != host:
                raise ToolError(f"{host.name!r} is not in the host inventory")  # never a host built elsewhere
            ssh = self.inventory.ssh
            link = _Link(host=host, sessions=asyncio.Semaphore(ssh.max_sessions_per_host), idle_s=ssh.idle_timeout_s)
            self._links[host.name] = link
        return link

    async def _connection(self, link: _Link) -> asyncssh.SSHClientConnection:
        """The link's open connection, made now if needed; fails fast while a recent connect failure stands."""
        if (conn := link.live()) is not None:
            return conn
        if self._closed:
            raise SshError(link.host.name, Failure.DROPPED, "opsloop is shutting down")
        async with link.connecting:
            if (conn := link.live()) is not None:
                return conn
            fail_fast_s = self.inventory.ssh.fail_fast_s
            if link.failed is not None:
                ago = time.monotonic() - link.failed_at
                if ago < fail_fast_s:
                    e = link.failed
                    raise SshError(
                        e.host,
                        e.failure,
                        f"{e.detail} (failed {ago:.0f}s ago; opsloop tries again in {fail_fast_s - ago:.0f}s)",
                        fingerprint=e.fingerprint,
                        keyscan=e.keyscan,
                    )
            try:
                conn = await self._connect(link)
            except SshError as e:
                link.failed, link.failed_at = e, time.monotonic()
                log.warning(
                    "ssh.connect_failed host=%s failure=%s detail=%s", link.host.name, e.failure.value, e.detail
                )
                raise
            link.failed = None
            return conn

    async def _connect(self, link: _Link) -> asyncssh.SSHClientConnection:
        host = link.host
        login = self.inventory.login(host)
        started = time.monotonic()
        via: _Link | None = None
        tunnel: asyncssh.SSHClientConnection | None = None
        if host.jump is not None:
            jump = self.inventory.get(host.jump)
            assert jump is not None  # the inventory checked every jump
            via = self._link(jump)
            try:
                tunnel = await self._connection(via)
            except SshError as e:
                raise SshError(
                    host.name, e.failure, f"through jump host {e}", fingerprint=e.fingerprint, keyscan=e.keyscan
                ) from None
            via.hold()  # the jump connection stays open while this one runs through it
        client = _Client(link)
        try:
            keys = await self._client_keys(host, login)
            known_hosts = _read_known_hosts(login.known_hosts)
            options: dict[str, Any] = {}
            if tunnel is not None:
                options["tunnel"] = tunnel
            async with asyncio.timeout(login.connect_timeout_s):
                conn = await asyncssh.connect(
                    login.address,
                    login.port,
                    client_factory=lambda: client,
                    username=login.user or _local_user(),
                    known_hosts=known_hosts,  # always a loaded file: None would switch checking off
                    x509_trusted_certs=None,
                    config=[],  # never ~/.ssh/config
                    client_keys=keys,
                    agent_path=self.credentials.agent_path if keys == () else None,
                    passphrase=None,
                    password_auth=False,
                    kbdint_auth=False,
                    host_based_auth=False,
                    gss_host=None,
                    connect_timeout=login.connect_timeout_s,
                    login_timeout=login.connect_timeout_s,
                    keepalive_interval=KEEPALIVE_S,
                    keepalive_count_max=3,
                    encryption_algs=ENCRYPTION_ALGS,
                    **options,
                )
        except BaseException as e:
            if via is not None:
                via.release()
            if isinstance(e, SshError):
                raise
            if isinstance(e, Exception):
                raise _classify(
                    e, host, login, client, known_hosts_path=login.known_hosts, via=self.inventory.via(host)
                ) from None
            raise
        link.conn, link.client, link.via = conn, client, via
        link.connects += 1
        log.info(
            "ssh.connected host=%s address=%s port=%d via=%s ms=%.0f",
            host.name,
            login.address,
            login.port,
            self.inventory.via(host) or "-",
            (time.monotonic() - started) * 1000,
        )
        return conn

    async def _client_keys(self, host: Host, login: Login) -> Any:
        """The identity file's key, decrypted with its passphrase from the environment; () = agent + defaults."""
        if login.identity_file is None:
            return ()
        passphrase = self.credentials.passphrases.get(login.passphrase_env) or None
        cache_key = (login.identity_file, passphrase)
        if cache_key not in self._keys:
            path = login.identity_file
            try:
                self._keys[cache_key] = await asyncio.to_thread(asyncssh.read_private_key, path, passphrase)
            except OSError as e:
                raise SshError(host.name, Failure.AUTH, f"cannot read identity file {path}: {e.strerror}") from None
            except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as e:
                # Our words only: an import error's own text is not shown (it could quote the file).
                if "passphrase" in str(e).lower() and passphrase is None:
                    why = f"it is encrypted and ${login.passphrase_env} is not set"
                elif "passphrase" in str(e).lower():
                    why = f"the passphrase in ${login.passphrase_env} does not decrypt it"
                else:
                    why = "it is not a private key opsloop can read"
                raise SshError(host.name, Failure.AUTH, f"identity file {path}: {why}") from None
        return [self._keys[cache_key]]

    # -- one command -------------------------------------------------------------------------

    async def _exec(
        self,
        link: _Link,
        conn: asyncssh.SSHClientConnection,
        command: str,
        argv: Sequence[str],
        timeout_s: float,
        max_bytes: int,
    ) -> Result:
        name = link.host.name
        started = time.monotonic()
        try:
            process = await conn.create_process(command, encoding=None, stdin=asyncssh.DEVNULL, term_type=None)
        except (asyncssh.ChannelOpenError, asyncssh.DisconnectError, ConnectionError, OSError) as e:
            if conn.is_closed():
                raise _NotStarted(_reason(e)) from None
            if isinstance(e, asyncssh.ChannelOpenError) and e.code in _SESSION_REFUSED_CODES:
                raise _SessionRefused(_reason(e)) from None
            raise SshError(name, Failure.PROTOCOL, f"the server refused a session: {_reason(e)}") from None
        limit = timeout_s + self.grace_s
        try:
            async with asyncio.timeout(limit):
                done = await process.wait(check=False)
        except TimeoutError:
            raise SshError(
                name, Failure.TIMEOUT, f"{argv[0]} did not finish within {limit:g}s; opsloop closed its channel"
            ) from None
        except (asyncssh.DisconnectError, ConnectionError, OSError) as e:
            raise SshError(
                name,
                Failure.DROPPED,
                f"the connection dropped during {argv[0]}: {_reason(e)}; the next call reconnects",
            ) from None
        finally:
            process.close()
            # The server frees the session slot only once the close is done: wait (bounded) before the
            # semaphore lets the next session open, or sshd's MaxSessions can refuse it.
            with contextlib.suppress(TimeoutError, asyncssh.Error, OSError):
                async with asyncio.timeout(self.grace_s if self.grace_s > 0 else 1.0):
                    await process.wait_closed()
        elapsed = time.monotonic() - started
        if done.exit_status is None or done.exit_status < 0:
            if conn.is_closed() or link.live() is None:
                raise SshError(
                    name, Failure.DROPPED, f"the connection dropped during {argv[0]}; the next call reconnects"
                )
            signal = done.exit_signal[0] if done.exit_signal else "an unknown cause"
            raise SshError(name, Failure.PROTOCOL, f"{argv[0]} ended without an exit status ({signal})")
        if done.exit_status == KILLED_BY_TIMEOUT and elapsed >= timeout_s * 0.95:
            raise SshError(name, Failure.TIMEOUT, f"{argv[0]} ran past {timeout_s:g}s and was killed on the host")
        return Result.of(done.exit_status, _as_bytes(done.stdout), _as_bytes(done.stderr), max_bytes)


# -- helpers ------------------------------------------------------------------------------------


def _as_bytes(value: Any) -> bytes:
    if value is None:
        return b""
    return value if isinstance(value, bytes) else str(value).encode()


def _local_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def _read_known_hosts(path: Path) -> asyncssh.SSHKnownHosts:
    """The host's known_hosts, read now (a missing file trusts nothing). Never None: that disables checking."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:  # missing or unreadable
        text = ""
    return asyncssh.import_known_hosts(text)


def _known_key_types(path: Path, login: Login) -> list[str]:
    """The key types known_hosts trusts for this host (empty: the host is unknown there)."""
    known = _read_known_hosts(path)
    port = login.port if login.port != 22 else None
    keys = known.match(login.address, login.address, port)[0]
    return [k.get_algorithm() for k in keys]


def _keyscan_type(key: asyncssh.SSHKey) -> str:
    algorithm = key.get_algorithm()
    kinds = (
        ("ssh-ed25519", "ed25519"),
        ("ssh-rsa", "rsa"),
        ("rsa-", "rsa"),
        ("ecdsa-", "ecdsa"),
        ("ssh-dss", "dsa"),
    )
    return next((kind for prefix, kind in kinds if algorithm.startswith(prefix)), algorithm)


def _reason(e: BaseException) -> str:
    reason = getattr(e, "reason", None) or str(e) or type(e).__name__
    return str(reason).strip().rstrip(".")


def _classify(e: Exception, host: Host, login: Login, client: _Client, *, known_hosts_path: Path, via: str) -> SshError:
    """A connect failure as an SshError with our own words (nothing from keys or passphrases)."""
    name = host.name
    where = f"{login.address}:{login.port}"
    if isinstance(e, asyncssh.HostKeyNotVerifiable) or (
        isinstance(e, asyncssh.KeyExchangeFailed) and _known_key_types(known_hosts_path, login)
    ):
        known = _known_key_types(known_hosts_path, login)
        offered = client.offered
        entry = f"[{login.address}]:{login.port}" if login.port != 22 else login.address
        if offered is None:
            return SshError(
                name,
                Failure.HOST_KEY_MISMATCH,
                f"{where} offered none of the key types {known_hosts_path} has for {entry} "
                f"({', '.join(known)}); opsloop does not connect",
            )
        fp = offered.get_fingerprint("sha256")
        kind = offered.get_algorithm()
        if known:
            return SshError(
                name,
                Failure.HOST_KEY_MISMATCH,
                f"{where} offered {kind} key {fp}, which is not the key {known_hosts_path} has for "
                f"{entry}; if the host was reinstalled, verify the new key and replace that entry "
                "(opsloop never accepts a changed key)",
                fingerprint=fp,
            )
        scan = f"ssh-keyscan -p {login.port} -t {_keyscan_type(offered)} {login.address}"
        on = f" (run it on {via}: {name} is reached through it)" if via else ""
        return SshError(
            name,
            Failure.HOST_KEY_UNKNOWN,
            f"{where} offered {kind} key {fp}, and {known_hosts_path} has no key for {entry}; "
            f"verify it, then add it with `{scan} >> {known_hosts_path}`{on} "
            "(opsloop never accepts a new key by itself)",
            fingerprint=fp,
            keyscan=scan,
        )
    if isinstance(e, asyncssh.PermissionDenied):
        identity = str(login.identity_file) if login.identity_file else "the ssh-agent's and ~/.ssh keys"
        return SshError(name, Failure.AUTH, f"{where} refused user {login.user or _local_user()!r} with {identity}")
    if isinstance(e, TimeoutError):
        return SshError(name, Failure.TIMEOUT, f"no SSH session with {where} within {login.connect_timeout_s:g}s")
    if isinstance(e, socket.gaierror):
        return SshError(name, Failure.DNS, f"cannot resolve {login.address!r}: {e.strerror or e}")
    if isinstance(e, ConnectionRefusedError):
        return SshError(name, Failure.REFUSED, f"{where} refused the connection")
    if isinstance(e, asyncssh.ChannelOpenError):  # a jump host could not open the tunnel onwards
        reason = _reason(e)
        failure = Failure.REFUSED if "refused" in reason.lower() else Failure.UNREACHABLE
        return SshError(name, failure, f"the jump host {via} could not connect to {where}: {reason}")
    if isinstance(e, asyncssh.ConnectionLost):
        return SshError(name, Failure.DROPPED, f"{where} closed the connection during the handshake")
    if isinstance(e, asyncssh.DisconnectError):
        return SshError(name, Failure.PROTOCOL, f"{where}: {_reason(e)}")
    if isinstance(e, OSError):
        return SshError(name, Failure.UNREACHABLE, f"cannot connect to {where}: {e.strerror or _reason(e)}")
    return SshError(name, Failure.PROTOCOL, f"{where}: {type(e).__name__}")


__all__ = ["DEFAULT_MAX_BYTES", "Failure", "ProbeResult", "Result", "SshError", "SshPool"]
