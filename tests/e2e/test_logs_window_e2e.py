"""End to end through the real app and the scripted model: grep_log with since and newest_first finds an
incident's lines at the end of a big log, and says how many matched in all."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import ALICE, bot_env, result_text, tool_results


@pytest.mark.processes
async def test_grep_log_since_newest_first_finds_the_incident_at_the_end_of_a_big_log(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    logs = tmp_path / "log"
    logs.mkdir()
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - timedelta(days=2)
    with (logs / "api.log").open("w") as f:  # two days, a line a second: 170k lines, 12 MB; old errors throughout
        for i in range(170_000):
            t = start + timedelta(seconds=i)
            kind = "ERROR db pool exhausted" if i % 1000 == 0 else "INFO request served"
            f.write(f"{t:%Y-%m-%dT%H:%M:%SZ} {kind} id={i}\n")
        for k in range(3):  # the incident, in the last minutes
            f.write(f"{now - timedelta(minutes=3 - k):%Y-%m-%dT%H:%M:%SZ} ERROR db pool exhausted incident={k}\n")
    args = {"path": "api.log", "pattern": "ERROR db pool", "since": "30m", "newest_first": True, "max_matches": 2}
    fake_anthropic.script(
        reply(text("Searching the recent log."), tool_use("grep_log", args, id="toolu_grep")),
        reply(tool_use("update_summary", {"summary": "db pool exhausted in the last minutes"}, id="toolu_sum")),
        reply(text("The pool ran out three minutes ago.")),
    )
    config = f'[tools]\nmodules = ["tools.builtin"]\n[tools.logs]\ndirs = [{json.dumps(str(logs))}]\n'
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        channel, ts = await env.mention("api errors, check the log", user=ALICE)
        await env.wait_final(channel, ts, timeout=60)
        requests = await env.requests(2, timeout=10)
        (result,) = [r for r in tool_results(requests[1]) if r["tool_use_id"] == "toolu_grep"]
        lines = result_text(result).splitlines()
        assert lines[0] == "#1 grep_log api.log"
        assert lines[1].startswith(f"3 matching lines for /ERROR db pool/ in {logs / 'api.log'} between ")
        assert lines[1].endswith("and now (173 in all), showing the newest 2")
        assert [line.split(": ", 1)[1] for line in lines[2:]] == [
            f"{now - timedelta(minutes=1):%Y-%m-%dT%H:%M:%SZ} ERROR db pool exhausted incident=2",
            f"{now - timedelta(minutes=2):%Y-%m-%dT%H:%M:%SZ} ERROR db pool exhausted incident=1",
        ]
