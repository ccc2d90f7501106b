"""A long incident on claude-sonnet-5-5, through `opsloop run` as a real process, the fake Slack and the
strict fake Messages API (thinking bound to the exact conversation, 400 on any changed prefix).

Read-only calls in parallel, a 529 that falls back to claude-haiku-5-5, a thread reply that supersedes a
pending approval, a destructive call whose card is pending when the process is SIGKILLed, a new process
that resumes it, the approval, one condensation, the answer. Every request is accepted, and the cost the
bot recorded matches the fake's own pricing to the cent.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

from tests.conftest import API_KEY
from tests.support.fakes.anthropic import error, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, mention_event, message_event
from tests.support.harness import answered

ROOT = Path(__file__).resolve().parents[2]
CHANNEL, ALICE, BOB, CAROL = "C0INCIDENT", "U0ALICE", "U0BOB", "U0CAROL"
OVERLOADED = error(529, "overloaded_error", headers={"retry-after-ms": "10"})


def config(tmp_path: Path, name: str, extra: str = "") -> Path:
    path = tmp_path / name
    path.write_text(f"""
[model]
primary = "claude-sonnet-5-5"
fallbacks = ["claude-haiku-5-5"]
{extra}
[slack]
status_update_seconds = 0
[approvals]
approvers = ["{CAROL}", "{BOB}"]
[tools]
modules = ["tests.support.incident_tools"]
""")
    return path


async def start_bot(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: Any, cfg: Path, connects: int
) -> asyncio.subprocess.Process:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_", "OPSLOOP_"))},
        "SLACK_BOT_TOKEN": fake_slack.bot_token,
        "SLACK_APP_TOKEN": fake_slack.app_token,
        "SLACK_API_URL": fake_slack.api_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
        "OPSLOOP_DB": str(tmp_path / "opsloop.db"),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.app.cli",
        "run",
        "--config",
        str(cfg),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    await fake_slack.wait_connected(timeout=30, connects=connects)
    return proc


def card(fake_slack: FakeSlack, thread_ts: str, tool: str, state: str) -> Any:
    def match(m: Any) -> bool:
        blob = json.dumps(m.blocks or [])
        return (
            m.thread_ts == thread_ts and "opsloop.approve" in blob
            if state == "pending"
            else (m.thread_ts == thread_ts and tool in blob and state in (m.text or "").lower())
        )

    return fake_slack.wait_for_message(
        CHANNEL, where=lambda m: tool in json.dumps(m.blocks or []) and match(m), timeout=30
    )


async def test_a_long_incident_on_the_current_models_survives_a_sigkill(tmp_path, fake_slack, fake_anthropic):
    fake_anthropic.script(
        # 1 sonnet: two read-only calls at once; what it says between calls arrives as thinking
        reply(
            text("Checking disk and the big files."),
            tool_use("check_disk", {"host": "web-03"}),
            tool_use("list_large_files", {"host": "web-03", "path": "/var"}),
        ),
        # 2 sonnet is overloaded: three attempts, then the fallback answers (sonnet's thinking is dropped by the API)
        OVERLOADED,
        OVERLOADED,
        OVERLOADED,
        reply(
            text("Restarting nginx should release the deleted files."),
            tool_use("restart_service", {"host": "web-03", "unit": "nginx.service"}),
        ),
        # 3 after bob's reply superseded the restart: propose the cleanup instead (destructive, dry run)
        reply(
            text("Bob asked for no restart. Cleaning rotated logs."),
            tool_use("clean_logs", {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7}),
        ),
    )
    first = await start_bot(tmp_path, fake_slack, fake_anthropic, config(tmp_path, "a.toml"), connects=1)
    mention = mention_event(CHANNEL, ALICE, "web-03 is out of disk, deal with it")
    thread = mention["ts"]
    try:
        await fake_slack.send_event(mention)
        restart_card = await card(fake_slack, thread, "restart_service", "pending")
        reply_event = message_event(CHANNEL, BOB, "don't restart nginx, show me the logs first", thread_ts=thread)
        await fake_slack.send_event(reply_event)
        await card(fake_slack, thread, "restart_service", "superseded")
        clean_card = await card(fake_slack, thread, "clean_logs", "pending")
        assert "would delete" in json.dumps(clean_card.blocks)
    finally:
        first.send_signal(signal.SIGKILL)  # the process dies with the approval pending
        await first.wait()
    assert restart_card.ts != clean_card.ts

    # A new process, with a context budget that the next prompt exceeds: it condenses once.
    prompt = fake_anthropic.requests[-1].usage
    budget = prompt["input_tokens"] + prompt["cache_read_input_tokens"] + prompt["cache_creation_input_tokens"]
    fake_anthropic.script(
        reply(text("Cleaned. Checking the disk again."), tool_use("check_disk", {"host": "web-03"})),
        reply(text("Summary: web-03 /var was full of rotated nginx logs; carol approved clean_logs; 19.8 GB freed.")),
        *answered(
            reply(
                text(
                    "web-03: rotated nginx logs cleaned (approved by carol), /var back to 61%. Nginx not restarted, "
                    "as bob asked."
                )
            )
        ),
    )
    second = await start_bot(
        tmp_path,
        fake_slack,
        fake_anthropic,
        config(tmp_path, "b.toml", f"context_budget_tokens = {budget}"),
        connects=2,
    )
    try:
        await fake_slack.click(CAROL, CHANNEL, clean_card.ts, "opsloop.approve")
        answer = await fake_slack.wait_for_message(
            CHANNEL, where=lambda m: m.thread_ts == thread and "Nginx not restarted" in (m.text or ""), timeout=30
        )
    finally:
        second.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(second.communicate(), 30)
    assert second.returncode == 0, stderr.decode()[-2000:]
    assert answer.thread_ts == thread
    fake_anthropic.assert_complete()

    statuses = [r.status for r in fake_anthropic.requests]
    assert 400 not in statuses, [r.error for r in fake_anthropic.requests if r.status == 400]
    assert statuses.count(529) == 3
    models = [r.body["model"] for r in fake_anthropic.requests if r.status == 200]
    assert models == ["claude-sonnet-5-5", *["claude-haiku-5-5"] * 6]  # the answer twice: asked for the summary
    summary_request = fake_anthropic.requests[-3].body
    assert "tools" not in summary_request
    final_request = fake_anthropic.requests[-2].body
    thinking_kept = [
        b
        for m in final_request["messages"][:-2]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] in ("thinking", "redacted_thinking")
    ]
    assert thinking_kept == []  # the kept turns lost their thinking when the older ones were summarised

    db = sqlite3.connect(tmp_path / "opsloop.db")
    db.row_factory = sqlite3.Row
    run = db.execute("SELECT * FROM runs").fetchone()
    assert (run["status"], run["stop_reason"], run["condensed"]) == ("finished", "completed", 1)
    assert round(run["cost_usd"], 2) == round(fake_anthropic.cost_usd(), 2)
    assert abs(run["cost_usd"] - fake_anthropic.cost_usd()) < 1e-9
    confirmed = {r["tool"]: r["confirmed_by"] for r in db.execute("SELECT * FROM tool_results")}
    assert confirmed == {"check_disk": None, "list_large_files": None, "restart_service": None, "clean_logs": CAROL}
    restart = db.execute("SELECT content FROM tool_results WHERE tool = 'restart_service'").fetchone()["content"]
    handle, _, restart = restart.partition("\n")
    assert handle == "#3 restart_service web-03"  # the handle line, then what the run said instead of running it
    assert restart.startswith("Not run: while restart_service was waiting for approval, U0BOB replied")
    assert "don't restart nginx, show me the logs first" in restart
