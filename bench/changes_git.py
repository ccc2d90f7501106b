"""How long tools/changes/git.py takes on a 10,000-commit repository (not a test; `python -m bench.changes_git`).

The repository is made with `git fast-import` (one commit a minute, each touching one of 50 files under
k8s/ or docs/), then each query runs 20 times through git_changes, the way recent_changes will call it.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tools.changes.git import GitRepo, git_changes, git_env
from tools.changes.model import Cut

COMMITS = 10_000
RUNS = 20
FIRST = datetime(2026, 11, 25, 0, 0, tzinfo=UTC)


def make_repo(path: Path, first: datetime = FIRST) -> datetime:
    """A bare repository with COMMITS commits one minute apart on main from `first`; the last commit's time."""
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], env=git_env(), check=True)
    lines: list[str] = []
    for i in range(COMMITS):
        when = int((first + timedelta(minutes=i)).timestamp())
        name = f"{'k8s' if i % 2 else 'docs'}/file{i % 50}.yaml"
        content = f"revision: {i}\n"
        message = f"change {i}: bump {name}\n"
        lines += [
            "commit refs/heads/main",
            f"mark :{i + 1}",
            f"author alice <alice@example.com> {when} +0000",
            f"committer ci <ci@example.com> {when} +0000",
            f"data {len(message)}",
            message.rstrip("\n"),
            *([f"from :{i}"] if i else []),
            f"M 100644 inline {name}",
            f"data {len(content)}",
            content.rstrip("\n"),
            "",
        ]
    subprocess.run(
        ["git", "-C", str(path), "fast-import", "--quiet"],
        input="\n".join(lines) + "\n",
        text=True,
        env=git_env(),
        check=True,
    )
    return first + timedelta(minutes=COMMITS - 1)


async def timed(repo: GitRepo, since: datetime, until: datetime, max_commits: int) -> tuple[float, int]:
    times, found = [], 0
    for _ in range(RUNS):
        start = time.perf_counter()
        answer = await git_changes(repo, since, until, max_commits=max_commits, max_bytes=64 * 2**20)
        found = len(answer.changes if isinstance(answer, Cut) else answer)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), found


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "deploy-config.git"
        start = time.perf_counter()
        last = make_repo(path)
        print(f"made {COMMITS:,} commits in {time.perf_counter() - start:.1f}s")
        cases = [
            ("2-hour window at the tip", GitRepo(name="d", path=path), last - timedelta(hours=2), 200),
            (
                "2-hour window, paths=k8s/",
                GitRepo(name="d", path=path, paths=("k8s/",)),
                last - timedelta(hours=2),
                200,
            ),
            ("2-hour window 5 days back", GitRepo(name="d", path=path), last - timedelta(days=5), 200),
            ("all 10,000 commits", GitRepo(name="d", path=path), FIRST, COMMITS),
            ("all 10,000 commits, paths=k8s/", GitRepo(name="d", path=path, paths=("k8s/",)), FIRST, COMMITS),
        ]
        for label, repo, since, limit in cases:
            until = since + timedelta(hours=2) if "back" in label else last
            ms, found = await timed(repo, since, until, limit)
            print(f"{label:34} {found:6,} commits  median {ms:7.1f} ms over {RUNS} runs")


if __name__ == "__main__":
    asyncio.run(main())
