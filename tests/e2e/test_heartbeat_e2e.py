"""End to end: the nastiest built-in call (grep_log through a huge log; its pattern can't backtrack, RE2
matches in linear time, but 64 GiB still takes minutes) must not stop the bot's heart. While it runs, a
thread reply still gets its :eyes: and a Stop click still works; when it overruns its timeout the model
gets the error. Either way its worker process is killed, not left behind. Only ordering is asserted, never
how long anything took.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import psutil
import pytest

from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import ALICE, bot_env, result_text, text_of, tool_results
from tools.worker import WORKER_MARK

TASK = "api-7 logs look odd, search them"
EVIL = {"path": "huge.log", "pattern": "needle"}


def evil_logs(tmp_path: Path) -> Path:
    logs = tmp_path / "log"
    logs.mkdir()
    with (logs / "huge.log").open("wb") as f:
        f.truncate(64 * 1024**3)  # a hole: no disk used, but grep_log reads it for minutes
    return logs


def config(logs: Path, grep_timeout_s: float) -> str:
    return (
        f'[tools]\nmodules = ["tools.builtin"]\n[tools.logs]\ndirs = [{json.dumps(str(logs))}]\n'
        f"[tools.timeouts]\ngrep_log = {grep_timeout_s}\n"
    )


def workers() -> list[psutil.Process]:
    """Live tool worker processes started by this (test and bot) process."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if WORKER_MARK in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


async def wait_for_worker(timeout: float = 30.0) -> psutil.Process:  # noqa: ASYNC109
    async with asyncio.timeout(timeout):
        while not (found := workers()):  # noqa: ASYNC110 (no event for "a process appeared")
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
        # The reply was stored and acked while the grep had not returned: its worker is still alive and
        # the model was not asked for a next step.
        assert alive(worker) and len(fake_anthropic.requests) == 1

        await env.stop(await env.status(channel, ts), ALICE)
        report = text_of(await env.wait_final(channel, ts, timeout=30))
        assert "cancelled" in report and f"Stopped by <@{ALICE}>" in report
        assert not alive(worker) and workers() == []  # killed with the run, not abandoned
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
        assert result_text(result) == "grep_log timed out after 1s (its process was killed)"
        assert not alive(worker) and workers() == []
        fake_anthropic.assert_complete()
