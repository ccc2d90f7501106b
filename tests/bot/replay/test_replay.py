"""Replay (issue 23): an incident recorded through the real app (FakeSlack, FakeAnthropic, the real anthropic
client), exported, then rerun with the real run loop and the real AnthropicModel against FakeAnthropic on a
second scripted policy, against the recorded world.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from bot.app.cli import main
from bot.core.pricing import price_for
from bot.replay.compare import compare, html_page, text
from bot.replay.record import Incident, export_run
from bot.replay.runner import Replayed, replay
from bot.run.model import AnthropicModel
from tests.conftest import API_KEY
from tests.e2e.test_planted_secrets_e2e import _blob, _cores
from tests.support import incident_tools, planted_tools
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, error, reply, thinking, tool_use
from tests.support.fakes.anthropic import text as said
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import BOB, CAROL, answered, bot_env, result_text, tool_results, user_turn

ROOT = Path(__file__).resolve().parents[3]
TASK = "web-03 is paging: disk full on /var, please fix"
DISK = {"host": "web-03"}
LARGE = {"host": "web-03", "path": "/var"}
CLEAN = {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7}
REPLY = "only the rotated logs, please"
REPLAY_MODEL = "claude-opus-5-5"


def original_script() -> list[Any]:
    return [
        reply(said("Checking disk usage on web-03."), tool_use("check_disk", DISK)),
        reply(tool_use("list_large_files", LARGE)),
        reply(said("Deleting the rotated nginx logs older than 7 days."), tool_use("clean_logs", CLEAN)),
        *answered(reply(said("Freed 19.8 GB on web-03."))),
    ]


async def record_incident(tmp_path: Path, slack: FakeSlack, fake: FakeAnthropic) -> Incident:
    """The incident through the real app: bob replies while list_large_files runs, carol approves clean_logs."""
    fake.script(*original_script())
    async with bot_env(tmp_path, slack, fake) as env:
        gate = incident_tools.hold("list_large_files")
        channel, ts = await env.mention(TASK)
        await gate.wait_entered()
        await env.reply(channel, ts, REPLY, user=BOB)
        await env.wait_idle()  # stored before the ack: it is in the run's inbox
        gate.release()
        await env.approve(await env.card(channel, ts), CAROL)
        await env.wait_final(channel, ts)
        (run,) = env.runs()
        with env.ledger() as ledger:
            incident = export_run(
                ledger, run.id, categories={t.name: t.category.value for t in env.ops.tools}, limits=env.settings.limits
            )
    assert incident is not None
    incident_tools.reset()
    return incident


@pytest.fixture
def no_executions() -> Iterator[None]:
    incident_tools.reset()
    yield
    assert incident_tools.EXECUTIONS == [], "a replay ran a tool for real"


async def replay_on(
    incident: Incident, fake: FakeAnthropic, *steps: Any, effort: str | None = "medium"
) -> tuple[Replayed, list[RecordedRequest]]:
    before = len(fake.requests)
    fake.script(*steps)
    client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=fake.base_url, max_retries=0)
    try:
        result = await replay(
            incident, model=AnthropicModel(client, [REPLAY_MODEL]), price_for=lambda m: price_for(m)[0], effort=effort
        )
    finally:
        await client.close()
    fake.assert_complete()
    return result, fake.requests[before:]


def replies_in(request: RecordedRequest) -> list[str]:
    return [b["text"] for b in user_turn(request) if b.get("type") == "text" and "[thread reply" in b["text"]]


# --------------------------------------------------------------------------------------------------------
async def test_the_same_path_replays_identically_and_runs_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, no_executions: None
) -> None:
    incident = await record_incident(tmp_path, fake_slack, fake_anthropic)
    assert [c.tool for c in incident.calls] == ["check_disk", "list_large_files", "clean_logs"]
    # four steps to the answer, and its answer again when asked once for the summary
    assert incident.changes and incident.succeeded and incident.steps == 5
    (r,) = incident.replies
    assert (r.user, r.text, r.after_step, r.after_call) == (BOB, REPLY, 2, 1)

    result, requests = await replay_on(incident, fake_anthropic, *original_script())
    c = compare(result)
    assert c.identical and c.diverged_at is None and c.same_change and not c.regression
    assert [p.mark for row in c.rows for p in row.pairs] == ["same", "same", "same"]
    assert c.sources["replayed"] == 2 and c.sources["recorded decision"] == 1 and c.sources["unrecorded"] == 0
    assert c.approvals_replay[0].outcome == f"recorded decision: approved by {CAROL}"
    # the recorded results reached the model, and the approved change's recorded result
    assert "/var   50G    49.8G" in result_text(tool_results(requests[1])[0])
    assert "deleted 212 files" in result_text(tool_results(requests[3])[0])
    # the reply: after 2 steps, as in the original (in the 3rd request, not the 2nd)
    assert replies_in(requests[1]) == [] and replies_in(requests[2]) == [f"[thread reply from {BOB}] {REPLY}"]
    assert c.replies[0].replay == "step 3 (after 2 steps)"
    # priced per model: the replay's cost is what the fake billed for opus
    assert result.replay.model == REPLAY_MODEL
    assert result.replay.cost_usd == pytest.approx(sum(q.cost_usd or 0 for q in requests))
    shown = text(c)
    assert "path: identical" in shown and "same final change: yes" in shown
    page = html_page(c, generated_at=0)
    assert "<script" not in page and "identical path" in page and "clean_logs" in page


async def test_a_divergence_at_step_3_is_marked_and_unrecorded_calls_get_errors(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, no_executions: None
) -> None:
    incident = await record_incident(tmp_path, fake_slack, fake_anthropic)
    result, requests = await replay_on(
        incident,
        fake_anthropic,
        *original_script()[:2],
        reply(tool_use("check_disk", {"host": "web-04"})),
        *answered(reply(said("web-04 unknown; stopping here."))),
    )
    c = compare(result)
    assert c.diverged_at == 3 and not c.identical
    (pair,) = c.rows[2].pairs
    assert (pair.mark, pair.source) == ("different", "unrecorded")
    (res,) = tool_results(requests[3])
    assert res.get("is_error") and "unrecorded in this incident" in result_text(res)
    assert not c.same_change and c.regression
    assert "diverged at step 3" in text(c) and "REGRESSION" in text(c)


async def test_a_different_destructive_call_is_marked_and_never_executed(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, no_executions: None
) -> None:
    incident = await record_incident(tmp_path, fake_slack, fake_anthropic)
    wider = {**CLEAN, "older_than_days": 1}
    result, requests = await replay_on(
        incident,
        fake_anthropic,
        *original_script()[:2],
        reply(said("Deleting everything older than a day."), tool_use("clean_logs", wider)),
        *answered(reply(said("Not approved in this replay."))),
    )
    c = compare(result)
    assert c.diverged_at == 3 and c.rows[2].pairs[0].mark == "different"
    assert c.rows[2].pairs[0].source == "would ask approval"
    (asked,) = c.approvals_replay
    assert "clean_logs" in asked.call and asked.outcome == "would ask approval → denied (replay)"
    (res,) = tool_results(requests[3])
    assert res.get("is_error") and result_text(res).startswith("#3 clean_logs web-03\nDenied: replay.")
    assert result.replay.changes == [] and c.regression
    assert incident_tools.ran("clean_logs") == []


async def test_after_a_divergence_a_reply_follows_the_call_it_followed(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, no_executions: None
) -> None:
    incident = await record_incident(tmp_path, fake_slack, fake_anthropic)
    result, requests = await replay_on(
        incident,
        fake_anthropic,
        reply(tool_use("list_large_files", LARGE)),  # step 1 already differs
        reply(tool_use("check_disk", DISK)),
        *answered(reply(said("Done looking."))),
    )
    c = compare(result)
    assert c.diverged_at == 1
    # in the original the reply followed list_large_files: here that was step 1, so it arrives at step 2
    assert replies_in(requests[0]) == [] and replies_in(requests[1]) == [f"[thread reply from {BOB}] {REPLY}"]
    assert c.replies[0].replay == "step 2 (after list_large_files)"


async def test_the_export_carries_no_planted_secret(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    planted_tools.OUTPUT["text"] = _blob("OUTP")
    fake_anthropic.script(
        reply(thinking(_blob("THNK")), tool_use("read_config", {"service": "nginx", "note": _blob("ARGS")})),
        *answered(reply(said("Config read."))),
    )
    config = '[tools]\nmodules = ["tests.support.incident_tools", "tests.support.planted_tools"]\n'
    try:
        async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
            channel, ts = await env.mention(f"check nginx config {_blob('MENT')}")
            await env.wait_final(channel, ts)
            (run,) = env.runs()
            with env.ledger() as ledger:
                incident = export_run(
                    ledger,
                    run.id,
                    categories={t.name: t.category.value for t in env.ops.tools},
                    limits=env.settings.limits,
                )
    finally:
        planted_tools.OUTPUT["text"] = "(nothing planted)"
    assert incident is not None and [c.tool for c in incident.calls] == ["read_config"]
    dumped = incident.dumps()
    leaked = [core for tag in ("OUTP", "THNK", "ARGS", "MENT") for core in _cores(tag) if core in dumped]
    assert leaked == []
    assert Incident.from_json(json.loads(dumped)).calls[0].tool == "read_config"


async def _cli(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


async def test_export_and_the_suite_exit_status_on_a_regression(
    tmp_path: Path,
    fake_slack: FakeSlack,
    fake_anthropic: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_executions: None,
) -> None:
    incident = await record_incident(tmp_path, fake_slack, fake_anthropic)
    monkeypatch.setenv("OPSLOOP_DB", str(tmp_path / "opsloop.db"))
    monkeypatch.setenv("OPSLOOP_CONFIG", str(tmp_path / "opsloop.toml"))  # the harness's config: its tools
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    capsys.readouterr()
    assert await _cli("export", incident.run_id) == 0
    exported = Incident.from_json(json.loads(capsys.readouterr().out))
    assert exported.categories["clean_logs"] == "destructive" and exported.categories["check_disk"] == "read_only"
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "disk-full.json").write_text(exported.dumps())

    fake_anthropic.script(
        *original_script()[:2],
        reply(tool_use("clean_logs", {**CLEAN, "older_than_days": 1})),
        *answered(reply(said("Could not clean."))),
    )
    assert await _cli("replay", "--suite", str(suite), "--model", REPLAY_MODEL) == 1
    out = capsys.readouterr().out
    assert "disk-full" in out and "REGRESSION" in out and "1 regression(s)" in out
    (row,) = [line for line in out.splitlines() if line.startswith("disk-full")]
    assert " 2/0/0 " in row  # check_disk and list_large_files replayed; the wider clean_logs is no read

    fake_anthropic.script(*original_script())
    assert await _cli("replay", "--suite", str(suite), "--model", REPLAY_MODEL) == 0
    out = capsys.readouterr().out
    assert "identical" in out and "no regression" in out


async def test_the_shipped_demo_incident_replays_on_the_scripted_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # no key: the demo's scripted model, no network
    monkeypatch.delenv("OPSLOOP_CONFIG", raising=False)
    monkeypatch.setenv("OPSLOOP_DB", str(tmp_path / "none.db"))
    assert await _cli("replay", "--suite", str(ROOT / "bench" / "incidents"), "--model", "claude-sonnet-5-5") == 0
    out = capsys.readouterr().out
    assert "demo" in out and "identical" in out and "no regression" in out
    html = tmp_path / "demo.html"
    assert await _cli("replay", str(ROOT / "bench" / "incidents" / "demo.json"), "--html", str(html)) == 0
    page = html.read_text()
    assert "identical path" in page and "superseded by U0BOB" in page


async def test_a_refused_model_call_is_its_own_exit_status_not_a_regression(
    tmp_path: Path,
    fake_slack: FakeSlack,
    fake_anthropic: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_executions: None,
) -> None:
    incident = await record_incident(tmp_path, fake_slack, fake_anthropic)
    monkeypatch.setenv("OPSLOOP_DB", str(tmp_path / "opsloop.db"))
    monkeypatch.setenv("OPSLOOP_CONFIG", str(tmp_path / "opsloop.toml"))
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    capsys.readouterr()
    fake_anthropic.script(reply(said("I can't help with that."), stop_reason="refusal"))
    assert await _cli("replay", incident.run_id[:12], "--model", REPLAY_MODEL) == 3
    out = capsys.readouterr().out
    assert "same final change: no · MODEL FAILED (the model refused: stop_reason refusal), not a regression" in out
    assert "REGRESSION" not in out
    fake_anthropic.script(error(400, "invalid_request_error", "prompt is too long"))
    assert await _cli("replay", incident.run_id, "--model", REPLAY_MODEL) == 3
    out = capsys.readouterr().out
    assert "MODEL FAILED (model_error: " in out and "prompt is too long" in out and "REGRESSION" not in out
    fake_anthropic.assert_complete()


async def test_update_summary_is_not_listed_among_the_approvals_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # the demo's scripted model
    monkeypatch.delenv("OPSLOOP_CONFIG", raising=False)
    monkeypatch.setenv("OPSLOOP_DB", str(tmp_path / "none.db"))
    assert await _cli("replay", str(ROOT / "bench" / "incidents" / "demo.json")) == 0
    out = capsys.readouterr().out
    asked = out[out.index("approvals asked:\n") : out.index("same final change")].splitlines()[1:]
    assert [line.split("(")[0].split() for line in asked] == [
        ["original", "restart_service"],
        ["original", "clean_logs"],
        ["replay", "restart_service"],
        ["replay", "clean_logs"],
    ]
