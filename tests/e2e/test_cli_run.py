"""`opsloop run` as a real process: connects over Socket Mode, answers a mention, stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from tests.conftest import API_KEY
from tests.support.fakes.anthropic import reply, text
from tests.support.fakes.slack import mention_event

ROOT = Path(__file__).resolve().parents[2]


async def test_opsloop_run_serves_a_mention_and_stops_on_sigterm(tmp_path, fake_slack, fake_anthropic):
    fake_anthropic.script(reply(text("web-03: /var is at 100%, mostly rotated nginx logs.")))
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
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await fake_slack.wait_connected(timeout=30)
        mention = mention_event("C0INCIDENT", "U0ALICE", "web-03 is out of disk")
        await fake_slack.send_event(mention)
        answer = await fake_slack.wait_for_message(
            "C0INCIDENT",
            where=lambda m: m.thread_ts == mention["ts"] and "rotated nginx logs" in (m.text or ""),
            timeout=30,
        )
        assert answer.thread_ts == mention["ts"]
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    logs = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    events = [e.get("event") for e in logs]
    assert {"socket_mode.connected", "shutting_down"} <= set(events)
    # Start-up's objects are frozen out of the collector's full passes before Slack can deliver anything.
    [frozen] = [e for e in logs if e.get("event") == "gc.frozen"]
    assert frozen["objects"] > 10_000 and events.index("gc.frozen") < events.index("socket_mode.connected")
    assert fake_slack.bot_token not in stderr.decode() and API_KEY not in stderr.decode()
