"""tools.netguard as pure functions: which addresses and names check_url may reach, and [tools.http] allow.

No test here opens a connection; resolution goes through a stub resolver.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

import pytest

from tests.support.config_readers import tool_context
from tools import ToolConfigError, ToolContext
from tools.netguard import (
    AddressKind,
    HostAllowlist,
    IPAddress,
    Refused,
    check_host,
    classify,
    parse_allowlist,
    parse_ip,
    resolve_host,
)

NOTHING = HostAllowlist()
SRE = parse_allowlist(["status.internal.example", "10.20.0.0/16", "127.0.0.1", "*.corp.example"])


class StubDNS:
    """A resolver with fixed answers per name (IP strings); records every name it is asked for."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[IPAddress]:
        self.calls.append(host)
        name = host.lower().rstrip(".")  # as DNS compares names
        if name not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [ipaddress.ip_address(a) for a in self.answers[name]]


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("8.8.8.8", AddressKind.PUBLIC),
        ("2606:4700:4700::1111", AddressKind.PUBLIC),
        ("127.0.0.1", AddressKind.LOOPBACK),
        ("127.8.9.10", AddressKind.LOOPBACK),
        ("::1", AddressKind.LOOPBACK),
        ("169.254.169.254", AddressKind.LINK_LOCAL),
        ("fe80::1", AddressKind.LINK_LOCAL),
        ("10.1.2.3", AddressKind.PRIVATE),
        ("172.31.255.255", AddressKind.PRIVATE),
        ("192.168.0.1", AddressKind.PRIVATE),
        ("100.64.0.1", AddressKind.SHARED),
        ("100.100.100.200", AddressKind.SHARED),
        ("fd00:ec2::254", AddressKind.UNIQUE_LOCAL),
        ("fc00::1", AddressKind.UNIQUE_LOCAL),
        ("0.0.0.0", AddressKind.UNSPECIFIED),
        ("::", AddressKind.UNSPECIFIED),
        ("224.0.0.251", AddressKind.MULTICAST),
        ("ff02::1", AddressKind.MULTICAST),
        ("240.0.0.1", AddressKind.RESERVED),
        ("255.255.255.255", AddressKind.RESERVED),
        ("192.0.0.192", AddressKind.SPECIAL),
        ("198.18.0.1", AddressKind.SPECIAL),
        ("203.0.113.7", AddressKind.DOCUMENTATION),
        ("2001:db8::1", AddressKind.DOCUMENTATION),
        ("::ffff:169.254.169.254", AddressKind.LINK_LOCAL),
        ("::ffff:127.0.0.1", AddressKind.LOOPBACK),
        ("::ffff:8.8.8.8", AddressKind.PUBLIC),
        ("::127.0.0.1", AddressKind.LOOPBACK),
        ("64:ff9b::a9fe:a9fe", AddressKind.LINK_LOCAL),
        ("64:ff9b::10.0.0.1", AddressKind.PRIVATE),
        ("64:ff9b::8.8.8.8", AddressKind.PUBLIC),
        ("2002:7f00:1::1", AddressKind.LOOPBACK),
        ("2001::1", AddressKind.SPECIAL),  # Teredo
        ("4000::1", AddressKind.RESERVED),  # outside global unicast 2000::/3
    ],
)
def test_classify_names_the_kind_of_every_address(address: str, kind: AddressKind) -> None:
    assert classify(ipaddress.ip_address(address)).kind is kind


