"""HTTP(S) checks: status, latency, TLS certificate expiry and the start of the body, of public hosts only.

check_url runs without approval on URLs a model chose after reading attacker-influenced text, so it is
no SSRF tool: every hop (the URL and each redirect, followed here, at most MAX_REDIRECTS) passes
tools.netguard before any connection, names are resolved once and the connection is pinned to the
checked addresses (PinnedResolver), the body read stops at READ_BYTES and everything, all hops and the
body included, shares one deadline ([tools.http] timeout_s).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import socket
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from multidict import CIMultiDict
from yarl import URL

from bot.core.errors import OpsloopError
from bot.core.redact import redact_slice
from tools.api import BadCall
from tools.builtin import reach
from tools.netguard import IPAddress, Refused, check_host, normal_name, resolve_host
from tools.registry import Category, ToolContext, ToolError, tool
from tools.remote.inventory import Host

BODY_CHARS = 500
READ_BYTES = 64 * 1024
MAX_REDIRECTS = 5
CERT_WARN_DAYS = 14
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
REFUSAL_HINT = (
    "opsloop's check_url only reaches public addresses from the bot unless [tools.http] allow lists it; "
    "host=<an inventory host> runs the check from that host, inside its network"
)


class PinnedResolver(AbstractResolver):
    """aiohttp's resolver for check_url: it answers only with the addresses checked for a name before
    the request, so a second DNS answer (rebinding) can never pick the target; unchecked names fail."""

    def __init__(self) -> None:
        self._pins: dict[str, tuple[IPAddress, ...]] = {}

    def pin(self, host: str, addresses: Iterable[IPAddress]) -> None:
        self._pins[normal_name(host)] = tuple(addresses)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[ResolveResult]:
        pinned = self._pins.get(normal_name(host))
        if pinned is None:
            raise OSError(f"{host} was not checked before connecting")
        families = [(ip, socket.AF_INET if ip.version == 4 else socket.AF_INET6) for ip in pinned]
        results = [
            ResolveResult(hostname=host, host=str(ip), port=port, family=fam, proto=0, flags=socket.AI_NUMERICHOST)
            for ip, fam in families
            if family in (socket.AF_UNSPEC, fam)
        ]
        if not results:
            raise OSError(f"{host} has no checked address of the requested family")
        return results

    async def close(self) -> None:
        return None


# -- TLS -------------------------------------------------------------------------------------------


def verifying_context(ctx: ToolContext) -> ssl.SSLContext:
    """The TLS context that verifies certificates: the system's CAs plus [tools.http] ca_file."""
    sslctx = ssl.create_default_context()
    if ctx.http_ca_file is not None:
        sslctx.load_verify_locations(cafile=str(ctx.http_ca_file))
    return sslctx


def _peer_cert(resp: aiohttp.ClientResponse) -> dict[str, Any] | None:
    conn = resp.connection
    transport = conn.transport if conn is not None else None
    sslobj = transport.get_extra_info("ssl_object") if transport is not None else None
    cert = sslobj.getpeercert() if sslobj is not None else None
    return cert or None


async def _fetch_cert(address: IPAddress, host: str, port: int, sslctx: ssl.SSLContext) -> dict[str, Any] | None:
    """A separate TLS handshake to the checked address, verified for `host`. aiohttp releases a connection
    as soon as a small body has arrived, so the response usually no longer holds the certificate."""
    _reader, writer = await asyncio.open_connection(str(address), port, ssl=sslctx, server_hostname=host)
    try:
        sslobj = writer.get_extra_info("ssl_object")
        return sslobj.getpeercert() if sslobj is not None else None
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def _name(parts: Any) -> str:
    return ", ".join(f"{k}={v}" for rdn in parts or () for k, v in rdn)


