"""DNS, TCP and TLS checks, from the bot or from an inventory host.

From the bot (no `host`, or "self") a target passes tools.netguard exactly as check_url's do: public addresses
only, plus what [tools.http] allow opens; a name is resolved once and the connection goes to the checked
addresses. From an inventory host the check runs there as fixed commands over SSH (tools.builtin.reach.run):
the host is trusted to reach its own network, which is the point (internal names), and the target is only
checked for syntax (tools.netguard.target_name) before it goes, quoted, into the command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import ssl
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.rdatatype
import dns.resolver
from cryptography import x509

from tools.api import BadCall
from tools.builtin import reach
from tools.builtin.http import CERT_WARN_DAYS, verifying_context
from tools.netguard import (
    IPAddress,
    Refused,
    check_answers,
    check_host,
    check_name,
    parse_ip,
    resolve_host,
    target_name,
)
from tools.registry import Category, ToolContext, ToolError, tool
from tools.remote.inventory import Host

DNS_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5.0
MAX_ADDRESSES = 4  # tcp_check tries at most this many of a name's addresses
MAX_CHAIN = 8  # certificates shown; the rest are counted
REMOTE_TIMEOUT_S = 15.0
TYPES = ("A", "AAAA", "CNAME")
REFUSAL_HINT = "from the bot only public addresses are reached unless [tools.http] allow lists them; an inventory "
REFUSAL_HINT += "host (host=...) can check its own network"


# -- arguments and the bot's guard ----------------------------------------------------------------


def _target(text: str, what: str = "target_host") -> str:
    try:
        return target_name(text)
    except ValueError as e:
        raise BadCall(f"{what}: {e}") from None


def _port(port: int) -> int:
    if not 0 < port < 65536:
        raise BadCall(f"port: {port} is not a TCP port (1-65535)")
    return port


def _where(host: str | None, ctx: ToolContext) -> Host | None:
    """The inventory host to check from, or None for the bot."""
    return reach.target(host, ctx) if host else None


async def _admit(target: str, port: int, ctx: ToolContext) -> tuple[IPAddress, ...]:
    """The addresses the bot may connect to for `target` (ToolError saying why not)."""
    try:
        literal = check_host(target, ctx.http_allow)
        if literal is not None:
            return (literal,)
        async with asyncio.timeout(DNS_TIMEOUT_S):
            return await resolve_host(target, port, ctx.http_allow, ctx.http_resolver)
    except Refused as e:
        raise ToolError(f"refused: {e}; {REFUSAL_HINT}") from None
    except (OSError, TimeoutError) as e:
        raise ToolError(f"{target} does not resolve from the bot ({getattr(e, 'strerror', None) or e})") from None


def _ms(started: float) -> str:
    return f"{(time.perf_counter() - started) * 1000:.0f} ms"


# -- dns_lookup -------------------------------------------------------------------------------------


def _resolver(ctx: ToolContext) -> dns.asyncresolver.Resolver:
    resolver = dns.asyncresolver.Resolver(configure=not ctx.dns_servers)
    if ctx.dns_servers:
        resolver.nameservers = [dns.nameserver.Do53Nameserver(address, port) for address, port in ctx.dns_servers]
    resolver.lifetime = DNS_TIMEOUT_S
    return resolver


async def _ask(resolver: dns.asyncresolver.Resolver, name: str, rdtype: str, ctx: ToolContext) -> list[str]:
    """The lines for one question: each record of the answer (the CNAME chain included) with its TTL."""
    started = time.perf_counter()
    try:
        answer = await resolver.resolve(name, rdtype, search=False, raise_on_no_answer=False)
    except dns.resolver.NXDOMAIN:
        return [f"{rdtype}: NXDOMAIN: {name} does not exist ({_ms(started)})"]
    except dns.resolver.LifetimeTimeout:
        return [f"{rdtype}: TIMEOUT: no answer within {DNS_TIMEOUT_S:g}s from {_servers(resolver)}"]
    except dns.resolver.NoNameservers as e:
        return [f"{rdtype}: FAILED: every server refused or failed ({e})"]
    took = _ms(started)
    records = [(rrset, item) for rrset in answer.response.answer for item in rrset]
    addresses = [ipaddress.ip_address(item.to_text()) for rrset, item in records if rrset.rdtype in (1, 28)]
    try:
        check_answers(name, addresses, ctx.http_allow)
    except Refused as e:
        return [f"{rdtype}: refused: {e}; {REFUSAL_HINT}"]
    if not any(rrset.rdtype == dns.rdatatype.from_text(rdtype) for rrset, _ in records):
        head = f"{rdtype}: NO ANSWER: {name} exists but has no {rdtype} record ({took})"
    else:
        by = answer.nameserver if answer.port == 53 else f"{answer.nameserver}:{answer.port}"
        head = f"{rdtype}: answered in {took} by {by}"
    lines = [head]
    lines += [
        f"  {rrset.name.to_text(omit_final_dot=True)}  TTL {rrset.ttl}s  {dns.rdatatype.to_text(rrset.rdtype)}  "
        f"{item.to_text()}"
        for rrset, item in records
    ]
    return lines


def _servers(resolver: dns.asyncresolver.Resolver) -> str:
    return ", ".join(_server(n) for n in resolver.nameservers) or "no server"


def _server(server: str | dns.nameserver.Nameserver) -> str:
    if isinstance(server, dns.nameserver.Do53Nameserver) and server.port != 53:
        return f"{server.address}:{server.port}"
    return server.answer_nameserver() if isinstance(server, dns.nameserver.Nameserver) else server


async def _lookup_here(name: str, types: Sequence[str], ctx: ToolContext) -> str:
    try:
        check_name(name, ctx.http_allow)
    except Refused as e:
        raise ToolError(f"refused: {e}; {REFUSAL_HINT}") from None
    resolver = _resolver(ctx)
    lines = [f"DNS {name} from the bot (servers: {_servers(resolver)})"]
    for rdtype in types:
        lines += await _ask(resolver, name, rdtype, ctx)
    return "\n".join(lines)


# getent asks the host's own resolver (nsswitch: /etc/hosts, then DNS): addresses and the canonical name, no TTLs.
_GETENT = 's=$(date +%s%N); getent "$1" "$2"; c=$?; e=$(date +%s%N); echo "# exit $c ns $((e - s))"'
_GETENT_DB = {"A": "ahostsv4", "AAAA": "ahostsv6", "CNAME": "ahosts"}


async def _lookup_on(on: Host, name: str, types: Sequence[str], ctx: ToolContext) -> str:
    lines = [f"DNS {name} from {on.name} (via getent, the host's own resolver: /etc/hosts and DNS; no TTLs)"]
    for rdtype in types:
        result = await reach.run(
            ctx, on, ["sh", "-c", _GETENT, "dns_lookup", _GETENT_DB[rdtype], name], timeout_s=REMOTE_TIMEOUT_S
        )
        if result.exit_status == 127 or "getent: not found" in result.stderr:
            raise ToolError(f"{on.name}: getent is not available")
        lines += _getent_lines(rdtype, name, result.stdout)
    return "\n".join(lines)


def _getent_lines(rdtype: str, name: str, out: str) -> list[str]:
    status = re.search(r"# exit (\d+) ns (\d+)", out)
    code, took = (int(status[1]), f"{int(status[2]) / 1e6:.0f} ms") if status else (-1, "?")
    rows = [line.split() for line in out.splitlines() if line and not line.startswith("#")]
    if code == 2 or (code == 0 and not rows):
        return [f"{rdtype}: NOT FOUND: the host's resolver has no {rdtype} answer for {name} ({took})"]
    if code != 0:
        return [f"{rdtype}: FAILED: getent exited {code} ({took})"]
    canonical = next((r[2] for r in rows if len(r) > 2), name)
    if rdtype == "CNAME":
        if canonical.rstrip(".") == name:
            return [f"CNAME: NO ANSWER: {name} is itself the canonical name (no CNAME) ({took})"]
        return [f"CNAME: answered in {took}", f"  {name}  canonical name  {canonical}"]
    addresses = list(dict.fromkeys(r[0] for r in rows))
    lines = [f"{rdtype}: answered in {took}"]
    if canonical.rstrip(".") != name:
        lines.append(f"  {name}  canonical name  {canonical}")
    return lines + [f"  {canonical}  {rdtype}  {address}" for address in addresses]


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def dns_lookup(
    name: str, type: Literal["A", "AAAA", "CNAME", "ANY"] = "A", host: str | None = None, *, ctx: ToolContext
) -> str:
    """Resolve a DNS name and say what came back, how fast, or why nothing did.

    Returns each record of the answer (the CNAME chain included) with its TTL in seconds, and the time the
    resolver took to answer in milliseconds; NXDOMAIN (the name does not exist), NO ANSWER (it exists but has no
    record of that type) and TIMEOUT (no answer within 5 s) are said in words. type "ANY" asks A, AAAA and CNAME
    in turn (not the DNS ANY query). From the bot it asks the configured [tools.http] dns_servers (else the
    system's), and answers pointing at non-public addresses are refused unless [tools.http] allow opens them;
    from an inventory host it asks that host's own resolver with getent (/etc/hosts and DNS: addresses and the
    canonical name, without TTLs). Use it when a name may have stopped resolving or points somewhere new, and
    from an app server (host=...) for internal names only it can resolve.

    Args:
        name: the DNS name to look up, e.g. api.example.com.
        type: the record type: A (IPv4), AAAA (IPv6), CNAME, or ANY for all three.
        host: where to check from: an inventory host (see list_hosts), to see its own network and internal names,
            or "self" / nothing (the default) for the bot, which reaches public addresses only unless
            [tools.http] allow opens more.
    """
    name = _target(name, "name")
    if type not in (*TYPES, "ANY"):
        raise BadCall(f"type: {type!r} is not one of A, AAAA, CNAME, ANY")
    types = TYPES if type == "ANY" else (type,)
    on = _where(host, ctx)
    return await (_lookup_on(on, name, types, ctx) if on is not None else _lookup_here(name, types, ctx))


# -- tcp_check --------------------------------------------------------------------------------------


def _connect_error(e: BaseException) -> str:
    if isinstance(e, TimeoutError):
        return f"TIMED OUT after {CONNECT_TIMEOUT_S:g}s (nothing answered: a firewall dropping packets, or no host)"
    if isinstance(e, ConnectionRefusedError):
        return "REFUSED (the host answered; nothing listens on that port, or a firewall rejects it)"
    text = getattr(e, "strerror", None) or str(e)
    if "route" in text.lower() or "unreachable" in text.lower():
        return f"NO ROUTE ({text})"
    return f"FAILED ({text})"


async def _tcp_here(target: str, port: int, ctx: ToolContext) -> str:
    addresses = await _admit(target, port, ctx)
    lines = [f"TCP {target}:{port} from the bot"]
    for address in addresses[:MAX_ADDRESSES]:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                _reader, writer = await asyncio.open_connection(str(address), port)
        except (OSError, TimeoutError) as e:
            lines.append(f"{address}: {_connect_error(e)}")
            continue
        took = _ms(started)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        lines.append(f"{address}: CONNECTED in {took}")
        break
    if len(addresses) > MAX_ADDRESSES:
        lines.append(f"({len(addresses) - MAX_ADDRESSES} more addresses not tried)")
    return "\n".join(lines)


# bash's /dev/tcp connects (resolving the name itself); EPOCHREALTIME (bash 5) times the connect on the host.
_DEV_TCP = 's=$EPOCHREALTIME; if exec 3<>"/dev/tcp/$1/$2"; then echo "# connected $s $EPOCHREALTIME"; else exit 1; fi'


async def _tcp_on(on: Host, target: str, port: int, ctx: ToolContext) -> str:
    argv = ["timeout", f"{CONNECT_TIMEOUT_S:g}", "bash", "-c", _DEV_TCP, "tcp_check", target, str(port)]
    result = await reach.run(ctx, on, argv, timeout_s=REMOTE_TIMEOUT_S)
    head = f"TCP {target}:{port} from {on.name} (via bash /dev/tcp)"
    if result.exit_status == 127:
        raise ToolError(f"{on.name}: bash or timeout is not available")
    if result.exit_status == 124:
        return f"{head}\n{_connect_error(TimeoutError())}"
    if (done := re.search(r"# connected ([\d.]+) ([\d.]+)", result.stdout)) is not None:
        return f"{head}\nCONNECTED in {(float(done[2]) - float(done[1])) * 1000:.0f} ms"
    error = result.stderr.strip().splitlines()[0] if result.stderr.strip() else f"exit {result.exit_status}"
    error = error.split(": ")[-1]
    if "refused" in error.lower():
        return f"{head}\n{_connect_error(ConnectionRefusedError())}"
    if "not known" in error.lower() or "invalid argument" in error.lower():
        return f"{head}\nFAILED: {target} does not resolve on {on.name} ({error})"
    return f"{head}\n{_connect_error(OSError(0, error))}"


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def tcp_check(target_host: str, port: int, host: str | None = None, *, ctx: ToolContext) -> str:
    """Open a TCP connection to a host and port, and close it at once: is anything listening, and how fast.

    Returns the connect time in milliseconds, or the error in words: REFUSED (the host answered but nothing
    listens), TIMED OUT (nothing answered within 5 s: a firewall dropping packets, or no host), NO ROUTE, or a
    name that does not resolve. From the bot each of a name's addresses is tried in turn (at most 4) until one
    connects, and only public addresses are reached unless [tools.http] allow opens more; from an inventory
    host it connects there with bash's /dev/tcp. Nothing is sent. Use it to tell a service that is down from
    one that is slow, or to check a database or internal port from an app server (host=...).

    Args:
        target_host: the name or IP address to connect to.
        port: the TCP port (1-65535).
        host: where to check from: an inventory host (see list_hosts), to see its own network and internal names,
            or "self" / nothing (the default) for the bot, which reaches public addresses only unless
            [tools.http] allow opens more.
    """
    target, port = _target(target_host), _port(port)
    on = _where(host, ctx)
    return await (_tcp_on(on, target, port, ctx) if on is not None else _tcp_here(target, port, ctx))


# -- tls_check --------------------------------------------------------------------------------------


def _sans(cert: x509.Certificate) -> list[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*ext.get_values_for_type(x509.DNSName), *(str(ip) for ip in ext.get_values_for_type(x509.IPAddress))]


def name_matches(name: str, sans: Sequence[str]) -> bool:
    """Does `name` match one of the certificate's SANs (a leftmost `*.` matches one label, as browsers do)?"""
    name = name.lower().rstrip(".")
    parent = name.split(".", 1)[1] if "." in name else None
    return any(
        san == name or (san.startswith("*.") and parent == san[2:]) for san in (s.lower().rstrip(".") for s in sans)
    )


