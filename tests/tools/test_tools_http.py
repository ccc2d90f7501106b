"""check_url against local aiohttp servers: plain HTTP, HTTPS with a self-signed certificate made by openssl,
and the SSRF guard (refused targets, redirects re-checked per hop, DNS pinned, size and time caps).

Every connection goes to 127.0.0.1 (opened with [tools.http] allow); names resolve through a stub
resolver, and refused targets (169.254.169.254, fd00:ec2::254 ...) are only ever *named* in a redirect:
an aiohttp TraceConfig records every request and connection the tool starts, to show none went there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import re
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tools import ToolContext, ToolError
from tools.builtin import check_url
from tools.builtin.http import READ_BYTES, PinnedResolver, describe_cert
from tools.netguard import IPAddress, parse_allowlist

Serve = Callable[..., Awaitable[str]]
IMDS_CREDENTIALS = "http://169.254.169.254/latest/meta-data/iam/security-credentials/x"
HINT = (  # after every refusal: how an operator opens a target, and how the model checks it from inside
    "opsloop's check_url only reaches public addresses from the bot unless [tools.http] allow lists it; "
    "host=<an inventory host> runs the check from that host, inside its network"
)


class StubDNS:
    """A resolver with a list of answers per name, used in turn (the last one repeats); records each call."""

    def __init__(self, answers: dict[str, list[list[str]]] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[IPAddress]:
        asked = sum(1 for c in self.calls if c == host)
        self.calls.append(host)
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        turns = self.answers[host]
        return [ipaddress.ip_address(a) for a in turns[min(asked, len(turns) - 1)]]


@dataclasses.dataclass
class Watch:
    """What the tool's aiohttp session started: requests (URLs) and new connections (by host)."""

    requests: list[str] = dataclasses.field(default_factory=list)
    connections: list[str] = dataclasses.field(default_factory=list)

    def trace(self) -> aiohttp.TraceConfig:
        config = aiohttp.TraceConfig()

        async def request_start(_s: Any, _c: Any, params: aiohttp.TraceRequestStartParams) -> None:
            self.requests.append(str(params.url))

        async def connection_start(_s: Any, context: SimpleNamespace, _p: Any) -> None:
            self.connections.append(self.requests[-1])

        config.on_request_start.append(request_start)
        config.on_connection_create_start.append(connection_start)
        return config


def loopback(
    *, allow: Sequence[str] = ("127.0.0.1",), dns: StubDNS | None = None, watch: Watch | None = None, **kw: Any
) -> ToolContext:
    """A ToolContext that opens 127.0.0.1 (and `allow`), resolves through a stub, and is watched."""
    return ToolContext(
        http_allow=parse_allowlist(allow),
        http_resolver=dns or StubDNS(),
        http_trace_configs=(watch.trace(),) if watch else (),
        **kw,
    )


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start an aiohttp app on a random loopback port (or a given one); returns its base URL."""
    runners: list[web.AppRunner] = []

    async def start(
        app: web.Application, ssl_context: ssl.SSLContext | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> str:
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"{'https' if ssl_context else 'http'}://{host}:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def app_with(routes: dict[str, Handler], seen: list[str] | None = None) -> web.Application:
    """An app serving `routes`; every request's path goes into `seen`."""

    @web.middleware
    async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
        if seen is not None:
            seen.append(request.path_qs)
        return await handler(request)

    app = web.Application(middlewares=[record])
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    return app


async def ok(_: web.Request) -> web.Response:
    return web.Response(text="healthy " + "x" * 1000, content_type="text/plain")


async def unavailable(_: web.Request) -> web.Response:
    return web.Response(status=503, text="maintenance")


async def moved(_: web.Request) -> web.Response:
    raise web.HTTPFound("/health")


def redirect_to(location: str) -> Handler:
    async def handler(_: web.Request) -> web.Response:
        raise web.HTTPFound(location)

    return handler


# -- what check_url reports --------------------------------------------------------------------------


async def test_check_url_reports_status_latency_and_the_start_of_the_body(serve: Serve) -> None:
    base = await serve(app_with({"/health": ok}))
    out = await check_url.bind(loopback()).run({"url": f"{base}/health", "expect_status": 200})
    lines = out.splitlines()
    assert re.fullmatch(rf"GET {base}/health -> 200 OK in \d+ ms", lines[0])
    assert lines[1] == "expected status 200: OK"
    assert lines[2] == "content-type: text/plain; charset=utf-8; 1008 bytes"
    assert lines[3] == "body (first 500 chars):"
    assert lines[4] == "healthy " + "x" * 492 + " …"


