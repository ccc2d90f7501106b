"""dns_lookup, tcp_check and tls_check from the bot, against loopback servers the tests start
(tests/support/netservers.py): loopback is private, so [tools.http] allow opens 127.0.0.0/8 where a test
connects, and the guard's refusals are checked without it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.config_readers import tool_context
from tests.support.netservers import Record, closed_port, dns_server, make_chain, tls_server
from tools import ToolContext, ToolError
from tools.api import BadCall
from tools.builtin import dns_lookup, tcp_check, tls_check
from tools.netguard import parse_allowlist

OPEN = ToolContext(http_allow=parse_allowlist(["127.0.0.0/8"]))
ZONE = [
    Record("www.shop.test", "CNAME", "lb.shop.test.", ttl=60),
    Record("lb.shop.test", "A", "93.184.216.34", ttl=120),
    Record("db.shop.test", "A", "10.0.3.7"),
]


async def test_tls_check_reports_a_certificate_about_to_expire_and_a_wrong_name(tmp_path: Path) -> None:
    chain = make_chain(tmp_path, names=["other.example"], days_left=3.5)
    async with tls_server(chain) as port:
        out = await tls_check.bind(OPEN).run({"target_host": "127.0.0.1", "port": port, "server_name": "api.shop.test"})
    assert re.search(
        rf"TLS 127\.0\.0\.1:{port} \(127\.0\.0\.1\) from the bot, server name api\.shop\.test: TLSv1\.3", out
    )
    assert "verification: FAILED: self-signed certificate in certificate chain" in out
    assert "name api.shop.test: MISMATCH: the certificate names other.example" in out
    assert "chain (2 certificate(s), as the server sent them):" in out
    assert "1. subject CN=other.example; issuer CN=opsloop test CA" in out
    assert re.search(r"   valid until \S+ \S+ UTC \(3 days left; EXPIRES SOON, under 14 days\)", out)
    assert "2. subject CN=opsloop test CA; issuer CN=opsloop test CA" in out


async def test_tls_check_flags_an_expired_certificate_and_a_matching_name(tmp_path: Path) -> None:
    chain = make_chain(tmp_path, names=["api.shop.test"], days_left=-2)
    async with tls_server(chain) as port:
        out = await tls_check.bind(OPEN).run({"target_host": "127.0.0.1", "port": port, "server_name": "api.shop.test"})
    assert "name api.shop.test: matches the certificate" in out
    assert "(EXPIRED 2 days ago)" in out


async def test_tls_check_from_the_bot_refuses_loopback_unless_allowed(tmp_path: Path) -> None:
    async with tls_server(make_chain(tmp_path, names=["x.test"], days_left=30)) as port:
        with pytest.raises(ToolError, match=r"refused: 127\.0\.0\.1 is a loopback address; from the bot only public"):
            await tls_check.bind(ToolContext()).run({"target_host": "127.0.0.1", "port": port})


async def test_tcp_check_gives_the_connect_time_or_refused(tmp_path: Path) -> None:
    async with tls_server(make_chain(tmp_path, names=["x.test"], days_left=30)) as port:
        out = await tcp_check.bind(OPEN).run({"target_host": "127.0.0.1", "port": port})
    assert re.fullmatch(rf"TCP 127\.0\.0\.1:{port} from the bot\n127\.0\.0\.1: CONNECTED in \d+ ms", out)
    closed = closed_port()
    out = await tcp_check.bind(OPEN).run({"target_host": "127.0.0.1", "port": closed})
    assert out == (
        f"TCP 127.0.0.1:{closed} from the bot\n"
        "127.0.0.1: REFUSED (the host answered; nothing listens on that port, or a firewall rejects it)"
    )


async def test_tcp_check_refuses_what_is_no_hostname_before_anything_runs() -> None:
    with pytest.raises(BadCall, match="target_host: 'db; rm -rf /' is not a hostname or an IP address"):
        await tcp_check.bind(OPEN).run({"target_host": "db; rm -rf /", "port": 5432})
    with pytest.raises(BadCall, match=r"port: 70000 is not a TCP port \(1-65535\)"):
        await tcp_check.bind(OPEN).run({"target_host": "db", "port": 70000})


async def test_dns_lookup_asks_the_configured_server_with_ttls_and_the_cname_chain() -> None:
    async with dns_server(ZONE) as port:
        ctx = tool_context({"http": {"dns_servers": [f"127.0.0.1:{port}"]}})
        out = await dns_lookup.bind(ctx).run({"name": "www.shop.test"})
        missing = await dns_lookup.bind(ctx).run({"name": "gone.shop.test", "type": "ANY"})
        no_aaaa = await dns_lookup.bind(ctx).run({"name": "lb.shop.test", "type": "AAAA"})
    head, *records = out.splitlines()
    assert head == f"DNS www.shop.test from the bot (servers: 127.0.0.1:{port})"
    assert re.fullmatch(rf"A: answered in \d+ ms by 127\.0\.0\.1:{port}", records[0])
    assert records[1:] == [
        "  www.shop.test  TTL 60s  CNAME  lb.shop.test.",
        "  lb.shop.test  TTL 120s  A  93.184.216.34",
    ]
    assert [re.sub(r"\d+ ms", "N ms", line) for line in missing.splitlines()[1:]] == [
        f"{t}: NXDOMAIN: gone.shop.test does not exist (N ms)" for t in ("A", "AAAA", "CNAME")
    ]
    assert re.search(r"AAAA: NO ANSWER: lb\.shop\.test exists but has no AAAA record \(\d+ ms\)", no_aaaa)


async def test_dns_lookup_from_the_bot_refuses_private_answers_unless_allowed() -> None:
    async with dns_server(ZONE) as port:
        closed = tool_context({"http": {"dns_servers": [f"127.0.0.1:{port}"]}})
        refused = await dns_lookup.bind(closed).run({"name": "db.shop.test"})
        opened = tool_context({"http": {"dns_servers": [f"127.0.0.1:{port}"], "allow": ["*.shop.test"]}})
        allowed = await dns_lookup.bind(opened).run({"name": "db.shop.test"})
    assert refused.splitlines()[1] == (
        "A: refused: db.shop.test resolves to 10.0.3.7, a private (RFC 1918) address; from the bot only public "
        "addresses are reached unless [tools.http] allow lists them; an inventory host (host=...) can check its "
        "own network"
    )
    assert allowed.splitlines()[2] == "  db.shop.test  TTL 300s  A  10.0.3.7"


@pytest.mark.slow
async def test_dns_lookup_says_when_no_server_answers() -> None:
    port = closed_port()  # nothing answers on it: dnspython waits out its 5 s lifetime
    ctx = tool_context({"http": {"dns_servers": [f"127.0.0.1:{port}"]}})
    out = await dns_lookup.bind(ctx).run({"name": "www.shop.test"})
    assert out.splitlines()[1] == f"A: TIMEOUT: no answer within 5s from 127.0.0.1:{port}"


def test_dns_servers_setting_names_a_bad_entry() -> None:
    with pytest.raises(Exception, match=r"tools\.http\.dns_servers\[1\].*'ns1' is not an IP address"):
        tool_context({"http": {"dns_servers": ["10.0.0.2", "ns1"]}})
