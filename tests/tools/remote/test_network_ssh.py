"""The network checks from an inventory host: the real test sshd on 127.0.0.1 runs getent, bash's /dev/tcp,
openssl s_client and curl against loopback servers this test starts; no [tools.http] allow is needed there."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.netservers import closed_port, make_chain, tls_server
from tests.support.sshserver import SshServer
from tests.tools.remote.test_host_tools_ssh import host_for
from tools import ToolRegistry
from tools.config import build_registry
from tools.remote import SshHosts
from tools.remote.inventory import Inventory, SshSettings


@pytest.fixture
async def tools(sshd: SshServer) -> AsyncIterator[ToolRegistry]:
    registry = await build_registry({}, reaches={"ssh": SshHosts(Inventory(SshSettings(), (host_for(sshd),)))})
    yield registry
    await registry.aclose()


async def call(registry: ToolRegistry, tool_name: str, **args: object) -> str:
    found = registry.get(tool_name)
    assert found is not None
    return await found.run({"host": "web-03", **args})


async def test_tls_check_from_a_host_reports_the_expiring_certificate(tools: ToolRegistry, tmp_path: Path) -> None:
    async with tls_server(make_chain(tmp_path, names=["other.example"], days_left=3.5)) as port:
        out = await call(tools, "tls_check", target_host="127.0.0.1", port=port, server_name="api.shop.test")
    assert re.search(
        rf"TLS 127\.0\.0\.1:{port} from web-03 \(via openssl s_client\), server name api\.shop\.test: TLSv1\.3", out
    )
    assert "verification: FAILED: self-signed certificate in certificate chain" in out
    assert "name api.shop.test: MISMATCH: the certificate names other.example" in out
    assert "(3 days left; EXPIRES SOON, under 14 days)" in out


async def test_tcp_check_from_a_host(tools: ToolRegistry, tmp_path: Path) -> None:
    async with tls_server(make_chain(tmp_path, names=["x.test"], days_left=30)) as port:
        out = await call(tools, "tcp_check", target_host="127.0.0.1", port=port)
    assert re.fullmatch(rf"TCP 127\.0\.0\.1:{port} from web-03 \(via bash /dev/tcp\)\nCONNECTED in \d+ ms", out)
    closed = closed_port()
    out = await call(tools, "tcp_check", target_host="127.0.0.1", port=closed)
    assert out.endswith("REFUSED (the host answered; nothing listens on that port, or a firewall rejects it)")


async def test_dns_lookup_from_a_host_uses_its_own_resolver(tools: ToolRegistry) -> None:
    out = await call(tools, "dns_lookup", name="localhost")
    assert out.splitlines()[0] == (
        "DNS localhost from web-03 (via getent, the host's own resolver: /etc/hosts and DNS; no TTLs)"
    )
    assert re.fullmatch(r"A: answered in \d+ ms", out.splitlines()[1])
    assert "  localhost  A  127.0.0.1" in out.splitlines()
    missing = await call(tools, "dns_lookup", name="nothing-here.invalid")
    assert re.search(r"A: NOT FOUND: the host's resolver has no A answer for nothing-here\.invalid", missing)


async def test_check_url_from_a_host_runs_curl_there(tools: ToolRegistry) -> None:
    async def maintenance(_: web.Request) -> web.Response:
        return web.Response(status=503, text="maintenance")

    app = web.Application()
    app.router.add_get("/health", maintenance)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        out = await call(tools, "check_url", url=f"http://127.0.0.1:{port}/health", expect_status=200)
    finally:
        await runner.cleanup()
    lines = out.splitlines()
    assert re.fullmatch(rf"GET http://127\.0\.0\.1:{port}/health -> 503 in \d+ ms from web-03 \(via curl\)", lines[0])
    assert lines[1:] == ["expected status 200: MISMATCH: got 503", "body (first 500 chars):", "maintenance"]
