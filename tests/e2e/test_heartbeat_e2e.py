"""End to end: the nastiest built-in call (grep_log through a huge log; its pattern can't backtrack, RE2
matches in linear time, but 25 GB of text still takes minutes) must not stop the bot's heart. While it runs, a
thread reply still gets its :eyes: and a Stop click still works; when it overruns its timeout the model
gets the error. Either way its command is killed, not left behind. Only ordering is asserted, never
how long anything took.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import psutil
import pytest

from tests.support.busy_log import grep_commands, host_commands, huge_log
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import ALICE, bot_env, result_text, text_of, tool_results

TASK = "api-7 logs look odd, search them"
EVIL = {"path": "huge.log.gz", "pattern": "needle"}


def evil_logs(tmp_path: Path) -> Path:
    logs = tmp_path / "log"
    logs.mkdir()
    huge_log(logs / "huge.log")
    return logs


def config(logs: Path, grep_timeout_s: float) -> str:
    return (
        f'[tools]\nmodules = ["tools.builtin"]\n[tools.logs]\ndirs = [{json.dumps(str(logs))}]\n'
        f"[tools.timeouts]\ngrep_log = {grep_timeout_s}\n"
    )


async def wait_for_worker(timeout: float = 30.0) -> psutil.Process:  # noqa: ASYNC109
    """grep_log's command, once it runs grep."""
    async with asyncio.timeout(timeout):
        while not (found := grep_commands()):  # noqa: ASYNC110 (no event for "a process appeared")
            await asyncio.sleep(0.01)
    (worker,) = found
    return worker


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.processes
async def test_a_reply_and_a_stop_click_are_handled_while_a_catastrophic_grep_runs(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Searching the log."), tool_use("grep_log", EVIL)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config(evil_logs(tmp_path), 600)) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        worker = await wait_for_worker()

        reply_ts = await env.reply(channel, ts, "it started right after the 14:02 deploy", user=ALICE)
        await env.wait_reaction(channel, reply_ts, timeout=30)
        # The reply was stored and acked while the grep had not returned: its command is still alive and
        # the model was not asked for a next step.
        assert alive(worker) and len(fake_anthropic.requests) == 1

        await env.stop(await env.status(channel, ts), ALICE)
        report = text_of(await env.wait_final(channel, ts, timeout=30))
        assert "cancelled" in report and f"Stopped by <@{ALICE}>" in report
        assert not alive(worker) and host_commands() == []  # killed with the run, not abandoned
        assert len(fake_anthropic.requests) == 1
        fake_anthropic.assert_complete()


@pytest.mark.processes
async def test_a_catastrophic_grep_that_overruns_its_timeout_is_killed_and_the_model_told(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(text("Searching the log."), tool_use("grep_log", EVIL)),
        reply(text("The search timed out; the pattern was too expensive.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config(evil_logs(tmp_path), 1)) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        worker = await wait_for_worker()
        final = await env.wait_final(channel, ts, timeout=30)
        assert "timed out" in text_of(final)

        (result,) = tool_results((await env.requests(2))[1])
        assert result["is_error"] is True
        assert result_text(result) == "#1 grep_log huge.log.gz\ngrep_log timed out after 1s (its process was killed)"
        assert not alive(worker) and host_commands() == []
        fake_anthropic.assert_complete()
