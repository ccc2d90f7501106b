"""What the Bedrock and Vertex AI fakes share: a loopback server that takes a provider's wire format, checks
it, and relays the request to a FakeAnthropic as a first-party ``POST /v1/messages``, so the scripted replies,
the request validation and the thinking checks are FakeAnthropic's own, not copied."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.support.fakes.anthropic import FakeAnthropic


@dataclass
class CloudRequest:
    """One request as the provider fake received it: the path (with the provider's model id), the headers
    (lower-case), the body, and the status it answered."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]  # as received (the fake's own copy is what it pops the provider's fields from)
    status: int = 0
    problems: list[str] = field(default_factory=list)


class CloudFake:
    """The loopback server and the relay; a subclass routes its provider's paths. The requests it relays reach
    the FakeAnthropic with an `x-relayed-by` header naming the provider (a direct one has none)."""

    name = ""

    def __init__(self, anthropic: FakeAnthropic) -> None:
        self.anthropic = anthropic
        self.requests: list[CloudRequest] = []
        self.overloaded = 0  # the next N model requests get the provider's 529 overloaded, Retry-After 0
        self.refuse_betas = False  # a request with any anthropic-beta gets the provider's 400
        self.base_url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> CloudFake:
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"
        self._session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def relay(self, body: dict[str, Any], *, model: str, betas: list[str], stream: bool) -> tuple[int, Any]:
        """Send `body` for `model` to the FakeAnthropic: (status, the error's or the message's JSON), or when
        `stream` (200, the SSE events as dicts, an async iterator)."""
        assert self._session is not None
        headers = {"x-api-key": self.anthropic.api_key, "anthropic-version": "2023-06-01", "x-relayed-by": self.name}
        if betas:
            headers["anthropic-beta"] = ",".join(betas)
        response = await self._session.post(
            f"{self.anthropic.base_url}/v1/messages", json={**body, "model": model, "stream": stream}, headers=headers
        )
        if response.status != 200 or not stream:
            async with response:
                return response.status, await response.json()
        return 200, _events(response)


async def _events(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    async with response:
        async for line in response.content:
            if line.startswith(b"data: "):
                yield json.loads(line[6:])
