"""Slack or Anthropic out of reach: `opsloop check` says so in one line per service, `opsloop run` keeps
trying with one log line per attempt and /healthz says why. Never a traceback.

Every "unreachable" here is on loopback: a closed port (refused), a server that accepts and says nothing
(timeout), a self-signed TLS server (certificate not trusted), a dead proxy, and, inside a network
namespace of the test's own with its resolver on 127.0.0.1, a DNS lookup that fails. Nothing leaves the
machine (in the namespace, nothing can).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from bot.app.check import check
from bot.app.settings import load_settings
from tests.conftest import API_KEY

ROOT = Path(__file__).resolve().parents[3]


# --- places that can't be reached -------------------------------------------------------------------------
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[int]:
    """Accepts TCP, then never says a word (a firewall that drops, a hung proxy)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for w in held:
            w.close()
        server.close()


def self_signed(tmp_path: Path) -> ssl.SSLContext:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    return ctx


@contextlib.asynccontextmanager
async def tls_server(tmp_path: Path) -> AsyncIterator[int]:
    """TLS with a certificate nobody trusts (a TLS-intercepting middlebox, a wrong endpoint)."""

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(drop, "127.0.0.1", 0, ssl=self_signed(tmp_path))
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


def env_at(slack: str, anthropic: str, **extra: str) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": "xoxb-unreachable",
        "SLACK_APP_TOKEN": "xapp-unreachable",
        "SLACK_API_URL": slack,
        "ANTHROPIC_API_KEY": API_KEY,
        "ANTHROPIC_BASE_URL": anthropic,
        **extra,
    }


def problems(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("opsloop: ") and "warning:" not in line]


