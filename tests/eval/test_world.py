"""The case's world answers through the real gate: an unmatched call is a plain "no data" result that says what
there is (never an error toward a stop), and a case's bad input is one line naming the case and the key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bot.core.pricing import price_for
from bot.eval.case import CaseError, Turn, load
from bot.eval.runner import run_case
from bot.eval.script import ScriptedModel

CASE = Path(__file__).resolve().parents[2] / "evals" / "crashloop-configmap-env"


async def test_an_unmatched_call_gets_no_data_and_what_there_is_not_an_error() -> None:
    turns = (
        Turn(calls=(("k8s_logs", {"pod": "payments-api-0", "namespace": "other"}),)),
        Turn(text="done"),
    )
    ran = await run_case(load(CASE), model=ScriptedModel(turns), price_for=lambda m: price_for(m, {})[0])
    (result,) = ran.results
    assert result.splitlines()[1:] == [
        'No data for k8s_logs with namespace="other", pod="payments-api-0": nothing matched these arguments.',
        "k8s_logs has data for: k8s_logs(pod~/checkout-.*/).",
        "There is: Kubernetes clusters (the tools' cluster argument): prod (namespaces: shop; default shop)",
        "There is: Change sources (recent_changes; default window 120 minutes back from the run's start, or the "
        "alert's): Kubernetes rollouts, host package upgrades and boots (of the clusters and hosts named here)",
        "There is: Log directories (this machine, and inventory hosts that set no log_dirs of their own): /var/log",
        "There is: read_file reads under (this machine, and inventory hosts that set no read_dirs of their own): /etc",
        "There is: disk_usage lists under (this machine, and inventory hosts that set no usage_dirs of their own): "
        "every mount point",
    ]
    assert ran.stop_reason == "completed" and ran.calls[0].ran


def test_a_bad_case_is_one_line_naming_the_case_and_the_key(tmp_path: Path) -> None:
    shutil.copytree(CASE, tmp_path, dirs_exist_ok=True)
    (tmp_path / "case.yaml").write_text((CASE / "case.yaml").read_text().replace("  root_cause:", "  root_cuase:"))
    with pytest.raises(CaseError, match=rf"^{tmp_path.name}: expect: unknown key\(s\) root_cuase"):
        load(tmp_path)


def test_a_bad_approvals_table_is_read_as_opsloop_reads_it(tmp_path: Path) -> None:
    """`config.approvals` goes through the same reader as `[approvals]`: a value of the wrong type is one line, not
    a crash in the middle of a run."""
    shutil.copytree(CASE, tmp_path, dirs_exist_ok=True)
    text = (CASE / "case.yaml").read_text().replace("config:\n", "config:\n  approvals: {required_approvals: two}\n", 1)
    (tmp_path / "case.yaml").write_text(text)
    with pytest.raises(CaseError, match=rf"^{tmp_path.name}: config.approvals: required_approvals: "):
        load(tmp_path)
