"""Shared fixtures: a temp store, the fake Messages API and the fake Slack, all on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import pytest

from bot.store import Store
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.slack import FakeSlack

API_KEY = "sk-ant-test-key-000000"


@pytest.fixture
async def fake_anthropic() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=API_KEY) as fake:
        yield fake


@pytest.fixture
async def anthropic_client(fake_anthropic: FakeAnthropic) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=fake_anthropic.base_url, max_retries=0)
    yield client
    await client.close()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store(tmp_path / "opsloop.db").open()
    yield s
    await s.close()


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as slack:
        yield slack


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--chaos-runs N`: the long crash test (`make chaos`) instead of the short one in `make test`."""
    parser.addoption("--chaos-runs", type=int, default=0,
                     help="runs for the long crash test (0: the short, seeded version)")
    parser.addoption("--chaos-seed", type=int, default=None, help="seed for the crash tests (default: random)")
