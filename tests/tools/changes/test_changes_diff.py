"""ConfigMap key changes in recent_changes (keyed hashes in the store, never a value) and change_diff's three
details: a commit's patch (the real git), a revision's pod template diff and a ConfigMap's keys (the fake
kube-apiserver through the real client), on both store backends."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.store import Ledger, Store
from tests.support.fakes.kube import FakeKube, deployment, replicaset
from tests.tools.changes.test_changes_git import commit, git
from tests.tools.changes.test_changes_k8s import NS, ago, client, configmap, ts, world  # noqa: F401  (client: a fixture)
from tools.changes.git import DIFF_CHARS, GitError, GitRepo, git_show
from tools.changes.k8s import KeyMemory, configmap_detail, namespace_changes, revision_diff
from tools.changes.model import Cut
from tools.k8s.clusters import KubeClient
from tools.reaches import TABLES

SECRET = b"install-secret-0123456789abcdef!"
VALUES = {"DB_URL": "postgres://app:pw-9f8e7d@db:5432/app", "POOL_SIZE": "10", "FEATURE_X": "true"}


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    s = await Store(db_url, tables=TABLES).open()
    yield s
    await s.close()


def renamed(kube: FakeKube, manager: str = "kubectl-edit") -> None:
    """DB_URL renamed DATABASE_URL and POOL_SIZE raised, by `manager`, now."""
    kube.touch(
        "ConfigMap",
        NS,
        "api-config",
        {
            "data": {"DB_URL": None, "DATABASE_URL": VALUES["DB_URL"], "POOL_SIZE": "20"},
            "metadata": {
                "managedFields": [
                    {
                        "manager": manager,
                        "operation": "Update",
                        "apiVersion": "v1",
                        "time": ts(ago(0)),
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:data": {"f:DATABASE_URL": {}, "f:POOL_SIZE": {}}},
                    }
                ]
            },
        },
    )


async def configmap_line(client: KubeClient, memory: KeyMemory | None) -> str:  # noqa: F811
    changes = await namespace_changes(client, NS, ago(120), ago(-1), memory=memory)
    assert not isinstance(changes, Cut)
    (line,) = [c.what for c in changes if c.target.endswith("configmap/api-config")]
    return line


async def test_a_configmap_change_names_the_keys_added_removed_and_changed_never_a_value(
    fake_kube: FakeKube,
    client: KubeClient,  # noqa: F811
    store: Store,
    db_url: str,
) -> None:
    fake_kube.add(configmap("api-config", created_min=600, writes=[("helm", 30)], data=dict(VALUES)))
    memory = KeyMemory(store, SECRET)
    first = await configmap_line(client, memory)
    assert first == "configmap changed by helm (Update): earlier keys unknown (opsloop had not read it before)"
    renamed(fake_kube)
    second = await configmap_line(client, memory)
    assert second.startswith(
        "configmap changed by kubectl-edit (Update): key DB_URL removed, key DATABASE_URL added, "
        "key POOL_SIZE changed since opsloop read it at "
    )
    assert await configmap_line(client, memory) == second  # read again: the same change, not "nothing changed"
    ledger = Ledger(db_url, TABLES)
    try:
        rows = ledger._select("SELECT * FROM configmap_keys", [])
    finally:
        ledger.close()
    stored = json.dumps(rows, default=str)
    assert "pw-9f8e7d" not in stored and '"10"' not in stored and '"20"' not in stored
    assert hashlib.sha256(b"true").hexdigest()[:32] not in stored  # a keyed hash: "true" is not guessable
    assert set(json.loads(rows[0]["hashes"])) == {"DATABASE_URL", "POOL_SIZE", "FEATURE_X"}
    cm = next(r for r in fake_kube.requests if r.path.endswith("/configmaps"))
    assert "PartialObjectMetadata" not in cm.headers.get("Accept", "")  # read whole, to hash

    detail = await configmap_detail(client, NS, "api-config", memory)
    assert "data keys now (3): DATABASE_URL, FEATURE_X, POOL_SIZE" in detail
    assert "key changes: key DB_URL removed, key DATABASE_URL added, key POOL_SIZE changed since" in detail
    assert "- kubectl-edit Update at " in detail and ": keys DATABASE_URL, POOL_SIZE" in detail
    assert "pw-9f8e7d" not in detail and "postgres://" not in detail

    renamed(fake_kube, manager="kubectl-patch")  # the same values again, read under another install's key
    other = await configmap_line(client, KeyMemory(store, b"another-secret-0123456789abcdef!"))
    assert "no data key added, removed or changed (values not compared: the hash key changed since)" in other


async def test_without_a_store_a_configmap_names_the_keys_its_writer_set_from_metadata_only(
    fake_kube: FakeKube,
    client: KubeClient,  # noqa: F811
) -> None:
    fake_kube.add(configmap("api-config", created_min=600, writes=[("helm", 30)], data=dict(VALUES)))
    renamed(fake_kube)
    assert (
        await configmap_line(client, None)
        == "configmap changed by kubectl-edit (Update): keys it set: DATABASE_URL, POOL_SIZE"
    )
    assert all(
        "PartialObjectMetadataList" in r.headers.get("Accept", "")
        for r in fake_kube.requests
        if r.path.endswith("/configmaps")
    )


async def test_a_revision_diff_is_the_pod_template_against_the_revision_before(
    fake_kube: FakeKube,
    client: KubeClient,  # noqa: F811
) -> None:
    world(fake_kube)  # api: revisions 1 (api:1.40), 2 (api:1.41), 3 (api:1.42); statefulset db: 1, 2
    by_revision = {
        r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: r["metadata"]["name"]
        for r in fake_kube.objects("ReplicaSet", NS)
    }
    out = await revision_diff(client, NS, "deployment/api", f"replicaset/{by_revision['3']}")
    assert out.splitlines() == [
        f"prod/web deployment/api revision 3 (replicaset/{by_revision['3']}) against revision 2 "
        f"(replicaset/{by_revision['2']}):",
        "spec.template.spec.containers[app].image: api:1.41 → api:1.42",
    ]
    first = await revision_diff(client, NS, "deployment/api", f"replicaset/{by_revision['1']}")
    assert first.endswith("no earlier revision is kept to compare with; its images: api:1.40")
    sts = await revision_diff(client, NS, "statefulset/db", "controllerrevision/db-2abc")
    assert sts.splitlines()[1] == "spec.template.spec.containers[app].image: postgres:16.1 → postgres:16.2"
    with pytest.raises(Exception, match="is a revision of deployment/api, not of deployment/web"):
        await revision_diff(client, NS, "deployment/web", f"replicaset/{by_revision['3']}")
    with pytest.raises(Exception, match="names no revision"):
        await revision_diff(client, NS, "deployment/api", "pod/x")


async def test_an_env_change_is_named_field_by_field(fake_kube: FakeKube, client: KubeClient) -> None:  # noqa: F811
    dep = fake_kube.add(deployment("worker", NS, image="w:1", revision=1, age_s=600))
    new = replicaset(
        dep, revision=2, containers=[{"name": "app", "image": "w:1", "env": [{"name": "MODE", "value": "fast"}]}]
    )
    fake_kube.add(new)
    out = await revision_diff(client, NS, "deployment/worker", f"replicaset/{new['metadata']['name']}")
    assert "spec.template.spec.containers[app].env[MODE].value: (none) → fast" in out.splitlines()


START = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "deploy-config"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    commit(r, "initial layout", START - timedelta(days=3), {"README": "hi", "k8s/api.yaml": "pool: 10\n"})
    commit(r, "pool up, docs", START - timedelta(minutes=12), {"k8s/api.yaml": "pool: 50\n", "docs/x.md": "doc\n"})
    git(r, "checkout", "-q", "-b", "feature")
    commit(r, "on another branch", START - timedelta(minutes=5), {"k8s/feature.yaml": "f\n"})
    git(r, "checkout", "-q", "main")
    return r


@pytest.mark.processes  # the real git
async def test_a_commit_diff_within_paths_on_the_configured_branch_only(repo: Path) -> None:
    sha = git(repo, "rev-parse", "--short", "main")
    out = await git_show(GitRepo("deploy-config", repo, paths=("k8s",)), sha)
    assert out.startswith(f"commit {git(repo, 'rev-parse', 'main')}\nauthor alice\n")
    assert "pool up, docs" in out and "k8s/api.yaml | 2 +-" in out and "-pool: 10\n+pool: 50" in out
    assert "docs/x.md" not in out  # outside the configured paths
    whole = await git_show(GitRepo("deploy-config", repo), sha)
    assert "docs/x.md" in whole and "+doc" in whole
    with pytest.raises(GitError, match="is not on deploy-config \\(main\\)"):
        await git_show(GitRepo("deploy-config", repo), git(repo, "rev-parse", "--short", "feature"))
    with pytest.raises(GitError, match="no commit abcdef1 in deploy-config"):
        await git_show(GitRepo("deploy-config", repo), "abcdef1")
    with pytest.raises(GitError, match="is not a commit id"):
        await git_show(GitRepo("deploy-config", repo), "--output=/tmp/x")


@pytest.mark.processes  # the real git
async def test_a_long_patch_is_cut_saying_how_much_was_left_out(repo: Path) -> None:
    big = "".join(f"line {i} of a generated manifest\n" for i in range(2000))
    sha = commit(repo, "regenerate manifests", START - timedelta(minutes=1), {"k8s/big.yaml": big})
    out = await git_show(GitRepo("deploy-config", repo, paths=("k8s",)), sha)
    assert "k8s/big.yaml | 2000 +" in out  # the --stat is whole
    assert f"[patch cut at {DIFF_CHARS:,} characters: " in out and "more characters not shown" in out
    assert len(out) < DIFF_CHARS + 1000 and "line 1999 of" not in out
