"""The shipped opsloop.example.toml: `opsloop check` accepts it, it names every key, and its examples parse."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from bot.app.cli import main
from bot.app.settings import load_settings
from bot.config.reader import Reader
from bot.config.settings import SECTIONS
from tests.support.config_readers import tool_context
from tools import config as tools_config
from tools.commands import CommandParam, RunbookCommand
from tools.mcp import MCPServerSpec

EXAMPLE = Path(__file__).resolve().parents[1] / "opsloop.example.toml"
TEXT = EXAMPLE.read_text()
COMMENTED_TOML = re.compile(r'^# ((?:\[|"?[A-Za-z0-9_.-]+"? = ).*)$')  # a commented key or table, not prose


def uncommented(text: str) -> str:
    """The example with every commented-out key and table switched on."""
    return "\n".join(COMMENTED_TOML.sub(r"\1", line) for line in text.splitlines())


def keys_named(text: str) -> set[str]:
    """Every key assigned or table named in the file, active or commented out."""
    assigned = re.findall(r'^(?:# )?"?([A-Za-z0-9_.-]+)"? = ', text, flags=re.MULTILINE)
    tables = re.findall(r"^(?:# )?\[+([A-Za-z0-9_.-]+)\]+", text, flags=re.MULTILINE)
    return {*assigned, *(part for table in tables for part in table.split("."))}


@pytest.fixture
def no_secrets(tmp_path, monkeypatch):
    for name in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "ANTHROPIC_API_KEY", "OPSLOOP_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPSLOOP_DB", str(tmp_path / "opsloop.db"))


def test_opsloop_check_accepts_the_example(no_secrets, capsys):
    assert main(["check", "--config", str(EXAMPLE)]) == 2  # only because no tokens are set
    out, err = capsys.readouterr()
    problems = [line for line in err.splitlines() if not line.startswith("opsloop: warning:")]
    assert problems == [
        f"opsloop: config: {EXAMPLE} (--config)",
        "opsloop: error: SLACK_BOT_TOKEN is not set (the bot token, xoxb-…)",
        "opsloop: error: set SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode)",
        "opsloop: error: ANTHROPIC_API_KEY is not set",
    ]
    assert "check_disk" in out  # the tool table was built from the example's [tools]


def test_the_active_lines_are_the_defaults(no_secrets):
    example, defaults = load_settings(EXAMPLE), load_settings(None)
    for part in ("model", "limits", "channels", "status_update_seconds", "log_level"):
        assert getattr(example, part) == getattr(defaults, part), part
    assert example.approvals.who_may_approve("destructive") == defaults.approvals.who_may_approve("destructive")


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_settings_key_is_in_the_example(section):
    assert f"[{section}]" in TEXT
    assert setting_keys(SECTIONS[section]) - keys_named(TEXT) == set()


def setting_keys(cls: type) -> set[str]:
    return {f.metadata.get("key") or f.name for f in dataclasses.fields(cls) if f.metadata}


def test_every_tools_key_is_in_the_example():
    keys = keys_named(TEXT)
    known = {
        *tools_config._TOP_KEYS,
        *setting_keys(RunbookCommand),
        *setting_keys(CommandParam),
        *setting_keys(MCPServerSpec),
        "dirs",
        "restart_allowlist",
        "url",
        "timeout_s",
        "ca_file",
        "allow",
    }
    assert known - keys == set()


def test_the_commented_examples_are_valid(no_secrets, tmp_path):
    on = tomllib.loads(uncommented(TEXT))
    path = tmp_path / "all-on.toml"
    kubeconfig = tmp_path / "kubeconfig"  # the reaches read their sections at load time: the kubeconfig must be one
    kubeconfig.write_text('{"contexts": [{"name": "prod-eu"}], "current-context": "prod-eu"}')
    path.write_text(uncommented(TEXT).replace("/etc/opsloop/kubeconfig", str(kubeconfig)))
    settings = load_settings(path)  # model, limits, approvals, the reaches: every commented value is accepted
    assert [c.name for c in settings.reaches["kubernetes"]] == ["prod-eu"]
    assert (settings.model.effort, settings.model.thinking_display) == ("medium", "summarized")
    tools: dict[str, Any] = on["tools"]
    (command,) = tools["commands"]
    parsed = tools_config.parse_command(command, "tools.commands[0]", base_dir=tmp_path)
    assert parsed.env == ("KUBECONFIG",)
    (server,) = tools["mcp"]
    entry = Reader(server, "tools.mcp[0]", base_dir=tmp_path)
    spec = tools_config.read_mcp_server(entry)
    assert entry.problems == []
    assert spec.trust_annotations is False
    http = {k: v for k, v in tools["http"].items() if k != "ca_file"}  # the example's CA file is not here
    ctx = tool_context({"http": http, "prometheus": tools["prometheus"]}, base_dir=tmp_path)
    assert ctx.prometheus_url == "http://prometheus.monitoring:9090"
