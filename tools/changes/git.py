"""Commits on a configured branch in a window, from a local clone or a bare repository, with the git CLI.

Why the CLI and not a library (pygit2, dulwich): git is installed wherever a deploy repository is, so it adds
no dependency (pygit2 needs libgit2 wheels, dulwich is pure Python); it is fast, a window's commits read in
milliseconds from a large history (bench/changes_git.py measures it); and the CLI runs in its own process,
so a timeout kills it without leaving a thread stuck in C.

Safety: argv only (no shell); a fresh environment with no system or global config (`GIT_CONFIG_NOSYSTEM`,
`GIT_CONFIG_GLOBAL=/dev/null`, an empty HOME of our own), no terminal prompt, no pager, no optional locks;
`-c safe.directory=<path>` so a repository owned by another user is read. The branch and paths come from config
and are checked; the revision goes after `--end-of-options`, paths after `--` with `--literal-pathspecs`.

The repository's own config never makes git run a program or reach the network. opsloop never fetches: it
reads what the clone has. A partial clone asks its promisor remote for the objects it lacks (`git log
--name-only` on a treeless clone needs trees), which runs the remote's `uploadpack`, `core.sshCommand`,
`core.gitProxy`, an `ext::` command or a credential helper, and a fetch then runs auto-maintenance and its
hooks. Two layers close that: no lazy fetch (`GIT_NO_LAZY_FETCH`) and no transport at all
(`GIT_ALLOW_PROTOCOL` set to a list naming none, which outranks every `protocol.*.allow`); such a clone's
answer is an error saying it lacks objects. Behind them, the programs themselves are switched off, by
environment (which outranks config) or by `-c` (read after the repository's config): `GIT_SSH_COMMAND`,
`GIT_PROXY_COMMAND`, `credential.helper=` (empty clears every helper), `core.hooksPath=/dev/null`, no
auto-maintenance, `core.fsmonitor=false`, no external diff or textconv, no signature check.

Bounded: at most `max_commits` commits and `MAX_BYTES` of output (the process is killed past it), a timeout;
each subject and author capped by git itself. A cut answer says so (a `Cut`): past MAX_BYTES with `paths`
(a commit touching thousands of files) the commits are read again without their files, so every commit of
the window is still listed; past `max_commits`, the last ones on the branch are listed.

`--since`/`--until` compare committer dates, so `Change.at` is the committer date too (a rebased or
cherry-picked commit counts from when it landed, not when it was first written). git stops walking a few
commits after the first one older than `--since`: a commit with a skewed (older) committer date hides the
ones below it, as it does for `git log --since` itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import tempfile
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.config.reader import Reader, setting
from tools.api import ToolError, some_names
from tools.changes.model import FIELD_MAX, Change, Cut

GIT = "git"
MAX_COMMITS = 200
MAX_BYTES = 512 * 1024
TIMEOUT_S = 10.0
FILES_SHOWN = 5  # files listed per commit; the rest are counted
_RECORD = "\x1e"  # starts each commit's header; file names (with --name-only) follow on their own lines
AUTHOR_MAX = 100  # columns; git pads shorter ones with spaces, stripped here
_FORMAT = f"%x1e%h%x00%<({AUTHOR_MAX},trunc)%an%x00%cI%x00%<({FIELD_MAX},trunc)%s"  # a 600 KB subject is 300 columns
_BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")
_SHA = re.compile(r"[0-9a-f]{4,40}")
_HOME: list[str] = []  # one empty directory per process, made on first use


class GitError(ToolError):
    """The repository could not be read (missing, not a repository, unknown branch, git failed or timed out)."""


def _checked(value: Any, r: Reader, key: str) -> Any:
    """A [[changes.git]] entry's branch or paths checked as GitRepo checks them: a problem, not a ValueError."""
    try:
        return check_branch(value) if key == "branch" else tuple(check_path(p) for p in value)
    except ValueError as e:
        r.problem(str(e), key)
        return None


