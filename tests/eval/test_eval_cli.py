"""`opsloop eval` end to end: the real CLI, runner and runtime against the fake Messages API (the real anthropic
client on loopback); `--baseline` exits 1 when a case got worse."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from bot.app.cli import main
from bot.eval.case import Turn, load
from tests.conftest import API_KEY
from tests.support.fakes.anthropic import FakeAnthropic, Reply, reply, text, tool_use

CASE = Path(__file__).resolve().parents[2] / "evals" / "crashloop-configmap-env"
MODEL = "claude-sonnet-5-5"


def replies(turns: tuple[Turn, ...]) -> list[Reply]:
    """A case's script as the fake Messages API's replies."""
    return [
        reply(*([text(t.text)] if t.text else []), *(tool_use(name, args) for name, args in t.calls)) for t in turns
    ]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_anthropic: FakeAnthropic) -> Path:
    monkeypatch.chdir(tmp_path)  # no opsloop.toml here: the defaults
    monkeypatch.delenv("OPSLOOP_CONFIG", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    shutil.copytree(CASE, tmp_path / "evals" / CASE.name)
    return tmp_path


async def opsloop(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


async def test_eval_runs_a_case_on_the_model_and_writes_its_scores(
    env: Path, fake_anthropic: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_anthropic.script(*replies(load(CASE).scripts["golden"]))
    status = await opsloop("eval", "evals", "--model", MODEL, "--json", "out.json", "--html", "out.html")
    out = capsys.readouterr()
    assert status == 0, out.out
    fake_anthropic.assert_complete()
    body = json.loads((env / "out.json").read_text())
    assert [(c["case"], c["model"], c["pass_rate"]) for c in body["cases"]] == [(CASE.name, MODEL, 1.0)]
    assert all(check["passed"] for check in body["runs"][0]["checks"].values())
    assert body["runs"][0]["tokens"] > 0 and body["runs"][0]["cost_usd"] > 0
    assert f"{CASE.name}" in out.out and "1/1 runs passed every check" in out.out
    assert f"[1/1] {CASE.name} on {MODEL}: pass" in out.err  # the progress line, plain: not a terminal
    assert "<table>" in (env / "out.html").read_text()


async def test_baseline_exits_1_naming_the_case_that_got_worse(
    env: Path, fake_anthropic: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await opsloop("eval", "evals", "--script", "golden", "--model", MODEL, "--json", "base.json") == 0
    fake_anthropic.script(*replies(load(CASE).scripts["bad"]))
    capsys.readouterr()
    status = await opsloop("eval", "evals", "--model", MODEL, "--baseline", "base.json")
    out = capsys.readouterr().out
    assert status == 1
    assert f"REGRESSION {CASE.name}: pass rate 100% → 0% ({MODEL})" in out
    assert "1 case(s) worse than base.json" in out


async def test_baseline_passes_when_nothing_got_worse(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert await opsloop("eval", "evals", "--script", "golden", "--model", MODEL, "--json", "base.json") == 0
    assert await opsloop("eval", "evals", "--script", "golden", "--model", MODEL, "--baseline", "base.json") == 0
    assert "no case worse than base.json" in capsys.readouterr().out


async def test_the_judge_scores_each_answer_apart_from_the_checks(
    env: Path, fake_anthropic: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_anthropic.script(reply(text("SCORE: 0.8 the cause and its evidence are right; impact is thin.")))
    status = await opsloop(
        "eval", "evals", "--script", "golden", "--model", MODEL, "--judge", "claude-haiku-5-5", "--json", "out.json"
    )
    assert status == 0, capsys.readouterr().out
    fake_anthropic.assert_complete()
    (judged,) = [r.body for r in fake_anthropic.requests if r.body and r.body["model"] == "claude-haiku-5-5"]
    assert "PAYMENTS_API_URL" in json.dumps(judged["messages"])  # the answer reaches the judge
    run = json.loads((env / "out.json").read_text())["runs"][0]
    assert (run["judge"], run["passed"]) == (0.8, True)
    assert " 0.80" in capsys.readouterr().out.splitlines()[1]
