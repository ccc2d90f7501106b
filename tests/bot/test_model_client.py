"""bot/model.py `claude_client`: the client every request to Claude goes through, on the SDK's aiohttp transport.
What the httpx layer reads from the environment still applies to it: a proxy named there carries the requests."""

from __future__ import annotations

import asyncio

import pytest

from bot.model import AnthropicModel, claude_client
from bot.types import ModelRequest
from tests.support.fakes.anthropic import API_KEY, FakeAnthropic, reply, text


async def test_a_proxy_in_the_environment_carries_the_requests(
    fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    forwarded: list[str] = []

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A forwarding HTTP proxy: the request line names the whole URL; it goes on in origin form."""
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        method, url, version = head.split("\r\n", 1)[0].split()
        forwarded.append(url)
        authority, _, path = url.removeprefix("http://").partition("/")
        host, port = authority.rsplit(":", 1)
        up_r, up_w = await asyncio.open_connection(host, int(port))
        up_w.write(f"{method} /{path} {version}\r\n{head.split(chr(13) + chr(10), 1)[1]}".encode("latin-1"))

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
            w.close()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer), return_exceptions=True)

    proxy = await asyncio.start_server(forward, "127.0.0.1", 0)
    try:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.sockets[0].getsockname()[1]}")
        for name in ("NO_PROXY", "no_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        fake_anthropic.script(reply(text("through the proxy")))
        client = claude_client(API_KEY, fake_anthropic.base_url)
        try:
            response = await AnthropicModel(client, ["claude-sonnet-5-5"]).complete(
                ModelRequest(system="s", tools=[], messages=[{"role": "user", "content": "hi"}], max_tokens=100)
            )
        finally:
            await client.close()
        assert response.content[-1] == {"type": "text", "text": "through the proxy"}
        assert forwarded == [f"{fake_anthropic.base_url}/v1/messages"]
    finally:
        proxy.close()
