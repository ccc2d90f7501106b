"""docs/cli.md's exit-code table, every row run through the real CLI (`python -m bot.app.cli` processes against the
fakes), so the table, `check` and `run` cannot disagree. A row without a scenario here, or a scenario without a
row, fails the test."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.bot.app.test_startup_errors import ROOT, _free_port, base_env, opsloop
from tests.conftest import API_KEY
from tests.support.fakes.anthropic import FakeAnthropic, reply, text
from tests.support.fakes.slack import FakeSlack

DOC = ROOT / "docs" / "cli.md"
APPROVERS = '[approvals]\napprovers = ["U1"]\n'


def table_rows() -> list[tuple[str, str, int]]:
    """(command, situation, exit code) for each row of the table under `## Exit codes`."""
    section = DOC.read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`opsloop "):
            rows.append((cells[0].strip("`").removeprefix("opsloop "), cells[1], int(cells[2])))
    return rows


class World:
    """The fakes, a temp dir and the environment a scenario changes."""

    def __init__(self, tmp_path: Path, slack: FakeSlack, model: FakeAnthropic) -> None:
        self.tmp, self.slack, self.model = tmp_path, slack, model
        self.env = {
            "SLACK_BOT_TOKEN": slack.bot_token,
            "SLACK_APP_TOKEN": slack.app_token,
            "SLACK_API_URL": slack.api_url,
            "ANTHROPIC_API_KEY": API_KEY,
            "ANTHROPIC_BASE_URL": model.base_url,
            "OPSLOOP_DB": str(tmp_path / "opsloop.db"),
        }
        self.config(APPROVERS + "[model]\nfallbacks = []\n")
        model.script(*[reply(text("pong"))] * 4)

    def config(self, toml: str) -> None:
        (self.tmp / "opsloop.toml").write_text(toml)

    async def check(self) -> int:
        code, out, err = await opsloop("check", env=base_env(self.tmp, **self.env), cwd=self.tmp)
        assert "Traceback" not in out + err
        verdict = out.splitlines()[-1]
        assert verdict == "ready: run would start" if code == 0 else re.match(r"\d+ problems?: run would", verdict)
        return code

    async def run_until(self, ready: Callable[[list[dict[str, object]]], bool]) -> int:
        """`opsloop run`: its exit code if it ends by itself, else SIGTERM once its log shows `ready`."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.app.cli",
            "run",
            cwd=self.tmp,
            env=base_env(self.tmp, **self.env),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stderr is not None
        logs: list[dict[str, object]] = []
        try:
            while line := await asyncio.wait_for(proc.stderr.readline(), 60):
                if line.startswith(b"{"):
                    logs.append(json.loads(line))
                if ready(logs):
                    proc.send_signal(signal.SIGTERM)
                    break
            await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode is not None
        return proc.returncode


def logged(event: str) -> Callable[[list[dict[str, object]]], bool]:
    return lambda logs: any(e.get("event") == event for e in logs)


def never(logs: list[dict[str, object]]) -> bool:
    return False


async def config_problem(w: World) -> None:
    w.config(APPROVERS + f'[[changes.git]]\nname = "deploy"\npath = "{w.tmp}/no-repo"\n')


async def slack_refuses(w: World) -> None:
    w.env["SLACK_BOT_TOKEN"] = "xoxb-wrong"


async def slack_unreachable(w: World) -> None:
    w.env["SLACK_API_URL"] = f"http://127.0.0.1:{_free_port()}/api/"


async def anthropic_unreachable(w: World) -> None:
    w.env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{_free_port()}"


async def host_down(w: World) -> None:
    (w.tmp / "known_hosts").write_text("")
    w.config(
        APPROVERS + f'[model]\nfallbacks = []\n[ssh]\nuser = "opsloop"\nknown_hosts = "{w.tmp / "known_hosts"}"\n'
        f'connect_timeout_s = 2\n[[hosts]]\nname = "web-01"\naddress = "127.0.0.1"\nport = {_free_port()}\n'
    )


async def nothing(w: World) -> None:
    return None


# (command, situation) as docs/cli.md words it -> (what the scenario changes, what `run` waits for).
SCENARIOS: dict[tuple[str, str], tuple[Callable[[World], Awaitable[None]], Callable[..., bool]]] = {
    ("check", "ready: `run` would start (warnings allowed)"): (nothing, never),
    ("check", "a start-up check stops `run` (see Start-up checks)"): (config_problem, never),
    ("check", "Slack refuses the bot token"): (slack_refuses, never),
    ("check", "Slack can't be reached now"): (slack_unreachable, never),
    ("check", "Anthropic can't be reached now, or refuses the key or a model"): (anthropic_unreachable, never),
    ("check", "an SSH host or a Kubernetes cluster can't be reached or used now"): (host_down, never),
    ("run", "a start-up check stops it (see Start-up checks)"): (config_problem, never),
    ("run", "Slack refuses the bot token"): (slack_refuses, never),
    (
        "run",
        "Slack can't be reached now: it starts, retries with backoff, and is stopped by SIGTERM",
    ): (slack_unreachable, logged("slack.unreachable")),
    ("run", "stopped by SIGTERM or Ctrl-C"): (nothing, logged("socket_mode.connected")),
}


def test_every_row_of_the_exit_code_table_has_a_scenario():
    assert sorted((command, situation) for command, situation, _ in table_rows()) == sorted(SCENARIOS)


@pytest.mark.parametrize(("command", "situation", "code"), table_rows(), ids=[r[1][:40] for r in table_rows()])
async def test_the_cli_exits_as_the_table_says(command, situation, code, tmp_path, fake_slack, fake_anthropic):
    world = World(tmp_path, fake_slack, fake_anthropic)
    change, ready = SCENARIOS[(command, situation)]
    await change(world)
    got = await world.check() if command == "check" else await world.run_until(ready)
    assert got == code
