"""The host inventory: [ssh] defaults and [[hosts]] entries, checked, and the only names opsloop may connect to.

`read_hosts(config)` reads the two tables out of the parsed TOML and returns (SshSettings, hosts), every problem
recorded on the reader with its location (`hosts[2].jump: …`). `Inventory` resolves the
name a model gave to a Host (None: this machine, `self`), or raises a ToolError naming the closest inventory names;
with hosts configured, no name at all is an error too, so a forgotten host never checks this machine silently.
Nothing here opens a connection; nothing outside the inventory can become one.
"""

from __future__ import annotations

import difflib
import posixpath
import re
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.config.reader import Reader, read, setting
from bot.core.errors import ConfigError
from tools.api import BadCall, some_names
from tools.reach import matching
from tools.systemd_units import unit_names

SELF = "self"  # this machine, the one opsloop runs on: no SSH; the host tools' default only without [[hosts]]
LOCALHOST = "localhost"  # accepted for SELF, like the loopback addresses
LOCAL_ALIASES = (SELF, LOCALHOST, "127.0.0.1", "::1")
NAMED_HOSTS_MAX = 10  # an error names up to this many inventory hosts
HOST_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_ADDRESS_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:%-]*")  # a DNS name, IPv4 or IPv6 literal; never an option


class HostsConfigError(ConfigError):
    """[ssh] or [[hosts]] is wrong: every problem, one per line, each starting with its location."""