def describe_chain(certs: Sequence[x509.Certificate], name: str, now: datetime | None = None) -> list[str]:
    """The lines for a chain as the server sent it: the name check on the first, then each certificate."""
    now = now or datetime.now(UTC)
    lines: list[str] = []
    if certs:
        sans = _sans(certs[0])
        if name_matches(name, sans):
            lines.append(f"name {name}: matches the certificate")
        else:
            named = ", ".join(sans[:10]) or "no subject alternative names"
            lines.append(f"name {name}: MISMATCH: the certificate names {named}")
    lines.append(f"chain ({len(certs)} certificate(s), as the server sent them):")
    for i, cert in enumerate(certs[:MAX_CHAIN], 1):
        until = cert.not_valid_after_utc
        days = (until - now).total_seconds() / 86_400
        state = f"{days:.0f} days left" if days >= 0 else f"EXPIRED {-days:.0f} days ago"
        if 0 <= days < CERT_WARN_DAYS:
            state += f"; EXPIRES SOON, under {CERT_WARN_DAYS} days"
        lines.append(f"{i}. subject {cert.subject.rfc4514_string()}; issuer {cert.issuer.rfc4514_string()}")
        lines.append(f"   valid until {until:%Y-%m-%d %H:%M} UTC ({state})")
        if sans := _sans(cert):
            more = f" and {len(sans) - 10} more" if len(sans) > 10 else ""
            lines.append(f"   SANs: {', '.join(sans[:10])}{more}")
    if len(certs) > MAX_CHAIN:
        lines.append(f"({len(certs) - MAX_CHAIN} more certificates not shown)")
    return lines


