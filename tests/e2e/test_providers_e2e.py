"""End to end: the disk-full incident with Claude on Amazon Bedrock and on Google Vertex AI ([model] provider),
each through its fake on loopback (its own wire format and credentials, the replies FakeAnthropic's), with tools
and an approval; and a fallback from Vertex AI, overloaded, to Anthropic's API."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.pricing import Price
from tests.e2e.test_slack_e2e import CLEAN, TASK, clean_logs_script
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.bedrock import FakeBedrock
from tests.support.fakes.slack import FakeSlack
from tests.support.fakes.vertex import FakeVertex
from tests.support.harness import ALICE, BOB, bot_env, text_of
from tests.support.incident_tools import Execution, ran

PROFILE = "us.anthropic.claude-sonnet-5-5-v1:0"  # a cross-region inference profile, named in [model.ids]


async def approved_incident(env, fake_anthropic: FakeAnthropic) -> None:
    channel, ts = await env.mention(TASK, user=ALICE)
    card = await env.card(channel, ts)
    assert "clean_logs" in text_of(card)
    await env.approve(card, BOB)
    assert "Freed 19.8 GB" in text_of(await env.wait_final(channel, ts))
    assert ran("clean_logs") == [Execution("clean_logs", CLEAN, BOB)]
    fake_anthropic.assert_complete()


async def test_incident_on_bedrock_signed_streamed_and_priced_at_bedrock_s_price(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_bedrock: FakeBedrock
) -> None:
    fake_anthropic.script(*clean_logs_script())
    config = f"""
[model]
provider = "bedrock"
primary = "claude-sonnet-5-5"
fallbacks = []
[model.bedrock]
region = "us-east-1"
[model.ids]
"bedrock:claude-sonnet-5-5" = "{PROFILE}"
[model.prices."bedrock:claude-sonnet-5-5"]
input = 2.2
output = 11.0
"""
    env_extra = {"ANTHROPIC_BEDROCK_BASE_URL": fake_bedrock.base_url, "ANTHROPIC_API_KEY": ""}
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config, env_extra=env_extra) as env:
        await approved_incident(env, fake_anthropic)
        await env.wait_idle()
        (run,) = env.runs()
    assert (
        len(fake_bedrock.requests) == 5
    )  # the incident's four steps and its answer given again when asked once for the summary
    for rec in fake_bedrock.requests:
        assert rec.path == f"/model/{PROFILE}/invoke-with-response-stream"
        assert (rec.status, rec.problems) == (200, [])
        assert rec.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIAFAKEOPSLOOP00001/")
    assert [r.headers.get("x-relayed-by") for r in fake_anthropic.requests] == ["bedrock"] * 5
    # thinking and the cache breakpoints went through Bedrock as they go to Anthropic's API
    first, second = (r.body or {} for r in fake_anthropic.requests[:2])
    assert any(b["type"] == "thinking" for b in second["messages"][1]["content"])
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert run.model == "bedrock:claude-sonnet-5-5"
    price = Price(input=2.2, output=11.0)
    assert run.cost_usd == pytest.approx(sum(price.cost(_usage(r.usage)) for r in fake_anthropic.requests))


async def test_incident_on_vertex_with_application_default_credentials(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_vertex: FakeVertex
) -> None:
    fake_anthropic.script(*clean_logs_script())
    config = """
[model]
provider = "vertex"
primary = "claude-sonnet-5-5"
fallbacks = []
[model.vertex]
project = "opsloop-test"
region = "us-east5"
"""
    env_extra = {"ANTHROPIC_VERTEX_BASE_URL": f"{fake_vertex.base_url}/v1", "ANTHROPIC_API_KEY": ""}
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config, env_extra=env_extra) as env:
        await approved_incident(env, fake_anthropic)
    assert fake_vertex.tokens_minted == 1
    assert [(r.status, r.problems) for r in fake_vertex.requests] == [(200, [])] * 5
    assert fake_vertex.requests[0].path == (
        "/v1/projects/opsloop-test/locations/us-east5/publishers/anthropic/models/claude-sonnet-5-5:streamRawPredict"
    )


async def test_vertex_overloaded_falls_back_to_anthropic_s_api(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_vertex: FakeVertex
) -> None:
    fake_anthropic.script(*clean_logs_script())
    fake_vertex.overloaded = 3  # every attempt opsloop makes on Vertex
    config = """
[model]
primary = "vertex:claude-sonnet-5-5"
fallbacks = ["anthropic:claude-sonnet-5-5"]
[model.vertex]
project = "opsloop-test"
region = "us-east5"
"""
    env_extra = {"ANTHROPIC_VERTEX_BASE_URL": f"{fake_vertex.base_url}/v1"}
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config, env_extra=env_extra) as env:
        await approved_incident(env, fake_anthropic)
        await env.wait_idle()
        (run,) = env.runs()
    assert [r.status for r in fake_vertex.requests] == [529, 529, 529]
    assert [r.headers.get("x-relayed-by") for r in fake_anthropic.requests] == [None] * 5  # all direct
    assert run.model == "claude-sonnet-5-5"


def _usage(u: dict[str, int] | None):
    from bot.core.types import Usage

    u = u or {}
    return Usage(
        input_tokens=u.get("input_tokens", 0),
        output_tokens=u.get("output_tokens", 0),
        cache_read_tokens=u.get("cache_read_input_tokens", 0),
        cache_write_tokens=u.get("cache_creation_input_tokens", 0),
    )