@pytest.mark.parametrize(
    ("host", "meant"),
    [
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("2852039166", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("169.254.43518", "169.254.169.254"),
        ("::ffff:a9fe:a9fe", "::ffff:a9fe:a9fe"),
        ("fe80::1%25eth0", "fe80::1%eth0"),
        ("example.com", None),
        ("beef.cafe", None),
        ("1e100.net", None),
    ],
)
def test_odd_ip_spellings_are_read_as_the_address_they_mean(host: str, meant: str | None) -> None:
    assert parse_ip(host) == (ipaddress.ip_address(meant) if meant else None)


@pytest.mark.parametrize("host", ["1.2.3.4.5", "256.1.1.1", "08.0.0.1", "4294967296"])
def test_numeric_hosts_that_are_no_address_are_refused(host: str) -> None:
    with pytest.raises(Refused, match="is not a valid IPv4 address"):
        check_host(host, NOTHING)


# (host, allowlist, expected refusal or None when the host passes)
HOST_CASES = [
    ("8.8.8.8", NOTHING, None),
    ("example.com", NOTHING, None),  # a name: its addresses are checked when it is resolved
    ("169.254.169.254", NOTHING, "169.254.169.254 is a link-local/cloud metadata address"),
    ("fd00:ec2::254", NOTHING, "fd00:ec2::254 is a unique-local (fc00::/7) address (AWS IPv6 metadata endpoint)"),
    (
        "::ffff:a9fe:a9fe",
        NOTHING,
        "::ffff:a9fe:a9fe (IPv4-mapped 169.254.169.254) is a link-local/cloud metadata address",
    ),
    ("::ffff:7f00:1", NOTHING, "::ffff:7f00:1 (IPv4-mapped 127.0.0.1) is a loopback address"),
    (
        "64:ff9b::a9fe:a9fe",
        NOTHING,
        "64:ff9b::a9fe:a9fe (NAT64 169.254.169.254) is a link-local/cloud metadata address",
    ),
    ("2130706433", NOTHING, "2130706433 means 127.0.0.1, a loopback address"),
    ("0251.0376.0251.0376", NOTHING, "0251.0376.0251.0376 means 169.254.169.254, a link-local/cloud metadata address"),
    ("127.0.0.1", NOTHING, "127.0.0.1 is a loopback address"),
    ("::1", NOTHING, "::1 is a loopback address"),
    ("10.0.0.1", NOTHING, "10.0.0.1 is a private (RFC 1918) address"),
    ("100.64.1.1", NOTHING, "100.64.1.1 is a shared/CGNAT (100.64.0.0/10) address"),
    (
        "100.100.100.200",
        NOTHING,
        "100.100.100.200 is a shared/CGNAT (100.64.0.0/10) address (Alibaba Cloud metadata endpoint)",
    ),
    ("0.0.0.0", NOTHING, "0.0.0.0 is an unspecified address"),
    ("239.1.1.1", NOTHING, "239.1.1.1 is a multicast address"),
    ("metadata.google.internal", NOTHING, "metadata.google.internal is a cloud metadata name"),
    ("METADATA.Google.Internal.", NOTHING, "metadata.google.internal is a cloud metadata name"),
    ("metadata", NOTHING, "metadata is a cloud metadata name"),
    ("instance-data.ec2.internal", NOTHING, "instance-data.ec2.internal is a cloud metadata name"),
    ("localhost", NOTHING, "localhost is a loopback name"),
    ("api.localhost", NOTHING, "api.localhost is a loopback name"),
    # what the operator opened
    ("127.0.0.1", SRE, None),
    ("::ffff:7f00:1", SRE, None),  # the IPv4-mapped form of an allowed address is that address
    ("127.0.0.2", SRE, "127.0.0.2 is a loopback address"),
    ("2130706433", SRE, None),
    ("10.20.3.4", SRE, None),
    ("10.21.0.1", SRE, "10.21.0.1 is a private (RFC 1918) address"),
    ("169.254.169.254", SRE, "169.254.169.254 is a link-local/cloud metadata address"),
    ("169.254.169.254", parse_allowlist(["169.254.169.254"]), None),
    ("metadata.google.internal", parse_allowlist(["metadata.google.internal"]), None),
    (
        "metadata.google.internal",
        parse_allowlist(["*.google.internal"]),
        "metadata.google.internal is a cloud metadata name",
    ),  # a wildcard never opens a metadata name
]


@pytest.mark.parametrize(("host", "allow", "refusal"), HOST_CASES)
def test_host_policy(host: str, allow: HostAllowlist, refusal: str | None) -> None:
    if refusal is None:
        check_host(host, allow)
    else:
        with pytest.raises(Refused) as caught:
            check_host(host, allow)
        assert str(caught.value) == refusal


# -- names, resolved once through a stub ---------------------------------------------------------------

DNS = StubDNS(
    {
        "status.internal.example": ["10.9.8.7"],
        "evil.internal.example": ["169.254.169.254"],
        "www.example.com": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
        "db.example.com": ["10.0.0.5"],
        "split.example.com": ["93.184.215.14", "10.0.0.5"],
        "api.eu.corp.example": ["192.168.7.7"],
        "corp.example": ["192.168.7.8"],
        "v6meta.example.com": ["fd00:ec2::254"],
        "lab.example.com": ["10.20.1.1"],
    }
)

NAME_CASES = [
    ("www.example.com", NOTHING, None),
    ("db.example.com", NOTHING, "db.example.com resolves to 10.0.0.5, a private (RFC 1918) address"),
    ("split.example.com", NOTHING, "split.example.com resolves to 10.0.0.5, a private (RFC 1918) address"),
    (
        "v6meta.example.com",
        NOTHING,
        "v6meta.example.com resolves to fd00:ec2::254, a unique-local (fc00::/7) address (AWS IPv6 metadata endpoint)",
    ),
    # a hostname entry trusts that name wherever it resolves ...
    ("status.internal.example", SRE, None),
    ("STATUS.internal.example.", SRE, None),
    # ... except to link-local/cloud metadata addresses, which only an address/CIDR entry opens
    (
        "evil.internal.example",
        parse_allowlist(["evil.internal.example"]),
        "evil.internal.example resolves to 169.254.169.254, a link-local/cloud metadata address",
    ),
    ("evil.internal.example", parse_allowlist(["evil.internal.example", "169.254.169.254"]), None),
    (
        "v6meta.example.com",
        parse_allowlist(["v6meta.example.com"]),
        "v6meta.example.com resolves to fd00:ec2::254, a unique-local (fc00::/7) address (AWS IPv6 metadata endpoint)",
    ),
    # *.corp.example covers names under it at any depth, not corp.example itself
    ("api.eu.corp.example", SRE, None),
    ("corp.example", SRE, "corp.example resolves to 192.168.7.8, a private (RFC 1918) address"),
    # a name not listed reaches a listed CIDR
    ("lab.example.com", SRE, None),
    ("db.example.com", SRE, "db.example.com resolves to 10.0.0.5, a private (RFC 1918) address"),
]


@pytest.mark.parametrize(("host", "allow", "refusal"), NAME_CASES)
async def test_name_policy(host: str, allow: HostAllowlist, refusal: str | None) -> None:
    if refusal is None:
        assert await resolve_host(host, 443, allow, DNS)
    else:
        with pytest.raises(Refused) as caught:
            await resolve_host(host, 443, allow, DNS)
        assert str(caught.value) == refusal


async def test_resolve_host_returns_the_checked_answers_in_order() -> None:
    answers = ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]
    dns = StubDNS({"www.example.com": answers})
    got = await resolve_host("www.example.com", 443, NOTHING, dns)
    assert got == tuple(ipaddress.ip_address(a) for a in answers)
    assert dns.calls == ["www.example.com"]


