"""`opsloop check` with Claude on Bedrock and Vertex AI: the id it will call for each model of the chain, what each
provider lacks, and one ping per model through the provider's own fake."""

from __future__ import annotations

from bot.app.check import check
from bot.app.settings import load_settings
from tests.bot.app.test_check import env_for
from tests.support.fakes.anthropic import reply, text

CHAIN = """
[model]
provider = "bedrock"
primary = "claude-sonnet-5-5"
fallbacks = ["vertex:claude-haiku-4-5", "anthropic:claude-haiku-5-5"]
[model.bedrock]
region = "us-east-1"
[model.vertex]
project = "opsloop-test"
region = "us-east5"
[approvals]
approvers = ["U1"]
"""


async def test_check_names_each_provider_s_id_and_pings_each_model_there(
    fake_slack, fake_anthropic, fake_bedrock, fake_vertex, tmp_path, capsys
):
    config = tmp_path / "opsloop.toml"
    config.write_text(CHAIN)
    fake_anthropic.script(reply(text("pong")), reply(text("pong")), reply(text("pong")))
    env = env_for(
        fake_slack,
        fake_anthropic,
        ANTHROPIC_BEDROCK_BASE_URL=fake_bedrock.base_url,
        ANTHROPIC_VERTEX_BASE_URL=f"{fake_vertex.base_url}/v1",
    )
    assert await check(load_settings(config, env=env)) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        "model: bedrock:claude-sonnet-5-5: bedrock calls anthropic.claude-sonnet-5-5 (by rule: set [model.ids] "
        '"bedrock:claude-sonnet-5-5" if yours differs)'
    ) in out
    assert "model: vertex:claude-haiku-4-5: vertex calls claude-haiku-4-5@20251001" in out
    assert "model: claude-haiku-5-5: anthropic calls claude-haiku-5-5" in out
    assert any(line.startswith("model: bedrock: no token-counting endpoint") for line in out)
    assert [line for line in out if line.startswith("model: ok")] == [
        "model: ok, bedrock:claude-sonnet-5-5",
        "model: ok, vertex:claude-haiku-4-5",
        "model: ok, claude-haiku-5-5",
    ]
    assert [r.path for r in fake_bedrock.requests] == ["/model/anthropic.claude-sonnet-5-5/invoke"]
    assert fake_vertex.requests[0].path.endswith("/models/claude-haiku-4-5@20251001:rawPredict")
    assert [r.headers.get("x-relayed-by") for r in fake_anthropic.requests] == ["bedrock", "vertex", None]


async def test_check_says_when_aws_credentials_are_missing(
    fake_slack, fake_anthropic, fake_bedrock, tmp_path, monkeypatch, capsys
):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role to find on this machine
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    config = tmp_path / "opsloop.toml"
    config.write_text('[model]\nprovider = "bedrock"\nfallbacks = []\n[model.bedrock]\nregion = "us-east-1"\n')
    env = env_for(fake_slack, fake_anthropic, ANTHROPIC_BEDROCK_BASE_URL=fake_bedrock.base_url)
    assert await check(load_settings(config, env=env)) == 1  # run would start; the model can't be used now
    err = capsys.readouterr().err
    assert "error: model: bedrock:claude-sonnet-5-5: " in err and "check the AWS credentials" in err
    assert fake_bedrock.requests == []
