"""End to end: runs that end well, through the real app, FakeSlack and FakeAnthropic.

A budget's stop gives the model one wrap-up turn with no tool allowed, and the handoff report carries its
conclusion; the error breaker counts turns of errors the model cannot fix; condensation keeps each result's
first line (its handle) and the living summary, and runs again when the context fills again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.app.cli import main
from bot.run.prompts import CONDENSE_SYSTEM
from bot.run.report import CONCLUSION as WRAP_UP_LABEL
from bot.run.summary import TOOL_NAME
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import answered, bot_env, result_text, text_of, tool_results, user_turn

TASK = "web-03 is paging: disk full on /var"
CONCLUSION = "Most likely rotated nginx logs fill /var on web-03 (medium confidence); web-03 itself is unchecked"


def said(request: RecordedRequest) -> str:
    """Everything a request sent, as one string."""
    return json.dumps(request.body)


def condensing(request: RecordedRequest) -> bool:
    return CONDENSE_SYSTEM[:40] in json.dumps((request.body or {}).get("system"))


async def test_a_run_at_its_iteration_limit_wraps_up_and_the_report_and_exports_carry_its_conclusion(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, monkeypatch: Any, capsys: Any
) -> None:
    fake_anthropic.script(
        reply(text("Checking web-01."), tool_use("check_disk", {"host": "web-01"})),
        reply(text("Checking web-02."), tool_use("check_disk", {"host": "web-02"})),
        reply(text(CONCLUSION)),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[limits]\nmax_iterations = 2") as env:
        channel, ts = await env.mention(TASK)
        report = text_of(await env.wait_final(channel, ts))
        assert "iteration_limit" in report and "2/2" in report  # the limit, and the steps never past it
        assert CONCLUSION in report and "Conclusion" in report
        fake_anthropic.assert_complete()
        assert len(fake_anthropic.requests) == 3
        wrap = fake_anthropic.requests[-1].body
        assert wrap is not None
        # No tool allowed; the tools are still sent, as the history holds tool calls (the API requires them).
        assert wrap["tool_choice"] == {"type": "none"} and wrap["tools"]
        ask = user_turn(fake_anthropic.requests[-1])[-1]["text"]
        assert "Conclude now, with no new tool calls" in ask and "2 of 2 steps used" in ask
        assert all("tool_choice" not in (r.body or {}) for r in fake_anthropic.requests[:-1])
        [run] = env.runs()
        assert run.stop_reason is not None and run.stop_reason.value == "iteration_limit"
        assert run.output == CONCLUSION
        db = str(env.settings.db_path)
    monkeypatch.setenv("OPSLOOP_DB", db)
    monkeypatch.chdir(tmp_path)
    for name in ("OPSLOOP_CONFIG", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    labelled = f"\n{WRAP_UP_LABEL}\n{CONCLUSION}\n"
    for args in (["show", run.id], ["show", run.id, "--json"]):
        capsys.readouterr()
        assert main(args) == 0
        assert capsys.readouterr().out.endswith(labelled)
    page = tmp_path / "run.html"
    assert main(["show", run.id, "--html", str(page)]) == 0
    html = page.read_text()
    assert f"<h2>{WRAP_UP_LABEL}</h2>" in html and "<h2>Answer</h2>" not in html
    assert html.index(WRAP_UP_LABEL) < html.index(CONCLUSION[:40])


async def test_a_permission_denial_gets_no_wrap_up(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("read_secret", {"name": "db-password"})))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        report = text_of(await env.wait_final(channel, ts))
        assert "permission_denied" in report and "Conclusion" not in report
        assert len(fake_anthropic.requests) == 1


async def test_three_failed_parallel_calls_are_one_error_turn(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(*(tool_use("check_disk", {"host": h}) for h in ("db-01", "db-02", "db-03"))),
        reply(tool_use("check_disk", {"host": "web-03"})),
        *answered(reply(text("web-03 /var is full; the db hosts refuse ssh."))),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        final = text_of(await env.wait_final(channel, ts))
        assert "db hosts refuse ssh" in final
        errors = tool_results(fake_anthropic.requests[1])
        assert [b.get("is_error") for b in errors] == [True] * 3
        assert env.runs()[0].stop_reason.value == "completed"  # type: ignore[union-attr]
        fake_anthropic.assert_complete()


async def test_three_turns_of_real_errors_stop_the_run_and_not_found_errors_do_not_count(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "db-01"})),
        reply(tool_use("list_large_files", {"host": "web-03", "path": "/nonexistent/a"})),  # not found: not counted
        reply(tool_use("check_disk", {"host": "db-02"})),
        reply(tool_use("list_large_files", {"host": "web-03", "path": "/nonexistent/b"})),
        reply(tool_use("check_disk", {"host": "db-03"})),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        report = text_of(await env.wait_final(channel, ts))
        assert "consecutive_errors" in report and "3 turns of tool errors in a row" in report
        fake_anthropic.assert_complete()
        assert len(fake_anthropic.requests) == 5  # no wrap-up: the breaker is not a budget
        [run] = env.runs()
        assert run.stop_reason is not None and run.stop_reason.value == "consecutive_errors"
        assert run.iterations == 5


async def test_not_found_errors_alone_never_stop_the_run_but_the_same_failing_call_is_a_loop(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    guesses = [{"host": "web-03", "path": f"/nonexistent/{d}"} for d in ("a", "b", "c")]  # three different ones
    same = {"host": "web-03", "path": "/nonexistent/logs"}
    fake_anthropic.script(*[reply(tool_use("list_large_files", args)) for args in [*guesses, *[same] * 6]])
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        report = text_of(await env.wait_final(channel, ts))
        assert "loop_detected" in report
        fake_anthropic.assert_complete()
        [run] = env.runs()
        assert run.stop_reason is not None and run.stop_reason.value == "loop_detected"
        assert run.iterations == 9


def living(situation: str, evidence: dict[str, str]) -> dict[str, Any]:
    hypothesis = {
        "id": "logs",
        "statement": "rotated nginx logs fill /var",
        "status": "supported",
        "confidence": "high",
        "evidence": [evidence],
    }
    return {"situation": situation, "hypotheses": [hypothesis], "next_steps": ["list the large files"]}


async def test_a_condensed_run_keeps_its_handles_and_living_summary_and_condenses_again(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    situation = "web-03 /var at 100% since the upgrade"
    evidence = {"handle": "#1", "quote": "/var 50G 49.8G 0.2G 100%"}  # check_disk web-03's result, quoted
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"}, id="toolu_disk")),
        reply(
            tool_use(TOOL_NAME, living(situation, evidence), id="toolu_sum"),
            tool_use("check_disk", {"host": "web-01"}, id="toolu_web01"),
        ),
        reply(text("Disks were checked.")),  # the first condensation's summary: it names no result
        reply(tool_use("check_disk", {"host": "web-02"}, id="toolu_web02")),
        reply(text("More disks were checked.")),  # the second condensation's
        *answered(reply(text("Rotated nginx logs fill /var on web-03."))),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[model]\ncontext_budget_tokens = 1") as env:
        channel, ts = await env.mention(TASK)
        final = text_of(await env.wait_final(channel, ts))
        assert "Rotated nginx logs" in final
        fake_anthropic.assert_complete()
        requests = fake_anthropic.requests
        # ... then the answer, asked once for the summary, again
        assert [condensing(r) for r in requests] == [False, False, True, False, True, False, False]
        [disk] = tool_results(requests[1])
        handle = result_text(disk).splitlines()[0]  # the result's first line: its handle
        for after in (requests[3], requests[5]):  # after each condensation
            head = " ".join(b["text"] for b in user_turn(after, 0))
            assert handle in head and "check_disk" in head and "toolu_disk" in head
            assert situation in head and "rotated nginx logs fill /var" in head  # the living summary, re-attached
        [run] = env.runs()
        assert run.stop_reason is not None and run.stop_reason.value == "completed"
