"""Which network targets an unattended tool may reach: public addresses, plus what [tools.http] allow opens.

Pure decisions (no I/O) except `resolve_host`, which resolves a name once through an injectable
resolver so the caller can pin the connection to the addresses that were checked.
"""

from __future__ import annotations

import asyncio
import enum
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from bot.core.errors import OpsloopError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]
"""`await resolver(host, port)` -> the addresses a name resolves to (raises OSError when it does not)."""


class AddressKind(enum.StrEnum):
    """What kind of address something is; the values read as `169.254.169.254 is a <value> address`."""

    PUBLIC = "public"
    UNSPECIFIED = "unspecified"
    LOOPBACK = "loopback"
    LINK_LOCAL = "link-local/cloud metadata"
    PRIVATE = "private (RFC 1918)"
    SHARED = "shared/CGNAT (100.64.0.0/10)"
    UNIQUE_LOCAL = "unique-local (fc00::/7)"
    SPECIAL = "special-purpose (IANA)"
    DOCUMENTATION = "documentation-only"
    MULTICAST = "multicast"
    RESERVED = "reserved"


def _nets(*pairs: tuple[str, AddressKind]) -> tuple[tuple[IPNetwork, AddressKind], ...]:
    return tuple((ipaddress.ip_network(n), kind) for n, kind in pairs)


K = AddressKind
# Our own table rather than ipaddress's is_private/is_global, whose lists change between Python patch releases.
_BLOCKED_V4 = _nets(
    ("0.0.0.0/8", K.UNSPECIFIED),
    ("10.0.0.0/8", K.PRIVATE),
    ("100.64.0.0/10", K.SHARED),
    ("127.0.0.0/8", K.LOOPBACK),
    ("169.254.0.0/16", K.LINK_LOCAL),
    ("172.16.0.0/12", K.PRIVATE),
    ("192.0.0.0/24", K.SPECIAL),
    ("192.0.2.0/24", K.DOCUMENTATION),
    ("192.88.99.0/24", K.RESERVED),
    ("192.168.0.0/16", K.PRIVATE),
    ("198.18.0.0/15", K.SPECIAL),
    ("198.51.100.0/24", K.DOCUMENTATION),
    ("203.0.113.0/24", K.DOCUMENTATION),
    ("224.0.0.0/4", K.MULTICAST),
    ("240.0.0.0/4", K.RESERVED),
)
_BLOCKED_V6 = _nets(
    ("::/128", K.UNSPECIFIED),
    ("::1/128", K.LOOPBACK),
    ("100::/64", K.RESERVED),
    ("64:ff9b:1::/48", K.SPECIAL),
    ("2001::/23", K.SPECIAL),
    ("2001:db8::/32", K.DOCUMENTATION),
    ("3fff::/20", K.DOCUMENTATION),
    ("fc00::/7", K.UNIQUE_LOCAL),
    ("fe80::/10", K.LINK_LOCAL),
    ("fec0::/10", K.RESERVED),
    ("ff00::/8", K.MULTICAST),
)
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIXTOFOUR = ipaddress.IPv6Network("2002::/16")

METADATA_ADDRESSES: dict[IPAddress, str] = {
    ipaddress.ip_address("169.254.169.254"): "cloud metadata endpoint (AWS, GCP, Azure, DigitalOcean, ...)",
    ipaddress.ip_address("169.254.170.2"): "AWS ECS task metadata endpoint",
    ipaddress.ip_address("fd00:ec2::254"): "AWS IPv6 metadata endpoint",
    ipaddress.ip_address("100.100.100.200"): "Alibaba Cloud metadata endpoint",
    ipaddress.ip_address("192.0.0.192"): "Oracle Cloud metadata endpoint",
}
# Names that reach a metadata service or this machine whatever DNS says; refused unless listed exactly in allow.
METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
_LOCAL_NAME = re.compile(r"(.+\.)?localhost")
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_NUMERIC_HOST = re.compile(r"[0-9a-fx.]+", re.IGNORECASE)
_NUMBER = re.compile(r"0x[0-9a-f]*|[0-9]+", re.IGNORECASE)


