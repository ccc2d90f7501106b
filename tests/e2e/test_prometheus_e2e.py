"""End to end through Slack with a real Prometheus over an hour of backfilled history: the model asks for the checkout
error ratio over the hour with a threshold, reads when it first crossed it, and quotes that line as evidence."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.run.summary import TOOL_NAME
from tests.support import promserver
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import bot_env, result_text, tool_results

pytestmark = pytest.mark.skipif(
    promserver.prometheus_missing() is not None, reason=str(promserver.prometheus_missing())
)
START = promserver.history_start()
ONSET = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(START + promserver.ONSET_AFTER_S))


@pytest.fixture
async def prom() -> AsyncIterator[promserver.PromStack]:
    target = await promserver.Target(value=0.5).start()
    try:
        async with promserver.prometheus(target, backfill=promserver.onset_history(START)) as stack:
            yield stack
    finally:
        await target.close()


async def test_the_model_reads_when_the_error_ratio_first_crossed_its_threshold(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, prom: promserver.PromStack
) -> None:
    onset_line = f"first above 0.1 at {ONSET}"
    args = {
        "query": "test_errors_ratio",
        "start": str(START),
        "end": str(START + promserver.HOUR),
        "threshold": 0.1,
        "top": 3,
    }
    hypothesis = {"id": "checkout", "statement": "checkout errors rose", "status": "confirmed", "confidence": "high"}
    summary = {
        "situation": "checkout errors",
        "hypotheses": [{**hypothesis, "evidence": [{"handle": "#1", "quote": onset_line}]}],
    }
    fake_anthropic.script(
        reply(tool_use("prometheus_query_range", args, id="toolu_range")),
        reply(tool_use(TOOL_NAME, summary, id="toolu_summary")),
        reply(text(f"checkout's error ratio went above 10% at {ONSET}.")),
    )
    config = f'[tools]\nmodules = ["tools.builtin"]\n\n[tools.prometheus]\nurl = {json.dumps(prom.url)}\n'
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        channel, ts = await env.mention("checkout is throwing errors, when did it start?")
        await env.wait_final(channel, ts, timeout=30)
        requests = await env.requests(3)
        (result,) = tool_results(requests[1])
        said = result_text(result)
        assert not result.get("is_error"), said
        assert f"  {onset_line} (value 0.4 (40%))" in said
        assert said.count("first above 0.1") == 1  # only checkout crossed; the calm ones are counted, not shown
        assert "… 12 more series not shown, their max from 0.001 to 0.012; 0 of them above 0.1;" in said
        (accepted,) = tool_results(requests[2])
        assert not accepted.get("is_error"), result_text(accepted)
        fake_anthropic.assert_complete()
