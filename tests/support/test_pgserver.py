"""The throwaway Postgres of tests/support/pgserver.py and its fixtures: Unix socket only, isolated databases,
NOTIFY."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from tests.support import pgserver

ROOT = Path(__file__).resolve().parents[2]
needs_binaries = pytest.mark.skipif(
    pgserver.find_bindir() is None, reason=f"Postgres {pgserver.MIN_MAJOR} not installed: make postgres"
)


def socket_dir(url: str) -> Path:
    """The Unix socket directory a server URL names (its `host` query parameter)."""
    return Path(parse_qs(urlsplit(url).query)["host"][0])


def test_server_accepts_a_connection_over_its_unix_socket(pg_server: str) -> None:
    with psycopg.connect(pg_server) as conn:
        row = conn.execute("SELECT current_user, inet_server_addr(), current_setting('server_version_num')::int")
        user, server_addr, version = row.fetchone() or ()
        host = conn.info.host
    assert (user, server_addr) == ("postgres", None)  # no server address: the connection is not TCP
    assert version >= pgserver.MIN_MAJOR * 10000
    assert host == str(socket_dir(pg_server))


def test_the_server_listens_on_no_tcp_port(pg_server: str) -> None:
    with psycopg.connect(pg_server) as conn:
        row = conn.execute("SHOW listen_addresses").fetchone()
    assert row == ("",)


def test_two_databases_are_isolated(pg_server: str, pg_url: str) -> None:
    other = pgserver.new_database(pg_server)
    try:
        with psycopg.connect(pg_url) as conn:
            conn.execute("CREATE TABLE only_here (x int)")
        with psycopg.connect(pg_url) as mine, psycopg.connect(other) as theirs:
            names = (
                mine.execute("SELECT current_database()").fetchone(),
                theirs.execute("SELECT current_database()").fetchone(),
            )
            found = theirs.execute("SELECT to_regclass('only_here')").fetchone()
            here = mine.execute("SELECT to_regclass('only_here')::text").fetchone()
    finally:
        pgserver.drop_database(other)
    assert names[0] != names[1]
    assert (here, found) == (("only_here",), (None,))


async def test_listen_notify_reaches_another_connection(pg_url: str) -> None:
    async with (
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as listener,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as sender,
    ):
        await listener.execute("LISTEN opsloop_wake")
        await sender.execute("SELECT pg_notify('opsloop_wake', 'run-1')")
        received = [(n.channel, n.payload) async for n in listener.notifies(timeout=30, stop_after=1)]
    assert received == [("opsloop_wake", "run-1")]


def test_a_dropped_database_is_gone(pg_server: str) -> None:
    url = pgserver.new_database(pg_server)
    lingering = psycopg.connect(url)  # a session still open: the forced drop cuts it
    pgserver.drop_database(url)
    lingering.close()
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        psycopg.connect(url).close()


def test_database_url_swaps_only_the_database_name() -> None:
    url = "postgresql://postgres@/postgres?host=%2Ftmp%2Fopsloop-pg-x"
    assert pgserver.database_url(url, "t1") == "postgresql://postgres@/t1?host=%2Ftmp%2Fopsloop-pg-x"


def test_db_url_is_a_sqlite_file_or_an_empty_postgres_database(db_url: str, tmp_path: Path) -> None:
    if not db_url.startswith("postgresql://"):
        assert Path(db_url) == tmp_path / "opsloop.db"
        return
    with psycopg.connect(db_url) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
    assert tables == (0,)


@needs_binaries
def test_stop_leaves_no_server_and_no_files_behind() -> None:
    with pgserver.PgServer() as server:
        url = server.url
        root = server.root
        with psycopg.connect(url) as conn:
            conn.execute("SELECT 1")
    assert root is not None and not root.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5).close()


@needs_binaries
def test_cli_starts_a_detached_server_and_stops_it(tmp_path: Path) -> None:
    state = tmp_path / "pg.json"
    started = subprocess.run(
        [sys.executable, "-m", "tests.support.pgserver", "start", str(state)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    name, _, value = started.stdout.strip().removeprefix("export ").partition("=")
    url = shlex.split(value)[0]
    try:
        with psycopg.connect(url) as conn:  # still running after the CLI process exited
            conn.execute("SELECT 1")
    finally:
        subprocess.run([sys.executable, "-m", "tests.support.pgserver", "stop", str(state)], cwd=ROOT, check=True)
    assert name == pgserver.ENV_VAR
    assert not state.exists() and not socket_dir(url).exists()
