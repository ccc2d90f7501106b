"""`opsloop eval add`: a run of `opsloop demo` becomes a case whose golden script (the run's own model replies)
passes once a person has filled in the expectation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bot.app.cli import main
from bot.eval.case import CaseError, load
from bot.store import Ledger


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
