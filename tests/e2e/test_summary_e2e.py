"""End to end: the living summary (docs/context.md) through the real app, FakeSlack and FakeAnthropic.

The fake model scripts `update_summary` calls; opsloop checks them against the run's own calls, stores the
accepted ones and shows the last in the status message (validated by the stand-in's Block Kit checks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.app.cli import main
from bot.playground.standin.blockkit import block_errors
from bot.run.summary import TOOL_NAME, Evidence
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, Message
from tests.support.harness import ALICE, BOB, bot_env, is_status, result_text, text_of, tool_results

TASK = "web-03 is paging: disk full on /var"
CLEAN = {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7}


def summary(
    situation: str = "web-03 /var at 100%",
    *,
    hypotheses: list[dict[str, Any]] | None = None,
    steps: list[str] | None = None,
) -> dict[str, Any]:
    return {"situation": situation, "hypotheses": hypotheses or [], "next_steps": steps or []}


def ev(handle: str, quote: str) -> dict[str, str]:
    return {"handle": handle, "quote": quote}


# check_disk web-03's result in the playground: /var is the full mount (whitespace collapsed, as quotes may be)
DISK = ev("#1", "/var 50G 49.8G 0.2G 100%")


def hyp(
    hid: str,
    evidence: list[dict[str, str]],
    *,
    status: str = "supported",
    confidence: str = "high",
    statement: str = "rotated nginx logs fill /var",
) -> dict[str, Any]:
    return {"id": hid, "statement": statement, "status": status, "confidence": confidence, "evidence": evidence}


def status_text(msg: Message) -> str:
    assert block_errors(msg.blocks) == [], block_errors(msg.blocks)
    return text_of(msg)


async def final_status(env: Any, channel: str, ts: str, needle: str) -> Message:
    return await env.slack.wait_for_message(
        channel,
        lambda m: (
            m.thread_ts == ts
            and is_status(m)
            and needle in text_of(m)
            and "status_actions" not in [b.get("block_id") for b in m.blocks or []]
        ),
    )


async def test_an_accepted_update_is_shown_above_the_tasks_and_stored(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"}, id="toolu_disk")),
        # the update shares its turn with another call; the evidence is the earlier, successful call
        reply(
            tool_use(
                TOOL_NAME,
                summary(
                    hypotheses=[
                        hyp("logs", [DISK]),
                        hyp("db", [DISK], status="refuted", statement="the database is slow"),
                    ],
                    steps=["delete rotated logs older than 7 days"],
                ),
                id="toolu_sum",
            ),
            tool_use("list_large_files", {"host": "web-03", "path": "/var"}, id="toolu_ls"),
        ),
        reply(text("Rotated nginx logs fill /var.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        await env.wait_final(channel, ts)
        status = await final_status(env, channel, ts, "rotated nginx logs fill /var")
        shown = status_text(status)
        ids = [b.get("block_id") for b in status.blocks or []]
        assert ids.index("summary_situation") < ids.index("summary_cause") < ids.index("summary_next")
        assert ids.index("summary_next") < ids.index("status_tasks")  # above the task list
        assert shown.index("rotated nginx logs") < shown.index("the database is slow")  # supported before refuted
        assert "delete rotated logs" in shown
        plan = next(b for b in status.blocks or [] if b.get("block_id") == "status_tasks")
        assert TOOL_NAME not in str(plan)  # not a task
        assert len(plan["tasks"]) == 2

        requests = await env.requests(3)
        assert TOOL_NAME in [t["name"] for t in requests[0].body["tools"]]  # in the tools block from the start
        (res,) = [r for r in tool_results(requests[2]) if r["tool_use_id"] == "toolu_sum"]
        assert not res.get("is_error") and "Summary updated" in result_text(res)

        (run,) = env.runs()
        with env.ledger() as ledger:
            (row,) = ledger.summaries(run.id)
        assert row.step == 2 and row.summary.hypotheses[0].evidence == (
            Evidence("#1 check_disk web-03", "/var 50G 49.8G 0.2G 100%"),
        )
        fake_anthropic.assert_complete()


async def test_each_bad_update_is_refused_naming_the_problem_and_never_trips_the_error_limit(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bad = [
        summary(hypotheses=[hyp("x", [ev("#9", "/var/log")], confidence="low")]),
        summary(hypotheses=[hyp("x", [ev("#1", "path must be absolute")])]),
        summary(hypotheses=[hyp(f"h{i}", [], status="open", confidence="low") for i in range(6)]),
        summary("x" * 301),
    ]
    fake_anthropic.script(
        reply(tool_use("list_large_files", {"host": "web-03", "path": "var"}, id="toolu_failed")),  # a ToolError
        reply(tool_use(TOOL_NAME, summary("first, kept"), id="toolu_ok")),
        *[reply(tool_use(TOOL_NAME, b, id=f"toolu_bad{i}")) for i, b in enumerate(bad)],
        reply(text("Not sure yet.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[limits]\nmax_consecutive_errors = 2") as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        await env.wait_final(channel, ts)
        requests = await env.requests(7)
        refusals = [tool_results(r)[0] for r in requests[3:7]]
        assert all(r.get("is_error") for r in refusals)
        said = [result_text(r) for r in refusals]
        assert "hypotheses[0].evidence[0].handle: #9 is not a call of this run" in said[0]
        assert "confidence high needs at least one quoted piece of evidence from a successful call" in said[1]
        assert "#1 list_large_files web-03 returned an error" in said[1]
        assert "hypotheses: 6 given, at most 5" in said[2]
        assert "situation: 301 characters, at most 300" in said[3]
        assert all("the summary is unchanged" in s for s in said)
        (run,) = env.runs()
        assert run.stop_reason is not None and run.stop_reason.value == "completed"  # not consecutive_errors
        with env.ledger() as ledger:
            assert [r.summary.situation for r in ledger.summaries(run.id)] == ["first, kept"]
        status_text(await final_status(env, channel, ts, "first, kept"))
        fake_anthropic.assert_complete()


async def test_high_confidence_on_a_denied_call_is_refused(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("clean_logs", CLEAN, id="toolu_clean")),
        reply(tool_use(TOOL_NAME, summary(hypotheses=[hyp("logs", [ev("#1", "denied")], status="confirmed")]))),
        reply(text("Denied; stopping here.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        await env.deny(await env.card(channel, ts), BOB)
        await env.wait_final(channel, ts)
        requests = await env.requests(3)
        (res,) = tool_results(requests[2])
        assert res.get("is_error") and "status confirmed" in result_text(res)
        (run,) = env.runs()
        with env.ledger() as ledger:
            assert ledger.summaries(run.id) == []
        fake_anthropic.assert_complete()


async def test_the_summary_is_redacted_and_escaped_in_the_status_message(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    token = "xoxb-" + "1234567890-1234567890-abcdefghijklmnopqrstuvwx"
    fake_anthropic.script(
        reply(
            tool_use(
                TOOL_NAME, summary(f"<!channel> leaked {token} <http://evil.example|docs>", steps=["ping <@U0BOB>"])
            )
        ),
        reply(text("done")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        await env.wait_final(channel, ts)
        shown = status_text(await final_status(env, channel, ts, "leaked"))
        assert token not in shown and "xoxb-" not in shown
        assert "<!channel>" not in shown and "<http://evil" not in shown and "<@U0BOB>" not in shown
        assert "&lt;!channel&gt;" in shown
        (run,) = env.runs()
        with env.ledger() as ledger:
            (row,) = ledger.summaries(run.id)
        assert token not in row.summary.situation


async def test_a_restarted_run_shows_its_last_summary_again(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"}, id="toolu_disk")),
        reply(
            tool_use(TOOL_NAME, summary("before the restart", hypotheses=[hyp("logs", [DISK])])),
            tool_use("clean_logs", CLEAN),
        ),
        reply(text("Freed 19.8 GB after the restart.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        card = await env.card(channel, ts)
        await env.restart()
        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        shown = status_text(await final_status(env, channel, ts, "before the restart"))
        assert "rotated nginx logs fill /var" in shown
        fake_anthropic.assert_complete()


async def test_a_run_cut_off_by_a_limit_reports_its_last_summary_and_show_export_and_html_have_it(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, monkeypatch: Any, capsys: Any
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"}, id="toolu_disk")),
        reply(tool_use(TOOL_NAME, summary("first belief", hypotheses=[hyp("logs", [DISK], confidence="low")]))),
        reply(tool_use(TOOL_NAME, summary("second belief", hypotheses=[hyp("logs", [DISK])]))),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[limits]\nmax_iterations = 3") as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        report = await env.wait_final(channel, ts)
        assert block_errors(report.blocks) == []
        assert "second belief" in text_of(report) and "rotated nginx logs fill /var" in text_of(report)
        (run,) = env.runs()
        db = str(env.settings.db_path)
    monkeypatch.setenv("OPSLOOP_DB", db)
    monkeypatch.chdir(tmp_path)
    for name in ("OPSLOOP_CONFIG", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    assert main(["show", run.id]) == 0
    shown = capsys.readouterr().out
    assert "\nSummary\nWhat's going on: second belief" in shown and "first belief" not in shown.split("Summary")[-1]
    assert main(["export", run.id]) == 0
    history = json.loads(capsys.readouterr().out)["summary_history"]
    assert [(h["step"], h["summary"]["situation"]) for h in history] == [(2, "first belief"), (3, "second belief")]
    assert history[0]["at"] <= history[1]["at"]
    page = tmp_path / "run.html"
    assert main(["show", run.id, "--html", str(page)]) == 0
    html = page.read_text()
    assert "How the hypotheses changed" in html and html.index("first belief") < html.index("second belief")


async def test_the_final_answer_starts_from_the_last_summary_redacted_and_escaped(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    token = "xoxb-" + "1234567890-1234567890-abcdefghijklmnopqrstuvwx"
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"}, id="toolu_disk")),
        reply(tool_use(TOOL_NAME, summary("an older belief", hypotheses=[hyp("logs", [DISK], confidence="low")]))),
        reply(
            tool_use(
                TOOL_NAME,
                summary(
                    f"<!channel> /var full, token {token}",
                    hypotheses=[hyp("logs", [DISK])],
                    steps=["ping <@U0BOB>"],
                ),
            )
        ),
        reply(text("Rotated nginx logs fill /var.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        answer = await env.wait_final(channel, ts)
        assert block_errors(answer.blocks) == [], block_errors(answer.blocks)
        ids = [b.get("block_id") for b in answer.blocks or []]
        # the summary first, its hypothesis with its evidence under it
        assert ids[:4] == ["summary_situation", "summary_cause", "summary_evidence_0", "summary_next"]
        assert '#1 check_disk web-03: "/var 50G 49.8G 0.2G 100%"' in text_of(answer)
        assert answer.text == "Rotated nginx logs fill /var."  # the notification is the answer itself
        shown = text_of(answer)
        assert (
            shown.index("/var full")
            < shown.index("rotated nginx logs fill /var")
            < shown.rindex("Rotated nginx logs fill /var.")
        )  # situation, cause, then the answer's own text
        assert "an older belief" not in shown  # the last accepted update, not an earlier one
        assert token not in shown and "xoxb-" not in shown
        assert "<!channel>" not in shown and "<@U0BOB>" not in shown and "&lt;!channel&gt;" in shown
        assert [m.ts for m in env.finals(channel, ts)] == [answer.ts]  # no extra post
        fake_anthropic.assert_complete()


async def test_an_answer_without_a_summary_is_the_answer_alone(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Nothing to do.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        answer = await env.wait_final(channel, ts)
        assert not [b for b in answer.blocks or [] if str(b.get("block_id", "")).startswith("summary_")]
        assert "Nothing to do." in text_of(answer)


async def test_updates_within_the_throttle_window_cost_no_extra_slack_call(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        *[reply(tool_use(TOOL_NAME, summary(f"belief {i}"), id=f"toolu_sum{i}")) for i in range(4)],
        reply(text("done")),
    )
    config = "[slack]\nstatus_update_seconds = 30"  # one status update per 30 s at most
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        channel, ts = await env.mention(TASK, user=ALICE)
        answer = await env.wait_final(channel, ts)
        status = await final_status(env, channel, ts, "belief 3")  # the finished status shows the last one
        updates = [c for c in fake_slack.calls_to("chat.update") if c.args.get("ts") == status.ts]
        # four accepted updates inside one window: the first event's update and the closing one, nothing more
        assert len(updates) == 2
        assert "belief" not in str(updates[0].args.get("blocks"))  # the run's start, before any update
        assert "belief 3" in str(updates[1].args.get("blocks"))
        assert "belief 3" in text_of(answer)
        (run,) = env.runs()
        with env.ledger() as ledger:
            assert [r.summary.situation for r in ledger.summaries(run.id)] == [f"belief {i}" for i in range(4)]
        fake_anthropic.assert_complete()