def describe_cert(cert: dict[str, Any], now: float | None = None) -> str:
    """'valid until 2025-03-01 12:00 UTC (29 days left); subject ...; issuer ...' with a warning when close."""
    not_after = ssl.cert_time_to_seconds(cert["notAfter"])
    days = (not_after - (now if now is not None else time.time())) / 86_400
    until = datetime.fromtimestamp(not_after, UTC).strftime("%Y-%m-%d %H:%M UTC")
    left = f"{days:.0f} days left" if days >= 0 else f"EXPIRED {-days:.0f} days ago"
    text = f"certificate valid until {until} ({left}); subject {_name(cert.get('subject'))}"
    text += f"; issuer {_name(cert.get('issuer'))}"
    if 0 <= days < CERT_WARN_DAYS:
        text += f"\nWARNING the certificate expires in less than {CERT_WARN_DAYS} days"
    return text


# -- one hop ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    """A URL that passed the policy, and the addresses its connection is pinned to."""

    url: URL
    addresses: tuple[IPAddress, ...]


@dataclass(frozen=True)
class _Hop:
    """One response of the chain, with at most READ_BYTES of its body."""

    target: _Target
    status: int
    reason: str
    latency_ms: float
    headers: CIMultiDict[str]
    charset: str
    raw: bytes
    cut: str  # "" when the whole body was read, else why reading stopped: "size" or "time"
    cert: dict[str, Any] | None
    verified: bool  # https with a verified certificate
    notes: tuple[str, ...] = ()


class _NotFetched(Refused):
    """A URL refused for its form (scheme, credentials), whatever its address."""


class _Stop(OpsloopError):
    """The chain ends before a response: `target` is the URL not fetched, `why` the line(s) saying why."""

    def __init__(self, target: str, label: str, why: str) -> None:
        super().__init__(why)
        self.target, self.label, self.why = target, label, why


def _http_url(url: str) -> URL:
    """The URL the model gave, or ToolError when it is no http(s) URL with a host."""
    try:
        parsed = URL(url)
    except ValueError as e:
        raise BadCall(f"url: {url!r} is not a valid URL ({e})") from None
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise BadCall(f"url: expected an http:// or https:// URL, got {url!r}")
    return parsed


async def _admit(url: URL, ctx: ToolContext, pins: PinnedResolver) -> _Target:
    """Apply the policy to one hop's URL (Refused), resolve a name once and pin it (OSError if it does not resolve)."""
    if url.scheme not in ("http", "https"):
        raise _NotFetched(f"{url.scheme or 'a relative'}: URLs are not fetched, only http:// and https://")
    if url.raw_user is not None or url.raw_password is not None:
        raise _NotFetched(f"{url.with_user(None)} carries credentials (user:password@), which check_url never sends")
    host, port = url.raw_host or "", url.port or (443 if url.scheme == "https" else 80)
    literal = check_host(host, ctx.http_allow)
    if literal is not None:
        if literal.version == 4 and str(literal) != host:  # 2130706433, 0x7f.1 ...: connect to what was checked
            url = url.with_host(str(literal))
        return _Target(url, (literal,))
    addresses = await resolve_host(host, port, ctx.http_allow, ctx.http_resolver)
    pins.pin(host, addresses)
    return _Target(url, addresses)


async def _read_body(resp: aiohttp.ClientResponse, deadline: float) -> tuple[bytes, str]:
    """At most READ_BYTES of the body, and why reading stopped early ("size", "time") or ""."""
    data = bytearray()
    try:
        async with asyncio.timeout_at(deadline):
            while len(data) <= READ_BYTES:
                chunk = await resp.content.read(READ_BYTES + 1 - len(data))
                if not chunk:
                    return bytes(data), ""
                data += chunk
    except TimeoutError:
        return bytes(data[:READ_BYTES]), "time"
    return bytes(data[:READ_BYTES]), "size"


