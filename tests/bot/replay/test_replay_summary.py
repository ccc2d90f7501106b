"""Replay and the living summary: a record keeps its summary history, a replay's update_summary calls run in the
replay's own store (the runtime's tool, never the recorded world's), and the comparison sets the final hypotheses
of both runs side by side (docs/context.md, The living summary: "`opsloop replay` compares the final hypotheses")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.replay.compare import compare, html_page, text
from bot.replay.record import Incident, export_run
from bot.run.summary import TOOL_NAME
from tests.bot.replay.test_replay import replay_on
from tests.support.fakes.anthropic import FakeAnthropic, reply, tool_use
from tests.support.fakes.anthropic import text as said
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import bot_env, result_text, tool_results

TASK = "web-03 is paging: disk full on /var"


def update(status: str, confidence: str) -> dict[str, Any]:
    return {
        "situation": "web-03 /var at 100%",
        "hypotheses": [
            {
                "id": "logs",
                "statement": "rotated nginx logs fill /var",
                "status": status,
                "confidence": confidence,
                "evidence": [{"handle": "#1", "quote": "/var 50G 49.8G 0.2G 100%"}],
            },
            {
                "id": "db",
                "statement": "the database writes a huge dump",
                "status": "open",
                "confidence": "low",
                "evidence": [],
            },
        ],
        "next_steps": ["delete rotated logs"],
    }


def script(status: str, confidence: str) -> list[Any]:
    return [
        reply(tool_use("check_disk", {"host": "web-03"}, id="toolu_disk")),
        reply(tool_use(TOOL_NAME, update(status, confidence), id="toolu_sum")),
        reply(said("Rotated nginx logs fill /var.")),
    ]


async def record(tmp_path: Path, slack: FakeSlack, fake: FakeAnthropic) -> Incident:
    fake.script(*script("supported", "high"))
    async with bot_env(tmp_path, slack, fake) as env:
        channel, ts = await env.mention(TASK)
        await env.wait_final(channel, ts)
        (run,) = env.runs()
        with env.ledger() as ledger:
            incident = export_run(
                ledger, run.id, categories={t.name: t.category.value for t in env.ops.tools}, limits=env.settings.limits
            )
    assert incident is not None
    return Incident.from_json(incident.to_json())  # as `opsloop replay` reads it: from the exported file


async def test_the_same_final_hypotheses_are_said_to_be_the_same(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    incident = await record(tmp_path, fake_slack, fake_anthropic)
    assert [h["summary"]["hypotheses"][0]["status"] for h in incident.summary_history] == ["supported"]
    assert incident.calls[0].result is not None and incident.calls[0].result.startswith("web-03")  # no handle line
    result, requests = await replay_on(incident, fake_anthropic, *script("supported", "high"))
    (disk,) = tool_results(requests[1])
    assert result_text(disk).startswith("#1 check_disk web-03\nweb-03")  # the replay's own handle, once
    names = [t["name"] for t in requests[0].body["tools"]]
    assert names.count(TOOL_NAME) == 1  # the runtime's own tool, not a second copy from the record
    (res,) = tool_results(requests[2])
    assert not res.get("is_error") and "Summary updated" in result_text(res)  # accepted in the replay's store
    c = compare(result)
    assert c.same_hypotheses and c.identical
    assert "final hypotheses: same (logs supported/high; db open/low)" in text(c).splitlines()


async def test_different_final_hypotheses_are_shown_side_by_side(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    incident = await record(tmp_path, fake_slack, fake_anthropic)
    result, _ = await replay_on(incident, fake_anthropic, *script("confirmed", "high"))
    c = compare(result)
    assert not c.same_hypotheses and c.same_change
    assert (
        "final hypotheses: different (logs supported/high; db open/low → logs confirmed/high; db open/low)"
        in text(c).splitlines()
    )
    page = html_page(c, generated_at=0)
    assert "different final hypotheses" in page and "logs confirmed/high" in page


async def test_a_replay_that_never_summarises_says_so(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    incident = await record(tmp_path, fake_slack, fake_anthropic)
    result, _ = await replay_on(
        incident,
        fake_anthropic,
        reply(tool_use("check_disk", {"host": "web-03"})),
        reply(said("Rotated nginx logs fill /var.")),
    )
    c = compare(result)
    assert not c.same_hypotheses
    assert "final hypotheses: different (logs supported/high; db open/low → no summary)" in text(c).splitlines()