@dataclass(frozen=True)
class Classified:
    """An address's kind; `via` names the IPv4 address an IPv6 form carries when that decided it."""

    address: IPAddress
    kind: AddressKind
    via: str = ""

    @property
    def public(self) -> bool:
        return self.kind is AddressKind.PUBLIC

    @property
    def metadata(self) -> bool:
        """Link-local or a known cloud metadata address: never opened by a hostname entry alone."""
        return (
            self.kind is AddressKind.LINK_LOCAL
            or self.address in METADATA_ADDRESSES
            or (embedded_ipv4(self.address) in METADATA_ADDRESSES)
        )

    def describe(self) -> str:
        """'169.254.169.254 is a link-local/cloud metadata address'."""
        return f"{self._address()} is {self._kind()}"

    def noun(self) -> str:
        """'10.0.0.5, a private (RFC 1918) address' (for 'db.example resolves to ...')."""
        return f"{self._address()}, {self._kind()}"

    def _address(self) -> str:
        return f"{self.address} ({self.via})" if self.via else str(self.address)

    def _kind(self) -> str:
        article = "an" if self.kind is AddressKind.UNSPECIFIED else "a"
        v4 = embedded_ipv4(self.address)
        known = METADATA_ADDRESSES.get(self.address) or (METADATA_ADDRESSES.get(v4) if v4 else None)
        note = f" ({known})" if known and self.kind is not AddressKind.LINK_LOCAL else ""
        return f"{article} {self.kind.value} address{note}"


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, translated, compatible, NAT64, 6to4), if any."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip in _MAPPED or ip in _TRANSLATED or ip in _NAT64 or (ip in _COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _SIXTOFOUR:
        return ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)
    return None


_FORMS = (
    (_MAPPED, "IPv4-mapped"),
    (_TRANSLATED, "IPv4-translated"),
    (_NAT64, "NAT64"),
    (_SIXTOFOUR, "6to4"),
    (_COMPATIBLE, "IPv4-compatible"),
)


def classify(ip: IPAddress) -> Classified:
    """The kind of an address; an IPv6 form of an IPv4 address is the kind of that IPv4 address."""
    bare = ipaddress.ip_address(str(ip).split("%")[0])  # a zone id (fe80::1%eth0) does not change the kind
    table = _BLOCKED_V4 if isinstance(bare, ipaddress.IPv4Address) else _BLOCKED_V6
    for net, kind in table:
        if bare in net:
            return Classified(ip, kind)
    v4 = embedded_ipv4(bare)
    if v4 is not None:
        form = next(name for net, name in _FORMS if bare in net)
        inner = classify(v4)
        return Classified(ip, inner.kind, f"{form} {v4}") if not inner.public else Classified(ip, AddressKind.PUBLIC)
    if isinstance(bare, ipaddress.IPv6Address) and bare not in _GLOBAL_UNICAST_V6:
        return Classified(ip, AddressKind.RESERVED)
    return Classified(ip, AddressKind.PUBLIC)


# -- host spellings ------------------------------------------------------------------------------


def normal_name(host: str) -> str:
    """A hostname as compared: lower case, no trailing dot."""
    return host.lower().rstrip(".")


def parse_ip(host: str) -> IPAddress | None:
    """The address a URL host means, if it is one: IPv6, dotted quad, or a legacy IPv4 spelling
    (2130706433, 0177.0.0.1, 0x7f.1, 127.1) read the way browsers and inet_aton read them.
    None for a name; ValueError for something numeric that is no address (1.2.3.4.5, 256.1.1.1)."""
    text = host.strip("[]").replace("%25", "%")
    if ":" in text:
        return ipaddress.IPv6Address(text)
    text = text[:-1] if text.endswith(".") else text  # "127.0.0.1." is 127.0.0.1, as in browsers
    if not text or not _NUMERIC_HOST.fullmatch(text) or not _NUMBER.fullmatch(text.split(".")[-1]):
        return None  # a name (even one like "beef.cafe")
    parts = text.split(".")
    if len(parts) > 4 or not all(_NUMBER.fullmatch(p) for p in parts):
        raise ValueError(f"{host!r} is not a valid IPv4 address")
    try:
        numbers = [_number(p) for p in parts]
    except ValueError:
        raise ValueError(f"{host!r} is not a valid IPv4 address") from None
    last_max = 256 ** (5 - len(parts))
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= last_max:
        raise ValueError(f"{host!r} is not a valid IPv4 address")
    return ipaddress.IPv4Address(numbers[-1] + sum(n << (8 * (3 - i)) for i, n in enumerate(numbers[:-1])))