async def _get(
    session: aiohttp.ClientSession, target: _Target, ssl_arg: ssl.SSLContext | bool, deadline: float
) -> _Hop:
    started = time.perf_counter()
    async with asyncio.timeout_at(deadline):
        resp = await session.get(target.url, ssl=ssl_arg, allow_redirects=False)
    async with resp:
        latency_ms = (time.perf_counter() - started) * 1000
        cert = _peer_cert(resp)
        raw, cut = await _read_body(resp, deadline)
        return _Hop(
            target=target,
            status=resp.status,
            reason=resp.reason or "",
            latency_ms=latency_ms,
            headers=CIMultiDict(resp.headers),
            charset=resp.charset or "utf-8",
            raw=raw,
            cut=cut,
            cert=cert,
            verified=target.url.scheme == "https" and ssl_arg is not False,
        )


async def _fetch(session: aiohttp.ClientSession, target: _Target, ctx: ToolContext, deadline: float) -> _Hop:
    """GET one hop; a certificate that fails verification is reported and the hop fetched without it."""
    if target.url.scheme != "https":
        return await _get(session, target, True, deadline)
    try:
        return await _get(session, target, verifying_context(ctx), deadline)
    except aiohttp.ClientConnectorCertificateError as e:
        hop = await _get(session, target, False, deadline)
        notes = (
            f"TLS: certificate verification FAILED: {e.certificate_error}",
            "(the response below was fetched without verifying the certificate)",
        )
        return dataclasses.replace(hop, notes=notes)


def _next_url(hop: _Hop) -> URL | None:
    if hop.status not in _REDIRECT_STATUSES or "Location" not in hop.headers:
        return None
    location = hop.headers["Location"]
    try:
        return hop.target.url.join(URL(location))
    except ValueError:
        raise _Stop(location, "not followed", f"redirect: Location {location!r} is not a valid URL") from None


def _down(url: URL | str, e: BaseException, ctx: ToolContext) -> str:
    if isinstance(e, TimeoutError):
        return f"DOWN {url}: no response within {ctx.http_timeout_s:g}s"
    if isinstance(e, aiohttp.ClientConnectorDNSError):
        return f"DOWN {url}: cannot resolve {e.host}"
    if isinstance(e, aiohttp.ClientConnectorError):
        return f"DOWN {url}: cannot connect to {e.host}:{e.port} ({e.os_error.strerror or e.os_error})"
    if isinstance(e, OSError):
        return f"DOWN {url}: cannot resolve {URL(str(url)).host} ({e.strerror or e})"
    return f"DOWN {url}: {type(e).__name__}: {e}"


async def _walk(
    session: aiohttp.ClientSession, start: URL, ctx: ToolContext, pins: PinnedResolver, deadline: float
) -> tuple[list[_Hop], _Stop | None]:
    """Follow the chain from `start`, each hop admitted first; the responses, and why it ended early."""
    hops: list[_Hop] = []
    url: URL | None = start
    while url is not None:
        if len(hops) > MAX_REDIRECTS:
            return hops, _Stop(str(url), "not followed", f"stopped: more than {MAX_REDIRECTS} redirects")
        try:
            async with asyncio.timeout_at(deadline):
                target = await _admit(url, ctx, pins)
        except Refused as e:
            text = f"refused: {e}" if isinstance(e, _NotFetched) else f"refused: {e}; {REFUSAL_HINT}"  # how to open it
            if not hops:
                raise ToolError(text) from None
            return hops, _Stop(str(url), "refused", text)
        except (OSError, TimeoutError) as e:
            return hops, _Stop(str(url), "DOWN", _down(url, e, ctx))
        try:
            hops.append(await _fetch(session, target, ctx, deadline))
        except (aiohttp.ClientError, TimeoutError) as e:
            return hops, _Stop(str(url), "DOWN", _down(url, e, ctx))
        try:
            url = _next_url(hops[-1])
        except _Stop as stop:
            return hops, stop
    return hops, None


# -- the report ------------------------------------------------------------------------------------


