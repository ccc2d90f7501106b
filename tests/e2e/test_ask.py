"""`opsloop ask` as a real process: the scripted model on loopback, approvals answered on its standard input,
Ctrl-C as the Stop button, --json, and the run stored for `show` and incident memory."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bot.config.settings import ModelSettings
from bot.store import Ledger
from tests.conftest import API_KEY
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import ALICE, CHANNEL, bot_env, result_text, text_of, tool_results
from tests.support.sshserver import SshServer

ROOT = Path(__file__).resolve().parents[2]
DEMO = '[tools]\nmodules = ["bot.playground.demo.tools"]\n'
HOST = {"host": "web-03"}
LOGS = {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7}
SUMMARY = reply(tool_use("update_summary", {"situation": "web-03 /var is full of rotated nginx logs"}))


def _env(tmp_path: Path, fake: FakeAnthropic, config: str) -> dict[str, str]:
    (tmp_path / "opsloop.toml").write_text(config)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_", "OPSLOOP_"))},
        "ANTHROPIC_API_KEY": API_KEY,
        "ANTHROPIC_BASE_URL": fake.base_url,
        "OPSLOOP_DB": str(tmp_path / "opsloop.db"),
        "OPSLOOP_CONFIG": str(tmp_path / "opsloop.toml"),
    }


async def _ask(env: dict[str, str], *args: str, stdin: str = "") -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.app.cli", "ask", *args, cwd=ROOT, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "bot.app.cli", *args], check=False, cwd=ROOT, env=env, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def test_ask_runs_the_demo_incident_with_approvals_on_stdin(tmp_path: Path, fake_anthropic: FakeAnthropic):
    config = DEMO + '[memory]\nenabled = true\n[approvals]\nterminal_user = "U0ALICE"\nallow_self_approval = true\n'
    fake_anthropic.script(
        reply(text("Looking at the disk."), tool_use("check_disk", HOST)),
        reply(tool_use("clean_logs", LOGS)),
        reply(tool_use("restart_service", {"host": "web-03", "unit": "nginx"})),
        SUMMARY,
        reply(text("web-03: deleted the rotated nginx logs; /var has room again.")),
    )
    env = _env(tmp_path, fake_anthropic, config)
    status, out, err = await _ask(env, "why is web-03 out of disk?", stdin="y\nn\n")
    assert status == 0, err + out
    # The card's content: tool, category, arguments, dry run; then who decided.
    assert "clean_logs" in out and "destructive" in out and '"path": "/var/log/nginx"' in out
    assert "would delete 212 files under /var/log/nginx" in out
    assert "approve clean_logs as U0ALICE? [y/N]" in out
    assert (
        "[complete] check_disk" in out and "summary: What's going on: web-03 /var is full of rotated nginx logs" in out
    )
    assert "Approved by @U0ALICE" in out and "Denied by @U0ALICE" in out and "[error] restart_service" in out
    assert "web-03: deleted the rotated nginx logs; /var has room again." in out
    run_id = out.rsplit("opsloop show ", 1)[1].split()[0]
    shown = _cli(env, "show", run_id)
    assert f"run {run_id}" in shown and "why is web-03 out of disk?" in shown
    audit = [json.loads(line) for line in _cli(env, "audit").splitlines()]
    assert [(a["tool"], a["state"], a["decided_by"]) for a in audit] == [
        ("clean_logs", "approved", "U0ALICE"),
        ("restart_service", "denied", "U0ALICE"),
    ]
    # Incident memory keeps it private, for the person who asked (a DM-like conversation of theirs).
    import sqlite3

    with sqlite3.connect(tmp_path / "opsloop.db") as db:
        assert db.execute("SELECT channel, kind FROM incidents WHERE run_id = ?", [run_id]).fetchall() == [
            ("terminal:U0ALICE", "im")
        ]


async def test_a_destructive_call_needing_two_people_is_refused_in_the_terminal(
    tmp_path: Path, fake_anthropic: FakeAnthropic
):
    config = (
        DEMO
        + '[approvals]\nterminal_user = "U0ALICE"\nallow_self_approval = true\ndestructive_required_approvals = 2\n'
    )
    fake_anthropic.script(reply(tool_use("clean_logs", LOGS)), SUMMARY, reply(text("I could not clean the logs.")))
    status, out, err = await _ask(_env(tmp_path, fake_anthropic, config), "clean web-03", stdin="y\n")
    assert status == 0, err
    assert "needs 2 approvals from different people: it can't be approved from one terminal" in out
    assert "[y/N]" not in out  # nobody was asked
    (result,) = tool_results(fake_anthropic.requests[1])
    assert "needs 2 approvals" in result_text(result) and result.get("is_error") is True


async def test_without_a_terminal_user_approvals_are_refused_naming_the_setting(
    tmp_path: Path, fake_anthropic: FakeAnthropic
):
    fake_anthropic.script(
        reply(tool_use("restart_service", {"host": "web-03", "unit": "nginx"})), SUMMARY, reply(text("Not restarted."))
    )
    status, out, err = await _ask(_env(tmp_path, fake_anthropic, DEMO), "restart nginx on web-03", stdin="y\n")
    assert status == 0, err
    assert "can't approve: nobody may approve from this terminal: set [approvals] terminal_user" in out
    assert "--as U…" in out and "[y/N]" not in out


async def test_the_default_policy_refuses_self_approval_of_a_destructive_call(
    tmp_path: Path, fake_anthropic: FakeAnthropic
):
    fake_anthropic.script(reply(tool_use("clean_logs", LOGS)), SUMMARY, reply(text("Someone else must approve.")))
    status, out, err = await _ask(_env(tmp_path, fake_anthropic, DEMO), "clean web-03", "--as", "U0ALICE", stdin="y\n")
    assert status == 0, err
    assert "can't approve:" in out and "[y/N]" not in out


async def test_ctrl_c_stops_the_run_with_its_handoff_report(tmp_path: Path, fake_anthropic: FakeAnthropic):
    config = DEMO + '[approvals]\nterminal_user = "U0ALICE"\n'
    fake_anthropic.script(
        reply(text("Looking."), tool_use("check_disk", HOST)),
        reply(tool_use("restart_service", {"host": "web-03", "unit": "nginx"})),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.app.cli", "ask", "web-03 is out of disk", cwd=ROOT,
        env=_env(tmp_path, fake_anthropic, config),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    seen = b""
    while b"[y/N]" not in seen:  # waiting at the approval prompt
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line, seen.decode()
        seen += line
    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    shown = seen.decode() + out.decode()
    assert proc.returncode == 1, err.decode()
    assert "stopping: the run ends with its handoff report" in shown
    assert "cancelled" in shown and "check_disk" in shown.split("stopping:")[1]  # the report lists what ran
    fake_anthropic.assert_complete()


async def test_json_prints_the_runs_events_as_json_lines(tmp_path: Path, fake_anthropic: FakeAnthropic):
    fake_anthropic.script(
        reply(text("Looking."), tool_use("check_disk", HOST)), SUMMARY, reply(text("/var is 97% full."))
    )
    status, out, err = await _ask(_env(tmp_path, fake_anthropic, DEMO), "disk?", "--json")
    assert status == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    kinds = [e["type"] for e in events]
    assert {"Iteration", "ToolsAnnounced", "ToolStarted", "ToolDone", "Summarized"} <= set(kinds)
    assert kinds[-1] == "Finished" and events[-1]["result"]["output"] == "/var is 97% full."
    done = next(e for e in events if e["type"] == "ToolDone" and e["tool"] == "check_disk")
    assert "97%" in done["result"]


async def test_ask_reads_a_real_host_over_ssh(tmp_path: Path, sshd: SshServer, fake_anthropic: FakeAnthropic):
    config = (
        '[tools]\nmodules = ["tools.builtin"]\n'
        f'[[hosts]]\nname = "web-03"\naddress = "127.0.0.1"\nport = {sshd.port}\n'
        f"identity_file = {json.dumps(str(sshd.client_key))}\nknown_hosts = {json.dumps(str(sshd.known_hosts))}\n"
    )
    fake_anthropic.script(
        reply(text("Checking the disk."), tool_use("check_disk", HOST)), SUMMARY, reply(text("Checked web-03."))
    )
    status, out, err = await _ask(_env(tmp_path, fake_anthropic, config), "is web-03 out of disk?")
    assert status == 0, err
    (result,) = tool_results(fake_anthropic.requests[1])
    assert result.get("is_error") is not True, result_text(result)
    assert "/" in result_text(result) and "[complete] check_disk" in out
    assert sshd.accepted_logins() >= 1 and "Checked web-03." in out


async def test_a_slack_process_never_drives_a_killed_terminal_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
):
    """Two runs whose drivers died (their leases lapsed): `opsloop run` on the same store takes the Slack one over
    and answers it in its thread, but never the terminal one (a killed `opsloop ask`'s): nothing reaches
    `terminal:U0ALICE`, the run stays as it was, and `opsloop show` and `opsloop runs` say it was interrupted."""
    ledger = Ledger(tmp_path / "opsloop.db")
    runs = {}
    for channel in ("terminal:U0ALICE", CHANNEL):  # the terminal run first: the older one is taken over first
        row, _ = ledger.open_run(
            channel=channel, thread_ts="1760000000.000100", requester=ALICE, task="why is web-03 out of disk?",
            prompt="why is web-03 out of disk?", model=ModelSettings().primary, mention_ts="",
        )  # fmt: skip
        assert ledger.claim_run(row.id, "gone-host:4242:1:x", until=ledger.sql.now() - 1, now=ledger.sql.now())
        runs[channel] = row.id
    ledger.close()
    fake_anthropic.script(reply(text("The Slack run's answer.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        assert "The Slack run's answer." in text_of(await env.wait_final(CHANNEL, "1760000000.000100"))
        await env.ops.supervisor.tick()  # one more look for runnable runs: still not the terminal one
        await env.wait_idle()
        assert [c.method for c in fake_slack.calls if str(c.args.get("channel", "")).startswith("terminal:")] == []
        assert len(fake_anthropic.requests) == 1
        with env.ledger() as after:
            terminal = after.get_run(runs["terminal:U0ALICE"])
    assert terminal.active and terminal.iterations == 0 and terminal.owner == "gone-host:4242:1:x"
    env_vars = {**os.environ, "OPSLOOP_DB": str(tmp_path / "opsloop.db"), "OPSLOOP_CONFIG": str(tmp_path / "none.toml")}
    (tmp_path / "none.toml").write_text("")
    shown = _cli(env_vars, "show", runs["terminal:U0ALICE"])
    assert "interrupted: its `opsloop ask` was killed before the run ended" in shown
    assert "interrupted" not in _cli(env_vars, "show", runs[CHANNEL])
    listed = {line.split()[0]: line.split()[3] for line in _cli(env_vars, "runs").splitlines()[1:]}
    assert listed[runs["terminal:U0ALICE"]] == "interrupted" and listed[runs[CHANNEL]] == "finished"


ANSWER_MARKUP = (
    "**Cause:** rotated nginx logs filled /var. See [the runbook](https://runbooks.example.com/disk) and ask "
    "<@U0BOB>.\n```\ndf -h /var\n```\nDone."
)


async def test_the_terminal_shows_slack_markup_rendered(tmp_path: Path, fake_anthropic: FakeAnthropic):
    """A pipe gets plain text: no `*bold*`, emoji codes, `<url|text>` links or code fences, and no ANSI codes."""
    config = DEMO + '[approvals]\nterminal_user = "U0ALICE"\nallow_self_approval = true\n'
    fake_anthropic.script(reply(tool_use("clean_logs", LOGS)), SUMMARY, reply(text(ANSWER_MARKUP)))
    status, out, err = await _ask(_env(tmp_path, fake_anthropic, config), "clean web-03", stdin="y\n")
    assert status == 0, err
    assert "Cause: rotated nginx logs filled /var." in out
    assert "the runbook (https://runbooks.example.com/disk)" in out and "ask @U0BOB." in out
    assert "\n    df -h /var\nDone." in out
    assert "Approved by @U0ALICE" in out and "destructive" in out
    assert "Tool: `clean_logs`" in out
    for markup in ("```", ":rotating_light:", ":white_check_mark:", "*Cause:*", "*Tool:*", "<https://", "&lt;"):
        assert markup not in out, markup
    assert "\x1b[" not in out  # no ANSI bold on a pipe


class Pty:
    """A pseudo-terminal for a child's standard output: what it wrote, read by a thread until it closes."""

    def __init__(self) -> None:
        import pty
        import threading

        self.master, self.slave = pty.openpty()
        self.seen = b""
        self.changed = asyncio.Event()
        loop = asyncio.get_running_loop()

        def read() -> None:
            while True:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # the child closed its end
                    chunk = b""
                loop.call_soon_threadsafe(self._add, chunk)
                if not chunk:
                    return

        threading.Thread(target=read, daemon=True).start()

    def _add(self, chunk: bytes) -> None:
        self.seen += chunk
        self.closed = not chunk
        self.changed.set()

    async def until(self, found: Callable[[str], bool]) -> str:
        async with asyncio.timeout(60):
            while not found(text := self.seen.decode(errors="replace")):
                self.changed.clear()
                await self.changed.wait()
        return text


async def test_on_a_terminal_the_answer_shows_as_the_model_writes_it(tmp_path: Path, fake_anthropic: FakeAnthropic):
    """On a TTY the long answer appears while the model is still writing it (the fake holds its reply at a
    marker), once, and the cards' *bold* is ANSI bold."""
    config = DEMO + '[approvals]\nterminal_user = "U0ALICE"\nallow_self_approval = true\n'
    first = "web-03's /var filled up with rotated nginx logs that logrotate never compressed. " * 5
    answer = first + "HOLD and then the rest: the cleanup freed 19.8 GB, so /var is at 60% now."
    fake_anthropic.script(reply(tool_use("clean_logs", LOGS)), SUMMARY, reply(text(answer)))
    fake_anthropic.text_delta_chars = 20
    fake_anthropic.pause_after = {"HOLD": 10.0}  # what came before it must be on screen while the model waits
    pty = Pty()
    env = {**_env(tmp_path, fake_anthropic, config), "COLUMNS": "200", "TERM": "xterm"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.app.cli", "ask", "clean web-03", cwd=ROOT, env=env,
        stdin=subprocess.PIPE, stdout=pty.slave, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(pty.slave)
    assert proc.stdin is not None
    proc.stdin.write(b"y\n")
    await proc.stdin.drain()
    shown = await pty.until(lambda t: first.strip()[-40:] in t)
    assert not fake_anthropic.requests[-1].finished.is_set()  # the model hasn't finished its answer yet
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    shown = await pty.until(lambda t: pty.closed)
    assert proc.returncode == 0, err.decode() + shown
    assert shown.count("the cleanup freed 19.8 GB") == 1 and shown.count("never compressed") == 5
    assert "\x1b[1mTool:\x1b[22m" in shown and "*Tool:*" not in shown
