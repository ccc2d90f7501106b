"""End to end, hostile repositories: a git repository opsloop is pointed at cannot make it run a program or fetch
(its own config plants one for every way git has), and a timeline that git's output limit cut says so and
still lists every commit of the window."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import bot_env, result_text, tool_results
from tests.tools.changes.test_changes_git import commit, git, huge_commit, plain_env
from tests.tools.changes.test_changes_git_isolation import (
    FETCH_WAYS,
    http_url,
    origin,
    plain_log,
    plant_fetch,
    planted,
    treeless,
)

pytestmark = pytest.mark.processes  # the real git

__all__ = ["http_url", "origin"]  # fixtures


def git_sources(repos: dict[str, Path]) -> str:
    return "".join(
        f'[[changes.git]]\nname = "{name}"\npath = {json.dumps(str(path))}\npaths = ["k8s/"]\n\n'
        for name, path in repos.items()
    )


async def timeline_of(tmp_path: Path, slack: FakeSlack, anthropic: FakeAnthropic, config: str) -> str:
    """recent_changes as the model calls it in a run: the tool result it receives."""
    anthropic.script(
        reply(text("Checking what changed."), tool_use("recent_changes", {})),
        reply(text("Done.")),
    )
    async with bot_env(tmp_path, slack, anthropic, f"[changes]\nwindow_minutes = 60\n\n{config}") as env:
        channel, ts = await env.mention("what changed in the last hour?")
        await env.wait_final(channel, ts, timeout=60)
        (result,) = tool_results((await env.requests(2))[1])
    anthropic.assert_complete()
    return result_text(result)


async def test_a_repository_s_own_config_runs_no_program_and_fetches_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, origin: Path, http_url: str
) -> None:
    repos, markers = {}, []
    for way in FETCH_WAYS:
        program, marker = planted(tmp_path, way)
        proof = treeless(origin, tmp_path / f"{way}-proof")
        plant_fetch(proof, way, program, http_url)
        plain_log(proof)
        assert marker.exists(), way  # a plain git log runs it on this machine
        marker.unlink()
        repos[way] = treeless(origin, tmp_path / way)
        plant_fetch(repos[way], way, program, http_url)
        markers.append(marker)
    full = tmp_path / "full"
    git(tmp_path, "clone", "-q", f"file://{origin}", str(full))

    shown = await timeline_of(tmp_path, fake_slack, fake_anthropic, git_sources({**repos, "full": full}))
    assert [m for m in markers if m.exists()] == []
    for way, path in repos.items():
        assert (
            f"could not read git {way} (main): {path} is a partial clone without objects this answer needs, "
            "and opsloop never fetches"
        ) in shown.splitlines()
    assert "git · full (main) · commit by alice: change 2 (files: k8s/f2.yaml)" in shown


def many_files_commit(repo: Path, subject: str, at: datetime, count: int) -> None:
    """One commit on main adding `count` files under k8s/generated/ (written with fast-import: no work tree)."""
    stamp = f"{int(at.timestamp())} +0000"
    lines = [
        "blob",
        "mark :1",
        "data 2",
        "x",
        "commit refs/heads/main",
        f"author alice <alice@example.com> {stamp}",
        f"committer ci <ci@example.com> {stamp}",
        f"data {len(subject)}",
        subject,
        "from refs/heads/main^0",
        *(f"M 100644 :1 k8s/generated/service-configuration-{i:05}.yaml" for i in range(count)),
        "",
    ]
    subprocess.run(
        ["git", "-C", str(repo), "fast-import", "--quiet"],
        input="\n".join(lines).encode(),
        env=plain_env(),
        check=True,
    )
    git(repo, "reset", "-q", "--hard", "main")


async def test_a_cut_timeline_says_so_and_lists_every_commit_of_the_window(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    now = datetime.now(UTC)
    repo = tmp_path / "deploy-config"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "lower pool size to 10", now - timedelta(minutes=20), {"k8s/api.yaml": "pool: 10"})
    many_files_commit(repo, "generate manifests", now - timedelta(minutes=10), 12_000)  # ~560 KB of names
    (repo / "k8s").mkdir(exist_ok=True)
    huge_commit(repo, now - timedelta(minutes=5), path="k8s/notes.yaml")  # a 600 KB subject

    shown = await timeline_of(tmp_path, fake_slack, fake_anthropic, git_sources({"deploy-config": repo}))
    handle, head, covered, *lines, cut = shown.splitlines()
    assert handle == "#1 recent_changes"  # no arguments: no main one
    assert head.startswith("3 changes, newest first")
    assert covered.startswith("window: ") and covered.endswith(
        "sources read: git deploy-config (main), webhook stored events"
    ), covered
    assert [line.split(" · ")[2:5] for line in lines] == [
        ["git", "deploy-config (main)", f"commit by alice: {'x' * 282}…"],  # capped by git, then by the timeline
        ["git", "deploy-config (main)", "commit by alice: generate manifests (files not listed)"],
        ["git", "deploy-config (main)", "commit by alice: lower pool size to 10 (files not listed)"],
    ]
    assert cut == "git deploy-config (main) was cut: the file lists passed 512 KiB, 2 commits are listed without them"
