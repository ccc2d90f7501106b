"""[model] provider, per-entry providers in the chain, [model.bedrock], [model.vertex] and [model.ids]."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config.settings import load_settings, missing_for_run
from bot.core.errors import ConfigError

SLACK = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"}


def load(tmp_path: Path, toml: str, env: dict[str, str] | None = None):
    path = tmp_path / "opsloop.toml"
    path.write_text(toml)
    return load_settings(path, env=env or {})


def test_the_chain_labels_each_model_with_its_provider(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        '[model]\nprovider = "bedrock"\nprimary = "claude-sonnet-5-5"\n'
        'fallbacks = ["vertex:claude-sonnet-5-5", "anthropic:claude-haiku-5-5", "bedrock:claude-sonnet-5-5"]\n'
        '[model.bedrock]\nregion = "eu-west-1"\n[model.vertex]\nproject = "p"\nregion = "europe-west1"\n'
        '[model.ids]\n"bedrock:claude-sonnet-5-5" = "eu.anthropic.claude-sonnet-5-5-v1:0"\n',
    )
    assert settings.model.chain == ["bedrock:claude-sonnet-5-5", "vertex:claude-sonnet-5-5", "claude-haiku-5-5"]
    assert (settings.model.bedrock.region, settings.model.vertex.project, settings.model.vertex.region) == (
        "eu-west-1",
        "p",
        "europe-west1",
    )
    assert settings.model.ids == {"bedrock:claude-sonnet-5-5": "eu.anthropic.claude-sonnet-5-5-v1:0"}


def test_bad_provider_settings_are_each_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load(
            tmp_path,
            '[model]\nprovider = "azure"\nfallbacks = ["gcp:claude-haiku-5-5"]\n'
            '[model.bedrock]\naws_secret_access_key = "x"\n[model.ids]\n"claude-sonnet-5-5" = "x"\n',
        )
    assert e.value.problems == [
        "model.bedrock.aws_secret_access_key: unknown key (known: region)",
        'model.ids."claude-sonnet-5-5": expected "bedrock:<claude model>" or "vertex:<claude model>" = '
        '"<its id there>"',
        "model.provider: 'azure' is not one of anthropic, bedrock, vertex",
        "model: 'gcp:claude-haiku-5-5': the part before ':' must be a provider, one of anthropic, bedrock, vertex",
    ]


def test_anthropic_s_key_is_needed_only_when_the_chain_has_an_anthropic_model(tmp_path: Path) -> None:
    cloud = load(tmp_path, '[model]\nprovider = "vertex"\n', SLACK)
    assert "ANTHROPIC_API_KEY is not set" not in missing_for_run(cloud)
    mixed = load(tmp_path, '[model]\nprovider = "vertex"\nfallbacks = ["anthropic:claude-haiku-5-5"]\n', SLACK)
    assert "ANTHROPIC_API_KEY is not set" in missing_for_run(mixed)
