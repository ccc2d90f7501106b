"""`opsloop replay`'s options (issue 23), through the real command: an incident recorded through the real app
(FakeSlack, FakeAnthropic, the real anthropic client), exported to a file, then replayed with `opsloop replay
FILE` and the real AnthropicModel against FakeAnthropic on a scripted policy.

--live-readonly (an unrecorded read-only call runs for real and is reported live; a change never runs),
--prompt FILE (the requests carry it), --effort E (the requests carry it; an invalid one is refused), --model M
(priced per model; an unknown or retired one is refused); and the replay makes no Slack request at all.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from bot.app.cli import main
from bot.core.pricing import price_for
from bot.core.types import Usage
from bot.replay.record import Incident
from tests.bot.replay.test_replay import REPLAY_MODEL, original_script, record_incident
from tests.conftest import API_KEY
from tests.support import incident_tools
from tests.support.fakes.anthropic import FakeAnthropic, reply, tool_use
from tests.support.fakes.anthropic import text as said
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import answered, result_text, tool_results

SUNNY = {"host": "web-04"}  # not in the record: check_disk on web-04 is unrecorded


async def _cli(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


@pytest.fixture
async def recorded(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The incident as a file, and the environment of `opsloop replay` on this machine: the harness's config
    (its tools), the fake Messages API, and Slack credentials pointing at the fake Slack (a replay must not use
    them)."""
    incident = await record_incident(tmp_path, fake_slack, fake_anthropic)
    path = tmp_path / "disk-full.json"
    path.write_text(incident.dumps())
    monkeypatch.setenv("OPSLOOP_DB", str(tmp_path / "opsloop.db"))
    monkeypatch.setenv("OPSLOOP_CONFIG", str(tmp_path / "opsloop.toml"))
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    monkeypatch.setenv("SLACK_BOT_TOKEN", fake_slack.bot_token)
    monkeypatch.setenv("SLACK_APP_TOKEN", fake_slack.app_token)
    monkeypatch.setenv("SLACK_API_URL", fake_slack.api_url)
    incident_tools.reset()
    return path


def _edit_categories(path: Path, **categories: str) -> None:
    body = json.loads(path.read_text())
    body["categories"].update(categories)
    path.write_text(json.dumps(body))


def _edit_fields(path: Path, **fields: str) -> None:
    body = json.loads(path.read_text())
    body.update(fields)
    path.write_text(json.dumps(body))


def _diverging_script() -> list[object]:
    """Same first two steps; then an unrecorded read-only call and a restart the original never asked for."""
    return [
        *original_script()[:2],
        reply(tool_use("check_disk", SUNNY), tool_use("restart_service", {"host": "web-03", "unit": "nginx"})),
        *answered(reply(said("web-04 is fine; I did not restart anything."))),
    ]