async def _tls_line(hop: _Hop, ctx: ToolContext, deadline: float) -> str:
    cert = hop.cert
    url = hop.target.url
    if cert is None and url.raw_host:
        with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
            async with asyncio.timeout_at(deadline):
                cert = await _fetch_cert(hop.target.addresses[0], url.raw_host, url.port or 443, verifying_context(ctx))
    return "TLS: " + (describe_cert(cert) if cert else "no certificate details available")


def _body_lines(hop: _Hop, ctx: ToolContext) -> list[str]:
    try:
        body = hop.raw.decode(hop.charset, errors="replace")
    except LookupError:
        body = hop.raw.decode("utf-8", errors="replace")
    size = hop.headers.get("Content-Length") or f"{len(hop.raw)}{'+' if hop.cut else ''}"
    lines = [f"content-type: {hop.headers.get('Content-Type', '-')}; {size} bytes"]
    if hop.cut == "size":
        lines.append(f"body cut: read stopped at {READ_BYTES // 1024} KiB")
    elif hop.cut == "time":
        lines.append(
            f"body cut: still arriving when the {ctx.http_timeout_s:g}s limit ([tools.http] timeout_s) "
            f"ran out; {len(hop.raw)} bytes read"
        )
    return [*lines, _body_line(body)]


def _body_line(body: str) -> str:
    # redact_slice: a secret crossing the cut goes whole (a raw cut could leave `Bearer eyJ` for nobody to spot)
    snippet = body if len(body) <= BODY_CHARS else redact_slice(body, 0, BODY_CHARS) + " …"
    return f"body (first {BODY_CHARS} chars):\n{snippet}" if snippet.strip() else "body: (empty)"


def _expected(expect_status: int, status: int) -> str:
    return f"expected status {expect_status}: {'OK' if status == expect_status else f'MISMATCH: got {status}'}"


async def _report(
    start: URL, hops: list[_Hop], stop: _Stop | None, expect_status: int | None, ctx: ToolContext, deadline: float
) -> str:
    last = hops[-1]
    total_ms = sum(h.latency_ms for h in hops)
    lines = [f"GET {start} -> {last.status} {last.reason} in {total_ms:.0f} ms"]
    if stop is not None:
        chain = [f"{h.target.url} ({h.status})" for h in hops] + [f"{stop.target} ({stop.label})"]
    else:
        chain = [f"{h.target.url} ({h.status})" for h in hops[:-1]] + [str(last.target.url)]
    if len(chain) > 1:
        lines.append("redirects: " + " -> ".join(chain))
    if stop is not None:
        lines.append(stop.why)
    if expect_status is not None:
        lines.append(_expected(expect_status, last.status))
    lines.extend(note for h in hops for note in h.notes)
    if last.verified:
        lines.append(await _tls_line(last, ctx, deadline))
    lines.extend(_body_lines(last, ctx))
    return "\n".join(lines)


# -- from an inventory host -------------------------------------------------------------------------

# curl writes this to stderr once it is done, even when the body was cut on the host (exit 23).
_CURL_OUT = "%{stderr}\n# opsloop %{http_code} %{time_total} %{num_redirects} %{url_effective}\n"
_CURL_CUT = 23  # curl could not write the body: the host's output bound (READ_BYTES) closed the pipe
_CURL_TLS = 60  # the certificate did not verify


