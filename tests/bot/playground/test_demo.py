"""`opsloop demo`: the whole incident, played by the real app against the shipped Slack stand-in.

One subprocess run checks the command a newcomer types (exit code and what it prints);
the in-process runs check one behaviour each. Without an API key the scripted model
plays; with one, the real Anthropic client talks to the fake Messages API.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import subprocess
import sys
from pathlib import Path

from bot.app.settings import load_settings
from bot.playground.demo import tools as demo_tools
from bot.playground.demo.play import REDIRECT, play
from tests.conftest import API_KEY
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.harness import answered

ROOT = Path(__file__).resolve().parents[3]
NO_SECRETS = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SLACK_", "OPSLOOP_"))}


async def _transcript(tmp_path: Path, *, stdin: str | None = None) -> tuple[int, str]:
    out = io.StringIO()
    settings = load_settings(None, env={"OPSLOOP_DB": str(tmp_path / "unused.db")})
    code = await play(
        settings, out=out, db_path=tmp_path / "demo.db", interactive=stdin is not None, stdin=io.StringIO(stdin or "")
    )
    return code, out.getvalue()


def test_opsloop_demo_plays_the_incident_and_exits_0(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bot.app.cli", "demo"],
        cwd=tmp_path,
        env=NO_SECRETS,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "@alice: @opsloop web-03 is out of disk, deal with it" in out
    assert "Following runbook: Disk full on a web host (5 steps)" in out
    assert "Approved: clean_logs · ✅ Approved by @carol" in out
    assert "web-03: /var is back to 41% (was 97%)." in out
    assert "completed in 7 steps" in out and " tokens (in " in out and "$0.0" in out
    assert "\x1b[" not in out  # no colour when stdout is not a terminal
    assert not list(tmp_path.iterdir())  # the database lived in a temp dir


async def test_demo_card_shows_the_dry_run_before_carol_approves(tmp_path: Path) -> None:
    code, out = await _transcript(tmp_path)
    assert code == 0
    card = out.index("Approval needed: clean_logs")
    dry_run = out.index("would delete 212 files under /var/log/nginx", card)
    click = out.index("@carol clicks [Approve] on clean_logs", dry_run)
    assert out.index("✅ Approved by @carol", click) > click


async def test_demo_redirect_supersedes_the_restart_and_the_agent_reads_the_logs(tmp_path: Path) -> None:
    code, out = await _transcript(tmp_path)
    assert code == 0
    reply = out.index(f"@bob: {REDIRECT}")
    assert out.index("Approval needed: restart_service") < reply
    assert out.index("Superseded by a thread reply from @bob", reply) > reply
    assert "nginx: not restarted, as asked in the thread" in out
    assert "restart_service" not in "".join(demo_tools.HOST.actions)


async def test_demo_final_answer_comes_with_tokens_and_cost(tmp_path: Path) -> None:
    code, out = await _transcript(tmp_path)
    assert code == 0
    answer = out.index("web-03: /var is back to 41% (was 97%).")
    summary = out[answer:]
    assert "approved by @carol" in summary
    assert re.search(
        r"run \S+: completed in 7 steps · [\d,]+ tokens \(in [\d,]+ · out [\d,]+ · cache read [\d,]+ · "
        r"write [\d,]+\) · \$0\.\d{4}",
        summary,
    ), summary


async def test_demo_changes_only_the_simulated_host_after_approval(tmp_path: Path) -> None:
    code, _ = await _transcript(tmp_path)
    assert code == 0
    assert demo_tools.HOST.var_percent == 41
    assert demo_tools.HOST.actions == ["clean_logs /var/log/nginx approved by U0CAROL"]


async def test_demo_interactive_prompt_denies_and_approves_cards(tmp_path: Path) -> None:
    code, out = await _transcript(tmp_path, stdin="\ndeny\napprove\n")
    assert code == 0
    assert "🚫 Denied by @carol" in out  # restart_service
    assert "✅ Approved by @carol" in out  # clean_logs
    assert demo_tools.HOST.actions == ["clean_logs /var/log/nginx approved by U0CAROL"]


async def test_demo_interactive_a_refused_click_leaves_the_card_open_for_the_next_one(tmp_path: Path) -> None:
    """alice may not approve her own destructive call: the card stays pending, and carol's click decides it."""
    async with asyncio.timeout(120):
        code, out = await _transcript(tmp_path, stdin="\nd\na as alice\na\n")
    assert code == 0
    refused = out.index("@alice clicks [Approve] on clean_logs")
    assert out.index("@carol clicks [Approve] on clean_logs", refused) > refused
    assert "✅ Approved by @carol" in out
    assert demo_tools.HOST.actions == ["clean_logs /var/log/nginx approved by U0CAROL"]


