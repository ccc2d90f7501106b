"""End to end, hostile: what a person approved is exactly what a built-in destructive tool runs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import ALICE, BOB, bot_env, result_text, text_of, tool_results

DAY = 86_400


def old_file(path: Path, size: int, days: float = 30) -> Path:
    path.write_bytes(b"x" * size)
    t = time.time() - days * DAY
    os.utime(path, (t, t))
    return path


@pytest.mark.processes
async def test_clean_logs_deletes_only_the_files_its_approved_preview_listed(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    logs = tmp_path / "log"
    logs.mkdir()
    listed = old_file(logs / "app.log.1", 1_000)
    args = {"path": str(logs), "older_than_days": 7}
    fake_anthropic.script(
        reply(text("Cleaning old rotated logs."), tool_use("clean_logs", args)),
        reply(text("Deleted app.log.1; app.log.2.gz needs a new approval.")),
    )
    config = f'[tools]\nmodules = ["tools.builtin"]\n[tools.logs]\ndirs = [{json.dumps(str(logs))}]\n'
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        channel, ts = await env.mention("disk is filling up with logs, clean them", user=ALICE)
        card = await env.card(channel, ts, timeout=30)
        shown = text_of(card)
        assert f"would delete 1 rotated log files older than 7 days under {logs}" in shown
        assert str(listed) in shown

        late = old_file(logs / "app.log.2.gz", 5_000)  # matches too, but appears after the preview was shown
        await env.approve(card, BOB)
        await env.wait_final(channel, ts, timeout=30)

        (result,) = tool_results((await env.requests(2))[1])
        content = result_text(result)
        assert not result.get("is_error")
        assert content.splitlines()[0].startswith("#1 clean_logs /")  # the handle, then what the tool said
        assert content.splitlines()[1] == (
            f"deleted 1 rotated log files older than 7 days under {logs}, freed 1000B (1000 bytes); approved by {BOB}"
        )
        assert content.splitlines()[3:] == [
            "not deleted, not in the approved preview (1 files, new or changed since it was made; call clean_logs "
            "again for a new preview and approval):",
            f"  {late}  4.9K  30d old",
        ]
        assert not listed.exists() and late.exists()
        fake_anthropic.assert_complete()
