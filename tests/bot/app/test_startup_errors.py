"""Every start-up error through the real CLI (`python -m bot.app.cli`): one line about it, exit 2, never a traceback;
`run` refuses exactly what `check` refuses.
Also: config discovery, --db, read-only commands that create nothing, and --version."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import API_KEY
from tests.support.fakes.anthropic import reply, text
from tests.tools.changes.test_changes_git import commit, git

ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def opsloop(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.app.cli",
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def base_env(tmp_path: Path, **over: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_", "OPSLOOP_"))}
    env["PYTHONPATH"] = str(ROOT)
    env.update(over)
    return env


@pytest.fixture
def busy() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s, int(s.getsockname()[1])
    s.close()


# (name, command, config text or None, extra env, the text the one line says). {busy}, {kubeconfig}, {refused}
# and {tmp} are filled in per case.
CASES = [
    ("config missing", "run --config {tmp}/nope.toml", None, {}, "nope.toml: config file not found"),
    (
        "OPSLOOP_CONFIG missing",
        "check",
        None,
        {"OPSLOOP_CONFIG": "{tmp}/gone.toml"},
        "gone.toml: config file not found",
    ),
    (
        "no app token nor signing secret",
        "check",
        "",
        {"SLACK_APP_TOKEN": ""},
        "set SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode)",
    ),
    (
        "user token as app token",
        "check",
        "",
        {"SLACK_APP_TOKEN": "xoxp-1-2"},
        "SLACK_APP_TOKEN must be an app-level token starting with xapp-",
    ),
    ("revoked app token", "check", "", {"SLACK_APP_TOKEN": "xapp-revoked"}, "apps.connections.open failed"),
    (
        "busy HTTP port",
        "run --port {busy}",
        "",
        {"SLACK_APP_TOKEN": "", "SLACK_SIGNING_SECRET": "s3cret"},
        "HTTP mode (--port): cannot listen on 0.0.0.0:{busy}",
    ),
    (
        "busy HTTP port, check",
        "check --port {busy}",
        "",
        {"SLACK_APP_TOKEN": "", "SLACK_SIGNING_SECRET": "s3cret"},
        "HTTP mode (--port): cannot listen on 0.0.0.0:{busy}",
    ),
    (
        "busy alert webhook",
        "run",
        '[alerts.webhook]\nlisten = "127.0.0.1:{busy}"\nchannel = "C0INCIDENT"\n',
        {"OPSLOOP_ALERT_TOKEN": "t0ken"},
        "alerts.webhook: cannot listen on 127.0.0.1:{busy}",
    ),
    (
        "busy changes webhook",
        "run",
        '[changes.webhook]\nlisten = "127.0.0.1:{busy}"\n',
        {"OPSLOOP_CHANGES_TOKEN": "t0ken"},
        "changes.webhook: cannot listen on 127.0.0.1:{busy}",
    ),
    (
        "busy changes webhook, check",
        "check",
        '[changes.webhook]\nlisten = "127.0.0.1:{busy}"\n',
        {"OPSLOOP_CHANGES_TOKEN": "t0ken"},
        "changes.webhook: cannot listen on 127.0.0.1:{busy}",
    ),
    (
        "a changes repository that is missing",
        "check",
        '[[changes.git]]\nname = "deploy"\npath = "{tmp}/no-repo"\n',
        {},
        "changes.git deploy: no repository at",
    ),
    (
        "a changes repository that is missing, run",
        "run",
        '[[changes.git]]\nname = "deploy"\npath = "{tmp}/no-repo"\n',
        {},
        "changes.git deploy: no repository at",
    ),
    (
        "a changes repository without the branch, run",
        "run",
        '[[changes.git]]\nname = "deploy"\npath = "{repo}"\nbranch = "release"\n',
        {},
        "changes.git deploy: no branch 'release' in",
    ),
    (
        "a changes repository without the branch, check",
        "check",
        '[[changes.git]]\nname = "deploy"\npath = "{repo}"\nbranch = "release"\n',
        {},
        "changes.git deploy: no branch 'release' in",
    ),
    (
        "changes webhook token unset, run",
        "run",
        '[changes.webhook]\nlisten = "127.0.0.1:0"\n',
        {},
        "OPSLOOP_CHANGES_TOKEN is not set",
    ),
    (
        "a runbook directory that can't be read, run",
        "run",
        '[runbooks]\ndirs = ["{tmp}/no-runbooks"]\n',
        {},
        "runbook directory cannot be read",
    ),
    (
        "a runbook with bad front matter, run",
        "run",
        '[runbooks]\ndirs = ["{runbooks}"]\n',
        {},
        "bad.md",
    ),
    (
        "a runbook with bad front matter, check",
        "check",
        '[runbooks]\ndirs = ["{runbooks}"]\n',
        {},
        "bad.md",
    ),
    (
        "a channel name no channel has, run",
        "run",
        '[slack]\nchannels = ["#incident", "#nope"]\n',
        {},
        "slack.channels: no channel #nope that the bot can see",
    ),
    (
        "a channel name no channel has, check",
        "check",
        '[slack]\nchannels = ["#incident", "#nope"]\n',
        {},
        "slack.channels: no channel #nope that the bot can see",
    ),
    (
        "an alert channel name no channel has, run",
        "run",
        '[[alerts.slack]]\nchannel = "#alerts"\nsenders = ["B1"]\n',
        {},
        "alerts.slack[0].channel: no channel #alerts that the bot can see",
    ),
    (
        "a channel that is neither an id nor a name",
        "check",
        '[slack]\nchannels = ["incident"]\n',
        {},
        "slack.channels: 'incident' is neither a channel id (C…) nor a channel name (#incident)",
    ),
    (
        "busy metrics port",
        "check --metrics-host 127.0.0.1 --metrics-port {busy}",
        "",
        {},
        "metrics (--metrics-port): cannot listen on 127.0.0.1:{busy}",
    ),
    ("metrics port out of range", "run --metrics-port 99999", "", {}, "port 99999 is not between 0 and 65535"),
    ("db in a missing directory", "run", "", {"OPSLOOP_DB": "{tmp}/no/such/dir/opsloop.db"}, "does not exist"),
    ("db in a missing directory, check", "check", "", {"OPSLOOP_DB": "{tmp}/no/such/dir/opsloop.db"}, "does not exist"),
    ("db in a missing directory, runs", "runs", "", {"OPSLOOP_DB": "{tmp}/no/such/dir/opsloop.db"}, "no database"),
    (
        "postgres refuses, runs",
        "runs",
        "",
        {"OPSLOOP_DB": "postgresql://opsloop@127.0.0.1:{refused}/opsloop"},
        "store: can't open postgresql://opsloop@127.0.0.1:{refused}/opsloop",
    ),
    (
        "tool module that doesn't import",
        "run",
        '[tools]\nmodules = ["tools.builtin", "no_such_module"]\n',
        {},
        "cannot import 'no_such_module'",
    ),
    (
        "tool module that doesn't import, check",
        "check",
        '[tools]\nmodules = ["tools.builtin", "no_such_module"]\n',
        {},
        "cannot import 'no_such_module'",
    ),
    (
        "tools.k8s without clusters",
        "run",
        '[tools]\nmodules = ["tools.builtin", "tools.k8s"]\n',
        {},
        "'tools.k8s' is listed but no [[kubernetes.clusters]]",
    ),
    (
        "kubeconfig context that doesn't exist",
        "check",
        '[[kubernetes.clusters]]\nname = "prod"\nkubeconfig = "{kubeconfig}"\ncontext = "nope"\n',
        {},
        "'nope' is not a context",
    ),
    (
        "kubeconfig context that doesn't exist, run",
        "run",
        '[[kubernetes.clusters]]\nname = "prod"\nkubeconfig = "{kubeconfig}"\ncontext = "nope"\n',
        {},
        "'nope' is not a context",
    ),
    (
        "runbook env names SLACK_BOT_TOKEN",
        "run",
        '[[tools.commands]]\nname = "x"\ndescription = "x"\ncommand = ["/bin/true"]\nenv = ["SLACK_BOT_TOKEN"]\n',
        {},
        "SLACK_BOT_TOKEN",
    ),
    (
        "sandbox with a tool config error",
        "sandbox --port 0 --config {tmp}/opsloop.toml",
        '[tools]\nmodules = ["no_such_module"]\n',
        {},
        "cannot import 'no_such_module'",
    ),
    (
        "invalid RE2 pattern",
        "run",
        '[[alerts.slack]]\nchannel = "C0INCIDENT"\nsenders = ["B1"]\nmatch = "(?<=x)y"\n',
        {},
        "invalid regular expression",
    ),
]


@pytest.mark.parametrize(("command", "config", "env", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_each_start_up_error_is_one_line_and_exit_2(
    command, config, env, says, tmp_path, busy, fake_slack, fake_anthropic, fake_kube
):
    fake_anthropic.script(*[reply(text("pong"))] * 4)
    fake_slack.add_channel("C0INCIDENT", "incident")
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "bad.md").write_text("---\ntitle: [unclosed\n---\n1. x\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "initial", datetime.now(UTC), {"README": "hi"})
    kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    refusing = json.loads(kubeconfig.read_text())
    refused = _free_port()
    for cluster in refusing.get("clusters", []):
        cluster["cluster"]["server"] = f"http://127.0.0.1:{refused}"
    (tmp_path / "refusing-kubeconfig").write_text(json.dumps(refusing))
    fill = {
        "busy": str(busy[1]),
        "tmp": str(tmp_path),
        "kubeconfig": str(kubeconfig),
        "refused": str(refused),
        "refusing_kubeconfig": str(tmp_path / "refusing-kubeconfig"),
        "runbooks": str(runbooks),
        "repo": str(repo),
    }
    if config is not None:
        (tmp_path / "opsloop.toml").write_text(config.format(**fill))
    over = {
        "SLACK_BOT_TOKEN": fake_slack.bot_token,
        "SLACK_APP_TOKEN": fake_slack.app_token,
        "SLACK_API_URL": fake_slack.api_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
        "OPSLOOP_DB": str(tmp_path / "opsloop.db"),
        **{k: v.format(**fill) for k, v in env.items()},
    }
    code, out, err = await opsloop(*command.format(**fill).split(), env=base_env(tmp_path, **over), cwd=tmp_path)
    said = says.format(**fill)
    about = [line for line in err.splitlines() if said in line]
    assert (code, len(about)) == (2, 1), err
    assert about[0].startswith("opsloop: error: " if command.startswith("check") else "opsloop: ")
    problems = [
        line
        for line in err.splitlines()  # `run`'s JSON log lines are its log, not problem lines
        if not line.startswith(("opsloop: warning:", "opsloop: config:", "{"))
    ]
    assert problems == about, err
    for noise in ("Traceback", "ClientConnectorError", "Cannot connect to host", "absl", "re2.cc"):
        assert noise not in out + err


async def test_a_read_only_command_in_an_empty_directory_says_there_is_no_database_and_creates_none(tmp_path):
    for command in (["runs"], ["show", "run_x"], ["audit"], ["export", "run_x"], ["replay", "run_x"]):
        code, _, err = await opsloop(*command, env=base_env(tmp_path), cwd=tmp_path)
        assert (code, err.splitlines()) == (
            2,
            ["opsloop: no database at opsloop.db (set --db or $OPSLOOP_DB; `opsloop run` creates it)"],
        ), command
    assert list(tmp_path.iterdir()) == []


async def test_store_commands_take_db(tmp_path):
    from bot.store import Ledger

    ledger = Ledger(tmp_path / "elsewhere.db")
    run = ledger.create_run(channel="C1", thread_ts="1.0", requester="U1", task="disk full", model="claude-sonnet-5-5")
    ledger.close()
    for command in (["runs"], ["show", run.id], ["audit"], ["export", run.id]):
        code, out, err = await opsloop(
            *command, "--db", str(tmp_path / "elsewhere.db"), env=base_env(tmp_path), cwd=tmp_path
        )
        assert code == 0, err
        assert command[0] in ("audit",) or run.id in out


async def test_check_finds_opsloop_toml_in_the_working_directory_and_says_so(tmp_path):
    (tmp_path / "opsloop.toml").write_text('[limits]\nmax_iterations = "x"\n')
    code, _, err = await opsloop("check", env=base_env(tmp_path), cwd=tmp_path)
    assert (code, err.splitlines()) == (2, ["opsloop: error: limits.max_iterations: expected an integer, got a string"])
    (tmp_path / "opsloop.toml").write_text('[approvals]\napprovers = ["U1"]\n')
    code, _, err = await opsloop("check", env=base_env(tmp_path), cwd=tmp_path)
    assert err.splitlines()[0] == f"opsloop: config: {tmp_path / 'opsloop.toml'} (./opsloop.toml)"


async def test_config_flag_wins_over_the_environment_and_the_working_directory(tmp_path):
    (tmp_path / "opsloop.toml").write_text("")
    (tmp_path / "env.toml").write_text("")
    (tmp_path / "flag.toml").write_text("")
    env = base_env(tmp_path, OPSLOOP_CONFIG=str(tmp_path / "env.toml"))
    _, _, err = await opsloop("check", "--config", str(tmp_path / "flag.toml"), env=env, cwd=tmp_path)
    assert err.splitlines()[0] == f"opsloop: config: {tmp_path / 'flag.toml'} (--config)"
    _, _, err = await opsloop("check", env=env, cwd=tmp_path)
    assert err.splitlines()[0] == f"opsloop: config: {tmp_path / 'env.toml'} ($OPSLOOP_CONFIG)"


async def test_without_any_config_run_and_check_warn_that_the_defaults_run(tmp_path):
    said = "no config file (no --config, no $OPSLOOP_CONFIG, no ./opsloop.toml): running on the defaults"
    _, _, err = await opsloop("check", env=base_env(tmp_path), cwd=tmp_path)
    assert err.splitlines()[0].startswith(f"opsloop: warning: {said}")
    _, _, err = await opsloop("run", env=base_env(tmp_path), cwd=tmp_path)  # run's stderr is one JSON log stream
    first = json.loads(err.splitlines()[0])
    assert (first["event"], first["level"], first["problem"].startswith(said)) == ("config.missing", "warning", True)


async def test_version_comes_from_the_package_metadata(tmp_path):
    from importlib.metadata import version

    code, out, _ = await opsloop("--version", env=base_env(tmp_path), cwd=tmp_path)
    assert (code, out.strip()) == (0, f"opsloop {version('opsloop')}")


def _make(*args: str) -> str:
    import subprocess

    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def test_make_run_passes_config_and_make_test_shows_skip_reasons():
    assert _make("-n", "run", "CONFIG=prod.toml").splitlines()[-1].endswith("opsloop run --config prod.toml")
    assert _make("-n", "run").splitlines()[-1].rstrip().endswith("opsloop run")
    pytest_line = next(line for line in _make("-n", "-W", ".venv/.installed", "test").splitlines() if "pytest" in line)
    assert "s" in next(arg for arg in pytest_line.split() if arg.startswith("-r"))  # every skip with its reason


@pytest.mark.parametrize(
    ("target", "packages"),
    [
        ("browser", "chromium chromium-driver fonts-noto-color-emoji"),
        ("postgres", "postgresql"),
        ("sshd", "openssh-server openssh-client zsh"),
        ("prometheus", "prometheus prometheus-alertmanager"),
    ],
)
def test_make_test_installs_without_recommends_and_starts_no_service(tmp_path, target, packages):
    """With none of the set on PATH and a sudo that records what it is asked: what the make target would run."""
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sh", "printf"):  # no ls: the Postgres check globs /usr/lib/postgresql with it
        (bin_dir / name).symlink_to(
            subprocess.run(
                ["sh", "-c", f"command -v {name}"], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
    fakes = {"id": "echo 1000", "apt-get": "exit 0", "sudo": f'printf "%s\\n" "$@" >> {tmp_path}/asked'}
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    line = _make("-s", target, f"PATH={bin_dir}")
    asked = (tmp_path / "asked").read_text()
    assert line == f"{target}: installing {packages} with apt-get\n"
    assert "--no-install-recommends" in asked and "policy-rc.d" in asked and "exit 101" in asked
    assert asked.endswith("\n".join(packages.split()) + "\n")


def test_slack_sdks_own_retry_line_is_not_logged_next_to_ours():
    import io
    import logging

    from bot.core.log import configure_logging

    stream = io.StringIO()
    configure_logging("info", stream=stream)
    logging.getLogger("slack_sdk.web.async_base_client").info(
        "A retry handler found: AsyncConnectionErrorRetryHandler for POST https://slack.com/api/auth.test - "
        "Cannot connect to host slack.com:443"
    )
    logging.getLogger("opsloop.app").warning("slack.unreachable")
    assert [json.loads(line)["event"] for line in stream.getvalue().splitlines()] == ["slack.unreachable"]


async def test_check_warns_once_when_prometheus_is_not_ready_and_not_when_it_is(tmp_path):
    from aiohttp import web

    refused = _free_port()
    (tmp_path / "opsloop.toml").write_text(f'[tools.prometheus]\nurl = "http://127.0.0.1:{refused}"\n')
    _, _, err = await opsloop("check", env=base_env(tmp_path), cwd=tmp_path)
    said = [line for line in err.splitlines() if "prometheus" in line]
    assert len(said) == 1 and said[0].startswith(f"opsloop: warning: prometheus: http://127.0.0.1:{refused}/-/ready")

    async def ready(_: web.Request) -> web.Response:
        return web.Response(text="Prometheus Server is Ready.\n")

    app = web.Application()
    app.router.add_get("/-/ready", ready)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        (tmp_path / "opsloop.toml").write_text(f'[tools.prometheus]\nurl = "http://127.0.0.1:{port}"\n')
        _, _, err = await opsloop("check", env=base_env(tmp_path), cwd=tmp_path)
    finally:
        await runner.cleanup()
    assert [line for line in err.splitlines() if "prometheus" in line] == []


async def test_check_says_an_unreachable_host_once(tmp_path):
    refused = _free_port()
    (tmp_path / "known_hosts").write_text("")
    (tmp_path / "opsloop.toml").write_text(
        f'[ssh]\nuser = "opsloop"\nknown_hosts = "{tmp_path / "known_hosts"}"\nconnect_timeout_s = 2\n'
        f'[[hosts]]\nname = "web-01"\naddress = "127.0.0.1"\nport = {refused}\n'
    )
    code, _, err = await opsloop("check", env=base_env(tmp_path), cwd=tmp_path)
    problems = [line for line in err.splitlines() if "web-01" in line]
    assert code == 2 and len(problems) == 1 and "Traceback" not in err, err