def _number(part: str) -> int:
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        if not set(part) <= set("01234567"):
            raise ValueError(f"{part!r} is not an octal number")
        return int(part, 8)
    return int(part)


# -- the allowlist -------------------------------------------------------------------------------


class AllowlistError(OpsloopError, ValueError):
    """One [tools.http] allow entry is wrong; `index` says which."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


@dataclass(frozen=True)
class HostAllowlist:
    """What an operator opened beyond public addresses: exact names, `*.suffix` patterns, addresses/CIDRs."""

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()  # ".example.com" for "*.example.com"
    networks: tuple[IPNetwork, ...] = ()

    def names_exactly(self, host: str) -> bool:
        return normal_name(host) in self.names

    def allows_name(self, host: str) -> bool:
        """Listed exactly, or under a `*.suffix` pattern (any depth; the bare suffix itself is not matched)."""
        name = normal_name(host)
        return name in self.names or any(name.endswith(s) for s in self.suffixes)

    def allows_address(self, ip: IPAddress) -> bool:
        """Inside a listed address/CIDR (an IPv4-mapped IPv6 address counts as its IPv4 address)."""
        bare = ipaddress.ip_address(str(ip).split("%")[0])
        candidates = [bare]
        if isinstance(bare, ipaddress.IPv6Address) and bare.ipv4_mapped is not None:
            candidates.append(bare.ipv4_mapped)
        return any(c.version == n.version and c in n for c in candidates for n in self.networks)


def parse_allowlist(entries: Iterable[str]) -> HostAllowlist:
    """[tools.http] allow as a HostAllowlist; AllowlistError(index, why) for the first bad entry."""
    names: set[str] = set()
    suffixes: list[str] = []
    networks: list[IPNetwork] = []
    for i, entry in enumerate(entries):
        try:
            kind, value = _allow_entry(entry)
        except ValueError as e:
            raise AllowlistError(i, str(e)) from None
        if kind == "name":
            names.add(value)
        elif kind == "suffix":
            suffixes.append(value)
        else:
            networks.append(ipaddress.ip_network(value))
    return HostAllowlist(names=frozenset(names), suffixes=tuple(suffixes), networks=tuple(networks))


def _allow_entry(entry: str) -> tuple[str, str]:
    text = entry.strip().lower()
    if "://" in text:
        raise ValueError(f"{entry!r} is a URL; give a hostname, an IP address or a CIDR (e.g. status.example.com)")
    if "/" in text or text.startswith("[") or text.count(":") > 1:
        try:
            return "network", str(ipaddress.ip_network(text.strip("[]")))
        except ValueError as e:
            what = "CIDR" if "/" in text else "IPv6 address"
            raise ValueError(f"{entry!r} is not a valid {what}: {e}") from None
    if ":" in text:
        raise ValueError(f"{entry!r}: a port is not part of an allow entry; give the host alone")
    try:
        ip = parse_ip(text)
    except ValueError:
        raise ValueError(f"{entry!r} is not a valid IPv4 address") from None
    if ip is not None:
        if str(ip) != text:
            raise ValueError(f"{entry!r}: write the address in standard form ({ip})")
        return "network", str(ipaddress.ip_network(text))
    wildcard = text.startswith("*.")
    name = normal_name(text[2:] if wildcard else text)
    if "*" in name:
        raise ValueError(f"{entry!r}: only a leading '*.' wildcard is supported (e.g. *.example.com)")
    try:
        name = name.encode("idna").decode("ascii")
    except UnicodeError:
        raise ValueError(f"{entry!r} is not a valid hostname") from None
    if not _HOSTNAME.fullmatch(name):
        raise ValueError(f"{entry!r} is not a hostname, an IP address or a CIDR")
    return ("suffix", "." + name) if wildcard else ("name", name)


# -- decisions -----------------------------------------------------------------------------------


class Refused(OpsloopError):
    """A target the policy does not let a tool reach; the message says why in words the model can act on."""


def address_refusal(ip: IPAddress, allow: HostAllowlist, *, trusted_name: bool = False) -> Classified | None:
    """Why `ip` is refused, or None: public, inside an allowed CIDR, or reached through a trusted
    (allowed) hostname — which opens every address except link-local/cloud metadata ones."""
    if allow.allows_address(ip):
        return None
    found = classify(ip)
    if found.public or (trusted_name and not found.metadata):
        return None
    return found


def check_name(host: str, allow: HostAllowlist) -> None:
    """Refuse metadata and localhost names before any DNS lookup (unless allow lists them exactly)."""
    name = normal_name(host)
    if allow.names_exactly(name):
        return
    if name in METADATA_NAMES:
        raise Refused(f"{name} is a cloud metadata name")
    if _LOCAL_NAME.fullmatch(name):
        raise Refused(f"{name} is a loopback name")


def check_host(host: str, allow: HostAllowlist) -> IPAddress | None:
    """The policy for a URL host without DNS: the address a literal means (after its checks), else None
    for a name that passed the name rules and still needs `resolve_host`."""
    try:
        ip = parse_ip(host)
    except ValueError as e:
        raise Refused(str(e)) from None
    if ip is None:
        check_name(host, allow)
        return None
    refusal = address_refusal(ip, allow)
    if refusal is None:
        return ip
    if isinstance(ip, ipaddress.IPv4Address) and host != str(ip):  # 2130706433, 0177.0.0.1 ...
        raise Refused(f"{host} means {refusal.noun()}")
    raise Refused(refusal.describe())


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The operating system's answer for `host` (getaddrinfo, TCP), in its order, without duplicates."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_ADDRCONFIG
    )
    return list(dict.fromkeys(ipaddress.ip_address(str(sockaddr[0])) for *_, sockaddr in infos))


async def resolve_host(host: str, port: int, allow: HostAllowlist, resolver: Resolver) -> tuple[IPAddress, ...]:
    """Resolve a name once and check every answer; Refused if any answer is refused (all-or-nothing,
    so a mix of public and internal answers cannot steer the connection)."""
    addresses = tuple(await resolver(host, port))
    if not addresses:
        raise OSError(f"{host} has no addresses")
    check_answers(host, addresses, allow)
    return addresses


def check_answers(host: str, addresses: Iterable[IPAddress], allow: HostAllowlist) -> None:
    """Refused if any address `host` resolved to is refused (the name itself may open them: allow.allows_name)."""
    trusted = allow.allows_name(host)
    for ip in addresses:
        refusal = address_refusal(ip, allow, trusted_name=trusted)
        if refusal is not None:
            raise Refused(f"{normal_name(host)} resolves to {refusal.noun()}")


# -- syntax ----------------------------------------------------------------------------------------


def target_name(text: str) -> str:
    """A hostname (IDNA-encoded, lower case) or an IP address in standard form, as a tool's target; ValueError
    for anything else, so what reaches a command line or a resolver is only letters, digits, '.', '-', '_', ':'."""
    raw = text.strip()
    try:
        ip = parse_ip(raw) if raw else None
    except ValueError:
        raise ValueError(f"{text!r} is not a valid IP address") from None
    if ip is not None:
        return str(ip)
    try:
        name = normal_name(raw).encode("idna").decode("ascii")
    except UnicodeError:
        raise ValueError(f"{text!r} is not a valid hostname") from None
    if not name or len(name) > 253 or not _HOSTNAME.fullmatch(name):
        raise ValueError(f"{text!r} is not a hostname or an IP address")
    return name


def server_address(text: str) -> tuple[str, int]:
    """'10.0.0.2', '10.0.0.2:5353', 'fd00::53' or '[fd00::53]:5353' as (address, port), default port 53."""
    raw = text.strip()
    host, port = raw, "53"
    if raw.startswith("[") and "]" in raw:
        host, _, rest = raw[1:].partition("]")
        port = rest.removeprefix(":") or "53"
    elif raw.count(":") == 1:
        host, port = raw.split(":")
    try:
        ip = ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        raise ValueError(f"{text!r} is not an IP address with an optional port (10.0.0.2, 10.0.0.2:5353)") from None
    if not 0 < number < 65536:
        raise ValueError(f"{text!r}: the port must be 1-65535")
    return str(ip), number