async def test_a_secret_crossing_the_body_cut_goes_whole(serve: Serve) -> None:
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJvcHMifQ.c2lnbmF0dXJl"

    async def leaky(_: web.Request) -> web.Response:
        return web.Response(text="x" * 489 + " Bearer " + token + " tail", content_type="text/plain")

    base = await serve(app_with({"/": leaky}))
    out = await check_url.bind(loopback()).run({"url": f"{base}/"})
    body = out.split("body (first 500 chars):\n", 1)[1]
    assert body in ("x" * 489 + " …", "x" * 489 + " [REDACTED] …"), body  # not even `Bearer eyJ` is left of it
    assert "eyJ" not in out


async def test_unexpected_status_is_flagged(serve: Serve) -> None:
    base = await serve(app_with({"/": unavailable}))
    out = await check_url.bind(loopback()).run({"url": f"{base}/", "expect_status": 200})
    assert " -> 503 Service Unavailable in " in out.splitlines()[0]
    assert "expected status 200: MISMATCH: got 503" in out.splitlines()


async def test_redirects_are_followed_and_shown(serve: Serve) -> None:
    base = await serve(app_with({"/old": moved, "/health": ok}))
    out = await check_url.bind(loopback()).run({"url": f"{base}/old"})
    assert out.splitlines()[0].startswith(f"GET {base}/old -> 200 OK in ")
    assert out.splitlines()[1] == f"redirects: {base}/old (302) -> {base}/health"


async def test_every_hop_of_a_redirect_chain_is_shown(serve: Serve) -> None:
    base = await serve(app_with({"/a": redirect_to("/b"), "/b": redirect_to("/c"), "/c": ok}))
    out = await check_url.bind(loopback()).run({"url": f"{base}/a"})
    assert out.splitlines()[1] == f"redirects: {base}/a (302) -> {base}/b (302) -> {base}/c"


async def test_refused_connection_is_reported_as_down() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    out = await check_url.bind(loopback()).run({"url": f"http://127.0.0.1:{port}/"})
    assert out.startswith(f"DOWN http://127.0.0.1:{port}/: cannot connect to 127.0.0.1:{port} (")


async def test_a_name_that_does_not_resolve_is_reported_as_down() -> None:
    out = await check_url.bind(loopback()).run({"url": "http://nowhere.invalid/"})
    assert out == "DOWN http://nowhere.invalid/: cannot resolve nowhere.invalid (Name or service not known)"


@pytest.mark.parametrize("url", ["ftp://example.com/", "localhost:8080", "http://"])
async def test_non_http_url_is_a_tool_error(url: str) -> None:
    with pytest.raises(ToolError, match="url: expected an http:// or https:// URL"):
        await check_url.run({"url": url})


# -- refused targets ---------------------------------------------------------------------------------


async def test_loopback_is_refused_without_the_allowlist_and_never_contacted(serve: Serve) -> None:
    seen: list[str] = []
    base = await serve(app_with({"/health": ok}, seen))
    watch = Watch()
    ctx = ToolContext(http_resolver=StubDNS(), http_trace_configs=(watch.trace(),))
    with pytest.raises(ToolError) as caught:
        await check_url.bind(ctx).run({"url": f"{base}/health"})
    assert str(caught.value) == (f"refused: 127.0.0.1 is a loopback address; {HINT}")
    assert (seen, watch.requests) == ([], [])


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local/cloud metadata address"),
        (
            "http://[fd00:ec2::254]/latest/meta-data/",
            "fd00:ec2::254 is a unique-local (fc00::/7) address (AWS IPv6 metadata endpoint)",
        ),
        ("http://metadata.google.internal/computeMetadata/v1/", "metadata.google.internal is a cloud metadata name"),
        ("http://2852039166/", "2852039166 means 169.254.169.254, a link-local/cloud metadata address"),
        ("http://10.0.0.1:8500/v1/kv/", "10.0.0.1 is a private (RFC 1918) address"),
    ],
)
async def test_internal_targets_are_refused_before_any_connection(url: str, reason: str) -> None:
    watch, dns = Watch(), StubDNS()
    with pytest.raises(ToolError) as caught:
        await check_url.bind(loopback(dns=dns, watch=watch)).run({"url": url})
    assert str(caught.value).startswith(f"refused: {reason}; ")
    assert (watch.requests, dns.calls) == ([], [])