# --------------------------------------------------------------------------------------------------------
async def test_live_readonly_runs_an_unrecorded_read_for_real_and_never_a_change(
    recorded: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    before = len(fake_anthropic.requests)
    fake_anthropic.script(*_diverging_script())
    assert await _cli("replay", str(recorded), "--model", REPLAY_MODEL, "--live-readonly") == 1  # no change: regression
    out = capsys.readouterr().out
    requests = fake_anthropic.requests[before:]
    # the unrecorded read ran for real, against the local tool, and its real output reached the model
    assert [e.args for e in incident_tools.EXECUTIONS] == [SUNNY]
    disk, restart = tool_results(requests[3])
    assert not disk.get("is_error") and "web-04:" in result_text(disk) and "/var   50G    21.0G" in result_text(disk)
    # the restart the original never decided: would ask, denied (replay), never run, even with --live-readonly
    assert restart.get("is_error") and result_text(restart).startswith("#4 restart_service web-03\nDenied: replay.")
    assert incident_tools.ran("restart_service") == []
    assert 'check_disk(host="web-04")' in out and "[live]" in out
    assert "replayed 2 · unrecorded 0 · live 1 · recorded decision 0 · would ask approval 1" in out
    assert "would ask approval → denied (replay)" in out


async def test_live_readonly_never_runs_a_change_the_record_calls_read_only(
    recorded: Path, fake_anthropic: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record edited to call restart_service read-only: the configured registry says it is mutating, so it is
    not run live; it is unrecorded, and nothing runs."""
    _edit_categories(recorded, restart_service="read_only")
    fake_anthropic.script(
        *original_script()[:2],
        reply(tool_use("restart_service", {"host": "web-03", "unit": "nginx"})),
        *answered(reply(said("Could not restart."))),
    )
    capsys.readouterr()
    assert await _cli("replay", str(recorded), "--model", REPLAY_MODEL, "--live-readonly") == 1
    out = capsys.readouterr().out
    assert incident_tools.EXECUTIONS == []
    assert "[unrecorded]" in out and "live 0" in out


async def test_without_live_readonly_the_same_read_is_unrecorded(
    recorded: Path, fake_anthropic: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    before = len(fake_anthropic.requests)
    fake_anthropic.script(*_diverging_script())
    capsys.readouterr()
    assert await _cli("replay", str(recorded), "--model", REPLAY_MODEL) == 1
    out = capsys.readouterr().out
    assert incident_tools.EXECUTIONS == []
    disk, _ = tool_results(fake_anthropic.requests[before:][3])
    assert disk.get("is_error") and "unrecorded in this incident" in result_text(disk)
    assert "unrecorded 1 · live 0" in out


async def test_prompt_file_is_the_system_prompt_of_every_replay_request(
    recorded: Path, tmp_path: Path, fake_anthropic: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    prompt = tmp_path / "prompt-v2.md"
    prompt.write_text("You are opsloop v2. Prefer the smallest change; say which logs you delete.\n")
    original = Incident.load(recorded).system
    before = len(fake_anthropic.requests)
    fake_anthropic.script(*original_script())
    assert await _cli("replay", str(recorded), "--model", REPLAY_MODEL, "--prompt", str(prompt)) == 0
    requests = fake_anthropic.requests[before:]
    assert len(requests) == 5  # every step of the original script, its answer twice
    for q in requests:
        assert q.body is not None
        system = "".join(b["text"] for b in q.body["system"])
        assert system == prompt.read_text() and original not in system
    capsys.readouterr()
    assert await _cli("replay", str(recorded), "--prompt", str(tmp_path / "missing.md")) == 2
    assert "--prompt" in capsys.readouterr().err


async def test_effort_reaches_every_request_and_an_invalid_one_is_refused(
    recorded: Path, fake_anthropic: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    before = len(fake_anthropic.requests)
    fake_anthropic.script(*original_script())
    assert await _cli("replay", str(recorded), "--model", REPLAY_MODEL, "--effort", "xhigh") == 0
    requests = fake_anthropic.requests[before:]
    assert [q.body and q.body["output_config"] for q in requests] == [{"effort": "xhigh"}] * 5
    assert all(q.body and q.body["thinking"]["type"] == "adaptive" for q in requests)

    capsys.readouterr()
    count = len(fake_anthropic.requests)
    assert await _cli("replay", str(recorded), "--model", REPLAY_MODEL, "--effort", "turbo") == 2
    err = capsys.readouterr().err
    assert "--effort" in err and "'turbo'" in err and "low, medium, high, xhigh, max" in err
    # a model that takes no effort (it thinks with budgets, if at all): --effort is refused, not dropped
    assert await _cli("replay", str(recorded), "--model", "claude-haiku-4-5", "--effort", "low") == 2
    assert "claude-haiku-4-5" in capsys.readouterr().err
    assert len(fake_anthropic.requests) == count  # refused before any request


async def test_model_prices_the_replay_and_an_unknown_or_retired_model_is_refused(
    recorded: Path, fake_anthropic: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    for model in ("claude-haiku-5-5", "claude-fable-5-2"):
        before = len(fake_anthropic.requests)
        fake_anthropic.script(*original_script())
        capsys.readouterr()
        assert await _cli("replay", str(recorded), "--model", model, "--html", "-") == 0
        out = capsys.readouterr().out
        requests = fake_anthropic.requests[before:]
        assert {q.body and q.body["model"] for q in requests} == {model}
        billed = sum(q.cost_usd or 0 for q in requests)
        own = sum(price_for(model)[0].cost(_usage(q.usage)) for q in requests)
        assert billed == pytest.approx(own) and billed > 0
        (line,) = [ln for ln in out.splitlines() if ln.startswith("cost ")]
        assert line.endswith(f"→  ${billed:.4f}"), line

    count = len(fake_anthropic.requests)
    assert await _cli("replay", str(recorded), "--model", "claude-nonesuch-9") == 2
    err = capsys.readouterr().err
    assert "claude-nonesuch-9" in err and "price" in err
    assert await _cli("replay", str(recorded), "--model", "claude-opus-4-1") == 2
    err = capsys.readouterr().err
    assert "claude-opus-4-1 is retired" in err and "claude-opus-5-5" in err
    assert len(fake_anthropic.requests) == count


def _usage(u: dict[str, int] | None) -> Usage:
    u = u or {}
    return Usage(
        input_tokens=u.get("input_tokens", 0),
        output_tokens=u.get("output_tokens", 0),
        cache_read_tokens=u.get("cache_read_input_tokens") or 0,
        cache_write_tokens=u.get("cache_creation_input_tokens") or 0,
    )


async def test_a_replay_makes_no_slack_request(
    recorded: Path,
    tmp_path: Path,
    fake_slack: FakeSlack,
    fake_anthropic: FakeAnthropic,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Slack's tokens and URL point at the fake Slack; a replay (single, --html, --suite, --live-readonly, from
    the store by run id) sends it nothing."""
    calls = len(fake_slack.calls)
    run_id = Incident.load(recorded).run_id
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(recorded, suite / "disk-full.json")
    for argv in (
        ["replay", str(recorded), "--html", str(tmp_path / "page.html")],
        ["replay", run_id, "--live-readonly"],
        ["replay", "--suite", str(suite)],
    ):
        fake_anthropic.script(*original_script())
        assert await _cli(*argv, "--model", REPLAY_MODEL) == 0, argv
    assert "no Slack call" in capsys.readouterr().out
    assert fake_slack.calls[calls:] == []
    assert incident_tools.EXECUTIONS == []


async def test_an_empty_suite_fails_and_the_page_escapes_what_the_incident_says(
    recorded: Path, tmp_path: Path, fake_anthropic: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    capsys.readouterr()
    assert await _cli("replay", "--suite", str(empty), "--model", REPLAY_MODEL) == 2  # a gate that checks nothing
    assert "no incident records" in capsys.readouterr().err

    hostile = '<script>alert("task")</script><img src=x onerror=alert(1)>'
    _edit_fields(recorded, task=hostile)
    fake_anthropic.script(*_diverging_script())
    page = tmp_path / "page.html"
    assert await _cli("replay", str(recorded), "--model", REPLAY_MODEL, "--live-readonly", "--html", str(page)) == 1
    html = page.read_text()
    assert "<script" not in html and "<img" not in html and "&lt;script&gt;" in html
    assert "diverged at step 3" in html and "REGRESSION" in html
    assert '<td class="src">live</td>' in html and '<td class="src">would ask approval</td>' in html
    assert "would ask approval → denied (replay)" in html
