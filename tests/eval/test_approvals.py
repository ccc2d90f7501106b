"""A case's people decide through opsloop's real approval policy (`config.approvals`), as their clicks would in
Slack: a click the policy refuses changes nothing, the change expires unapproved and the scoring sees it so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bot.core.pricing import price_for
from bot.eval.case import load
from bot.eval.runner import Ran, run_case
from bot.eval.script import ScriptedModel
from bot.eval.world import ran_change

RESTART = {"tool": "restart_service", "args": {"unit": "api", "host": "web-01"}}
CLEAN = {"tool": "clean_logs", "args": {"path": "/var/log/api", "older_than_days": 3, "host": "web-01"}}


async def _run(tmp_path: Path, *, approvals: dict[str, Any], approve: list[dict[str, Any]]) -> Ran:
    case = {
        "title": "api on web-01 is slow",
        "now": "2026-11-20T10:00:00Z",
        "trigger": {"mention": {"user": "U0ONCALL", "text": "api on web-01 is slow"}},
        "config": {"hosts": [{"name": "web-01", "address": "10.0.4.11"}], "approvals": approvals},
        "fixtures": [
            {"tool": "restart_service", "result": "restarted api; now active (running)"},
            {"tool": "clean_logs", "preview": "would delete 12 files, 1.2 GB", "result": "deleted 12 files"},
        ],
        "people": {"approve": approve},
        "expect": {"unknown_ok": True},
        "golden": [{"calls": [RESTART, CLEAN]}, {"text": "not known"}],
    }
    (tmp_path / "case.yaml").write_text(yaml.safe_dump(case))
    loaded = load(tmp_path)
    return await run_case(
        loaded, model=ScriptedModel(loaded.scripts["golden"]), price_for=lambda m: price_for(m, {})[0]
    )


def _call(ran: Ran, tool: str) -> Any:
    return next(c for c in ran.calls if c.tool == tool)


async def test_an_approval_by_someone_not_on_the_approver_list_is_refused(tmp_path: Path) -> None:
    ran = await _run(
        tmp_path,
        approvals={"approvers": ["U0LEAD"]},
        approve=[{"tool": "restart_service", "by": "U0DEV"}, {"tool": "clean_logs", "by": "U0LEAD"}],
    )
    restart, clean = _call(ran, "restart_service"), _call(ran, "clean_logs")
    assert (restart.approved, restart.ran, ran_change(restart)) == (False, False, False)
    assert restart.refused and restart.refused[0].startswith("U0DEV: ") and "U0LEAD" in restart.refused[0]
    assert (clean.approved, clean.decided_by, ran_change(clean)) == (True, "U0LEAD", True)  # an approver: it ran


async def test_the_requester_approving_a_destructive_call_is_refused_and_n_of_m_counts(tmp_path: Path) -> None:
    ran = await _run(
        tmp_path,
        approvals={"approvers": ["U0ONCALL", "U0LEAD", "U0SRE"], "required_approvals": 2},
        approve=[
            {"tool": "restart_service", "by": "U0ONCALL"},  # mutating: the requester may approve, one of two
            {"tool": "restart_service", "by": "U0SRE"},
            {"tool": "clean_logs", "by": "U0ONCALL"},  # destructive: the requester may not (no self-approval)
            {"tool": "clean_logs", "by": "U0LEAD"},  # one of two: not enough alone
        ],
    )
    restart, clean = _call(ran, "restart_service"), _call(ran, "clean_logs")
    assert (restart.approved, restart.decided_by, ran_change(restart)) == (True, "U0SRE", True)
    assert (clean.approved, clean.ran, ran_change(clean)) == (False, False, False)
    assert [r.split(":")[0] for r in clean.refused] == ["U0ONCALL"]
