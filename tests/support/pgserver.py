"""A throwaway Postgres (15 or newer) for the tests and CI: one temp dir, a Unix socket in it, no TCP.

`PgServer` runs `initdb` into a fresh temp dir and starts the server there with `pg_ctl -w`, listening only on
a Unix socket in that same dir (`listen_addresses = ''`), with durability off for speed (a test database is
never worth an fsync). As root (initdb refuses root) the server runs as the `postgres` OS user, which then
owns the temp dir. `stop()` stops it and removes the dir; an atexit hook does so for a server nobody stopped.

`new_database(url)` makes a fresh empty database on such a server and returns its URL; `drop_database` drops it.

The CLI is what `.ci/run` uses to start one server for a whole `make test` and stop it afterwards:

    python -m tests.support.pgserver start STATEFILE  # prints `export OPSLOOP_TEST_PG=<url>`, leaves the server running
    python -m tests.support.pgserver stop STATEFILE   # stops it and removes its temp dir
"""

from __future__ import annotations

import atexit
import json
import os
import pwd
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql

MIN_MAJOR = 15
BINARIES = ("initdb", "pg_ctl", "postgres")
SERVER_USER = "postgres"  # the OS user the server runs as when we are root, and the database superuser
ENV_VAR = "OPSLOOP_TEST_PG"  # a server URL someone else started (CI): the fixtures use it instead of their own

# Test speed over durability, and room for the many connections of the multi-replica tests.
SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}
# `PgServer(durable=True)`: the production defaults instead (every commit flushed to disk), for the benchmarks.
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}


class PgServerError(RuntimeError):
    """initdb or pg_ctl failed; the message carries their output (and the server log's tail)."""


def find_bindir() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres of version >= 15: PATH first, then the newest Debian one."""
    for bindir in _candidate_bindirs():
        if all(os.access(bindir / name, os.X_OK) for name in BINARIES) and (_major_version(bindir) or 0) >= MIN_MAJOR:
            return bindir
    return None


def _candidate_bindirs() -> list[Path]:
    """Where the binaries may be: next to the (symlink-resolved) pg_ctl on PATH, then /usr/lib/postgresql/N/bin."""
    found = shutil.which("pg_ctl")
    on_path = [Path(found).resolve().parent] if found else []
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _number(p.parent.name), reverse=True)
    return on_path + debian


def _number(text: str) -> int:
    """A version directory's name as a number (non-numeric names sort last)."""
    return int(text) if text.isdigit() else -1


