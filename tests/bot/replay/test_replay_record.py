"""The incident record says what the run ran under (issue 23): limits, effort, model and its tools' categories are
stored with the run when it is first driven (m011, both backends), and `opsloop export` writes those, whatever
the config says at export time. A run stored without them says `"limits_source": "config at export"`.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app.cli import main
from bot.replay.compare import compare, text
from bot.replay.record import Incident, export_run
from bot.store import Ledger, Store
from tests.bot.replay.test_replay import CLEAN, DISK, LARGE, TASK, original_script, replay_on
from tests.conftest import API_KEY
from tests.support import incident_tools
from tests.support.fakes.anthropic import FakeAnthropic, reply, tool_use
from tests.support.fakes.anthropic import text as text_block
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import CAROL, bot_env

RAN_UNDER = """
[model]
effort = "high"
max_tokens = 12000

[limits]
max_iterations = 5
cost_budget_usd = 2.5
parallelism = 2
"""
SECRET = "sk-ant-api03-PLANTEDsecret0value0123456789"


async def _cli(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


async def _record(tmp_path: Path, slack: FakeSlack, fake: FakeAnthropic) -> str:
    """The incident through the real app under RAN_UNDER (carol approves clean_logs); its run id."""
    fake.script(*original_script())
    async with bot_env(tmp_path, slack, fake, RAN_UNDER) as env:
        channel, ts = await env.mention(TASK)
        await env.approve(await env.card(channel, ts), CAROL)
        await env.wait_final(channel, ts)
        (run,) = env.runs()
    incident_tools.reset()
    return run.id


def _export_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeAnthropic, *, tools: bool = False) -> None:
    """`opsloop export` with another config than the run's: other limits, other effort (and, unless `tools`,
    none of the incident's tools)."""
    other = tmp_path / "other.toml"
    other.write_text(
        ('[tools]\nmodules = ["tests.support.incident_tools"]\n\n' if tools else "")
        + '[model]\neffort = "low"\n\n[limits]\nmax_iterations = 30\ncost_budget_usd = 9.0\n'
    )
    monkeypatch.setenv("OPSLOOP_DB", str(tmp_path / "opsloop.db"))
    monkeypatch.setenv("OPSLOOP_CONFIG", str(other))
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)


async def test_the_export_carries_what_the_run_ran_under_not_the_config_at_export(
    tmp_path: Path,
    fake_slack: FakeSlack,
    fake_anthropic: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = await _record(tmp_path, fake_slack, fake_anthropic)
    _export_env(tmp_path, monkeypatch, fake_anthropic)
    capsys.readouterr()
    assert await _cli("export", run_id) == 0
    out = capsys.readouterr()
    body = json.loads(out.out)
    assert body["limits_source"] == "run" and "config at export" not in out.err
    assert (body["limits"]["max_iterations"], body["limits"]["cost_budget_usd"], body["limits"]["parallelism"]) == (
        5,
        2.5,
        2,
    )
    assert body["effort"] == "high" and body["model"] == "claude-sonnet-5-5" and body["max_tokens"] == 12_000
    # the categories of the tools the run had (the export's config has none of them)
    assert {n: body["categories"][n] for n in ("check_disk", "list_large_files", "clean_logs", "restart_service")} == {
        "check_disk": "read_only",
        "list_large_files": "read_only",
        "clean_logs": "destructive",
        "restart_service": "mutating",
    }


async def test_a_replay_applies_the_runs_own_limits_and_effort(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """Stored max_iterations = 5: a replay that keeps calling stops at step 5 (the default would allow 20); its
    requests carry the run's effort and max_tokens when no others are asked for."""
    run_id = await _record(tmp_path, fake_slack, fake_anthropic)
    incident = _export(tmp_path, run_id)
    assert incident is not None and incident.limits["max_iterations"] == 5 and incident.effort == "high"
    looping = [
        reply(tool_use("check_disk", DISK)),
        reply(tool_use("list_large_files", LARGE)),
        *[reply(tool_use("check_disk", DISK)) for _ in range(3)],
        reply(text_block("/var is full of rotated logs.")),  # the wrap-up at the limit, with no tool allowed
    ]  # recorded reads: no error breaker
    result, requests = await replay_on(incident, fake_anthropic, *looping, effort=None)
    assert len(requests) == 6 and result.replay.stop_reason == "iteration_limit"
    assert [(q.body or {}).get("tool_choice") for q in requests] == [None] * 5 + [{"type": "none"}]
    assert result.replay.limits_source == "run" and result.replay.limits["max_iterations"] == 5
    assert {json.dumps(q.body and q.body.get("output_config")) for q in requests} == {'{"effort": "high"}'}
    assert {q.body and q.body["max_tokens"] for q in requests} == {12_000}
    assert "5 steps, 500,000 tokens, $2.5" in text(compare(result))


async def test_a_run_stored_without_its_settings_says_config_at_export(
    tmp_path: Path,
    fake_slack: FakeSlack,
    fake_anthropic: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = await _record(tmp_path, fake_slack, fake_anthropic)
    _forget_settings(tmp_path / "opsloop.db")  # as a run stored before m011 reads
    _export_env(tmp_path, monkeypatch, fake_anthropic, tools=True)
    capsys.readouterr()
    assert await _cli("export", run_id) == 0
    out = capsys.readouterr()
    body = json.loads(out.out)
    assert body["limits_source"] == "config at export" and "limits_source: config at export" in out.err
    assert body["limits"]["max_iterations"] == 30 and body["effort"] is None
    assert body["categories"]["clean_logs"] == "destructive"
    path = tmp_path / "old.json"
    path.write_text(out.out)
    fake_anthropic.script(*original_script())
    assert await _cli("replay", str(path), "--model", "claude-opus-5-5") == 0
    assert "(config at export)" in capsys.readouterr().out


def _export(tmp_path: Path, run_id: str) -> Incident | None:
    ledger = Ledger(str(tmp_path / "opsloop.db"))
    try:
        return export_run(ledger, run_id)
    finally:
        ledger.close()


def _forget_settings(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("UPDATE runs SET settings = NULL")
        conn.commit()
    finally:
        conn.close()


# --- the store: m011 on both backends --------------------------------------------------------------------
@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    s = await Store(db_url, retry_seconds=5).open()
    yield s
    await s.close()


async def test_run_settings_are_stored_once_and_redacted(store: Store) -> None:
    run = await store.create_run(channel="C1", thread_ts="1.0", requester="U1", task=TASK, model="m")
    assert run.settings is None
    first = {
        "limits": {"max_iterations": 5},
        "effort": "high",
        "categories": {"clean_logs": "destructive"},
        "note": f"token {SECRET}",
    }
    await store.record_settings(run.id, first)
    await store.record_settings(run.id, {"limits": {"max_iterations": 99}})  # a later drive: the first stays
    got = (await store.get_run(run.id)).settings
    assert got is not None and got["limits"] == {"max_iterations": 5} and got["effort"] == "high"
    assert got["categories"] == {"clean_logs": "destructive"} and SECRET not in json.dumps(got)


async def test_the_export_of_a_clean_call_keeps_its_decision(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """Sanity: the stored categories still make clean_logs a decided change (replayed with its decision)."""
    run_id = await _record(tmp_path, fake_slack, fake_anthropic)
    incident = _export(tmp_path, run_id)
    assert incident is not None
    (change,) = [c for c in incident.calls if not c.read_only]
    assert change.tool == "clean_logs" and change.args == CLEAN and change.decision and change.decision.approved
    result, _ = await replay_on(incident, fake_anthropic, *original_script())
    assert compare(result).identical
