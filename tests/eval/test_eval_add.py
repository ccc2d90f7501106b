"""`opsloop eval add`: a run of `opsloop demo`, or one an Alertmanager alert started in the real app, becomes a case
whose golden script (the run's own model replies) passes once a person has filled in the expectation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from bot.app.cli import main
from bot.eval.case import CaseError, load
from bot.store import Ledger
from tests.e2e import test_alerts_webhook_e2e as webhook
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import CHANNEL, bot_env


@pytest.mark.slow
def test_a_demo_run_round_trips_into_a_case_that_passes_with_its_golden_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPSLOOP_CONFIG", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    (tmp_path / "opsloop.toml").write_text('[tools]\nmodules = ["bot.playground.demo.tools"]\n')
    assert main(["demo", "--db", "demo.db", "--pace", "0", "--no-color"]) == 0
    ledger = Ledger(tmp_path / "demo.db")
    (run,) = ledger.list_runs()
    ledger.close()
    run_id = run.id[:12]  # the start of its id is enough, as for every run command

    assert main(["eval", "add", run_id, "case", "--db", "demo.db"]) == 0
    body = yaml.safe_load((tmp_path / "case" / "case.yaml").read_text())
    assert body["trigger"] == {"mention": {"user": "U0ALICE", "text": "web-03 is out of disk, deal with it"}}
    assert body["config"] == {"tools": {"modules": ["bot.playground.demo.tools"]}}
    assert [f["tool"] for f in body["fixtures"]][:2] == ["check_disk", "list_big_files"]
    assert body["people"]["approve"][0]["tool"] == "clean_logs"
    with pytest.raises(CaseError, match="give root_cause patterns"):  # the person fills in the expectation
        load(tmp_path / "case")

    body["expect"]["root_cause"] = ["logs?"]
    (tmp_path / "case" / "case.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
    capsys.readouterr()
    assert main(["eval", "case", "--script", "golden"]) == 0
    assert "1/1 runs passed every check" in capsys.readouterr().out


async def test_a_run_started_by_an_alertmanager_alert_becomes_a_case_with_that_alert_as_its_trigger(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fake_slack: FakeSlack,
    fake_anthropic: FakeAnthropic,
) -> None:
    summary = {
        "situation": "/var on web-03 is 97% full.",
        "hypotheses": [{"id": "h1", "statement": "Logs filled /var on web-03.", "status": "open", "confidence": "low"}],
        "next_steps": ["Look at the biggest files under /var/log."],
    }
    fake_anthropic.script(
        reply(tool_use("update_summary", summary)),
        reply(text("Most likely logs filled /var on web-03 (not confirmed: no tool reached the host).")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, webhook.CONFIG, env_extra=webhook.ENV) as env:
        assert await webhook.post(env, webhook.payload()) == (
            200,
            json.dumps({"status": "stored", "outcome": "started"}),
        )
        await env.wait_final(CHANNEL, await webhook.root(env))
        (run,) = env.runs()
    db = str(env.settings.db_path)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")  # no opsloop.toml here
    monkeypatch.delenv("OPSLOOP_CONFIG", raising=False)

    assert await asyncio.to_thread(main, ["eval", "add", run.id, "case", "--db", db]) == 0
    body = yaml.safe_load((tmp_path / "work" / "case" / "case.yaml").read_text())
    assert body["trigger"] == {"alert": webhook.payload()}  # the payload as Alertmanager sent it, not its text
    body["expect"]["root_cause"] = ["logs"]
    (tmp_path / "work" / "case" / "case.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
    case = load(tmp_path / "work" / "case")
    assert (case.alertname, case.requester) == ("DiskFull", "")
    assert case.task.startswith("[alert from Alertmanager") and "summary: /var on web-03 is 97% full" in case.task
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["eval", "case", "--script", "golden"]) == 0
    assert "1/1 runs passed every check" in capsys.readouterr().out
