"""AnthropicModel across providers: each label goes to its provider's client by the provider's id, a beta the
provider refuses moves the run to the next model instead of a 400, and responses are labelled (and so priced)
by provider."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.app.wiring import model_clients
from bot.config.settings import BedrockSettings, ModelSettings, Settings, VertexSettings
from bot.core.pricing import PRICES, Price, price_for
from bot.core.types import ModelRequest
from bot.run.model import AnthropicModel
from tests.support.fakes.anthropic import API_KEY, FakeAnthropic, reply, text
from tests.support.fakes.bedrock import FakeBedrock
from tests.support.fakes.vertex import FakeVertex

ASK = ModelRequest(system="s", tools=[], messages=[{"role": "user", "content": "hi"}], max_tokens=200)


def settings(
    fake_anthropic: FakeAnthropic, fake_bedrock: FakeBedrock, fake_vertex: FakeVertex, *chain: str
) -> Settings:
    model = ModelSettings(
        primary=chain[0],
        fallbacks=chain[1:],
        bedrock=BedrockSettings(region="us-east-1"),
        vertex=VertexSettings(project="opsloop-test", region="us-east5"),
    )
    return Settings(
        model=model,
        anthropic_api_key=API_KEY,  # type: ignore[arg-type]
        anthropic_base_url=fake_anthropic.base_url,
        bedrock_base_url=fake_bedrock.base_url,
        vertex_base_url=f"{fake_vertex.base_url}/v1",
    )


@pytest.fixture
async def clients(
    fake_anthropic: FakeAnthropic, fake_bedrock: FakeBedrock, fake_vertex: FakeVertex
) -> AsyncIterator[dict]:  # type: ignore[type-arg]
    made = model_clients(
        settings(fake_anthropic, fake_bedrock, fake_vertex, "bedrock:claude-sonnet-5-5", "vertex:x", "claude-x")
    )
    yield made
    for client in made.values():
        await client.close()


@pytest.mark.parametrize("provider", ["bedrock", "vertex"])
async def test_a_beta_the_provider_refuses_moves_on_to_the_next_model(
    provider: str, clients, fake_anthropic: FakeAnthropic, fake_bedrock: FakeBedrock, fake_vertex: FakeVertex
) -> None:
    cloud = fake_bedrock if provider == "bedrock" else fake_vertex
    cloud.refuse_betas = True
    fake_anthropic.script(reply(text("answered by Anthropic's API")))
    model = AnthropicModel(clients, [f"{provider}:claude-sonnet-5-5", "claude-sonnet-5-5"])
    response = await model.complete(ASK.__class__(**{**ASK.__dict__, "drop_block": True}))
    assert response.content[-1] == {"type": "text", "text": "answered by Anthropic's API"}
    assert [r.status for r in cloud.requests] == [400]
    assert fake_anthropic.requests[0].headers["anthropic-beta"] == "thinking-binding-controls-2026-08-01"


async def test_bedrock_takes_the_beta_in_the_body_and_the_response_keeps_its_label(
    clients, fake_anthropic: FakeAnthropic, fake_bedrock: FakeBedrock
) -> None:
    fake_anthropic.script(reply(text("ok")))
    model = AnthropicModel(clients, ["bedrock:claude-sonnet-5-5"], ids={"bedrock:claude-sonnet-5-5": "eu.anthropic.x"})
    response = await model.complete(ASK.__class__(**{**ASK.__dict__, "drop_block": True}))
    assert response.model == "bedrock:claude-sonnet-5-5"
    (rec,) = fake_bedrock.requests
    assert rec.path == "/model/eu.anthropic.x/invoke-with-response-stream"
    assert rec.body["anthropic_beta"] == ["thinking-binding-controls-2026-08-01"]


def test_a_provider_s_model_is_priced_at_anthropic_s_price_unless_the_config_says_otherwise() -> None:
    assert price_for("vertex:claude-sonnet-5-5") == (PRICES["claude-sonnet-5-5"], True)
    regional = Price(input=2.2, output=11.0)
    overrides = {"bedrock:claude-sonnet-5-5": regional}
    assert price_for("bedrock:claude-sonnet-5-5", overrides) == (regional, True)
    assert price_for("claude-sonnet-5-5", overrides) == (PRICES["claude-sonnet-5-5"], True)
