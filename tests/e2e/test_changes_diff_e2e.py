"""What changed, in detail, through the real app: a ConfigMap's renamed key shows in recent_changes as "key DB_URL
removed" (opsloop read it in an earlier run), and change_diff on a commit of the timeline shows its patch."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import bot_env, result_text, tool_results
from tests.tools.changes.test_changes_diff import VALUES, renamed
from tests.tools.changes.test_changes_git import commit, git
from tests.tools.changes.test_changes_k8s import NS, configmap


@pytest.mark.processes  # the real git
async def test_a_renamed_configmap_key_and_a_commit_diff_reach_the_model(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_kube: FakeKube
) -> None:
    fake_kube.add(configmap("api-config", created_min=600, writes=[("helm", 30)], data=dict(VALUES)))
    repo = tmp_path / "deploy-config"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "initial", datetime.now(UTC) - timedelta(days=2), {"k8s/api.yaml": "db_key: DB_URL\n"})
    sha = commit(
        repo, "rename DB_URL", datetime.now(UTC) - timedelta(minutes=5), {"k8s/api.yaml": "db_key: DATABASE_URL\n"}
    )
    kc = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    config = (
        f'[changes]\n\n[[changes.git]]\nname = "deploy-config"\npath = {json.dumps(str(repo))}\npaths = ["k8s"]\n\n'
        f'[[kubernetes.clusters]]\nname = "prod"\nkubeconfig = {json.dumps(str(kc))}\nnamespaces = ["{NS}"]\n'
    )
    fake_anthropic.script(
        reply(tool_use("recent_changes", {"namespace": NS})),
        reply(text("Nothing stands out yet.")),
    )
    async with bot_env(
        tmp_path, fake_slack, fake_anthropic, config, env_extra={"OPSLOOP_CHANGES_HASH_KEY": "k" * 40}
    ) as env:
        channel, ts = await env.mention("what changed in web?")
        await env.wait_final(channel, ts, timeout=30)
        first = len(fake_anthropic.requests)
        renamed(fake_kube)  # DB_URL renamed DATABASE_URL, by kubectl-edit, now
        fake_anthropic.script(
            reply(tool_use("recent_changes", {"namespace": NS})),
            reply(tool_use("change_diff", {"target": "deploy-config (main)", "ref": sha})),
            reply(tool_use("update_summary", {"summary": "DB_URL was renamed DATABASE_URL"})),
            reply(text("api-config's DB_URL was renamed DATABASE_URL 0 min ago.")),
        )
        channel, ts = await env.mention("api fails to connect to the db, what changed?")
        await env.wait_final(channel, ts, timeout=30)
    timeline = result_text(tool_results(fake_anthropic.requests[first + 1])[0])
    assert (
        "prod/web configmap/api-config · configmap changed by kubectl-edit (Update): key DB_URL removed, " in timeline
    )
    assert "key DATABASE_URL added, key POOL_SIZE changed since opsloop read it at" in timeline
    assert f"commit by alice: rename DB_URL (files: k8s/api.yaml) · {sha}" in timeline
    assert "pw-9f8e7d" not in timeline
    diff = result_text(tool_results(fake_anthropic.requests[first + 2])[0])
    assert "rename DB_URL" in diff and "k8s/api.yaml | 2 +-" in diff
    assert "-db_key: DB_URL\n+db_key: DATABASE_URL" in diff