def _chain_der(sslobj: ssl.SSLObject) -> list[bytes]:
    """The certificates the server sent, leaf first. ssl exposes the unverified chain publicly from Python 3.13;
    before, the same method is on the private _sslobj; failing both, the leaf alone."""
    public = getattr(sslobj, "get_unverified_chain", None)
    if public is not None:
        return [bytes(c) for c in public()]
    private = getattr(getattr(sslobj, "_sslobj", None), "get_unverified_chain", None)
    if private is not None:
        return [ssl.PEM_cert_to_DER_cert(c.public_bytes()) for c in private() or ()]
    leaf = sslobj.getpeercert(binary_form=True)
    return [leaf] if leaf else []


async def _handshake(address: IPAddress, port: int, sni: str | None, sslctx: ssl.SSLContext) -> ssl.SSLObject:
    async with asyncio.timeout(CONNECT_TIMEOUT_S):
        _reader, writer = await asyncio.open_connection(str(address), port, ssl=sslctx, server_hostname=sni)
    sslobj: ssl.SSLObject = writer.get_extra_info("ssl_object")
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return sslobj


async def _tls_here(target: str, port: int, name: str, ctx: ToolContext) -> str:
    addresses = await _admit(target, port, ctx)
    sni = None if parse_ip(name) else name  # name: target_name's, a standard IP or a name
    unverified = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
    started = time.perf_counter()
    try:
        sslobj = await _handshake(addresses[0], port, sni, unverified)
    except (OSError, TimeoutError) as e:
        what = "handshake failed" if isinstance(e, ssl.SSLError) else "cannot connect"
        raise ToolError(f"TLS {target}:{port} from the bot ({addresses[0]}): {what}: {_connect_error(e)}") from None
    took = _ms(started)
    cipher = sslobj.cipher()
    lines = [
        f"TLS {target}:{port} ({addresses[0]}) from the bot, server name {name}: {sslobj.version()}, "
        f"cipher {cipher[0] if cipher else '?'}, handshake in {took}"
    ]
    checking = verifying_context(ctx)
    checking.check_hostname = False  # the name is checked below, on its own line
    try:
        await _handshake(addresses[0], port, sni, checking)
        lines.append("verification: OK (trusted by the bot's CA bundle)")
    except ssl.SSLCertVerificationError as e:
        lines.append(f"verification: FAILED: {e.verify_message}")
    except (OSError, TimeoutError) as e:
        lines.append(f"verification: not done ({e})")
    certs = [x509.load_der_x509_certificate(der) for der in _chain_der(sslobj)]
    return "\n".join(lines + describe_chain(certs, name))