# --- opsloop check ----------------------------------------------------------------------------------------
async def test_check_names_a_refused_connection_in_one_line_per_service(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    port = closed_port()
    settings = load_settings(None, env=env_at(f"http://127.0.0.1:{port}/api/", f"http://127.0.0.1:{port}"))
    assert await check(settings, timeout_s=5) == 1
    assert problems(capsys.readouterr().err) == [
        f"opsloop: error: slack: cannot connect to 127.0.0.1:{port} (connection refused)",
        f"opsloop: error: anthropic: cannot connect to 127.0.0.1:{port} (connection refused)",
    ]


@pytest.mark.slow
async def test_check_names_a_timeout(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    async with silent_server() as port:
        settings = load_settings(None, env=env_at(f"http://127.0.0.1:{port}/api/", f"http://127.0.0.1:{port}"))
        assert await check(settings, timeout_s=1) == 1
    assert problems(capsys.readouterr().err) == [
        f"opsloop: error: slack: cannot connect to 127.0.0.1:{port} (timed out after 1s)",
        f"opsloop: error: anthropic: cannot connect to 127.0.0.1:{port} (timed out after 1s)",
    ]


@pytest.mark.slow
async def test_check_names_an_untrusted_tls_certificate(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    async with tls_server(tmp_path) as port:
        settings = load_settings(None, env=env_at(f"https://127.0.0.1:{port}/api/", f"https://127.0.0.1:{port}"))
        assert await check(settings, timeout_s=5) == 1
    assert problems(capsys.readouterr().err) == [
        f"opsloop: error: slack: cannot connect to 127.0.0.1:{port} (TLS certificate not trusted: self-signed "
        "certificate)",
        f"opsloop: error: anthropic: cannot connect to 127.0.0.1:{port} (TLS certificate not trusted: self-signed "
        "certificate)",
    ]


async def test_check_names_a_dead_proxy_and_not_its_password(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proxy_port = closed_port()
    proxy = f"http://opsloop:hunter2-proxy-password@127.0.0.1:{proxy_port}"
    for name in ("HTTPS_PROXY", "HTTP_PROXY"):  # the SDKs read these themselves; the config only names them
        monkeypatch.setenv(name, proxy)
    async with silent_server() as port:  # never reached: the proxy is the way there, and it is down
        settings = load_settings(
            None, env=env_at(f"http://127.0.0.1:{port}/api/", f"http://127.0.0.1:{port}", HTTPS_PROXY=proxy)
        )
        assert await check(settings, timeout_s=5) == 1
    err = capsys.readouterr().err
    assert problems(err) == [
        f"opsloop: error: slack: cannot connect to 127.0.0.1:{port} through proxy 127.0.0.1:{proxy_port} "
        "(connection refused)",
        f"opsloop: error: anthropic: cannot connect to 127.0.0.1:{port} through proxy 127.0.0.1:{proxy_port} "
        "(connection refused)",
    ]
    assert "hunter2" not in err


def in_isolated_netns() -> list[str] | None:
    """A command prefix that runs a program in a new network namespace (only its own loopback, up) whose
    resolver is 127.0.0.1, where nothing listens: every DNS lookup fails, and no packet can leave."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return None
    probe = subprocess.run(["unshare", "--net", "--mount", "true"], capture_output=True, check=False)
    return ["unshare", "--net", "--mount"] if probe.returncode == 0 else None


def netns_script(tmp_path: Path, argv: list[str]) -> list[str]:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    inner = f'ip link set lo up && mount --bind {resolv} /etc/resolv.conf && exec "$@"'
    return ["sh", "-c", inner, "sh", *argv]


async def test_check_names_a_failed_dns_lookup(tmp_path):
    prefix = in_isolated_netns()
    if prefix is None:
        pytest.skip("needs root and unshare(1) to give the test its own network namespace and resolver")
    env = {
        **_base_env(),
        **env_at("https://slack.com/api/", "https://api.anthropic.com"),
        "OPSLOOP_DB": str(tmp_path / "o.db"),
    }
    proc = await asyncio.create_subprocess_exec(
        *prefix,
        *netns_script(tmp_path, [sys.executable, "-m", "bot.app.cli", "check"]),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1  # out of reach now: run would start and keep trying
    assert problems(err.decode()) == [
        "opsloop: error: slack: cannot connect to slack.com:443 (DNS lookup failed: temporary failure in name "
        "resolution)",
        "opsloop: error: anthropic: cannot connect to api.anthropic.com:443 (DNS lookup failed: temporary failure in "
        "name resolution)",
    ]
    assert "Traceback" not in out.decode() + err.decode()


async def test_opsloop_check_as_a_command_prints_no_traceback(tmp_path):
    port = closed_port()
    env = {
        **_base_env(),
        **env_at(f"http://127.0.0.1:{port}/api/", f"http://127.0.0.1:{port}"),
        "OPSLOOP_DB": str(tmp_path / "o.db"),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.app.cli",
        "check",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1  # out of reach now: run would start and keep trying
    assert f"opsloop: error: slack: cannot connect to 127.0.0.1:{port} (connection refused)" in err.decode()
    assert "Traceback" not in out.decode() + err.decode()


# --- opsloop run ------------------------------------------------------------------------------------------
def _base_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLACK_", "ANTHROPIC_", "OPSLOOP_")) and k.lower() not in ("https_proxy", "http_proxy")
    }


async def _healthz(port: int) -> tuple[int, dict[str, str]] | None:
    try:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/healthz") as r:
            return r.status, await r.json()
    except aiohttp.ClientError:
        return None


async def run_until_it_retried(
    tmp_path: Path, env: dict[str, str], *, prefix: list[str] | None = None, attempts: int = 2
) -> tuple[dict[str, str], list[dict[str, object]], str]:
    """Start `opsloop run`, wait for `attempts` failed attempts to reach Slack (read from /healthz),
    SIGTERM it. Returns /healthz's checks, the JSON log lines and the whole stderr."""
    metrics = closed_port()
    argv = [sys.executable, "-m", "bot.app.cli", "run", "--metrics-port", str(metrics), "--metrics-host", "127.0.0.1"]
    env = {**_base_env(), "OPSLOOP_DB": str(tmp_path / "o.db"), **env}
    cmd = [*prefix, *netns_script(tmp_path, argv)] if prefix else argv
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True
    )
    checks: dict[str, str] = {}
    try:
        async with asyncio.timeout(90):
            while f"attempt {attempts}" not in checks.get("slack", ""):
                answer = await (_healthz_in_netns(proc, metrics) if prefix else _healthz(metrics))
                if answer is not None:
                    status, checks = answer
                    assert status == 503
                await asyncio.sleep(0.2)  # polling an HTTP endpoint of another process
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    text = stderr.decode()
    logs = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return checks, logs, text


async def _healthz_in_netns(proc: asyncio.subprocess.Process, port: int) -> tuple[int, dict[str, str]] | None:
    """/healthz of a process in another network namespace: fetched from inside it (nsenter)."""
    out = await asyncio.create_subprocess_exec(
        "nsenter",
        f"--net=/proc/{proc.pid}/ns/net",
        sys.executable,
        "-c",
        f"import urllib.request,sys\ntry:\n r=urllib.request.urlopen('http://127.0.0.1:{port}/healthz')\n"
        "except urllib.error.HTTPError as e: r=e\nexcept OSError: sys.exit(0)\n"
        "print(r.status); print(r.read().decode())",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    text = (await out.communicate())[0].decode().strip().splitlines()
    return (int(text[0]), json.loads(text[1])) if len(text) == 2 else None


def assert_one_line_per_attempt(logs: list[dict[str, object]], text: str, problem: str) -> None:
    failures = [e for e in logs if e.get("event") == "slack.unreachable"]
    assert len(failures) >= 2
    assert [e["attempt"] for e in failures] == list(range(1, len(failures) + 1))
    assert {e["problem"] for e in failures} == {problem}
    assert all(e.get("level") == "warning" for e in failures)
    assert "Traceback" not in text
    assert all(line.startswith("{") for line in text.splitlines() if line.strip())  # one JSON stream, nothing else


async def test_run_keeps_trying_a_refused_slack_and_healthz_says_why(tmp_path):
    port = closed_port()
    checks, logs, text = await run_until_it_retried(
        tmp_path, env_at(f"http://127.0.0.1:{port}/api/", f"http://127.0.0.1:{port}")
    )
    problem = f"cannot connect to 127.0.0.1:{port} (connection refused)"
    assert checks["slack"] == f"{problem}; retrying (attempt 2)"
    assert checks["store"] == "ok"
    assert_one_line_per_attempt(logs, text, problem)
    assert "shutting_down" in {e.get("event") for e in logs}


async def test_run_keeps_trying_through_an_untrusted_certificate(tmp_path):
    async with tls_server(tmp_path) as port:
        checks, logs, text = await run_until_it_retried(
            tmp_path, env_at(f"https://127.0.0.1:{port}/api/", f"https://127.0.0.1:{port}")
        )
    problem = f"cannot connect to 127.0.0.1:{port} (TLS certificate not trusted: self-signed certificate)"
    assert checks["slack"].startswith(problem)
    assert checks["anthropic"].startswith(problem)  # shown, while only Slack and the store decide health
    assert_one_line_per_attempt(logs, text, problem)


async def test_run_keeps_trying_a_dead_proxy(tmp_path):
    proxy_port = closed_port()
    proxy = f"http://opsloop:hunter2-proxy-password@127.0.0.1:{proxy_port}"
    port = closed_port()
    checks, logs, text = await run_until_it_retried(
        tmp_path,
        env_at(f"http://127.0.0.1:{port}/api/", f"http://127.0.0.1:{port}", HTTPS_PROXY=proxy, HTTP_PROXY=proxy),
    )
    problem = f"cannot connect to 127.0.0.1:{port} through proxy 127.0.0.1:{proxy_port} (connection refused)"
    assert checks["slack"].startswith(problem)
    assert_one_line_per_attempt(logs, text, problem)
    assert "hunter2" not in text


async def test_run_keeps_trying_a_slack_that_never_answers(tmp_path):
    async with silent_server() as port:  # each attempt costs the start-up timeout (10 s): one retry is enough
        checks, logs, text = await run_until_it_retried(
            tmp_path, env_at(f"http://127.0.0.1:{port}/api/", f"http://127.0.0.1:{closed_port()}"), attempts=1
        )
    problem = f"cannot connect to 127.0.0.1:{port} (timed out after 10s)"
    assert checks["slack"] == f"{problem}; retrying (attempt 1)"
    assert "Traceback" not in text
    assert [e["problem"] for e in logs if e.get("event") == "slack.unreachable"] == [problem]


async def test_run_keeps_trying_when_dns_fails(tmp_path):
    prefix = in_isolated_netns()
    if prefix is None or not shutil.which("nsenter"):
        pytest.skip("needs root, unshare(1) and nsenter(1) to give the test its own network namespace and resolver")
    checks, logs, text = await run_until_it_retried(
        tmp_path, env_at("https://slack.com/api/", "https://api.anthropic.com"), prefix=prefix
    )
    problem = "cannot connect to slack.com:443 (DNS lookup failed: temporary failure in name resolution)"
    assert checks["slack"] == f"{problem}; retrying (attempt 2)"
    assert_one_line_per_attempt(logs, text, problem)


async def test_run_with_a_revoked_token_stops_with_one_line(tmp_path, fake_slack):
    env = {
        **_base_env(),
        **env_at(fake_slack.api_url, f"http://127.0.0.1:{closed_port()}"),
        "SLACK_BOT_TOKEN": "xoxb-revoked",
        "SLACK_APP_TOKEN": fake_slack.app_token,  # only the bot token is bad
        "OPSLOOP_DB": str(tmp_path / "o.db"),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.app.cli",
        "run",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    lines = [line for line in err.decode().splitlines() if not line.startswith("{")]
    assert lines == ["opsloop: slack: invalid_auth: check SLACK_BOT_TOKEN and SLACK_APP_TOKEN"]
    assert "Traceback" not in err.decode()
