"""HTTP(S) checks: status, latency, TLS certificate expiry and the start of the body."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from tools.registry import Category, ToolContext, ToolError, tool

BODY_CHARS = 500
_READ_BYTES = 64 * 1024
CERT_WARN_DAYS = 14


def _ssl_context(ctx: ToolContext) -> ssl.SSLContext:
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


async def _fetch_cert(host: str, port: int, sslctx: ssl.SSLContext, timeout_s: float) -> dict[str, Any] | None:
    """A separate TLS handshake with the same verification. aiohttp releases a connection as soon as a small
    body has arrived, so the response usually no longer holds the certificate by the time we look."""
    async with asyncio.timeout(timeout_s):
        _reader, writer = await asyncio.open_connection(host, port, ssl=sslctx, server_hostname=host)
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


@dataclass(frozen=True)
class _Response:
    status: int
    reason: str
    latency_ms: float
    url: URL
    history: list[tuple[int, str]]
    headers: CIMultiDict[str]
    charset: str
    raw: bytes
    cert: dict[str, Any] | None


async def _get(session: aiohttp.ClientSession, url: str, ssl_arg: ssl.SSLContext | bool) -> _Response:
    started = time.perf_counter()
    async with session.get(url, ssl=ssl_arg, allow_redirects=True, max_redirects=10) as resp:
        latency_ms = (time.perf_counter() - started) * 1000
        cert = _peer_cert(resp)
        raw = await resp.content.read(_READ_BYTES)
        return _Response(
            status=resp.status,
            reason=resp.reason or "",
            latency_ms=latency_ms,
            url=resp.url,
            history=[(h.status, str(h.url)) for h in resp.history],
            headers=CIMultiDict(resp.headers),
            charset=resp.charset or "utf-8",
            raw=raw,
            cert=cert,
        )


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def check_url(url: str, expect_status: int | None = None, *, ctx: ToolContext) -> str:
    """Fetch a URL: HTTP status, latency, TLS certificate expiry and the first 500 characters of the body.

    Args:
        url: an http:// or https:// URL.
        expect_status: the status code the endpoint should answer with; a different one is flagged.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ToolError(f"url: expected an http:// or https:// URL, got {url!r}")
    https = parts.scheme == "https"
    timeout = aiohttp.ClientTimeout(total=ctx.http_timeout_s)
    notes: list[str] = []
    verified = https
    async with aiohttp.ClientSession(timeout=timeout, headers={"User-Agent": "opsloop-check_url"}) as session:
        try:
            try:
                got = await _get(session, url, _ssl_context(ctx) if https else True)
            except aiohttp.ClientConnectorCertificateError as e:
                verified = False
                notes.append(f"TLS: certificate verification FAILED: {e.certificate_error}")
                notes.append("(the response below was fetched without verifying the certificate)")
                got = await _get(session, url, False)
        except TimeoutError:
            return f"DOWN {url}: no response within {ctx.http_timeout_s:g}s"
        except aiohttp.ClientConnectorError as e:
            return f"DOWN {url}: cannot connect to {e.host}:{e.port} ({e.os_error.strerror or e.os_error})"
        except aiohttp.ClientError as e:
            return f"DOWN {url}: {type(e).__name__}: {e}"
    lines = [f"GET {url} -> {got.status} {got.reason} in {got.latency_ms:.0f} ms"]
    if got.history:
        hops = " -> ".join(f"{u} ({s})" for s, u in got.history)
        lines.append(f"redirects: {hops} -> {got.url}")
    if expect_status is not None:
        verdict = "OK" if got.status == expect_status else f"MISMATCH: got {got.status}"
        lines.append(f"expected status {expect_status}: {verdict}")
    lines.extend(notes)
    if verified and got.url.scheme == "https":
        cert = got.cert
        if cert is None and got.url.host:
            cert = await _fetch_cert(got.url.host, got.url.port or 443, _ssl_context(ctx), ctx.http_timeout_s)
        lines.append("TLS: " + (describe_cert(cert) if cert else "no certificate details available"))
    try:
        body = got.raw.decode(got.charset, errors="replace")
    except LookupError:
        body = got.raw.decode("utf-8", errors="replace")
    length = got.headers.get("Content-Length") or f"{len(got.raw)}{'+' if len(got.raw) == _READ_BYTES else ''}"
    lines.append(f"content-type: {got.headers.get('Content-Type', '-')}; {length} bytes")
    snippet = body[:BODY_CHARS] + (" …" if len(body) > BODY_CHARS else "")
    lines.append(f"body (first {BODY_CHARS} chars):\n{snippet}" if snippet.strip() else "body: (empty)")
    return "\n".join(lines)