async def test_a_url_with_credentials_is_refused() -> None:
    with pytest.raises(ToolError) as caught:
        await check_url.bind(loopback()).run({"url": "http://admin:hunter2@127.0.0.1:9/"})
    assert str(caught.value) == (
        "refused: http://127.0.0.1:9/ carries credentials (user:password@), which check_url never sends"
    )


@pytest.mark.parametrize(
    ("location", "reason"),
    [
        (IMDS_CREDENTIALS, "169.254.169.254 is a link-local/cloud metadata address"),
        ("http://[fd00:ec2::254]/", "fd00:ec2::254 is a unique-local (fc00::/7) address (AWS IPv6 metadata endpoint)"),
        (
            "http://[::ffff:169.254.169.254]/latest/",
            "::ffff:a9fe:a9fe (IPv4-mapped 169.254.169.254) is a link-local/cloud metadata address",
        ),
        (
            "http://0251.0376.0251.0376/",
            "0251.0376.0251.0376 means 169.254.169.254, a link-local/cloud metadata address",
        ),
        ("http://metadata.google.internal./computeMetadata/v1/", "metadata.google.internal is a cloud metadata name"),
        ("http://127.0.0.2:8080/admin", "127.0.0.2 is a loopback address"),
    ],
)
async def test_a_redirect_to_an_internal_target_is_refused_at_the_hop(serve: Serve, location: str, reason: str) -> None:
    seen: list[str] = []
    base = await serve(app_with({"/go": redirect_to(location)}, seen))
    watch, dns = Watch(), StubDNS()
    out = await check_url.bind(loopback(dns=dns, watch=watch)).run({"url": f"{base}/go", "expect_status": 200})
    lines = out.splitlines()
    assert lines[0].startswith(f"GET {base}/go -> 302 Found in ")
    assert lines[1].startswith(f"redirects: {base}/go (302) -> ") and lines[1].endswith(" (refused)")
    assert lines[2] == f"refused: {reason}; {HINT}"
    assert lines[3] == "expected status 200: MISMATCH: got 302"
    # the only request and the only connection were the first hop's; no lookup for the refused one
    assert (watch.requests, watch.connections, dns.calls, seen) == ([f"{base}/go"], [f"{base}/go"], [], ["/go"])


async def test_a_redirect_to_another_scheme_is_refused(serve: Serve) -> None:
    base = await serve(app_with({"/go": redirect_to("file:///etc/passwd")}))
    out = await check_url.bind(loopback()).run({"url": f"{base}/go"})
    assert out.splitlines()[1] == f"redirects: {base}/go (302) -> file:///etc/passwd (refused)"
    assert out.splitlines()[2] == "refused: file: URLs are not fetched, only http:// and https://"


async def test_redirects_stop_after_five_hops(serve: Serve) -> None:
    seen: list[str] = []

    async def again(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"/hop/{int(request.match_info['n']) + 1}")

    app = app_with({}, seen)
    app.router.add_get("/hop/{n}", again)
    base = await serve(app)
    out = await check_url.bind(loopback()).run({"url": f"{base}/hop/0"})
    hops = " -> ".join(f"{base}/hop/{n} (302)" for n in range(6))
    assert out.splitlines()[1] == f"redirects: {hops} -> {base}/hop/6 (not followed)"
    assert out.splitlines()[2] == "stopped: more than 5 redirects"
    assert seen == [f"/hop/{n}" for n in range(6)]


# -- names: resolved once, connection pinned ---------------------------------------------------------


async def test_an_allowed_hostname_is_reached_at_its_resolved_address_with_its_own_host_header(serve: Serve) -> None:
    hosts: list[str] = []

    async def status(request: web.Request) -> web.Response:
        hosts.append(request.host)
        return web.Response(text="all systems go")

    base = await serve(app_with({"/": status}))
    port = base.rsplit(":", 1)[1]
    dns = StubDNS({"status.internal.example": [["127.0.0.1"]]})
    ctx = loopback(allow=["status.internal.example"], dns=dns)  # the name alone: trusted wherever it resolves
    out = await check_url.bind(ctx).run({"url": f"http://status.internal.example:{port}/"})
    assert out.splitlines()[0].startswith(f"GET http://status.internal.example:{port}/ -> 200 OK in ")
    assert (hosts, dns.calls) == ([f"status.internal.example:{port}"], ["status.internal.example"])


async def test_a_name_resolving_to_a_refused_address_is_refused_before_connecting() -> None:
    watch, dns = Watch(), StubDNS({"status.example.com": [["10.1.2.3"]]})
    with pytest.raises(ToolError) as caught:
        await check_url.bind(loopback(dns=dns, watch=watch)).run({"url": "http://status.example.com/"})
    assert (
        str(caught.value) == f"refused: status.example.com resolves to 10.1.2.3, a private (RFC 1918) address; {HINT}"
    )
    assert watch.requests == []


