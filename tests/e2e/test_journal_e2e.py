"""kernel_events through the real app: the model asks for the kernel's events and reads the OOM kill in its result."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support import journal as fixture
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import ALICE, bot_env, result_text, tool_results

OOM = "Out of memory: Killed process 3120 (java) total-vm:8388608kB, anon-rss:6291456kB, file-rss:0kB"


@pytest.mark.processes
async def test_kernel_events_reports_an_oom_kill_to_the_model(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    if (reason := fixture.missing_reason()) is not None:
        pytest.skip(reason)
    now = int(time.time())
    journal = fixture.write_journal(
        tmp_path / "journal",
        [fixture.kernel("e1000e: eth0 NIC Link is Up", at=now - 7_200, priority=6), fixture.kernel(OOM, at=now - 600)],
    )
    config = f'[tools]\nmodules = ["tools.builtin"]\n[tools.journal]\ndir = {json.dumps(str(journal))}\n'
    fake_anthropic.script(
        reply(text("Checking the kernel log."), tool_use("kernel_events", {"since": "24h"})),
        reply(text("The kernel OOM-killed java (pid 3120) ten minutes ago.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        channel, ts = await env.mention("the api died, why?", user=ALICE)
        await env.wait_final(channel, ts, timeout=30)
        (result,) = tool_results((await env.requests(2))[1])
        out = result_text(result)
        assert "(2 kernel messages read)" in out
        assert (
            f"OOM kills: 1, latest: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(now - 600))} err kernel: {OOM}"
            in out
        )
