"""The living summary survives a SIGKILL: the real `opsloop run` process accepts one update_summary, dies (SIGKILL)
inside the next model request, before a second update, and the restarted process shows that last accepted summary
in the status message and the final answer (docs/context.md: "a restarted run shows its last summary again")."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest

from bot.playground.standin.blockkit import block_errors
from bot.run.summary import TOOL_NAME
from tests.support.chaos import ALICE, CHANNEL, Bots, poll, query, stop
from tests.support.fakes.anthropic import FakeAnthropic, Reply, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, Message, mention_event
from tests.support.harness import is_status, text_of

FIRST = {
    "situation": "web-03 /var at 100%; cause not known yet",
    "hypotheses": [
        {
            "id": "logs",
            "statement": "rotated nginx logs fill /var",
            "status": "open",
            "confidence": "low",
            "evidence": [],
        }
    ],
    "next_steps": ["list the largest files under /var"],
}
SECOND = {**FIRST, "situation": "never accepted: the process died before it"}


@pytest.mark.processes
async def test_a_run_killed_between_two_updates_shows_its_last_accepted_summary_after_a_restart(
    tmp_path: Any, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bots = Bots(tmp_path, fake_slack, fake_anthropic)
    procs: list[asyncio.subprocess.Process] = []

    def kill_here(body: dict[str, Any]) -> Reply:
        """The request after the first update: the process dies before it gets the second one."""
        procs[-1].send_signal(signal.SIGKILL)
        return reply(tool_use(TOOL_NAME, SECOND))

    fake_anthropic.script(
        reply(tool_use(TOOL_NAME, FIRST, id="toolu_first")),
        kill_here,
        reply(text("Rotated nginx logs are the likely cause.")),
    )
    event = mention_event(CHANNEL, ALICE, "web-03 is paging: disk full on /var")
    thread = event["ts"]
    try:
        procs.append(await bots.start())
        await fake_slack.send_event(event, timeout=30)
        await poll(lambda: procs[0].returncode is not None or None, 20, "the SIGKILL at the second model request")
        assert await stop(procs[0]) == -signal.SIGKILL
        (run,) = query(bots.db, "SELECT id, status FROM runs")
        assert run["status"] != "finished"
        stored = query(bots.db, "SELECT step FROM summaries WHERE run_id = ?", (run["id"],))
        assert len(stored) == 1  # the first update was accepted and stored before the kill

        procs.append(await bots.start())
        answer = await fake_slack.wait_for_message(
            CHANNEL,
            lambda m: (
                m.thread_ts == thread
                and m.user == fake_slack.bot_user_id
                and not is_status(m)
                and "likely cause" in text_of(m)
            ),
            timeout=30,
        )
        status = await fake_slack.wait_for_message(
            CHANNEL, lambda m: m.thread_ts == thread and is_status(m) and "status_actions" not in ids(m), timeout=30
        )
    finally:
        for proc in procs:
            await stop(proc)

    for msg in (status, answer):
        assert block_errors(msg.blocks) == [], block_errors(msg.blocks)
        assert "summary_situation" in ids(msg)
        assert "web-03 /var at 100%" in text_of(msg) and "never accepted" not in text_of(msg)
    assert len(query(bots.db, "SELECT step FROM summaries WHERE run_id = ?", (run["id"],))) == 1
    fake_anthropic.assert_complete()


def ids(msg: Message) -> list[str]:
    return [str(b.get("block_id")) for b in msg.blocks or []]
