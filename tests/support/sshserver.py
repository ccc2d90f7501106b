"""A throwaway OpenSSH server for the tests: its own temp dir, keys and config, on 127.0.0.1 and a random port.

`SshServer` generates an ed25519 host key and an ed25519 client key pair (ssh-keygen), writes an sshd_config
that allows only public-key logins of the current user from keys in the temp dir (no PAM, no passwords,
`StrictModes no` because the temp dir is not the user's home), and runs the real Debian `sshd` in the
foreground (`-D`) with its log in the temp dir (`-E`). `known_hosts` is a file with the `[127.0.0.1]:PORT`
entry a client needs. Several servers can run at once (a jump host and the host behind it).

As root, sshd needs its privilege-separation dir (/run/sshd) and an absolute path to itself; both are
handled here. As another user it runs unprivileged and can only log that same user in, which is all a test
needs. `stop()` stops it and removes the dir; an atexit hook does so for a server nobody stopped.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import psutil

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
PRIVSEP_DIR = Path("/run/sshd")
START_TIMEOUT_S = 15.0


class SshServerError(RuntimeError):
    """ssh-keygen or sshd failed; the message carries their output and the server log's tail."""


def find_sshd() -> Path | None:
    """The OpenSSH server binary (absolute: sshd refuses to re-exec itself otherwise), or None."""
    on_path = shutil.which("sshd")
    for candidate in ([on_path] if on_path else []) + list(SSHD_CANDIDATES):
        if os.access(candidate, os.X_OK):
            return Path(candidate).resolve()
    return None


def missing_reason() -> str | None:
    """Why the SSH tests cannot run here (for pytest.skip), or None when they can."""
    if find_sshd() is None:
        return "OpenSSH server not installed (apt-get install openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen not installed (apt-get install openssh-client)"
    return None


def keygen(path: Path, *, passphrase: str = "", comment: str = "opsloop-test") -> Path:
    """A new ed25519 key pair at `path` and `path`.pub (OpenSSH format); returns `path`."""
    done = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", comment, "-f", str(path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SshServerError(f"ssh-keygen failed ({done.returncode}): {done.stdout}{done.stderr}")
    return path


