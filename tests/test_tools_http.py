"""check_url against local aiohttp servers: plain HTTP, and HTTPS with a self-signed certificate made by openssl."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from tools import ToolContext, ToolError
from tools.builtin import check_url
from tools.builtin.http import describe_cert

Serve = Callable[..., Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start an aiohttp app on a random local port; returns its base URL."""
    runners: list[web.AppRunner] = []

    async def start(app: web.Application, ssl_context: ssl.SSLContext | None = None) -> str:
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


def app_with(routes: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]]) -> web.Application:
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    return app


async def ok(_: web.Request) -> web.Response:
    return web.Response(text="healthy " + "x" * 1000, content_type="text/plain")


async def unavailable(_: web.Request) -> web.Response:
    return web.Response(status=503, text="maintenance")


async def moved(_: web.Request) -> web.Response:
    raise web.HTTPFound("/health")


async def test_check_url_reports_status_latency_and_the_start_of_the_body(serve: Serve) -> None:
    base = await serve(app_with({"/health": ok}))
    out = await check_url.run({"url": f"{base}/health", "expect_status": 200})
    lines = out.splitlines()
    assert re.fullmatch(rf"GET {base}/health -> 200 OK in \d+ ms", lines[0])
    assert lines[1] == "expected status 200: OK"
    assert lines[2] == "content-type: text/plain; charset=utf-8; 1008 bytes"
    assert lines[3] == "body (first 500 chars):"
    assert lines[4] == "healthy " + "x" * 492 + " …"


async def test_unexpected_status_is_flagged(serve: Serve) -> None:
    base = await serve(app_with({"/": unavailable}))
    out = await check_url.run({"url": f"{base}/", "expect_status": 200})
    assert " -> 503 Service Unavailable in " in out.splitlines()[0]
    assert "expected status 200: MISMATCH: got 503" in out.splitlines()


async def test_redirects_are_followed_and_shown(serve: Serve) -> None:
    base = await serve(app_with({"/old": moved, "/health": ok}))
    out = await check_url.run({"url": f"{base}/old"})
    assert out.splitlines()[1] == f"redirects: {base}/old (302) -> {base}/health"


async def test_refused_connection_is_reported_as_down() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    out = await check_url.run({"url": f"http://127.0.0.1:{port}/"})
    assert out.startswith(f"DOWN http://127.0.0.1:{port}/: cannot connect to 127.0.0.1:{port} (")


async def test_slow_endpoint_is_reported_as_down_after_the_configured_timeout(serve: Serve) -> None:
    release = asyncio.Event()

    async def stuck(_: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="late")

    base = await serve(app_with({"/": stuck}))
    try:
        out = await check_url.bind(ToolContext(http_timeout_s=0.2)).run({"url": f"{base}/"})
    finally:
        release.set()
    assert out == f"DOWN {base}/: no response within 0.2s"


@pytest.mark.parametrize("url", ["ftp://example.com/", "localhost:8080", "http://"])
async def test_non_http_url_is_a_tool_error(url: str) -> None:
    with pytest.raises(ToolError, match="url: expected an http:// or https:// URL"):
        await check_url.run({"url": url})


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "30", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key


def server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*map(str, certificate))
    return ctx


async def test_https_reports_certificate_expiry(serve: Serve, certificate: tuple[Path, Path]) -> None:
    base = await serve(app_with({"/health": ok}), ssl_context=server_tls(certificate))
    out = await check_url.bind(ToolContext(http_ca_file=certificate[0])).run({"url": f"{base}/health"})
    tls = next(line for line in out.splitlines() if line.startswith("TLS: "))
    assert re.fullmatch(r"TLS: certificate valid until \d{4}-\d\d-\d\d \d\d:\d\d UTC \((29|30) days left\); "
                        r"subject commonName=localhost; issuer commonName=localhost", tls)
    assert " -> 200 OK in " in out.splitlines()[0]


async def test_https_with_an_untrusted_certificate_says_verification_failed(
    serve: Serve, certificate: tuple[Path, Path]
) -> None:
    base = await serve(app_with({"/health": ok}), ssl_context=server_tls(certificate))
    out = await check_url.run({"url": f"{base}/health"})
    lines = out.splitlines()
    assert " -> 200 OK in " in lines[0]
    assert lines[1].startswith("TLS: certificate verification FAILED: ")
    assert "self-signed" in lines[1] or "self signed" in lines[1]
    assert lines[2] == "(the response below was fetched without verifying the certificate)"


def test_describe_cert_warns_when_expiry_is_close() -> None:
    cert = {"notAfter": "Mar  8 12:00:00 2030 GMT", "subject": ((("commonName", "api.example.com"),),),
            "issuer": ((("organizationName", "Example CA"),),)}
    now = ssl.cert_time_to_seconds("Mar  1 12:00:00 2030 GMT")
    assert describe_cert(cert, now=now) == (
        "certificate valid until 2030-03-08 12:00 UTC (7 days left); subject commonName=api.example.com; "
        "issuer organizationName=Example CA\nWARNING the certificate expires in less than 14 days")
    later = ssl.cert_time_to_seconds("Mar 10 12:00:00 2030 GMT")
    assert describe_cert(cert, now=later).startswith(
        "certificate valid until 2030-03-08 12:00 UTC (EXPIRED 2 days ago)")