_user = matching(re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*\$?"), "is not a user name")
_host_name = matching(HOST_NAME_RE, "must be letters, digits, '.', '_' or '-' (at most 63)")
_address = matching(_ADDRESS_RE, "is not a host name or IP address")  # None: the host's name is its address


def _log_dirs(dirs: tuple[str, ...], r: Reader, key: str) -> tuple[str, ...]:
    if not dirs:
        r.problem("must name at least one directory", key)
    return _paths(dirs, r, key)


def _absolute(path: str, r: Reader, key: str) -> str:
    if not path.startswith("/"):
        r.problem(f"{path!r} must be an absolute path on that host", key)
    return posixpath.normpath(path)


def _paths(paths: tuple[str, ...], r: Reader, key: str) -> tuple[str, ...]:
    checked = (_absolute(p, r, f"{key}[{i}]") for i, p in enumerate(paths))
    return tuple(p for p in checked if p.startswith("/"))


@dataclass(frozen=True, kw_only=True)
class SshSettings:
    """[ssh]: the defaults every [[hosts]] entry inherits, and the pool's own knobs."""

    user: str | None = setting(None, "None: the user opsloop runs as", check=_user)
    identity_file: Path | None = setting(None, "None: the ssh-agent (and ~/.ssh/id_*), as ssh does")
    known_hosts: Path = setting(
        doc="the host keys opsloop trusts", factory=lambda: Path("~/.ssh/known_hosts").expanduser()
    )
    connect_timeout_s: float = setting(10.0, "a login that takes longer fails", unit="s")
    max_sessions_per_host: int = setting(4, "commands at once on one connection", low=1, high=64)
    passphrase_env: str = setting(
        "OPSLOOP_SSH_PASSPHRASE", "the variable holding the identity's passphrase", kind="env_name"
    )
    idle_timeout_s: float = setting(300.0, "a connection nobody used this long is closed", unit="s")
    fail_fast_s: float = setting(
        15.0, "after a failed connect, calls fail at once with that error this long", unit="s", zero_ok=True
    )


@dataclass(frozen=True, kw_only=True)
class Host:
    """One [[hosts]] entry. None in an override field means "as [ssh] says"; log_dirs/restart_allowlist None
    means "as [tools.logs] / [tools.services] say", read_dirs/usage_dirs None "as [tools.files] says"."""

    name: str = setting(doc="the inventory name the model uses", check=_host_name)
    address: str = setting("", "DNS name or IP address; empty: the name", check=_address)
    port: int = setting(22, "the SSH port", low=1, high=65535)
    user: str | None = setting(None, "overrides [ssh] user", check=_user)
    identity_file: Path | None = setting(None, "overrides [ssh] identity_file")
    known_hosts: Path | None = setting(None, "overrides [ssh] known_hosts")
    connect_timeout_s: float | None = setting(None, "overrides [ssh] connect_timeout_s", unit="s")
    jump: str | None = setting(None, "the [[hosts]] entry to go through (ProxyJump)")
    groups: tuple[str, ...] = setting((), "labels to pick hosts by")
    log_dirs: tuple[str, ...] | None = setting(None, "absolute paths on that host", check=_log_dirs)
    restart_allowlist: tuple[str, ...] | None = setting(
        None, "units restart_service may restart there", check=unit_names
    )
    journal_dir: str | None = setting(
        None, "journal files journalctl reads there; None: its system journal", check=_absolute
    )
    passphrase_env: str | None = setting(None, "overrides [ssh] passphrase_env", kind="env_name")
    read_dirs: tuple[str, ...] | None = setting(None, "overrides [tools.files] read_dirs", check=_paths)
    usage_dirs: tuple[str, ...] | None = setting(None, "overrides [tools.files] usage_dirs", check=_paths)

    def __post_init__(self) -> None:
        if not self.address:
            object.__setattr__(self, "address", self.name)


@dataclass(frozen=True, kw_only=True)
class Login:
    """How to log in to one host: its entry with the [ssh] defaults filled in."""

    address: str
    port: int
    user: str | None
    identity_file: Path | None
    known_hosts: Path
    connect_timeout_s: float
    passphrase_env: str


@dataclass(frozen=True)
class SshCredentials:
    """Secrets the pool needs, resolved by the SSH reach from the environment: passphrases by variable name."""

    passphrases: Mapping[str, str] = field(default_factory=dict)
    agent_path: str | None = None  # SSH_AUTH_SOCK: used when no identity_file is set

    def __repr__(self) -> str:
        return f"SshCredentials(passphrases=<{len(self.passphrases)} set>, agent={'yes' if self.agent_path else 'no'})"


@dataclass(frozen=True)
class Inventory:
    """The hosts opsloop may reach; a name not in it (or an address) is refused without any connection."""

    ssh: SshSettings = field(default_factory=SshSettings)
    hosts: tuple[Host, ...] = ()

    def __post_init__(self) -> None:
        problems = _check_names_and_jumps(list(enumerate(self.hosts)))
        if problems:
            raise HostsConfigError(problems)

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)

    def get(self, name: str) -> Host | None:
        return next((h for h in self.hosts if h.name == name), None)

    def resolve(self, name: str | None) -> Host | None:
        """The inventory host called `name`; None for this machine (`self`, or no name when no [[hosts]] are
        configured); ToolError for anything else, no name with [[hosts]] configured included."""
        name = (name or "").strip()
        if not name:
            if self.hosts:
                raise BadCall(f"host is required: {self.described()}")
            return None
        if (host := self.get(name)) is not None:
            return host
        if name.lower() in LOCAL_ALIASES or name in (own := socket.gethostname(), own.split(".")[0]):
            return None
        raise BadCall(self._unknown(name))

    def described(self) -> str:
        """The hosts a host tool can be given, in one bounded line (up to NAMED_HOSTS_MAX inventory names)."""
        shown = some_names(self.names, NAMED_HOSTS_MAX)
        rest = " (list_hosts lists them)" if len(self) > NAMED_HOSTS_MAX else ""
        own = f"{SELF!r} (the machine opsloop runs on)"
        return f"one of the inventory's {len(self)} hosts ({shown}{rest}) or {own}" if self.hosts else own

    def _unknown(self, name: str) -> str:
        if not self.hosts:
            return (
                f"{name!r} is not a host opsloop can reach: no [[hosts]] are configured, so only "
                f"{SELF!r} (the machine opsloop runs on) is available"
            )
        by_address = [h.name for h in self.hosts if h.address == name]
        if by_address:
            return (
                f"{name!r} is not an inventory name; it is the address of {by_address[0]!r}: use host={by_address[0]!r}"
            )
        candidates = [*self.names, SELF]
        close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.7)
        hint = f"closest: {', '.join(close)}" if close else f"known: {', '.join(candidates[:NAMED_HOSTS_MAX])}"
        return (
            f"{name!r} is not in the host inventory ({hint}); opsloop connects only to inventory hosts, "
            "and list_hosts lists them"
        )

    def chain(self, host: Host) -> tuple[Host, ...]:
        """The jump hosts to go through to reach `host`, outermost first (empty: direct)."""
        hops: list[Host] = []
        while host.jump is not None and (jump := self.get(host.jump)) is not None:  # each is: __post_init__ checked
            hops.insert(0, jump)
            host = jump
        return tuple(hops)

    def via(self, host: Host) -> str:
        """The jump chain as people write it ("bastion" or "edge > bastion"), or "" when direct."""
        return " > ".join(h.name for h in self.chain(host))

    def login(self, host: Host) -> Login:
        """`host`'s login with the [ssh] defaults filled in."""
        inherited = ("user", "identity_file", "known_hosts", "connect_timeout_s", "passphrase_env")
        own = {f: getattr(self.ssh, f) if (value := getattr(host, f)) is None else value for f in inherited}
        return Login(address=host.address, port=host.port, **own)

    def passphrase_envs(self) -> tuple[str, ...]:
        """Every environment variable a host's identity passphrase may come from (config reads them)."""
        names = [self.ssh.passphrase_env, *(h.passphrase_env for h in self.hosts if h.passphrase_env)]
        return tuple(dict.fromkeys(names))