@dataclass(frozen=True)
class GitRepo:
    """One `[[changes.git]]` entry."""

    name: str = setting(doc="what people and the model call the repository")
    path: Path = setting(doc="a local clone or a bare repository, absolute or relative to the config file")
    branch: str = setting("main", "the branch whose commits are read", check=_checked)
    paths: tuple[str, ...] = setting(
        (), "only commits touching these; then each commit lists its files", check=_checked
    )

    def __post_init__(self) -> None:
        check_branch(self.branch)
        for p in self.paths:
            check_path(p)

    @property
    def target(self) -> str:
        return f"{self.name} ({self.branch})"


def check_branch(branch: str) -> str:
    """A branch name as `git check-ref-format --branch` would take it, never one that reads as an option."""
    if (
        not _BRANCH.fullmatch(branch)
        or ".." in branch
        or "//" in branch
        or branch.endswith(("/", ".", ".lock"))
        or "/." in branch
    ):
        raise ValueError(
            f"branch {branch!r} is not a branch name (letters, digits, '.', '_', '-', '/'; not starting with '-')"
        )
    return branch


def check_path(path: str) -> str:
    """A path inside the repository: relative, no NUL, no `..`, not an option."""
    parts = path.split("/")
    if not path or path.startswith(("-", "/")) or "\0" in path or ".." in parts:
        raise ValueError(f"path {path!r} must be relative to the repository, without '..', not starting with '-'")
    return path


def _home() -> str:
    if not _HOME:
        _HOME.append(tempfile.mkdtemp(prefix="opsloop-git-home-"))  # ours alone (0700): no one can plant a config
    return _HOME[0]


# Read after the repository's own config, so these win over it.
_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "credential.helper=",
    "maintenance.auto=false",
    "gc.auto=0",
    "log.showSignature=false",
    "core.quotePath=false",
)


def git_env() -> dict[str, str]:
    """The whole environment git runs with: nothing of the host's or the user's git config, no prompts, no
    fetch, no transport, no ssh or proxy command."""
    home = _home()
    return {
        "GIT_NO_LAZY_FETCH": "1",
        "GIT_ALLOW_PROTOCOL": "",  # an allow-list that names no protocol: every transport refused
        "GIT_SSH_COMMAND": "false",
        "GIT_PROXY_COMMAND": "",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "XDG_CONFIG_HOME": home,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_SYSTEM": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_PAGER": "cat",
        "PAGER": "cat",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_ASKPASS": "/bin/false",
        "SSH_ASKPASS": "/bin/false",
        "LC_ALL": "C",
        "TZ": "UTC",
    }


def _iso(at: datetime) -> str:
    if at.tzinfo is None:
        raise ValueError("the window's ends must carry a time zone")
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _git(repo: GitRepo) -> list[str]:
    """git and its options for reading `repo`, before the subcommand."""
    path = str(repo.path.resolve())  # safe.directory compares the real path
    config = [arg for setting in (f"safe.directory={path}", *_CONFIG) for arg in ("-c", setting)]
    return [GIT, "--no-pager", "--literal-pathspecs", "-C", path, *config]


def log_argv(
    repo: GitRepo, since: datetime, until: datetime, *, max_commits: int = MAX_COMMITS, files: bool = True
) -> list[str]:
    """The `git log` command line (argv) for `repo`'s branch in [since, until]; with `paths`, each commit's
    files too unless `files` is False."""
    argv = [
        *_git(repo),
        "log",
        f"--since={_iso(since)}",
        f"--until={_iso(until)}",
        f"--max-count={int(max_commits)}",
        f"--format={_FORMAT}",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--no-mailmap",
    ]
    if repo.paths and files:
        argv.append("--name-only")
    return [*argv, "--end-of-options", check_branch(repo.branch), "--", *repo.paths]