def _major_version(bindir: Path) -> int | None:
    """The major version `pg_ctl --version` reports ("pg_ctl (PostgreSQL) 15.8 (Debian …)" -> 15)."""
    try:
        out = subprocess.run([bindir / "pg_ctl", "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    match = re.search(r"\(PostgreSQL\)\s+(\d+)", out)
    return int(match.group(1)) if match else None


class PgServer:
    """One throwaway server: `with PgServer() as pg: pg.url`, or `start()`/`stop()` explicitly."""

    def __init__(self, *, bindir: Path | None = None, root: Path | None = None, durable: bool = False) -> None:
        self.bindir = bindir or find_bindir()
        self.durable = durable  # fsync and synchronous_commit on, as in production (default off: test speed)
        self.root = root  # the temp dir: data dir, socket and log; None until started
        self._run_as_other = os.geteuid() == 0

    @property
    def url(self) -> str:
        """The libpq URL of the `postgres` database over the Unix socket, e.g.
        postgresql://postgres@/postgres?host=%2Ftmp%2F…"""
        if self.root is None:
            raise PgServerError("the server is not started")
        return f"postgresql://{SERVER_USER}@/postgres?host={quote(str(self.root), safe='')}"

    @property
    def _data(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def _log(self) -> Path:
        assert self.root is not None
        return self.root / "server.log"

    def start(self) -> PgServer:
        """initdb into a new temp dir and start the server there; the atexit hook stops it if nobody else does."""
        if self.bindir is None:
            raise PgServerError(f"no Postgres {MIN_MAJOR}+ binaries (initdb, pg_ctl, postgres) found: make postgres")
        self.root = Path(tempfile.mkdtemp(prefix="opsloop-pg-"))
        atexit.register(self.stop)
        try:
            if self._run_as_other:
                entry = pwd.getpwnam(SERVER_USER)
                os.chown(self.root, entry.pw_uid, entry.pw_gid)
            self._run(
                "initdb",
                "-D",
                str(self._data),
                "--auth=trust",
                f"-U{SERVER_USER}",
                "--encoding=UTF8",
                "--no-sync",
                "--no-instructions",
            )
            self._configure()
            self._run("pg_ctl", "-D", str(self._data), "-l", str(self._log), "-w", "-t", "60", "start")
        except BaseException:
            self.stop()
            raise
        return self

    def _configure(self) -> None:
        """Append our settings to postgresql.conf: socket in the temp dir only, no TCP, test speed."""
        settings = {
            "listen_addresses": "",
            "unix_socket_directories": str(self.root),
            **SETTINGS,
            **(DURABLE if self.durable else {}),
        }
        lines = "".join(f"{key} = '{value.replace(chr(39), chr(39) * 2)}'\n" for key, value in settings.items())
        with (self._data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# opsloop throwaway test server (tests/support/pgserver.py)\n" + lines)

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are cut) and remove the temp dir; safe to call twice."""
        atexit.unregister(self.stop)
        if self.root is None:
            return
        if (self._data / "postmaster.pid").exists():
            # A server that is already gone makes pg_ctl fail; the dir goes either way.
            self._run("pg_ctl", "-D", str(self._data), "-m", "fast", "-w", "-t", "60", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def halt(self) -> None:
        """Stop the server but keep its data and socket dir (an outage); `resume()` starts it again."""
        assert self.root is not None
        self._run("pg_ctl", "-D", str(self._data), "-m", "fast", "-w", "-t", "60", "stop")

    def resume(self) -> None:
        """Start a halted server on the same data and socket: the end of an outage."""
        assert self.root is not None
        self._run("pg_ctl", "-D", str(self._data), "-l", str(self._log), "-w", "-t", "60", "start")

    def detach(self) -> dict[str, str]:
        """Leave the server running past this process (the CLI's `start`); returns what `attach` needs to stop it."""
        atexit.unregister(self.stop)
        assert self.root is not None and self.bindir is not None
        return {"url": self.url, "root": str(self.root), "bindir": str(self.bindir)}

    @classmethod
    def attach(cls, state: dict[str, str]) -> PgServer:
        """The server a `detach()` left running, to stop it (the CLI's `stop`)."""
        return cls(bindir=Path(state["bindir"]), root=Path(state["root"]))

    def _run(self, binary: str, *args: str, check: bool = True) -> None:
        """Run one of the server binaries, as the `postgres` OS user when we are root; raise with its output."""
        assert self.bindir is not None and self.root is not None
        command = [str(self.bindir / binary), *args]
        if self._run_as_other:
            command = _as_user(SERVER_USER, command)
        # cwd: the temp dir, which the server user can enter (it may not be able to enter ours).
        done = subprocess.run(
            command, cwd=self.root, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
        if check and done.returncode != 0:
            raise PgServerError(f"{binary} failed ({done.returncode}):\n{done.stdout}{done.stderr}{self._log_tail()}")

    def _log_tail(self, lines: int = 30) -> str:
        """The end of the server log, for an error message."""
        try:
            text = self._log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n--- server log ---\n" + "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> PgServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _as_user(user: str, command: list[str]) -> list[str]:
    """`command` run as `user`: runuser where it exists (util-linux), else su with an explicit shell."""
    if shutil.which("runuser"):
        return ["runuser", "-u", user, "--", *command]
    return ["su", user, "-s", "/bin/sh", "-c", shlex.join(command)]


def new_database(url: str) -> str:
    """Create a fresh, uniquely named, empty database on the server at `url` and return its URL.

    It copies template0, which is empty by definition (template1 is too, unless someone changed it): with PG 15's
    default WAL_LOG strategy and fsync off that is ~15 ms on the server, ~25 ms with the connection, so there
    is no pre-made template to keep (FILE_COPY was slower, ~32 ms, for the checkpoint it forces).
    """
    name = f"opsloop_test_{secrets.token_hex(6)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    return database_url(url, name)


def drop_database(url: str) -> None:
    """Drop the database `url` names, cutting off any session still in it (PG 13+ `WITH (FORCE)`)."""
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(database_url(url, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def database_url(url: str, name: str) -> str:
    """`url` pointing at database `name` instead (same user, same socket)."""
    return urlunsplit(urlsplit(url)._replace(path="/" + quote(name)))


def main(argv: list[str]) -> int:
    """`start STATEFILE`: start a detached server, write its state, print the export line; `stop STATEFILE`."""
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.support.pgserver start|stop STATEFILE", file=sys.stderr)
        return 2
    command, statefile = argv[0], Path(argv[1])
    if command == "start":
        state = PgServer().start().detach()
        statefile.write_text(json.dumps(state) + "\n", encoding="utf-8")
        print(f"export {ENV_VAR}={shlex.quote(state['url'])}")
        return 0
    if statefile.exists():
        PgServer.attach(json.loads(statefile.read_text(encoding="utf-8"))).stop()
        statefile.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
