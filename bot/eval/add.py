"""`opsloop eval add RUN_ID DIR`: a stored run as a case skeleton in DIR.

From the run's record (bot.replay.record, redacted): the trigger (the mention's author and text; for a run an
Alertmanager alert started, the alert's stored payload, redacted; any other alert's text as a mention), its start
as the case's "now", the tool and reach tables of the config in use (what the run could reach), every tool call that
returned a result as a fixture (in call order: the same call twice answers in turn), the people's decisions and
replies, and the golden script: the run's own model replies, tool calls and summaries included. The
expectation is left for a person: root_cause is empty, so the case does not load until it is filled in;
`evidence` lists the calls the run's last summary cited, to keep or trim.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from bot.config.settings import Settings
from bot.eval.case import CASE_FILE
from bot.replay.record import Incident, export_run
from bot.run.history import tool_calls
from bot.run.summary import handle_number
from bot.store import AlertGroup, Ledger
from tools.reaches import REACHES

ALERTMANAGER = "webhook"  # the alert source whose stored payload a case's `trigger.alert` reads
_MENTION = re.compile(r"^\[incident request from <@([^>]+)> in <#([^>]+)>\]\s*", re.S)


def _fail(line: str) -> int:
    print(f"opsloop: eval add: {line}", file=sys.stderr)
    return 2


def world_config(path: str | None) -> dict[str, Any]:
    """The tool and reach tables of the config file in use: what a run could reach (no model, Slack, approvals)."""
    if path is None or not Path(path).is_file():
        return {}
    raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    keep = {"tools", *(s for r in REACHES for s in r.sections)}
    return {k: v for k, v in raw.items() if k in keep}


def trigger(incident: Incident, alert: AlertGroup | None) -> tuple[dict[str, Any], str]:
    """The case's trigger, and a note for the case's head when it could not be the run's own: an Alertmanager
    alert's stored payload as `alert`; otherwise a mention with the run's first message (a PagerDuty or Slack
    alert included: a case's alert trigger reads Alertmanager payloads only)."""
    if alert is not None and alert.source == ALERTMANAGER and alert.payload:
        return {"alert": json.loads(alert.payload)}, ""
    m = _MENTION.match(incident.task)
    user = incident.requester or (m.group(1) if m else "U0ALERT")
    text = _MENTION.sub("", incident.task, count=1) if m else incident.task
    note = ""
    if alert is not None:
        note = (
            f"# The run was started by a {alert.source} alert; an alert trigger takes Alertmanager payloads only,\n"
            "# so the trigger below is a mention holding the alert's text as the run got it.\n"
        )
    return {"mention": {"user": user, "text": text.strip() or "(empty)"}}, note


def skeleton(
    incident: Incident, history: list[dict[str, Any]], config: dict[str, Any], alert: AlertGroup | None = None
) -> tuple[str, str]:
    """(case.yaml, golden.yaml) for the run; `alert`: the alert group that started it."""
    started_by, note = trigger(incident, alert)
    fixtures = [
        {"tool": c.tool, "args": c.args, "result": c.result, **({"error": True} if c.is_error else {})}
        for c in incident.calls
        if c.result is not None and c.tool != "update_summary" and (c.read_only or c.changed)
    ]
    approve = [
        {"tool": c.tool, "args": c.args, "by": c.decision.by}
        for c in incident.calls
        if c.decision is not None and c.decision.approved and c.decision.by
    ]
    deny = [
        {"tool": c.tool, "args": c.args, "by": c.decision.by or "U0SOMEONE", "reason": c.decision.reason}
        for c in incident.calls
        if c.decision is not None and c.decision.outcome == "denied"
    ]
    replies = [{"after_step": max(r.after_step, 1), "user": r.user, "text": r.text} for r in incident.replies]
    cited: list[dict[str, Any]] = []
    summary = incident.final_summary
    numbered = [c for c in incident.calls if c.tool != "update_summary"]  # how the run numbered handles
    for h in summary.hypotheses if summary else ():
        for e in h.evidence:
            n = handle_number(e.handle)
            if n is not None and 0 < n <= len(numbered) and (c := numbered[n - 1]).result is not None:
                entry = {"tool": c.tool, "args": c.args}
                if entry not in cited:
                    cited.append(entry)
    body = {
        "title": f"FILL IN: what happened (from run {incident.run_id})",
        "now": datetime.fromtimestamp(incident.created_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "trigger": started_by,
        "config": config,
        "fixtures": fixtures,
        "people": {k: v for k, v in (("approve", approve), ("deny", deny), ("replies", replies)) if v},
        "expect": {
            "root_cause": [],
            "tempting": [],
            "evidence": cited,
            "forbidden": [],
            "limits": {"steps": incident.steps + 2, "dollars": round(max(incident.cost_usd * 2, 0.1), 2)},
        },
    }
    head = (
        f"# A case made by `opsloop eval add {incident.run_id}`. Fill in the expectation (evals/README.md):\n"
        "# root_cause (patterns the answer and the top hypothesis must match), tempting, forbidden; check the\n"
        "# fixtures (trim what the case doesn't need, add the calls a different path would make), then write\n"
        "# bad.yaml: a script that states the tempting cause or makes the forbidden call.\n"
        f"{note}"
    )
    return head + _dump(body), _dump(golden(history))


def golden(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's model replies as a script: each assistant turn's text and tool calls."""
    turns = []
    for message in history:
        if message["role"] != "assistant":
            continue
        content = message["content"] if isinstance(message["content"], list) else []
        text = "\n".join(b["text"] for b in content if b.get("type") == "text" and b.get("text"))
        calls = [{"tool": c.name, "args": c.args} for c in tool_calls(content)]
        turns.append({**({"text": text} if text else {}), **({"calls": calls} if calls else {})})
    return [t for t in turns if t]


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]
    """Plain YAML a person edits: no anchors or aliases, multi-line text as a literal block."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def _dump(body: Any) -> str:
    text: str = yaml.dump(body, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)
    return text


def cmd_add(settings: Settings, argv: list[str], config_path: str | None) -> int:
    if len(argv) != 2:
        return _fail("usage: opsloop eval add RUN_ID DIR")
    run_id, folder = argv[0], Path(argv[1])
    if (folder / CASE_FILE).exists():
        return _fail(f"{folder / CASE_FILE} exists already; give a new folder")
    ledger = Ledger(settings.db_path)
    try:
        starting = ledger.runs_starting(run_id, 2)
        found = ledger.find_run(run_id) or (starting[0] if len(starting) == 1 else None)
        incident = export_run(ledger, found.id) if found is not None else None
        history = ledger.history(found.id) if found is not None else []
        alert = ledger.alert_group_of_run(found.id) if found is not None else None
    finally:
        ledger.close()
    if incident is None:
        return _fail(f"no run {run_id!r} in {settings.db_path}")
    case_text, golden_text = skeleton(incident, history, world_config(config_path), alert)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CASE_FILE).write_text(case_text, encoding="utf-8")
    (folder / "golden.yaml").write_text(golden_text, encoding="utf-8")
    print(f"wrote {folder / CASE_FILE} and {folder / 'golden.yaml'}: fill in the expectation, then add bad.yaml")
    return 0