async def _run(argv: list[str], *, timeout_s: float, max_bytes: int) -> tuple[int, bytes, bytes, bool]:
    """Run argv (git); (exit status, stdout up to max_bytes, stderr head, cut). Killed at the timeout or past
    max_bytes; GitError when git is not installed."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=git_env(),
            cwd=_home(),
        )
    except FileNotFoundError:
        raise GitError("the git command is not installed") from None
    assert proc.stdout is not None and proc.stderr is not None
    out = bytearray()
    cut = False

    async def read() -> bytes:
        nonlocal cut
        assert proc.stdout is not None and proc.stderr is not None
        while chunk := await proc.stdout.read(1 << 16):
            out.extend(chunk)
            if len(out) > max_bytes:
                cut = True
                proc.kill()
                break
        return await proc.stderr.read(4096)

    try:
        err = await asyncio.wait_for(read(), timeout_s)
        status = await asyncio.wait_for(proc.wait(), timeout_s)
    except TimeoutError:
        raise GitError(f"git gave no answer within {timeout_s:g}s") from None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    return status, bytes(out[:max_bytes]), err, cut


def parse_log(text: str, repo: GitRepo, *, complete: bool = True) -> list[Change]:
    """`git log --format=_FORMAT [--name-only]` output as Changes; a record that does not parse is skipped.

    With `complete` False (the output was cut) the last record is dropped: its file list may be short."""
    records = text.split(_RECORD)[1:]
    if not complete and records:
        records = records[:-1]
    changes = []
    for record in records:
        head, _, rest = record.partition("\n")
        fields = head.split("\0")
        if len(fields) != 4 or not _SHA.fullmatch(fields[0]):
            continue
        sha, author, when, subject = fields
        author, subject = author.rstrip(" "), subject.rstrip(" ")
        try:
            at = datetime.fromisoformat(when)
        except ValueError:
            continue
        if at.tzinfo is None:
            continue
        what = f"commit by {author}: {subject}"
        if repo.paths:
            files = [f for f in rest.splitlines() if f.strip()]
            what += f" (files: {some_names(files, FILES_SHOWN)})" if files else ""
        changes.append(Change(at=at, source="git", target=repo.target, what=what, ref=sha))
    return changes


def _why(status: int, err: bytes, repo: GitRepo) -> str:
    text = err.decode("utf-8", "replace").strip()
    lines = [line for line in text.splitlines() if not line.startswith("warning: ")]
    first = lines[0] if lines else f"git exited with {status}"
    if "unknown revision" in text or "bad revision" in text or "ambiguous argument" in text:
        return f"no branch {repo.branch!r} in {repo.path}"
    if "not a git repository" in text:
        return f"{repo.path} is not a git repository"
    if "promisor remote" in text:
        return f"{repo.path} is a partial clone without objects this answer needs, and opsloop never fetches"
    return first.removeprefix("fatal: ")[:300]


async def _log(
    repo: GitRepo, since: datetime, until: datetime, *, files: bool, max_commits: int, timeout_s: float, max_bytes: int
) -> tuple[list[Change], bool]:
    """One `git log`: its commits in git's order, and whether its output passed max_bytes (then its last,
    perhaps partial, commit is dropped)."""
    argv = log_argv(repo, since, until, max_commits=max_commits, files=files)
    status, out, err, cut = await _run(argv, timeout_s=timeout_s, max_bytes=max_bytes)
    if status != 0 and not cut:
        raise GitError(_why(status, err, repo))
    return parse_log(out.decode("utf-8", "replace"), repo, complete=not cut), cut


async def git_changes(
    repo: GitRepo,
    since: datetime,
    until: datetime,
    *,
    max_commits: int = MAX_COMMITS,
    timeout_s: float = TIMEOUT_S,
    max_bytes: int = MAX_BYTES,
) -> list[Change] | Cut:
    """The commits on `repo.branch` whose committer date is in [since, until], newest first, a Cut saying what
    is missing when not all of them fit; GitError if the repository cannot be read."""
    if not repo.path.exists():
        raise GitError(f"no repository at {repo.path}")
    read = functools.partial(  # one more than shown, to know when there are more
        _log, repo, since, until, max_commits=max_commits + 1, timeout_s=timeout_s, max_bytes=max_bytes
    )
    changes, cut = await read(files=True)
    missing = []
    size = f"{max_bytes // 1024} KiB" if max_bytes >= 1024 else f"{max_bytes} bytes"
    if cut and repo.paths:  # the file lists did not fit: every commit again, without them
        with_files = {c.ref: c for c in changes}
        changes, cut = await read(files=False)
        bare = [c for c in changes if c.ref not in with_files]
        changes = [with_files.get(c.ref) or replace(c, what=f"{c.what} (files not listed)") for c in changes]
        missing.append(f"the file lists passed {size}, {len(bare)} commits are listed without them")
    if cut:
        missing.append(f"the output passed {size}, commits older than the {len(changes)} listed are not")
    if len(changes) > max_commits:
        changes = changes[:max_commits]
        missing.append(
            f"more than {max_commits} commits in the window, the last {max_commits} on the branch are listed"
        )
    changes.sort(key=lambda c: c.at, reverse=True)  # git lists by the graph; a timeline reads by date
    return Cut(changes, "; ".join(missing)) if missing else changes


SHOW_BYTES = 256 * 1024  # git show's output read; the answer is cut far shorter (DIFF_CHARS)
DIFF_CHARS = 10_000  # the patch shown after the header and the --stat
STAT_WIDTH = "--stat=160,120,200"  # the --stat lines' width, names' width, and at most 200 files listed


async def git_show(repo: GitRepo, sha: str, *, timeout_s: float = TIMEOUT_S, limit: int = DIFF_CHARS) -> str:
    """One commit on `repo.branch`: its header, `git show --stat` and its patch, within `repo.paths` when set,
    the patch cut at `limit` characters saying how much was left out. GitError if the commit is not on the
    branch or the repository cannot be read; as git_changes, never a fetch."""
    if not _SHA.fullmatch(sha):
        raise GitError(f"{sha!r} is not a commit id (4 to 40 hexadecimal digits, as recent_changes lists it)")
    if not repo.path.exists():
        raise GitError(f"no repository at {repo.path}")
    branch = check_branch(repo.branch)
    status, out, err, _ = await _run(
        [*_git(repo), "rev-parse", "--verify", "--quiet", "--end-of-options", f"{sha}^{{commit}}"],
        timeout_s=timeout_s,
        max_bytes=4096,
    )
    full = out.decode().strip()
    if status != 0 or not full:
        raise GitError(f"no commit {sha} in {repo.name}")
    status, _, err, _ = await _run(
        [*_git(repo), "merge-base", "--is-ancestor", "--end-of-options", full, branch],
        timeout_s=timeout_s,
        max_bytes=4096,
    )
    if status == 1:
        raise GitError(f"commit {sha} is not on {repo.target}: change_diff reads the configured branch only")
    if status != 0:
        raise GitError(_why(status, err, repo))
    argv = [
        *_git(repo),
        "show",
        "--format=commit %H%nauthor %an%ncommitted %cI%n%n%B",
        STAT_WIDTH,
        "--patch",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--no-mailmap",
        "--end-of-options",
        full,
        "--",
        *repo.paths,
    ]
    status, out, err, cut = await _run(argv, timeout_s=timeout_s, max_bytes=SHOW_BYTES)
    if status != 0 and not cut:
        raise GitError(_why(status, err, repo))
    text = out.decode("utf-8", "replace")
    head, sep, patch = text.partition("\ndiff --git ")
    within = f" within {', '.join(repo.paths)}" if repo.paths else ""
    if not sep:
        return f"{head.rstrip()}\n\n(no changes{within} in this commit)"
    patch = "diff --git " + patch
    over = len(patch) - limit
    if over <= 0 and not cut:
        return f"{head.rstrip()}\n\n{patch.rstrip()}"
    kept = patch[:limit].rsplit("\n", 1)[0] if over > 0 else patch
    left = f"{over:,} more characters" if not cut else f"the rest past {SHOW_BYTES // 1024} KiB of git's output"
    return (
        f"{head.rstrip()}\n\n{kept.rstrip()}\n… [patch cut at {limit:,} characters: {left} not shown; the --stat "
        "above lists every file]"
    )
