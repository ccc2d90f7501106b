"""End to end: evidence anyone can check. Each tool result opens with a handle (`#1 check_disk web-03`); an
update_summary's evidence is a handle and a quote opsloop finds in that call's result, shown in Slack under its
hypothesis and in `opsloop show`; a final answer with no summary, or one behind its calls, gets one request for
the update."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.app.cli import main
from bot.playground.standin.blockkit import block_errors
from bot.run.prompts import SUMMARY_BEHIND
from bot.run.summary import TOOL_NAME
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import ALICE, answered, bot_env, is_status, result_text, text_of, tool_results

TASK = "web-03 is paging: disk full on /var"
TRUE_QUOTE = "/var 50G 49.8G  0.2G 100%"  # check_disk's line, its whitespace changed


def update(status: str, evidence: list[dict[str, str]], confidence: str = "high") -> dict[str, Any]:
    hyp = {"id": "logs", "statement": "rotated nginx logs fill /var", "status": status, "confidence": confidence}
    return {"situation": "web-03 /var is full", "hypotheses": [{**hyp, "evidence": evidence}]}


def user_texts(request: Any) -> list[str]:
    content = (request.body or {})["messages"][-1]["content"]
    return [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"]


async def test_a_quote_not_in_its_result_is_refused_and_the_model_sees_why(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"}, id="toolu_disk")),
        reply(tool_use(TOOL_NAME, update("confirmed", [{"handle": "#1", "quote": "/var 20% used"}]), id="toolu_s")),
        *answered(reply(text("Not sure yet."))),  # refused: no summary yet, so asked once
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        await env.wait_final(channel, ts)
        requests = await env.requests(3)
        (refused,) = tool_results(requests[2])
        assert refused.get("is_error")
        said = result_text(refused)
        assert "/var 20% used is not in the result of #1 check_disk web-03" in said, said
        (run,) = env.runs()
        with env.ledger() as ledger:
            assert ledger.summaries(run.id) == []
        fake_anthropic.assert_complete()


async def test_confirmed_without_evidence_is_refused(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"}, id="toolu_disk")),
        reply(tool_use(TOOL_NAME, update("confirmed", [], confidence="medium"), id="toolu_s")),
        *answered(reply(text("Not sure yet."))),  # refused: no summary yet, so asked once
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        await env.wait_final(channel, ts)
        (refused,) = tool_results((await env.requests(3))[2])
        assert refused.get("is_error")
        assert "status confirmed needs at least one quoted piece of evidence" in result_text(refused)
        fake_anthropic.assert_complete()


async def test_a_true_quote_is_shown_under_its_hypothesis_and_handles_are_in_results_and_show(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, monkeypatch: Any, capsys: Any
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"}, id="toolu_disk")),
        reply(tool_use(TOOL_NAME, update("confirmed", [{"handle": "#1", "quote": TRUE_QUOTE}]), id="toolu_s")),
        reply(text("Rotated nginx logs fill /var (#1).")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        await env.wait_final(channel, ts)
        requests = await env.requests(3)
        (disk,) = tool_results(requests[1])
        assert result_text(disk).startswith("#1 check_disk web-03\n")
        (accepted,) = tool_results(requests[2])
        assert not accepted.get("is_error"), result_text(accepted)
        status = await env.slack.wait_for_message(
            channel, lambda m: m.thread_ts == ts and is_status(m) and "rotated nginx logs" in text_of(m)
        )
        assert block_errors(status.blocks) == []
        ids = [b.get("block_id") for b in status.blocks or []]
        assert ids.index("summary_cause") + 1 == ids.index("summary_evidence_0")  # right under its hypothesis
        shown = text_of(status)
        assert '#1 check_disk web-03: "/var 50G 49.8G 0.2G 100%"' in shown
        (run,) = env.runs()
        db = str(env.settings.db_path)
        fake_anthropic.assert_complete()
    monkeypatch.setenv("OPSLOOP_DB", db)
    monkeypatch.chdir(tmp_path)
    for name in ("OPSLOOP_CONFIG", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    assert main(["show", run.id]) == 0
    out = capsys.readouterr().out
    assert "#1 check_disk web-03" in out
    assert 'evidence #1 check_disk web-03: "/var 50G 49.8G 0.2G 100%"' in out


async def test_a_final_answer_with_a_stale_summary_gets_one_request_for_the_update(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"}, id="toolu_disk")),
        reply(tool_use(TOOL_NAME, update("open", [], confidence="low"), id="toolu_s1")),
        reply(tool_use("list_large_files", {"host": "web-03", "path": "/var"}, id="toolu_ls")),  # after the summary
        reply(text("First answer.")),
        reply(text("Still the answer.")),  # it ignores the request: the answer posts anyway, not asked again
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        final = await env.wait_final(channel, ts)
        assert "Still the answer." in text_of(final)
        requests = await env.requests(5)
        assert user_texts(requests[4]) == [SUMMARY_BEHIND]  # asked once, after the first answer
        fake_anthropic.assert_complete()


async def test_a_final_answer_with_no_summary_after_reads_gets_one_request_for_the_update(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"}, id="toolu_disk")),
        reply(text("First answer.")),  # read with a tool, never summarised
        reply(tool_use(TOOL_NAME, update("confirmed", [{"handle": "#1", "quote": TRUE_QUOTE}]), id="toolu_s")),
        reply(text("The answer, summarised.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        final = await env.wait_final(channel, ts)
        assert "The answer, summarised." in text_of(final) and "First answer." not in text_of(final)
        requests = await env.requests(4)
        assert user_texts(requests[2]) == [SUMMARY_BEHIND]  # asked once, after the first answer
        (accepted,) = tool_results(requests[3])
        assert not accepted.get("is_error"), result_text(accepted)
        fake_anthropic.assert_complete()


async def test_a_reply_to_the_request_that_is_again_just_text_is_posted_and_not_asked_again(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"}, id="toolu_disk")),
        reply(text("First answer.")),
        reply(text("Still the answer.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        final = await env.wait_final(channel, ts)
        assert "Still the answer." in text_of(final)
        requests = await env.requests(3)
        assert user_texts(requests[2]) == [SUMMARY_BEHIND]
        assert len(fake_anthropic.requests) == 3  # asked only once
        fake_anthropic.assert_complete()


async def test_an_answer_with_no_tool_call_is_not_asked_for_a_summary(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Disk full on /var usually means logs; ask me to look.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        final = await env.wait_final(channel, ts)
        assert "usually means logs" in text_of(final)
        assert len(fake_anthropic.requests) == 1
        fake_anthropic.assert_complete()
