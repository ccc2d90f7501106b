"""End to end, hostile context: what a runbook's front matter, a change event or a team's tool module can put in
front of the bot. A runbook can't exhaust the bot (an alias bomb, a deep nest, a date PyYAML can't build are each
that file's one-line problem, and the good runbooks beside them are still offered and read); a change event the
store can't hold is a 400 naming its field, never a 500 or a 503 the sender retries forever; a tool can't take the
name of the runtime's own tool (`opsloop check` and `opsloop run`, as processes, refuse the config on one line)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from bot.run.summary import handle_number, without_handle
from tests.conftest import API_KEY
from tests.e2e.test_changes_webhook_e2e import CONFIG as CHANGES
from tests.e2e.test_changes_webhook_e2e import ENV as CHANGES_ENV
from tests.e2e.test_changes_webhook_e2e import EVENT, post, stored
from tests.e2e.test_runbooks_e2e import DISK_FULL, RUNBOOKS, books, first_turn, said, thread_line
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import answered, bot_env, result_text, tool_results
from tests.tools.runbooks.test_front_matter_bounds import alias_bomb, nested

ROOT = Path(__file__).resolve().parents[2]
BAD_DATE = "---\ntitle: 2026-02-30\nmatch: {keywords: [disk]}\n---\n1. x\n"


def hostile_books(tmp_path: Path) -> Path:
    return books(tmp_path, disk_full=DISK_FULL, bomb=alias_bomb(), deep=nested(990), bad_date=BAD_DATE)


async def test_hostile_runbooks_are_each_one_problem_and_the_good_one_is_still_offered_and_read(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    hostile_books(tmp_path)
    fake_anthropic.script(
        reply(tool_use("find_runbooks", {"query": "disk full"}), tool_use("read_runbook", {"name": "bomb"})),
        reply(tool_use("read_runbook", {"name": "disk-full"})),
        *answered(reply(text("Following disk-full."))),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, RUNBOOKS) as env:
        channel, ts = await env.mention("web-03: disk full on /var")
        await thread_line(env, ts, "Disk full on a web host")
        await said(env, channel, ts, "Following disk-full.")
        requests = await env.requests(3)
        assert "[team runbook disk-full:" in first_turn(requests[0])
        found, bomb = (result_text(b) for b in tool_results(requests[1]))
        assert found.startswith("#1 find_runbooks disk full\n") and handle_number(bomb) == 2  # their handles
        found, bomb = without_handle(found), without_handle(bomb)
        assert found.startswith("- disk-full: Disk full on a web host (4 steps)") and "bomb" not in found
        assert "no runbook named 'bomb' (known: disk-full)" in bomb
        (steps,) = (without_handle(result_text(b)) for b in tool_results(requests[2]))
        assert steps.startswith("[team runbook disk-full: 'Disk full on a web host', 4 steps]")


async def opsloop(*args: str, tmp_path: Path, config: str, env: dict[str, str]) -> tuple[int, str, str]:
    """`python -m bot.app.cli ARGS --config opsloop.toml` in tmp_path; a process still running after 60 s is killed
    (and the test fails on its exit code)."""
    (tmp_path / "opsloop.toml").write_text(config)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.app.cli",
        *args,
        "--config",
        str(tmp_path / "opsloop.toml"),
        cwd=tmp_path,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_", "OPSLOOP_"))},
            "PYTHONPATH": str(ROOT),
            "OPSLOOP_DB": str(tmp_path / "opsloop.db"),
            **env,
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def slack_env(fake_slack: FakeSlack, fake_anthropic: FakeAnthropic) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": fake_slack.bot_token,
        "SLACK_APP_TOKEN": fake_slack.app_token,
        "SLACK_API_URL": fake_slack.api_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
    }


async def test_opsloop_check_names_each_hostile_runbook_on_one_line_without_a_traceback(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    d = hostile_books(tmp_path)
    fake_anthropic.script(reply(text("pong")), reply(text("pong")))
    config = '[approvals]\napprovers = ["U1"]\n' + RUNBOOKS
    code, out, err = await opsloop("check", tmp_path=tmp_path, config=config, env=slack_env(fake_slack, fake_anthropic))
    assert code == 2, err
    assert f"runbooks: 1 loaded from {d}" in out.splitlines()
    problems = [line for line in err.splitlines() if not line.startswith(("opsloop: warning:", "opsloop: config:"))]
    assert problems == [
        f"opsloop: error: runbooks: {d / 'bad-date.md'}: bad front matter: ValueError: day is out of range for month",
        f"opsloop: error: runbooks: {d / 'bomb.md'}: bad front matter: anchors and aliases (&name, *name) are not "
        "allowed (line 5)",
        f"opsloop: error: runbooks: {d / 'deep.md'}: bad front matter: nested deeper than 8 levels (line 4)",
    ], err
    assert "Traceback" not in out + err


# (what is wrong, the event, the field the 400 names and what it says)
UNSTORABLE: list[tuple[dict[str, Any], str]] = [
    ({"at": "0001-01-01T00:00:00+01:00"}, "[1].at: out of range (in UTC it must fall in the years 1 to 9999)"),
    ({"at": "9999-12-31T23:30:00-01:00"}, "[1].at: out of range"),
    ({"summary": "deploy 1.44 \ud83d"}, "[1].summary: contains a lone UTF-16 surrogate (U+D83D)"),
    ({"id": "gha-\udc00"}, "[1].id: contains a lone UTF-16 surrogate (U+DC00)"),
    ({"source": "\ud800ci"}, "[1].source: contains a lone UTF-16 surrogate"),
    ({"service": "api\udfff"}, "[1].service: contains a lone UTF-16 surrogate"),
    ({"environment": "prod\ud800"}, "[1].environment: contains a lone UTF-16 surrogate"),
    ({"url": "https://ci.example.com/\udc80"}, "[1].url: contains a lone UTF-16 surrogate"),
    ({"at": "2026-12-02T14:08:00Z\ud800"}, "[1].at: contains a lone UTF-16 surrogate"),
    ({"labels": {"team": "pay\udc00"}}, "[1].labels.team: contains a lone UTF-16 surrogate"),
    ({"labels": {"te\ud800am": "x"}}, "[1].labels: a label name contains a lone UTF-16 surrogate"),
    ({"labels": {"team": "pay\x00ments"}}, "[1].labels.team: contains a NUL character"),
    ({"labels": {"te\x00am": "x"}}, "[1].labels: a label name contains a NUL character"),
    ({"summary": "deploy\x001.44"}, "[1].summary: contains a NUL character"),
]


async def test_a_change_event_the_store_cannot_hold_is_a_400_naming_its_field_and_nothing_is_stored(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CHANGES, env_extra=CHANGES_ENV) as env:
        for change, says in UNSTORABLE:
            status, answer = await post(env, [EVENT, {**EVENT, "id": "gha-2", **change}])
            assert (status, answer["problems"][0].startswith(says)) == (400, True), (change, answer)
            assert len(answer["problems"]) == 1, answer
            assert stored(env) == [], change  # the good event of the list is not stored either
        assert await post(env, EVENT) == (200, {"status": "stored", "events": 1, "new": 1})  # the store is fine


async def test_a_tool_named_like_the_runtimes_own_is_refused_by_check_and_by_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("pong")), reply(text("pong")))
    config = '[approvals]\napprovers = ["U1"]\n[tools]\nmodules = ["tools.builtin", "tests.support.clash_tools"]\n'
    says = "tools.modules[1]: tool name 'update_summary' is taken by opsloop's own tool, which every run has: rename it"
    for command in ("check", "run"):
        code, out, err = await opsloop(
            command, tmp_path=tmp_path, config=config, env=slack_env(fake_slack, fake_anthropic)
        )
        problems = [
            line for line in err.splitlines() if not line.startswith(("opsloop: warning:", "opsloop: config:", "{"))
        ]
        prefix = "opsloop: error: " if command == "check" else "opsloop: "  # check marks problems and warnings
        assert (code, problems) == (2, [prefix + says]), (command, out, err)
        assert "Traceback" not in out + err
