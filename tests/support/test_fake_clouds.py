"""The Bedrock and Vertex AI fakes, driven by the SDK's own clients (AsyncAnthropicBedrock, AsyncAnthropicVertex):
they decode what the fakes send (AWS event stream, SSE) and the fakes check what the clients send (SigV4, the
bearer token Application Default Credentials minted)."""

from __future__ import annotations

import anthropic
import pytest
from anthropic.types import MessageParam

from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.bedrock import CREDENTIALS, FakeBedrock
from tests.support.fakes.vertex import FakeVertex

QUESTION: list[MessageParam] = [{"role": "user", "content": "is web-03 full?"}]


async def test_bedrock_streams_an_event_stream_the_sdk_decodes(
    fake_bedrock: FakeBedrock, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Disk is "), tool_use("check_disk", {"host": "web-03"})))
    client = anthropic.AsyncAnthropicBedrock(aws_region="us-east-1", base_url=fake_bedrock.base_url, max_retries=0)
    async with client.messages.stream(
        model="anthropic.claude-sonnet-4-5-20250929-v1:0", max_tokens=256, messages=QUESTION
    ) as stream:
        message = await stream.get_final_message()
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[1].input == {"host": "web-03"}  # type: ignore[union-attr]
    (rec,) = fake_bedrock.requests
    assert rec.path == "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke-with-response-stream"
    assert rec.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIAFAKEOPSLOOP00001/")
    assert (fake_anthropic.requests[0].body or {})["model"] == "claude-sonnet-4-5-20250929"


async def test_bedrock_refuses_a_request_signed_with_other_credentials(
    fake_bedrock: FakeBedrock, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = anthropic.AsyncAnthropicBedrock(
        aws_region="us-east-1",
        base_url=fake_bedrock.base_url,
        max_retries=0,
        aws_access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_key="not-the-secret",
    )
    with pytest.raises(anthropic.PermissionDeniedError):
        await client.messages.create(
            model="anthropic.claude-sonnet-4-5-20250929-v1:0", max_tokens=256, messages=QUESTION
        )
    assert fake_bedrock.requests[0].problems == ["signature does not match"]


async def test_vertex_takes_the_token_adc_minted(fake_vertex: FakeVertex, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(reply(text("ok")))
    client = anthropic.AsyncAnthropicVertex(
        project_id="opsloop-test", region="us-east5", base_url=f"{fake_vertex.base_url}/v1", max_retries=0
    )
    async with client.messages.stream(model="claude-sonnet-4-5@20250929", max_tokens=256, messages=QUESTION) as stream:
        message = await stream.get_final_message()
    assert message.content[0].text == "ok"  # type: ignore[union-attr]
    assert fake_vertex.tokens_minted == 1
    (rec,) = fake_vertex.requests
    assert rec.path.endswith("/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict")
    assert rec.status == 200


async def test_vertex_refuses_another_token(fake_vertex: FakeVertex) -> None:
    client = anthropic.AsyncAnthropicVertex(
        project_id="opsloop-test", region="us-east5", base_url=f"{fake_vertex.base_url}/v1", access_token="ya29.stolen"
    )
    with pytest.raises(anthropic.AuthenticationError):
        await client.messages.create(model="claude-sonnet-4-5@20250929", max_tokens=256, messages=QUESTION)
