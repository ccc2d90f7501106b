"""A run whose update_summary was refused: the failing checks name each refusal (its first problem), in the
table and the JSON of `opsloop eval --script golden`, so a case's author sees why the summary failed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from bot.app.cli import main

CASE = Path(__file__).resolve().parents[2] / "evals" / "crashloop-configmap-env"


def _broken_golden(folder: Path) -> None:
    """The case's golden script with its summary refused twice: a quote not in the cited result, then a statement
    over the 200-character limit; the answer said again when opsloop asks once for the missing summary."""
    turns = yaml.safe_load((folder / "golden.yaml").read_text())
    summary = turns[1]["calls"][0]["args"]
    bad_quote = json.loads(json.dumps(summary))
    bad_quote["hypotheses"][0]["evidence"][0]["quote"] = "PAYMENTS_API_URL was deleted by ci-bot"
    too_long = json.loads(json.dumps(summary))
    too_long["hypotheses"][0]["statement"] = "The ConfigMap edit removed PAYMENTS_API_URL. " * 6
    turns[1]["calls"] = [{"tool": "update_summary", "args": bad_quote}]
    turns.insert(2, {"calls": [{"tool": "update_summary", "args": too_long}]})
    turns.append(turns[-1])  # asked once for the summary it never got, the model gives its answer again
    (folder / "golden.yaml").write_text(yaml.safe_dump(turns, sort_keys=False))


def test_the_failing_checks_name_the_refused_summaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPSLOOP_CONFIG", raising=False)
    shutil.copytree(CASE, tmp_path / CASE.name)
    _broken_golden(tmp_path / CASE.name)

    assert main(["eval", CASE.name, "--script", "golden", "--json", "out.json"]) == 1
    out = capsys.readouterr().out
    quote = "hypotheses[0].evidence[0].quote: PAYMENTS_API_URL was deleted by ci-bot is not in the result of #3"
    statement = "hypotheses[0].statement: 270 characters, at most 200"
    checks = json.loads((tmp_path / "out.json").read_text())["runs"][0]["checks"]
    why = checks["cause_found"]["why"]
    assert not checks["cause_found"]["passed"]
    assert "the summary's top hypothesis" in why and "update_summary was refused 2 times: " in why
    assert quote in why and statement in why
    assert quote in checks["evidence_cited"]["why"]  # the summary cites nothing: it was never accepted
    shown = " ".join(line.strip() for line in out.splitlines() if line.startswith("    "))  # under the case's row
    assert shown.startswith("cause_found: the summary's top hypothesis")
    assert quote in shown and statement in shown
