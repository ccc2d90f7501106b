"""Shared fixtures: a temp store, the fake Messages API (also as Bedrock and Vertex AI) and the fake Slack, all on
loopback; a throwaway Postgres.

Postgres: `pg_server` is one server for the session (the one CI started, named by OPSLOOP_TEST_PG, else our
own tests.support.pgserver.PgServer; the tests skip only when no Postgres 15+ is installed), `pg_url` a fresh empty
database on it per test, and `db_url` runs a test once per store backend: a SQLite file, then a Postgres URL.

SSH: `ssh_servers` starts throwaway OpenSSH servers on 127.0.0.1 (tests.support.sshserver.SshServer; skips when
sshd is not installed) and stops them after the test; `sshd` is one such server.

Markers: tests that start processes or use real servers are marked `processes` / `servers` at collection
(tests/support/markers.py says how), and a test that starts a process without its marker fails, so `make test-fast`
(`-m "not processes and not servers"`) stays fast without anyone keeping a list.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.lib.aws._auth import _get_session

from bot.run.model import claude_client
from bot.store import Store
from tests.support import markers, pgserver, sshserver
from tests.support.fakes.anthropic import API_KEY, FakeAnthropic
from tests.support.fakes.bedrock import CREDENTIALS, FakeBedrock
from tests.support.fakes.slack import FakeSlack
from tests.support.fakes.vertex import FakeVertex
from tools.reaches import TABLES

__all__ = ["API_KEY"]  # the fakes' key, for the tests that import it from here


@pytest.fixture
async def fake_anthropic() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=API_KEY) as fake:
        yield fake


@pytest.fixture
async def fake_bedrock(fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeBedrock]:
    """A FakeBedrock in us-east-1, with CREDENTIALS as the only AWS credentials boto3 finds."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    _get_session.cache_clear()  # the SDK keeps a boto3 session per process: each test's credentials are its own
    async with FakeBedrock(fake_anthropic) as fake:
        yield fake


@pytest.fixture
async def fake_vertex(
    fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> AsyncIterator[FakeVertex]:
    """A FakeVertex (project opsloop-test, us-east5) whose service account GOOGLE_APPLICATION_CREDENTIALS names."""
    async with FakeVertex(fake_anthropic) as fake:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(fake.service_account_file(tmp_path)))
        yield fake


@pytest.fixture
async def anthropic_client(fake_anthropic: FakeAnthropic) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = claude_client(API_KEY, fake_anthropic.base_url)  # the product's client, transport included
    yield client
    await client.close()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store(tmp_path / "opsloop.db", tables=TABLES).open()
    yield s
    await s.close()


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as slack:
        yield slack


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of the session's Postgres server (its `postgres` database); skips without Postgres 15+."""
    if url := os.environ.get(pgserver.ENV_VAR):
        yield url
        return
    if pgserver.find_bindir() is None:
        pytest.skip(f"Postgres {pgserver.MIN_MAJOR} not installed: make postgres")
    with pgserver.PgServer() as server:
        yield server.url


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database on the session's server, dropped after the test (sessions left open are cut)."""
    url = pgserver.new_database(pg_server)
    yield url
    pgserver.drop_database(url)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's store lives, once per backend: a SQLite file in tmp_path, then a fresh Postgres database URL.

    Both are what `Store(url_or_path)` / `Ledger(url_or_path)` accept; the Postgres run skips without Postgres.
    """
    if request.param == "sqlite":
        return str(tmp_path / "opsloop.db")
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def ssh_servers() -> Iterator[Callable[..., sshserver.SshServer]]:
    """Start throwaway sshd's (`ssh_servers(max_sessions=2)`), all stopped after the test; skips without OpenSSH."""
    if reason := sshserver.missing_reason():
        pytest.skip(reason)
    started: list[sshserver.SshServer] = []

    def start(**options: Any) -> sshserver.SshServer:
        server = sshserver.SshServer(**options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def sshd(ssh_servers: Callable[..., sshserver.SshServer]) -> sshserver.SshServer:
    """One throwaway OpenSSH server on 127.0.0.1 for this test."""
    return ssh_servers()


_spawns = markers.SpawnWatch()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    markers.mark(items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Watch what the test starts from its setup through its call (teardowns only stop what was started)."""
    _spawns.current = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if call.when == "call" and (spawned := _spawns.unmarked_spawns(item)):
        note = (
            "started a process but is not marked `processes` (tests/support/markers.py could not see it): add "
            "@pytest.mark.processes, or @pytest.mark.servers if it uses a real server:\n  " + "\n  ".join(spawned)
        )
        if report.passed:
            report.outcome, report.longrepr = "failed", note
        else:
            report.sections.append(("unmarked process", note))
    return report


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--chaos-runs N`: the long crash test (`make chaos`) instead of the short one in `make test`."""
    parser.addoption(
        "--chaos-runs", type=int, default=0, help="runs for the long crash test (0: the short, seeded version)"
    )
    parser.addoption("--chaos-seed", type=int, default=None, help="seed for the crash tests (default: random)")


from tests.support.fakes.kube import FakeKube  # noqa: E402  (kept with its fixture)


@pytest.fixture
async def fake_kube() -> AsyncIterator[FakeKube]:
    """The fake kube-apiserver (HTTPS on loopback, bearer token ``kube-test-token``), empty."""
    async with FakeKube(token="kube-test-token") as kube:
        yield kube