def _check_names_and_jumps(hosts: Sequence[tuple[int, Host]]) -> list[str]:
    """Duplicate names, `self` or `localhost` taken, a jump to a missing host or in a cycle: one line each.

    `hosts` pairs each entry with its index in [[hosts]], for the locations in the messages."""
    problems: list[str] = []
    seen: dict[str, int] = {}
    for i, h in hosts:
        if h.name.lower() in LOCAL_ALIASES:
            problems.append(f"hosts[{i}].name: {h.name!r} is reserved for the machine opsloop runs on")
        if h.name in seen:
            problems.append(f"hosts[{i}].name: duplicate host name {h.name!r} (also hosts[{seen[h.name]}])")
        seen.setdefault(h.name, i)
    by_name = {h.name: h for _, h in hosts}
    for i, h in hosts:
        if h.jump is None:
            continue
        if h.jump not in by_name:
            close = difflib.get_close_matches(h.jump, list(by_name), n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"hosts[{i}].jump: {h.jump!r} is not the name of a [[hosts]] entry{hint}")
            continue
        path, current = [h.name], by_name[h.jump]
        while current.name not in path and current.jump in by_name:  # to a loop, or to the chain's end
            path.append(current.name)
            current = by_name[current.jump]
        if current.name in path:
            problems.append(f"hosts[{i}].jump: the jump chain loops: {' > '.join([*path, current.name])}")
    return problems


# -- loading from the parsed TOML ----------------------------------------------------------------


def read_hosts(config: Reader) -> tuple[SshSettings, tuple[Host, ...]]:
    """[ssh] and [[hosts]] read from the whole config, every problem recorded on `config`."""
    ssh = (read(SshSettings, config.at("ssh")) if config.has("ssh") else None) or SshSettings()
    hosts = [(int(entry.key or 0), host) for entry in config.items("hosts") if (host := read(Host, entry)) is not None]
    config.problems.extend(_check_names_and_jumps(hosts))
    return ssh, tuple(h for _, h in hosts)
