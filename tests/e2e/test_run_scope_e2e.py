"""The run scope a tool sees (`tools.api.current_run()`), through the real app: an alert run posted to the real
webhook is anchored at its group's earliest `startsAt` and knows the alert's name and common labels; a mention's
run is anchored at its own start."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.e2e.test_alerts_webhook_e2e import CONFIG as WEBHOOK
from tests.e2e.test_alerts_webhook_e2e import ENV, payload, post, root
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import CHANNEL, BotEnv, answered, bot_env, result_text, tool_results

TOOLS = '[tools]\nmodules = ["tests.support.incident_tools", "tests.support.scope_tools"]\n'


async def scope_seen(env: BotEnv) -> dict[str, Any]:
    requests = await env.requests(2)
    (result,) = tool_results(requests[1])
    handle, _, body = result_text(result).partition("\n")
    assert handle == "#1 run_scope"  # the handle line, then the tool's JSON
    seen: dict[str, Any] = json.loads(body)
    return seen


async def test_an_alert_runs_anchor_is_its_earliest_starts_at(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    body = payload(fingerprints=("a1", "a2", "a3"))
    body["alerts"][1]["startsAt"] = "2026-12-01T09:30:00.5Z"  # the earliest, neither first nor last
    body["alerts"][2]["startsAt"] = "2026-12-01T11:00:00Z"
    body["commonLabels"] = {"alertname": "DiskFull", "severity": "critical", "job": "node"}
    fake_anthropic.script(reply(tool_use("run_scope", {})), *answered(reply(text("Anchored."))))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, WEBHOOK + TOOLS, env_extra=ENV) as env:
        assert (await post(env, body))[0] == 200
        ts = await root(env)
        seen = await scope_seen(env)
        assert seen["anchor"] == datetime(2026, 12, 1, 9, 30, 0, 500000, tzinfo=UTC).timestamp()
        assert seen["started_at"] > seen["anchor"]  # the run started now, the alert long before
        assert seen["alertname"] == "DiskFull"
        assert seen["labels"] == {"alertname": "DiskFull", "severity": "critical", "job": "node"}
        assert seen["conversation"] == CHANNEL
        assert "Anchored." in (await env.wait_final(CHANNEL, ts)).text


async def test_a_mentions_anchor_is_its_own_start(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("run_scope", {})), *answered(reply(text("Anchored."))))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, TOOLS) as env:
        channel, _ = await env.mention("when did this start?")
        seen = await scope_seen(env)
        assert seen["anchor"] == seen["started_at"] and seen["alertname"] in ("", None)
        assert seen["labels"] == {} and seen["conversation"] == channel