def fingerprint(public_key_file: Path) -> str:
    """The SHA256 fingerprint of a public key file, as `ssh-keygen -l` prints it ("SHA256:…")."""
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(public_key_file)], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"SHA256:\S+", out)
    assert match, out
    return match.group(0)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (sshd binds it next; start() retries on a clash)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class SshServer:
    """One throwaway sshd: `with SshServer() as srv: srv.port, srv.client_key, srv.known_hosts`."""

    def __init__(
        self, *, max_sessions: int = 10, max_startups: int = 100, path: str | None = None, log_level: str = "VERBOSE"
    ) -> None:
        self.sshd = find_sshd()
        self.log_level = log_level  # DEBUG1 also logs what the key exchange chose (the ciphers)
        self.path = path  # PATH for the sessions (a test's stand-in programs first); None: sshd's default
        self.max_sessions = max_sessions
        self.max_startups = max_startups
        self.user = pwd.getpwuid(os.geteuid()).pw_name
        self.address = "127.0.0.1"
        self.port = 0
        self.root: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- files in the temp dir ---------------------------------------------------------------

    def _path(self, name: str) -> Path:
        if self.root is None:
            raise SshServerError("the server is not started")
        return self.root / name

    @property
    def host_key(self) -> Path:
        """The server's private host key; `.pub` next to it."""
        return self._path("ssh_host_ed25519_key")

    @property
    def client_key(self) -> Path:
        """A private key (no passphrase) whose public half is authorized for `user`."""
        return self._path("client_key")

    @property
    def known_hosts(self) -> Path:
        """A known_hosts file with this server's host key for `[127.0.0.1]:PORT`."""
        return self._path("known_hosts")

    @property
    def log(self) -> Path:
        return self._path("sshd.log")

    @property
    def authorized_keys(self) -> Path:
        return self._path("authorized_keys")

    def known_hosts_line(self) -> str:
        """`[127.0.0.1]:PORT ssh-ed25519 AAAA…` for this server."""
        kind, blob = self.host_key.with_suffix(".pub").read_text().split()[:2]
        return f"[{self.address}]:{self.port} {kind} {blob}\n"

    def host_fingerprint(self) -> str:
        return fingerprint(self.host_key.with_suffix(".pub"))

    def authorize(self, private_key: Path) -> None:
        """Let the key at `private_key` (its `.pub`) log in too."""
        pub = Path(str(private_key) + ".pub").read_text()
        with self.authorized_keys.open("a", encoding="utf-8") as f:
            f.write(pub if pub.endswith("\n") else pub + "\n")

    def new_client_key(self, name: str, *, passphrase: str = "", authorize: bool = True) -> Path:
        """Another client key pair in the temp dir, authorized unless `authorize=False`."""
        key = keygen(self._path(name), passphrase=passphrase)
        if authorize:
            self.authorize(key)
        return key

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SshServer:
        """Generate keys and config in a new temp dir and start sshd; returns once it accepts connections."""
        if self.sshd is None:
            raise SshServerError(missing_reason() or "no sshd")
        self.root = Path(tempfile.mkdtemp(prefix="opsloop-sshd-"))
        atexit.register(self.stop)
        try:
            if os.geteuid() == 0:
                PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
            keygen(self.host_key, comment="opsloop-test-host")
            keygen(self.client_key)
            self._path("home").mkdir()
            self.authorized_keys.write_text("")
            self.authorize(self.client_key)
            for attempt in range(5):
                self.port = free_port()
                self._write_config()
                if self._launch():
                    break
                if attempt == 4:
                    raise SshServerError(f"sshd did not start:{self._log_tail()}")
            self.known_hosts.write_text(self.known_hosts_line())
        except BaseException:
            self.stop()
            raise
        return self

    def _write_config(self) -> None:
        settings = {
            "Port": str(self.port),
            "ListenAddress": self.address,
            "HostKey": str(self.host_key),
            "PidFile": str(self._path("sshd.pid")),
            "AuthorizedKeysFile": str(self.authorized_keys),
            "StrictModes": "no",  # the temp dir and its files are not laid out like a home directory
            "UsePAM": "no",
            "PasswordAuthentication": "no",
            "KbdInteractiveAuthentication": "no",
            "PubkeyAuthentication": "yes",
            "PermitRootLogin": "prohibit-password",
            "AllowUsers": self.user,
            "MaxSessions": str(self.max_sessions),
            "MaxStartups": str(self.max_startups),
            "AllowTcpForwarding": "yes",  # a jump host tunnels to the next one
            "UseDNS": "no",
            "PrintMotd": "no",
            "PrintLastLog": "no",
            "LogLevel": self.log_level,
            "Subsystem": "sftp internal-sftp",
            # An empty home for the sessions: the login shell reads no rc file of the real user's (root's
            # ~/.bashrc here runs pyenv init, 100+ ms a session), so tests see the server, not dotfiles.
            "SetEnv": f"HOME={self._path('home')}" + (f" PATH={self.path}" if self.path else ""),
        }
        text = "".join(f"{key} {value}\n" for key, value in settings.items())
        self._path("sshd_config").write_text("# opsloop throwaway test server (tests/support/sshserver.py)\n" + text)

    def _launch(self) -> bool:
        """Start sshd on `port`; True once it listens, False if the port was taken meanwhile."""
        assert self.sshd is not None
        self.log.write_text("")
        self._proc = subprocess.Popen(
            [str(self.sshd), "-D", "-f", str(self._path("sshd_config")), "-E", str(self.log)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                if "Address already in use" in self.log.read_text(errors="replace"):
                    return False
                raise SshServerError(f"sshd exited with {self._proc.returncode}:{self._log_tail()}")
            if "Server listening on" in self.log.read_text(errors="replace"):
                return True
            time.sleep(0.01)
        raise SshServerError(f"sshd did not listen within {START_TIMEOUT_S:g}s:{self._log_tail()}")

    @property
    def pid(self) -> int:
        """The listening sshd's process id."""
        assert self._proc is not None
        return self._proc.pid

    def session_processes(self) -> list[psutil.Process]:
        """The per-connection sshd processes (children of the listener), each serving one client connection."""
        try:
            return psutil.Process(self.pid).children(recursive=False)
        except psutil.NoSuchProcess:
            return []

    def drop_connections(self) -> int:
        """SIGKILL every per-connection sshd process: each client sees its connection drop. Returns how many."""
        procs = self.session_processes()
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(procs, timeout=5)
        return len(procs)

    def accepted_logins(self) -> int:
        """How many logins the server accepted so far (one per SSH connection), from its log."""
        return self.log.read_text(errors="replace").count("Accepted publickey for")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """Stop the listener and every connection it serves, remove the temp dir; safe to call twice."""
        atexit.unregister(self.stop)
        if self._proc is not None:
            children = self.session_processes()
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            for p in children:  # the listener's exit leaves open connections running; end them too
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()
            self._proc = None
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except (OSError, SshServerError):
            return ""
        return "\n--- sshd log ---\n" + "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> SshServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
