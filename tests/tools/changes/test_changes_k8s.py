"""tools/changes/k8s.py against the fake kube-apiserver (proven with kubectl here for what it reads):
Deployment revisions, ControllerRevisions, ConfigMaps by managedFields time, scale events; scope; no Secret."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakes.kube import FakeKube, deployment, event, replicaset, secret, statefulset
from tests.support.test_fake_kube import kubectl  # noqa: F401  (the fixture: real kubectl against the fake)
from tools.api import PermissionDenied, ToolError
from tools.changes import k8s as changes_k8s
from tools.changes.gather import Source, gather
from tools.changes.k8s import namespace_changes, namespaces
from tools.changes.model import Change, Cut, timeline
from tools.k8s.clusters import KubeClient, KubeClusters
from tools.k8s.config import ClusterSpec

NS = "web"


def ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(minutes: float) -> datetime:
    return (datetime.now(UTC) - timedelta(minutes=minutes)).replace(microsecond=0)


def controller_revision(owner: dict[str, Any], revision: int, image: str, minutes_ago: float) -> dict[str, Any]:
    om = owner["metadata"]
    template = copy.deepcopy(owner["spec"]["template"])
    template["spec"]["containers"][0]["image"] = image
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "revision": revision,
        "metadata": {
            "name": f"{om['name']}-{revision}abc",
            "namespace": om["namespace"],
            "creationTimestamp": ts(ago(minutes_ago)),
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": om["name"],
                    "uid": om["uid"],
                    "controller": True,
                }
            ],
        },
        "data": {"spec": {"template": {**template, "$patch": "replace"}}},
    }


def configmap(
    name: str, *, created_min: float, writes: list[tuple[str, float]], data: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "data": data or {"POOL_SIZE": "10"},
        "metadata": {
            "name": name,
            "namespace": NS,
            "creationTimestamp": ts(ago(created_min)),
            "managedFields": [
                {"manager": m, "operation": "Update", "apiVersion": "v1", "time": ts(ago(t)), "fieldsType": "FieldsV1"}
                for m, t in writes
            ],
        },
    }


def world(kube: FakeKube) -> None:
    """api: revision 1 (api:1.40, 3 days ago), 2 (api:1.41, 2 days ago), 3 (api:1.42, 12 min ago); a
    StatefulSet db with revisions 1 (a day ago) and 2 (20 min ago); ConfigMaps; scale events; a Helm Secret."""
    dep = kube.add(deployment("api", NS, image="api:1.42", revision=3))
    for rs in kube.objects("ReplicaSet", NS):
        kube.touch("ReplicaSet", NS, rs["metadata"]["name"], {"metadata": {"creationTimestamp": ts(ago(12))}})
    kube.add(replicaset(dep, revision=1, image="api:1.40", age_s=3 * 86400))
    kube.add(replicaset(dep, revision=2, image="api:1.41", age_s=2 * 86400))
    db = kube.add(statefulset("db", NS, image="postgres:16.1"))
    kube.add(controller_revision(db, 1, "postgres:16.1", 24 * 60))
    kube.add(controller_revision(db, 2, "postgres:16.2", 20))
    kube.add(
        configmap(
            "api-config",
            created_min=5 * 24 * 60,
            writes=[("kubectl-client-side-apply", 5 * 24 * 60), ("kubectl-edit", 8)],
            data={"DB_PASSWORD_HINT": "hunter2"},
        )
    )
    kube.add(configmap("stale", created_min=9 * 24 * 60, writes=[("helm", 9 * 24 * 60)]))
    kube.add(
        event(
            dep,
            "ScalingReplicaSet",
            "Scaled up replica set api-7d9f to 6",
            type="Normal",
            component="deployment-controller",
            last_seen_ago_s=3 * 60,
        )
    )
    kube.add(
        event(dep, "ScalingReplicaSet", "Scaled down replica set api-old to 0", type="Normal", last_seen_ago_s=5 * 3600)
    )
    kube.add(event(dep, "BackOff", "Back-off restarting failed container", last_seen_ago_s=60))
    kube.add(secret("sh.helm.release.v1.api.v3", NS, {"release": "H4sIAAAAAAAA"}))


@pytest.fixture
async def client(fake_kube: FakeKube, tmp_path: Path) -> AsyncIterator[KubeClient]:
    kc = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    clusters = KubeClusters((ClusterSpec(name="prod", kubeconfig=kc, namespaces=(NS, "payments")),))
    yield clusters.get("prod")
    await clusters.aclose()


async def whole(client: KubeClient, since: datetime, until: datetime) -> list[Change]:
    """namespace_changes in NS, which must not be cut."""
    changes = await namespace_changes(client, NS, since, until)
    assert not isinstance(changes, Cut), changes.why
    return changes


def rows(changes: list[Change]) -> list[tuple[str, str, str]]:
    return [(c.target, c.what, c.ref) for c in changes]


@pytest.mark.slow
async def test_a_namespace_changes_newest_first(fake_kube: FakeKube, client: KubeClient) -> None:
    world(fake_kube)
    changes = await whole(client, ago(120), ago(-1))
    rs3 = next(
        r["metadata"]["name"]
        for r in fake_kube.objects("ReplicaSet", NS)
        if r["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    )
    assert rows(changes) == [
        ("prod/web deployment/api", "Scaled up replica set api-7d9f to 6", "event ScalingReplicaSet"),
        ("prod/web configmap/api-config", "configmap changed by kubectl-edit (Update)", "managedFields"),
        ("prod/web deployment/api", "image api:1.41 → api:1.42, revision 3", f"replicaset/{rs3}"),
        ("prod/web statefulset/db", "image postgres:16.1 → postgres:16.2, revision 2", "controllerrevision/db-2abc"),
    ]
    assert abs((changes[2].at - ago(12)).total_seconds()) < 60  # created 12 min before the world was built


async def test_configmap_values_are_never_read_and_secrets_never_requested(
    fake_kube: FakeKube, client: KubeClient
) -> None:
    world(fake_kube)
    changes = await whole(client, ago(120), ago(-1))
    text = timeline(changes, [], anchor=ago(0), now=ago(0))
    assert "hunter2" not in text and "POOL_SIZE" not in text and "H4sI" not in text
    paths = [r.path for r in fake_kube.requests]
    assert not [p for p in paths if "secret" in p]
    cm = next(r for r in fake_kube.requests if r.path.endswith("/configmaps"))
    assert "as=PartialObjectMetadataList" in cm.headers.get("Accept", "")


async def test_a_first_revision_and_an_unchanged_image_say_so(fake_kube: FakeKube, client: KubeClient) -> None:
    dep = fake_kube.add(deployment("worker", NS, image="w:1", revision=1, age_s=600))
    for rs in fake_kube.objects("ReplicaSet", NS):
        fake_kube.touch("ReplicaSet", NS, rs["metadata"]["name"], {"metadata": {"creationTimestamp": ts(ago(10))}})
    new = replicaset(
        dep, revision=2, containers=[{"name": "app", "image": "w:1", "env": [{"name": "X", "value": "1"}]}], age_s=120
    )
    fake_kube.add(new)
    whats = [c.what for c in await whole(client, ago(60), ago(-1))]
    assert whats == ["pod template changed (image w:1), revision 2", "image w:1, revision 1 (first)"]


async def test_lists_follow_continue_and_past_the_last_page_the_answer_says_it_was_cut(
    fake_kube: FakeKube, client: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(changes_k8s, "LIST_LIMIT", 2)  # a page of 2: the bound is MAX_PAGES pages of 2
    bound = 2 * changes_k8s.MAX_PAGES
    world(fake_kube)  # its ConfigMaps: api-config (edited 8 min ago) and stale (9 days ago)
    for i in range(bound - 4):  # with the world's 2: a few pages, all read
        fake_kube.add(configmap(f"cm-{i}", created_min=30, writes=[("helm", 30 - i)]))
    edited = {c.target for c in await whole(client, ago(120), ago(-1)) if "configmap" in c.target}
    assert edited == {"prod/web configmap/api-config", *(f"prod/web configmap/cm-{i}" for i in range(bound - 4))}
    pages = [r for r in fake_kube.requests if r.path.endswith("/configmaps")]
    assert [bool(r.query.get("continue")) for r in pages] == [False] + [True] * (len(pages) - 1) and len(pages) > 1

    for i in range(bound - 4, bound + 1):  # now 3 past the bound: api-config and cm-0 … cm-6 are read
        fake_kube.add(configmap(f"cm-{i}", created_min=30, writes=[("helm", 30 - i)]))
    cut = await namespace_changes(client, NS, ago(120), ago(-1))
    assert isinstance(cut, Cut)
    assert cut.why == f"configmaps: read the first {bound}, 3 more not read"
    assert {c.target for c in cut.changes if "configmap" in c.target} == {
        "prod/web configmap/api-config",
        *(f"prod/web configmap/cm-{i}" for i in range(bound - 1)),
    }
    assert "image api:1.41 → api:1.42, revision 3" in [c.what for c in cut.changes]  # the other lists are whole

    found, failures = await gather(
        [Source("kubernetes", "prod/web", partial(namespace_changes, client, NS))], ago(120), ago(-1)
    )
    text = timeline(found, failures, anchor=ago(0), now=ago(0))
    assert text.splitlines()[-1] == f"kubernetes prod/web was cut: configmaps: read the first {bound}, 3 more not read"
    assert "configmap/cm-6" in text and "configmap/cm-7" not in text


async def test_a_namespace_outside_the_configured_ones_is_refused_before_any_request(
    fake_kube: FakeKube, client: KubeClient
) -> None:
    with pytest.raises(ToolError, match="outside the namespaces"):
        await namespace_changes(client, "kube-system", ago(120), ago(-1))
    assert fake_kube.requests == []
    assert namespaces(client) == [NS, "payments"] and namespaces(client, "payments") == ["payments"]


async def test_a_cluster_that_is_down_raises_a_tool_error(fake_kube: FakeKube, client: KubeClient) -> None:
    await fake_kube.down()
    with pytest.raises(ToolError, match="cannot reach cluster prod"):
        await namespace_changes(client, NS, ago(120), ago(-1))


async def test_a_forbidden_list_names_the_resource(fake_kube: FakeKube, client: KubeClient) -> None:
    fake_kube.deny("list", "controllerrevisions", NS)
    with pytest.raises(PermissionDenied, match=r"forbids list controllerrevisions\.apps in namespace web"):
        await namespace_changes(client, NS, ago(120), ago(-1))


async def test_kubectl_lists_what_the_changes_reach_reads(fake_kube: FakeKube, kubectl: Any) -> None:  # noqa: F811
    """The fake answers kubectl for replicasets and controllerrevisions as a real apiserver would."""
    world(fake_kube)
    r = await kubectl("get", "replicasets,controllerrevisions", "-n", NS)
    assert r.rc == 0, r.err
    assert r.out.count("replicaset.apps/api-") == 3
    assert "controllerrevision.apps/db-1abc" in r.out and "controllerrevision.apps/db-2abc" in r.out
    r = await kubectl("get", "controllerrevision", "db-2abc", "-n", NS, "-o", "jsonpath={.revision}")
    assert (r.rc, r.out) == (0, "2")
    r = await kubectl("get", "configmaps", "-n", NS, "-o", "jsonpath={.items[*].metadata.managedFields[*].manager}")
    assert r.rc == 0 and "kubectl-edit" in r.out