# -- [tools.http] allow in the config --------------------------------------------------------------------


def test_allow_entries_are_parsed_into_names_patterns_and_networks() -> None:
    ctx = tool_context(
        {
            "http": {
                "allow": [
                    "Status.Internal.Example.",
                    "*.corp.example",
                    "10.20.0.0/16",
                    "127.0.0.1",
                    "[::1]",
                    "fd00:1234::/32",
                ]
            }
        }
    )
    assert ctx == ToolContext(
        http_allow=HostAllowlist(
            names=frozenset({"status.internal.example"}),
            suffixes=(".corp.example",),
            networks=(
                ipaddress.ip_network("10.20.0.0/16"),
                ipaddress.ip_network("127.0.0.1/32"),
                ipaddress.ip_network("::1/128"),
                ipaddress.ip_network("fd00:1234::/32"),
            ),
        )
    )


def test_without_allow_nothing_is_opened() -> None:
    assert tool_context({"http": {"timeout_s": 5}}).http_allow == HostAllowlist()


@pytest.mark.parametrize(
    ("allow", "message"),
    [
        (
            ["ok.example", "10.20.0.0/33"],
            "tools.http.allow[1]: '10.20.0.0/33' is not a valid CIDR: '10.20.0.0/33' does not appear to be an IPv4 or "
            "IPv6 network",
        ),
        (["10.20.0.1/16"], "tools.http.allow[0]: '10.20.0.1/16' is not a valid CIDR: 10.20.0.1/16 has host bits set"),
        (
            ["https://status.example.com"],
            "tools.http.allow[0]: 'https://status.example.com' is a URL; give a hostname, an IP address or a CIDR "
            "(e.g. status.example.com)",
        ),
        (
            ["status.example.com:8443"],
            "tools.http.allow[0]: 'status.example.com:8443': a port is not part of an allow entry; give the host alone",
        ),
        (
            ["api.*.example.com"],
            "tools.http.allow[0]: 'api.*.example.com': only a leading '*.' wildcard is supported (e.g. *.example.com)",
        ),
        (["2130706433"], "tools.http.allow[0]: '2130706433': write the address in standard form (127.0.0.1)"),
        (["256.1.1.1"], "tools.http.allow[0]: '256.1.1.1' is not a valid IPv4 address"),
        (["bad host"], "tools.http.allow[0]: 'bad host' is not a hostname, an IP address or a CIDR"),
        ([""], "tools.http.allow[0]: must not be empty"),
        ("10.0.0.0/8", "tools.http.allow: expected a list of strings, got a string"),
        ([42], "tools.http.allow[0]: expected a string, got an integer"),
    ],
)
def test_a_bad_allow_entry_is_a_config_error_naming_it(allow: object, message: str) -> None:
    with pytest.raises(ToolConfigError) as caught:
        tool_context({"http": {"allow": allow}})
    assert str(caught.value) == message
