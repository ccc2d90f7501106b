"""bot/run/model.py `claude_client`: the client every request to Claude goes through, on the SDK's aiohttp transport.
What the httpx layer reads from the environment still applies to it: a proxy named there carries the requests."""

from __future__ import annotations

import pytest

from bot.core.types import ModelRequest
from bot.run.model import AnthropicModel, claude_client
from tests.support.fakes.anthropic import API_KEY, FakeAnthropic, reply, text
from tests.support.proxy import forwarding_proxy


async def test_a_proxy_in_the_environment_carries_the_requests(
    fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with forwarding_proxy() as (url, forwarded):
        monkeypatch.setenv("HTTP_PROXY", url)
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