# openssl prints the chain (-showcerts) and the session; stdin is closed so it ends after the handshake.
_S_CLIENT = 'exec openssl s_client -connect "$1" ${2:+-servername "$2"} -showcerts </dev/null 2>&1'
_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


async def _tls_on(on: Host, target: str, port: int, name: str, ctx: ToolContext) -> str:
    connect = f"[{target}]:{port}" if ":" in target else f"{target}:{port}"
    sni = "" if parse_ip(name) else name
    argv = ["sh", "-c", _S_CLIENT, "tls_check", connect, sni]
    result = await reach.run(ctx, on, argv, timeout_s=REMOTE_TIMEOUT_S, max_bytes=256 * 1024)
    if result.exit_status == 127:
        raise ToolError(f"{on.name}: openssl is not available")
    out = result.stdout
    pems = _PEM.findall(out.encode())
    if not pems:
        why = [line for line in out.splitlines() if re.search(r"error|refused|unknown|errno|timed out", line, re.I)]
        detail = "; ".join(why[:3]) or f"openssl exited {result.exit_status} with no certificate"
        raise ToolError(f"TLS {connect} from {on.name}: no handshake: {detail}")
    protocol = re.search(r"^\s*Protocol\s*:\s*(\S+)", out, re.M) or re.search(r"^New, (\S+), Cipher", out, re.M)
    cipher = re.search(r"^\s*Cipher\s*:\s*(\S+)", out, re.M) or re.search(r"Cipher is (\S+)", out)
    verify = re.search(r"Verify return code: (\d+) \(([^)]*)\)", out)
    lines = [
        f"TLS {connect} from {on.name} (via openssl s_client), server name {name}: "
        f"{protocol[1] if protocol else '?'}, cipher {cipher[1] if cipher else '?'}",
        "verification: "
        + (
            "OK (trusted by the host's CA bundle)"
            if verify and verify[1] == "0"
            else f"FAILED: {verify[2]}"
            if verify
            else "unknown"
        ),
    ]
    certs = [x509.load_pem_x509_certificate(pem) for pem in pems]
    return "\n".join(lines + describe_chain(certs, name))


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def tls_check(
    target_host: str, port: int = 443, server_name: str | None = None, host: str | None = None, *, ctx: ToolContext
) -> str:
    """Do a TLS handshake with a server and report its certificates, whether or not they are valid.

    Returns the protocol and cipher agreed, whether the chain verifies (and why not: expired, unknown issuer,
    self-signed), whether server_name matches the certificate's names (SANs), and for each certificate the
    server sent (at most 8 shown): subject, issuer, SANs, expiry date and days left, flagging EXPIRED and
    EXPIRES SOON (under 14 days). An invalid certificate is reported, never an error. From the bot only public
    addresses are reached unless [tools.http] allow opens more; from an inventory host it runs openssl s_client
    there. Each handshake is bounded by 5 s. Use it when users see certificate errors, before a certificate
    expires, or to check an internal endpoint from an app server (host=...).

    Args:
        target_host: the name or IP address to connect to.
        port: the TCP port (default 443).
        server_name: the name to ask for (SNI) and check the certificate against; default target_host.
        host: where to check from: an inventory host (see list_hosts), to see its own network and internal names,
            or "self" / nothing (the default) for the bot, which reaches public addresses only unless
            [tools.http] allow opens more.
    """
    target, port = _target(target_host), _port(port)
    name = _target(server_name, "server_name") if server_name else target
    on = _where(host, ctx)
    return await (_tls_on(on, target, port, name, ctx) if on is not None else _tls_here(target, port, name, ctx))