async def test_dns_rebinding_cannot_move_the_connection_off_the_checked_address(serve: Serve) -> None:
    """The name answers 127.0.0.1 (allowed) when checked and 127.0.0.2 (refused) afterwards: the request still
    goes to 127.0.0.1, because the connection uses the checked answer and DNS is never asked again."""
    checked_seen: list[str] = []
    other_seen: list[str] = []
    base = await serve(app_with({"/": ok}, checked_seen))
    port = int(base.rsplit(":", 1)[1])
    await serve(app_with({"/": ok}, other_seen), host="127.0.0.2", port=port)
    dns = StubDNS({"rebind.invalid": [["127.0.0.1"], ["127.0.0.2"]]})
    out = await check_url.bind(loopback(dns=dns)).run({"url": f"http://rebind.invalid:{port}/"})
    assert " -> 200 OK in " in out.splitlines()[0]
    assert (checked_seen, other_seen, dns.calls) == (["/"], [], ["rebind.invalid"])


async def test_each_redirect_hop_to_a_name_is_resolved_and_checked_again(serve: Serve) -> None:
    seen: list[str] = []
    base = await serve(app_with({"/a": redirect_to("/b"), "/b": ok}, seen))
    port = int(base.rsplit(":", 1)[1])
    dns = StubDNS({"rebind.invalid": [["127.0.0.1"], ["127.0.0.2"]]})
    out = await check_url.bind(loopback(dns=dns)).run({"url": f"http://rebind.invalid:{port}/a"})
    assert out.splitlines()[2] == f"refused: rebind.invalid resolves to 127.0.0.2, a loopback address; {HINT}"
    assert (seen, dns.calls) == (["/a"], ["rebind.invalid", "rebind.invalid"])


async def test_the_pinned_resolver_answers_only_the_checked_addresses() -> None:
    """aiohttp asks this resolver when it connects: whatever DNS says by then, it hands out only what was checked."""
    pins = PinnedResolver()
    pins.pin("status.example.com", [ipaddress.ip_address("198.51.100.7"), ipaddress.ip_address("2001:db8::7")])
    got = await pins.resolve("STATUS.example.com.", 443)
    assert [(r["host"], r["port"], r["family"]) for r in got] == [
        ("198.51.100.7", 443, socket.AF_INET),
        ("2001:db8::7", 443, socket.AF_INET6),
    ]
    assert [r["host"] for r in await pins.resolve("status.example.com", 443, socket.AF_INET)] == ["198.51.100.7"]
    with pytest.raises(OSError, match="was not checked before connecting"):
        await pins.resolve("other.example.com", 443)


async def test_odd_spellings_of_an_allowed_address_reach_that_address(serve: Serve) -> None:
    seen: list[str] = []
    base = await serve(app_with({"/health": ok}, seen))
    port = base.rsplit(":", 1)[1]
    out = await check_url.bind(loopback()).run({"url": f"http://2130706433:{port}/health"})
    assert out.splitlines()[0].startswith(f"GET http://2130706433:{port}/health -> 200 OK in ")
    assert seen == ["/health"]


# -- size and time caps --------------------------------------------------------------------------------


async def test_the_body_read_stops_at_64_kib_and_says_so(serve: Serve) -> None:
    hung_up = asyncio.Event()

    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.content_type = "text/plain"
        await resp.prepare(request)
        try:
            for _ in range(1024):  # at most 64 MiB, far more than the client reads
                await resp.write(b"y" * 65536)
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            hung_up.set()
        return resp

    base = await serve(app_with({"/": endless}))
    out = await check_url.bind(loopback()).run({"url": f"{base}/"})
    lines = out.splitlines()
    assert lines[1] == f"content-type: text/plain; {READ_BYTES}+ bytes"
    assert lines[2] == "body cut: read stopped at 64 KiB"
    assert lines[4] == "y" * 500 + " …"
    await asyncio.wait_for(hung_up.wait(), timeout=10)  # the client hung up instead of reading the rest


async def test_slow_endpoint_is_reported_as_down_after_the_configured_timeout(serve: Serve) -> None:
    release = asyncio.Event()

    async def stuck(_: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="late")

    base = await serve(app_with({"/": stuck}))
    try:
        out = await check_url.bind(loopback(http_timeout_s=0.2)).run({"url": f"{base}/"})
    finally:
        release.set()
    assert out == f"DOWN {base}/: no response within 0.2s"