async def _check_on(on: Host, url: URL, expect_status: int | None, ctx: ToolContext) -> str:
    """check_url run on an inventory host with curl: the same redirect and protocol limits, bounded there."""
    if url.raw_user is not None or url.raw_password is not None:
        raise ToolError(
            f"refused: {url.with_user(None)} carries credentials (user:password@), which check_url never sends"
        )
    argv = [
        "curl", "--silent", "--show-error", "--location", "--max-redirs", str(MAX_REDIRECTS),
        "--max-time", f"{ctx.http_timeout_s:g}", "--proto", "=http,https", "--proto-redir", "=http,https",
        "--user-agent", "opsloop-check_url", "--write-out", _CURL_OUT,
    ]  # fmt: skip
    timeout_s = ctx.http_timeout_s + 5
    result = await reach.run(ctx, on, [*argv, "--", str(url)], timeout_s=timeout_s, max_bytes=READ_BYTES)
    notes: list[str] = []
    if result.exit_status == _CURL_TLS:
        notes = [f"TLS: certificate verification FAILED: {_curl_error(result.stderr)}",
                 "(the response below was fetched without verifying the certificate)"]  # fmt: skip
        insecure = [*argv, "--insecure", "--", str(url)]
        result = await reach.run(ctx, on, insecure, timeout_s=timeout_s, max_bytes=READ_BYTES)
    if result.exit_status == 127:
        raise ToolError(f"{on.name}: curl is not available")
    done = re.search(r"^# opsloop (\d{3}) ([\d.]+) (\d+) (\S*)$", result.stderr, re.M)
    if done is None or done[1] == "000":
        return f"DOWN {url} from {on.name} (via curl): {_curl_error(result.stderr) or f'exit {result.exit_status}'}"
    status = int(done[1])
    lines = [f"GET {url} -> {status} in {float(done[2]) * 1000:.0f} ms from {on.name} (via curl)"]
    if int(done[3]):
        lines.append(f"redirects: {done[3]}, ending at {done[4]}")
    if result.exit_status not in (0, _CURL_CUT):
        lines.append(f"stopped: {_curl_error(result.stderr)}")
    if expect_status is not None:
        lines.append(_expected(expect_status, status))
    lines += notes
    if result.truncated or result.exit_status == _CURL_CUT:
        lines.append(f"body cut: read stopped at {READ_BYTES // 1024} KiB")
    return "\n".join([*lines, _body_line(result.stdout)])


def _curl_error(stderr: str) -> str:
    return next((line.strip() for line in stderr.splitlines() if line.startswith("curl: ")), "")


def _session(ctx: ToolContext, pins: PinnedResolver) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(resolver=pins, use_dns_cache=False)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=ctx.http_timeout_s),
        headers={"User-Agent": "opsloop-check_url"},
        trace_configs=list(ctx.http_trace_configs) or None,
    )


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def check_url(url: str, expect_status: int | None = None, host: str | None = None, *, ctx: ToolContext) -> str:
    """Fetch a URL with GET, as a user would, and say how it answered.

    Returns the HTTP status, the latency in milliseconds, the TLS certificate's expiry (https), each redirect hop,
    and the first 500 characters of the body; a status other than expect_status is flagged. Reaches public
    addresses only (plus hosts the operator allowed); redirects are followed up to 5 hops, each checked the same
    way, and the whole call is bounded by the configured HTTP timeout (10 s by default). From an inventory host
    (host=...) it runs curl there, which reaches that host's own network and internal names (no certificate
    details: use tls_check with the same host). Use it to confirm whether an endpoint users report as down is
    really failing, and how.

    Args:
        url: an http:// or https:// URL.
        expect_status: the status code the endpoint should answer with; a different one is flagged.
        host: where to check from: an inventory host (see list_hosts), to see its own network and internal names,
            or "self" / nothing (the default) for the bot, which reaches public addresses only unless
            [tools.http] allow opens more.
    """
    start = _http_url(url)
    on = reach.target(host, ctx) if host else None
    if on is not None:
        return await _check_on(on, start, expect_status, ctx)
    deadline = asyncio.get_running_loop().time() + ctx.http_timeout_s
    pins = PinnedResolver()
    async with _session(ctx, pins) as session:
        hops, stop = await _walk(session, start, ctx, pins, deadline)
        if not hops:
            assert stop is not None
            return stop.why
        return await _report(start, hops, stop, expect_status, ctx, deadline)
