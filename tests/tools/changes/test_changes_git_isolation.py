"""A repository's own config never makes opsloop's git run a program or reach the network: each way is planted
(a program that writes a marker), shown to run under a plain git on this machine, then not to run under
git_changes; and each layer of the defence is shown to close its ways on its own."""

from __future__ import annotations

import http.server
import os
import pty
import subprocess
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.tools.changes.test_changes_git import commit, git, plain_env
from tools.changes.git import GitError, GitRepo, git_changes, git_env, log_argv

pytestmark = pytest.mark.processes  # the real git

NOW = datetime.now(UTC).replace(microsecond=0)
SINCE, UNTIL = NOW - timedelta(hours=1), NOW + timedelta(minutes=1)


def planted(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """(a program that appends its arguments to a marker file and fails, the marker)."""
    marker = tmp_path / f"{name}.ran"
    program = tmp_path / f"{name}.sh"
    program.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\nexit 1\n')
    program.chmod(0o755)
    return program, marker


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bare repository that serves filtered clones, with three commits under k8s/."""
    root = tmp_path_factory.mktemp("origin")
    work = root / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    for i in range(3):
        commit(work, f"change {i}", NOW - timedelta(minutes=10 - i), {f"k8s/f{i}.yaml": str(i)})
    bare = root / "origin.git"
    git(root, "clone", "-q", "--bare", str(work), str(bare))
    git(bare, "config", "uploadpack.allowFilter", "true")
    return bare


def treeless(origin: Path, where: Path) -> Path:
    """A treeless partial clone of `origin`: `git log --name-only` needs trees it does not have."""
    git(where.parent, "clone", "-q", "--filter=tree:0", "--no-checkout", f"file://{origin}", str(where))
    return where


class Unauthorized(http.server.BaseHTTPRequestHandler):
    """Answers every request 401, so git asks its credential helper."""

    def do_GET(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="r"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Unauthorized)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/repo"
    server.shutdown()
    thread.join()


def plant_fetch(clone: Path, way: str, program: Path, http_url: str) -> None:
    """Make a lazy fetch from `clone` run `program` the way named `way`."""

    def config(*pairs: tuple[str, str]) -> None:
        for key, value in pairs:
            git(clone, "config", key, value)

    hooks = clone.parent / f"{clone.name}-hooks"
    if way == "uploadpack":
        config(("remote.origin.uploadpack", str(program)), ("protocol.file.allow", "always"))
    elif way == "ssh":
        config(("remote.origin.url", "ssh://git.example.invalid/repo"), ("core.sshCommand", str(program)))
        config(("protocol.ssh.allow", "always"))
    elif way == "ext":
        config(("remote.origin.url", f"ext::{program} ext"), ("protocol.ext.allow", "always"))
    elif way == "git-proxy":
        config(("remote.origin.url", "git://git.example.invalid/repo"), ("core.gitProxy", str(program)))
    elif way == "credential-helper":
        config(("remote.origin.url", http_url), ("credential.helper", str(program)))
    elif way == "hooks":  # the fetch succeeds, then auto-maintenance runs pre-auto-gc and reference-transaction
        hooks.mkdir()
        for hook in ("pre-auto-gc", "reference-transaction"):
            (hooks / hook).symlink_to(program)
        config(("core.hooksPath", str(hooks)), ("gc.auto", "1"), ("gc.autoPackLimit", "1"))
    elif way == "alternate-refs":  # the fetch asks the alternate's refs with this command
        other = clone.parent / f"{clone.name}-alternate.git"
        git(clone.parent, "init", "-q", "--bare", str(other))
        (clone / ".git" / "objects" / "info" / "alternates").write_text(f"{other / 'objects'}\n")
        config(("core.alternateRefsCommand", str(program)))
    else:
        raise AssertionError(way)


FETCH_WAYS = ["uploadpack", "ssh", "ext", "git-proxy", "credential-helper", "hooks", "alternate-refs"]


def plain_log(clone: Path, *args: str) -> None:
    """`git log --name-only main -- k8s/` as a person would run it (no prompt: it must not wait on a terminal)."""
    subprocess.run(
        ["git", "-C", str(clone), "log", *args, "--name-only", "main", "--", "k8s/"],
        env={**plain_env(), "GIT_TERMINAL_PROMPT": "0"},
        capture_output=True,
        timeout=30,
        check=False,  # git may fail here; what matters is whether the planted program ran
    )


@pytest.mark.parametrize("way", FETCH_WAYS)
async def test_a_partial_clone_runs_nothing_and_fetches_nothing(
    way: str, origin: Path, http_url: str, tmp_path: Path
) -> None:
    program, marker = planted(tmp_path, way)
    proof = treeless(origin, tmp_path / "proof")
    plant_fetch(proof, way, program, http_url)
    plain_log(proof)
    assert marker.exists()  # a plain git log runs the planted program on this machine's git

    marker.unlink()
    clone = treeless(origin, tmp_path / "clone")
    plant_fetch(clone, way, program, http_url)
    with pytest.raises(GitError) as e:
        await git_changes(GitRepo(name="d", path=clone, paths=("k8s/",)), SINCE, UNTIL)
    assert str(e.value) == f"{clone} is a partial clone without objects this answer needs, and opsloop never fetches"
    assert not marker.exists()


def run_with(argv: list[str], env: dict[str, str]) -> None:
    subprocess.run(
        argv, env=env, capture_output=True, timeout=30, cwd=env["HOME"], check=False
    )  # the marker is the proof


@pytest.mark.parametrize("kept", ["GIT_NO_LAZY_FETCH", "GIT_ALLOW_PROTOCOL"])
def test_each_network_layer_closes_the_fetch_on_its_own(kept: str, origin: Path, http_url: str, tmp_path: Path) -> None:
    program, marker = planted(tmp_path, "uploadpack")
    clone = treeless(origin, tmp_path / "clone")
    plant_fetch(clone, "uploadpack", program, http_url)
    env = {k: v for k, v in git_env().items() if k not in {"GIT_NO_LAZY_FETCH", "GIT_ALLOW_PROTOCOL"} - {kept}}
    run_with(log_argv(GitRepo(name="d", path=clone, paths=("k8s/",)), SINCE, UNTIL), env)
    assert not marker.exists()


@pytest.mark.parametrize("way", ["ssh", "git-proxy", "credential-helper", "hooks"])
def test_behind_the_network_layers_the_program_itself_is_switched_off(
    way: str, origin: Path, http_url: str, tmp_path: Path
) -> None:
    program, marker = planted(tmp_path, way)
    clone = treeless(origin, tmp_path / "clone")
    plant_fetch(clone, way, program, http_url)
    env = {k: v for k, v in git_env().items() if k not in {"GIT_NO_LAZY_FETCH", "GIT_ALLOW_PROTOCOL"}}
    run_with(log_argv(GitRepo(name="d", path=clone, paths=("k8s/",)), SINCE, UNTIL), env)
    assert not marker.exists()


def in_a_terminal(argv: list[str], env: dict[str, str]) -> None:
    """Run argv with a terminal as its stdout (git starts a pager only then), to its end."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, env)
    try:
        while os.read(fd, 1 << 16):
            pass
    except OSError:  # the terminal closed with the process
        pass
    os.waitpid(pid, 0)


LOCAL_WAYS: dict[str, tuple[str, str, Callable[[Path], None]]] = {
    # way: (config key, plain git command that runs it, what else the repository needs)
    "pager": ("core.pager", "log", lambda _: None),
    "external-diff": ("diff.external", "diff HEAD~1 HEAD", lambda _: None),
    "textconv": (
        "diff.planted.textconv",
        "log -p --no-ext-diff",
        lambda r: (r / ".gitattributes").write_text("*.yaml diff=planted\n"),
    ),
    "fsmonitor": ("core.fsmonitor", "status", lambda _: None),
}


@pytest.mark.parametrize("way", list(LOCAL_WAYS))
async def test_a_full_clone_runs_no_program_of_its_config(way: str, tmp_path: Path) -> None:
    key, command, prepare = LOCAL_WAYS[way]
    program, marker = planted(tmp_path, way)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    prepare(repo)
    commit(repo, "one", NOW - timedelta(minutes=5), {"k8s/a.yaml": "1"})
    commit(repo, "two", NOW - timedelta(minutes=4), {"k8s/a.yaml": "2"})
    git(repo, "config", key, str(program))
    pager = {} if way == "pager" else {"GIT_PAGER": "cat"}  # else git -p waits on `less`
    in_a_terminal(["git", "-C", str(repo), *command.split()], {**plain_env(), **pager})
    assert marker.exists()  # a plain git runs it on this machine

    marker.unlink()
    changes = await git_changes(GitRepo(name="d", path=repo, paths=("k8s/",)), SINCE, UNTIL)
    assert [c.what for c in changes] == [
        "commit by alice: two (files: k8s/a.yaml)",
        "commit by alice: one (files: k8s/a.yaml)",
    ]
    assert not marker.exists()