async def test_demo_interactive_q_quits_while_a_command_waits_for_a_card(tmp_path: Path) -> None:
    """`q` ends the demo at once, even behind commands that wait for a card (here a refused click's card would
    never come back for alice), with the run still paused."""
    async with asyncio.timeout(60):
        code, out = await _transcript(tmp_path, stdin="\nd\na as alice\na as alice\nq\n")
    assert code == 1
    assert "quit before the incident finished" in out
    assert demo_tools.HOST.actions == []


async def test_demo_with_an_api_key_plays_against_claude_and_the_crew_follows_its_cards(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    clean = {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7}
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"})),
        reply(tool_use("clean_logs", clean)),  # bob redirects the first card, whatever it is
        reply(tool_use("tail_log", {"host": "web-03", "path": "/var/log/nginx/error.log"})),
        reply(tool_use("clean_logs", clean)),  # carol approves
        *answered(reply(text("Freed 28 GB on web-03; /var is at 41%."))),
    )
    settings = load_settings(None, env={"ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": fake_anthropic.base_url})
    out = io.StringIO()
    assert await play(settings, out=out, db_path=tmp_path / "demo.db") == 0
    shown = out.getvalue()
    assert "Claude (" in shown and f"@bob: {REDIRECT}" in shown and "✅ Approved by @carol" in shown
    assert "Freed 28 GB on web-03; /var is at 41%." in shown
    assert demo_tools.HOST.actions == ["clean_logs /var/log/nginx approved by U0CAROL"]
    fake_anthropic.assert_complete()


async def test_demo_ships_a_runbook_its_first_request_carries_and_its_thread_follows(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """The demo's config has `[runbooks] dirs` with the packaged disk-full.md: the task's keyword ("out of disk")
    matches it, so the first model request carries it as the team's runbook and the thread says it follows it."""
    fake_anthropic.script(reply(text("Following the runbook: web-03's /var is full.")))
    settings = load_settings(None, env={"ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": fake_anthropic.base_url})
    out = io.StringIO()
    assert await play(settings, out=out, db_path=tmp_path / "demo.db") == 0
    first = fake_anthropic.requests[0].body
    assert first is not None
    turn = "\n".join(b["text"] for b in first["messages"][0]["content"] if b.get("type") == "text")
    assert "[team runbook disk-full: 'Disk full on a web host', 5 steps; matched by keyword 'out of disk']" in turn
    assert "1. `check_disk` on the host" in turn and "[end of team runbook]" in turn
    shown = out.getvalue()
    assert "Following runbook: Disk full on a web host (5 steps)" in shown
    assert shown.index("Following runbook") < shown.index("Following the runbook: web-03's /var is full.")


async def test_the_scripted_demo_says_it_follows_the_runbook_before_its_first_card(tmp_path: Path) -> None:
    code, out = await _transcript(tmp_path)
    assert code == 0
    assert out.index("Following runbook: Disk full on a web host (5 steps)") < out.index("Approval needed:")


def test_the_demo_runbook_is_package_data_so_a_wheel_has_it() -> None:
    import tomllib

    from bot.playground.demo.stage import RUNBOOKS

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    files = sorted(RUNBOOKS.glob("*.md"))
    assert files and all(f.match(pattern) for f in files for pattern in data["bot.playground.demo"])
