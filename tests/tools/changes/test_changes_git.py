"""tools/changes/git.py with the real git, on repositories these tests create: dated commits inside and outside
the window, another branch, a bare clone, paths, hostile subjects, a missing repository."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tools.changes.git import GitError, GitRepo, check_branch, git_changes, git_env, log_argv
from tools.changes.model import FIELD_MAX, Cut, SourceFailure, timeline

pytestmark = pytest.mark.processes  # every test runs the real git

START = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
SINCE, UNTIL = START - timedelta(hours=2), START + timedelta(minutes=30)


def plain_env() -> dict[str, str]:
    """A plain git's environment: no host or user config, but nothing of opsloop's defences either."""
    home = git_env()["HOME"]
    return {"PATH": os.environ["PATH"], "HOME": home, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def git(repo: Path, *args: str, at: datetime | None = None, author_at: datetime | None = None) -> str:
    env = {
        **plain_env(),
        "GIT_AUTHOR_NAME": "alice",
        "GIT_AUTHOR_EMAIL": "alice@example.com",
        "GIT_COMMITTER_NAME": "ci",
        "GIT_COMMITTER_EMAIL": "ci@example.com",
    }
    if at is not None:
        env["GIT_COMMITTER_DATE"] = at.isoformat()
        env["GIT_AUTHOR_DATE"] = (author_at or at).isoformat()
    done = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(
    repo: Path, subject: str, at: datetime, files: dict[str, str] | None = None, author_at: datetime | None = None
) -> str:
    for name, content in (files or {"notes.txt": subject}).items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(content)
        git(repo, "add", name)
    git(repo, "commit", "-q", "-m", subject, at=at, author_at=author_at)
    return git(repo, "rev-parse", "--short", "HEAD")


def huge_commit(repo: Path, at: datetime, path: str = "notes.txt") -> None:
    """A commit whose message is one 600 KB line (its subject), touching `path`."""
    (repo / path).write_text("huge")
    (repo.parent / "message").write_text("x" * 600_000)
    git(repo, "add", path)
    git(repo, "commit", "-q", "-F", str(repo.parent / "message"), at=at)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "deploy-config"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    commit(r, "initial layout", START - timedelta(days=3), {"README": "hi"})
    commit(r, "lower pool size to 10", START - timedelta(minutes=12), {"k8s/api.yaml": "pool: 10"})
    commit(r, "terraform: bigger disk", START - timedelta(minutes=40), {"terraform/disk.tf": "size = 200"})
    commit(r, "docs only", START - timedelta(minutes=30), {"docs/x.md": "x"})
    commit(r, "hotfix after the alert", START + timedelta(minutes=3), {"k8s/api.yaml": "pool: 50"})
    commit(r, "tomorrow's change", START + timedelta(days=1), {"k8s/api.yaml": "pool: 60"})
    git(r, "checkout", "-q", "-b", "feature")
    commit(r, "on another branch", START - timedelta(minutes=5), {"k8s/feature.yaml": "f"})
    git(r, "checkout", "-q", "main")
    return r


def subjects(changes: list) -> list[str]:
    return [c.what for c in changes]


async def test_commits_on_the_branch_in_the_window_newest_first(repo: Path) -> None:
    changes = await git_changes(GitRepo(name="deploy-config", path=repo, branch="main"), SINCE, UNTIL)
    assert subjects(changes) == [
        "commit by alice: hotfix after the alert",
        "commit by alice: lower pool size to 10",
        "commit by alice: docs only",
        "commit by alice: terraform: bigger disk",
    ]  # by date
    assert {c.source for c in changes} == {"git"} and {c.target for c in changes} == {"deploy-config (main)"}
    assert changes[1].at == START - timedelta(minutes=12)
    assert changes[1].ref == git(repo, "rev-parse", "--short", "main~4")


async def test_another_branch_has_its_own_commits(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "release", "main~3")
    commit(repo, "release only", START - timedelta(minutes=7), {"k8s/r.yaml": "r"})
    git(repo, "checkout", "-q", "main")
    feature = await git_changes(GitRepo(name="deploy-config", path=repo, branch="feature"), SINCE, UNTIL)
    release = await git_changes(GitRepo(name="deploy-config", path=repo, branch="release"), SINCE, UNTIL)
    main = await git_changes(GitRepo(name="deploy-config", path=repo, branch="main"), SINCE, UNTIL)
    assert "commit by alice: on another branch" in subjects(feature)
    assert subjects(release) == [
        "commit by alice: release only",
        "commit by alice: lower pool size to 10",
        "commit by alice: terraform: bigger disk",
    ]
    assert not {"commit by alice: on another branch", "commit by alice: release only"} & set(subjects(main))


async def test_the_window_compares_committer_dates_not_author_dates(repo: Path) -> None:
    # git stops walking at commits older than --since, so the older committer date goes first (as it would)
    commit(repo, "written now, committed last week", START - timedelta(days=7), author_at=START)
    commit(repo, "written last week, landed now", START - timedelta(minutes=1), author_at=START - timedelta(days=7))
    changes = await git_changes(GitRepo(name="d", path=repo), SINCE, UNTIL)
    assert "commit by alice: written last week, landed now" in subjects(changes)
    assert "commit by alice: written now, committed last week" not in subjects(changes)


async def test_a_bare_clone_answers_the_same(repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    git(repo, "clone", "-q", "--bare", str(repo), str(bare))
    clone = await git_changes(GitRepo(name="d", path=repo), SINCE, UNTIL)
    from_bare = await git_changes(GitRepo(name="d", path=bare), SINCE, UNTIL)
    assert from_bare == clone and len(clone) == 4


async def test_paths_keep_only_commits_touching_them_and_list_their_files(repo: Path) -> None:
    changes = await git_changes(GitRepo(name="d", path=repo, paths=("k8s/", "terraform/")), SINCE, UNTIL)
    assert subjects(changes) == [
        "commit by alice: hotfix after the alert (files: k8s/api.yaml)",
        "commit by alice: lower pool size to 10 (files: k8s/api.yaml)",
        "commit by alice: terraform: bigger disk (files: terraform/disk.tf)",
    ]


async def test_many_files_are_counted_not_all_listed(repo: Path) -> None:
    commit(repo, "many", START - timedelta(minutes=2), {f"k8s/f{i}.yaml": "x" for i in range(8)})
    changes = await git_changes(GitRepo(name="d", path=repo, paths=("k8s",)), SINCE, UNTIL)
    assert changes[1].what.endswith(
        "(files: k8s/f0.yaml, k8s/f1.yaml, k8s/f2.yaml, k8s/f3.yaml, k8s/f4.yaml and 3 more)"
    )


async def test_max_commits_bounds_what_is_read_and_says_so(repo: Path) -> None:
    cut = await git_changes(GitRepo(name="d", path=repo), SINCE, UNTIL, max_commits=2)
    assert isinstance(cut, Cut) and subjects(cut.changes) == [  # the last two on the branch
        "commit by alice: hotfix after the alert",
        "commit by alice: docs only",
    ]
    assert cut.why == "more than 2 commits in the window, the last 2 on the branch are listed"
    assert len(await git_changes(GitRepo(name="d", path=repo), SINCE, UNTIL, max_commits=4)) == 4  # exactly: whole


async def test_output_past_max_bytes_is_cut_at_a_whole_commit_and_says_so(repo: Path) -> None:
    cut = await git_changes(GitRepo(name="d", path=repo), SINCE, UNTIL, max_bytes=600)
    assert isinstance(cut, Cut) and 0 < len(cut.changes) < 4
    assert all(c.what.startswith("commit by alice: ") for c in cut.changes)
    assert cut.why == f"the output passed 600 bytes, commits older than the {len(cut.changes)} listed are not"


async def test_a_huge_message_is_capped_by_git_and_hides_nothing(repo: Path) -> None:
    huge_commit(repo, START - timedelta(minutes=1))
    changes = await git_changes(GitRepo(name="d", path=repo, paths=("k8s/", "notes.txt")), SINCE, UNTIL)
    assert isinstance(changes, list) and len(changes) == 3
    assert changes[1].what == f"commit by alice: {'x' * (FIELD_MAX - 2)}.. (files: notes.txt)"


async def test_file_lists_past_max_bytes_leave_every_commit_listed(repo: Path) -> None:
    commit(repo, "generate", START - timedelta(minutes=2), {f"k8s/generated/f{i:03}.yaml": "x" for i in range(300)})
    commit(repo, "tidy", START - timedelta(minutes=1), {"k8s/tidy.yaml": "x"})
    cut = await git_changes(GitRepo(name="d", path=repo, paths=("k8s/", "terraform/")), SINCE, UNTIL, max_bytes=4096)
    assert isinstance(cut, Cut) and subjects(cut.changes) == [
        "commit by alice: hotfix after the alert (files not listed)",
        "commit by alice: tidy (files: k8s/tidy.yaml)",  # before the big one in git's order: its files fit
        "commit by alice: generate (files not listed)",
        "commit by alice: lower pool size to 10 (files not listed)",
        "commit by alice: terraform: bigger disk (files not listed)",
    ]
    assert cut.why == "the file lists passed 4 KiB, 4 commits are listed without them"


async def test_a_hostile_subject_is_redacted_and_neutralised_in_the_timeline(repo: Path) -> None:
    token = "xoxb-123456789012-1234567890123-" + "a" * 24
    commit(repo, f"<!channel> rotate {token} \u202eevil", START - timedelta(minutes=1))
    changes = await git_changes(GitRepo(name="d", path=repo), SINCE, UNTIL)
    text = timeline(changes, [], anchor=START, now=UNTIL)
    line = next(line for line in text.splitlines() if "rotate" in line)
    assert token not in text and "<!channel>" not in text
    assert "&lt;!channel&gt;" in line and "\u27e8U+202E\u27e9" in line and "\u202e" not in line
    assert line.startswith("2026-12-02 13:59 UTC · 1 min before · git · d (main) · commit by alice: ")


async def test_a_missing_repository_is_one_failure_line(tmp_path: Path) -> None:
    with pytest.raises(GitError) as e:
        await git_changes(GitRepo(name="gone", path=tmp_path / "nope"), SINCE, UNTIL)
    text = timeline([], [SourceFailure("git", "gone (main)", str(e.value))], anchor=START, now=UNTIL)
    assert text.splitlines()[1:] == [f"could not read git gone (main): no repository at {tmp_path / 'nope'}"]


async def test_a_directory_that_is_not_a_repository_says_so(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="is not a git repository"):
        await git_changes(GitRepo(name="d", path=tmp_path), SINCE, UNTIL)


async def test_an_unknown_branch_says_so(repo: Path) -> None:
    with pytest.raises(GitError, match="no branch 'release' in"):
        await git_changes(GitRepo(name="d", path=repo, branch="release"), SINCE, UNTIL)


@pytest.mark.parametrize("branch", ["-n1", "--output=/tmp/x", "a..b", "main.lock", "a b", "", "ma\0in", "x/"])
def test_a_branch_that_could_read_as_an_option_or_range_is_refused(branch: str) -> None:
    with pytest.raises(ValueError, match="is not a branch name"):
        check_branch(branch)
    with pytest.raises(ValueError, match="is not a branch name"):
        GitRepo(name="d", path=Path("/x"), branch=branch)


@pytest.mark.parametrize("path", ["-p", "/etc", "../x", "a/../../b", ""])
def test_a_path_outside_the_repository_or_like_an_option_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="must be relative to the repository"):
        GitRepo(name="d", path=Path("/x"), paths=(path,))


def test_the_command_is_argv_with_the_revision_after_end_of_options(repo: Path) -> None:
    argv = log_argv(GitRepo(name="d", path=repo, branch="main", paths=("k8s/",)), SINCE, UNTIL)
    assert argv[argv.index("--end-of-options") + 1 :] == ["main", "--", "k8s/"]
    assert f"safe.directory={repo.resolve()}" in argv and "core.fsmonitor=false" in argv
    assert "--since=2026-12-02T12:00:00Z" in argv and "--until=2026-12-02T14:30:00Z" in argv


async def test_the_repository_config_cannot_run_a_program(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    for key in ("core.fsmonitor", "core.pager", "gpg.program", "diff.external"):
        git(repo, "config", key, str(hook))
    git(repo, "config", "log.showSignature", "true")
    changes = await git_changes(GitRepo(name="d", path=repo, paths=("k8s/",)), SINCE, UNTIL)
    assert len(changes) == 2 and not marker.exists()


async def test_the_host_git_config_is_not_read(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[log]\n\tdate = relative\n[format]\n\tpretty = oneline\n")
    monkeypatch.setenv("HOME", str(home))  # the process's HOME; git must not see it
    changes = await git_changes(GitRepo(name="d", path=repo), SINCE, UNTIL)
    assert len(changes) == 4 and os.environ["HOME"] == str(home)