async def test_a_body_still_arriving_at_the_deadline_is_cut_and_reported(serve: Serve) -> None:
    release = asyncio.Event()

    async def trickle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.content_type = "text/plain"
        await resp.prepare(request)
        await resp.write(b"first part ")
        await release.wait()
        return resp

    base = await serve(app_with({"/": trickle}))
    try:
        out = await check_url.bind(loopback(http_timeout_s=1)).run({"url": f"{base}/"})
    finally:
        release.set()
    lines = out.splitlines()
    assert " -> 200 OK in " in lines[0]
    assert lines[2] == ("body cut: still arriving when the 1s limit ([tools.http] timeout_s) ran out; 11 bytes read")
    assert lines[4] == "first part "


async def test_the_time_limit_covers_every_hop(serve: Serve) -> None:
    release = asyncio.Event()

    async def stuck(_: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="late")

    base = await serve(app_with({"/go": redirect_to("/stuck"), "/stuck": stuck}))
    try:
        out = await check_url.bind(loopback(http_timeout_s=1)).run({"url": f"{base}/go"})
    finally:
        release.set()
    assert out.splitlines()[1] == f"redirects: {base}/go (302) -> {base}/stuck (DOWN)"
    assert out.splitlines()[2] == f"DOWN {base}/stuck: no response within 1s"


# -- TLS -------------------------------------------------------------------------------------------------


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "30",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,DNS:status.internal.example,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*map(str, certificate))
    return ctx


TLS_LINE = (
    r"TLS: certificate valid until \d{4}-\d\d-\d\d \d\d:\d\d UTC \((29|30) days left\); "
    r"subject commonName=localhost; issuer commonName=localhost"
)


async def test_https_reports_certificate_expiry(serve: Serve, certificate: tuple[Path, Path]) -> None:
    base = await serve(app_with({"/health": ok}), ssl_context=server_tls(certificate))
    out = await check_url.bind(loopback(http_ca_file=certificate[0])).run({"url": f"{base}/health"})
    tls = next(line for line in out.splitlines() if line.startswith("TLS: "))
    assert re.fullmatch(TLS_LINE, tls)
    assert " -> 200 OK in " in out.splitlines()[0]


async def test_https_to_a_pinned_name_verifies_the_certificate_for_that_name(
    serve: Serve, certificate: tuple[Path, Path]
) -> None:
    base = await serve(app_with({"/health": ok}), ssl_context=server_tls(certificate))
    port = base.rsplit(":", 1)[1]
    dns = StubDNS({"status.internal.example": [["127.0.0.1"]]})
    ctx = loopback(allow=["status.internal.example"], dns=dns, http_ca_file=certificate[0])
    out = await check_url.bind(ctx).run({"url": f"https://status.internal.example:{port}/health"})
    assert " -> 200 OK in " in out.splitlines()[0]
    assert re.fullmatch(TLS_LINE, next(line for line in out.splitlines() if line.startswith("TLS: ")))
    assert dns.calls == ["status.internal.example"]


async def test_https_with_an_untrusted_certificate_says_verification_failed(
    serve: Serve, certificate: tuple[Path, Path]
) -> None:
    base = await serve(app_with({"/health": ok}), ssl_context=server_tls(certificate))
    out = await check_url.bind(loopback()).run({"url": f"{base}/health"})
    lines = out.splitlines()
    assert " -> 200 OK in " in lines[0]
    assert lines[1].startswith("TLS: certificate verification FAILED: ")
    assert "self-signed" in lines[1] or "self signed" in lines[1]
    assert lines[2] == "(the response below was fetched without verifying the certificate)"


def test_describe_cert_warns_when_expiry_is_close() -> None:
    cert = {
        "notAfter": "Mar  8 12:00:00 2030 GMT",
        "subject": ((("commonName", "api.example.com"),),),
        "issuer": ((("organizationName", "Example CA"),),),
    }
    now = ssl.cert_time_to_seconds("Mar  1 12:00:00 2030 GMT")
    assert describe_cert(cert, now=now) == (
        "certificate valid until 2030-03-08 12:00 UTC (7 days left); subject commonName=api.example.com; "
        "issuer organizationName=Example CA\nWARNING the certificate expires in less than 14 days"
    )
    later = ssl.cert_time_to_seconds("Mar 10 12:00:00 2030 GMT")
    assert describe_cert(cert, now=later).startswith(
        "certificate valid until 2030-03-08 12:00 UTC (EXPIRED 2 days ago)"
    )
