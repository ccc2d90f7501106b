"""The fake kube-apiserver: real kubectl 1.32 against it (conformance), then the fake's own rules over raw HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.fakes.kube import FakeKube, deployment, event, node, pod, replicaset, secret

KUBECTL = shutil.which("kubectl")
NO_KUBECTL = "kubectl is not installed (the image ships /usr/bin/kubectl)"
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason=NO_KUBECTL)
NS = "web"


def crashloop_world(kube: FakeKube) -> dict[str, Any]:
    """A Deployment at revision 2 (api:1.42) whose pod crash-loops; revision 1 ran api:1.41."""
    dep = kube.add(deployment("api", NS, image="api:1.42", change_cause="deploy api 1.42", revision=2))
    kube.add(replicaset(dep, revision=1, image="api:1.41", change_cause="deploy api 1.41"))
    new_rs = next(
        r
        for r in kube.objects("ReplicaSet", NS)
        if r["spec"]["template"]["spec"]["containers"][0]["image"] == "api:1.42"
    )
    p = kube.add(
        pod(
            "api-8b76-x2x9q",
            NS,
            image="api:1.42",
            owner=new_rs,
            ready=False,
            restarts=7,
            waiting_reason="CrashLoopBackOff",
            last_terminated_reason="Error",
            last_terminated_ago_s=600,
            node="node-a",
            ip="10.244.1.17",
        )
    )
    kube.add(event(p, "BackOff", "Back-off restarting failed container app in pod api-8b76-x2x9q"))
    kube.add(
        event(
            dep,
            "ScalingReplicaSet",
            "Scaled up replica set api-8b76 to 3",
            type="Normal",
            component="deployment-controller",
            last_seen_ago_s=600,
        )
    )
    kube.add(secret("db", NS, {"password": "hunter2"}))
    kube.set_logs(NS, "api-8b76-x2x9q", "boot\nconnecting to db\npanic: nil map\n", previous=True)
    kube.set_logs(NS, "api-8b76-x2x9q", "boot\n")
    return {"deployment": dep, "pod": p, "replicaset": new_rs}


# --------------------------------------------------------------------------- kubectl conformance


@dataclass
class Run:
    rc: int
    out: str
    err: str


@pytest.fixture
def kubectl(fake_kube: FakeKube, tmp_path: Path) -> Callable[..., Awaitable[Run]]:
    """Run the real kubectl against the fake, with HOME, KUBECONFIG and its cache in tmp_path."""
    if KUBECTL is None:
        pytest.skip(NO_KUBECTL)
    config = fake_kube.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path / "home"),
        "KUBECONFIG": str(config),
        "KUBECACHEDIR": str(tmp_path / "kubecache"),
        "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
    }
    (tmp_path / "home").mkdir()

    async def run(*args: str) -> Run:
        cmd = [KUBECTL, "--kubeconfig", str(config), "--request-timeout=10s", *args]
        done = await asyncio.to_thread(subprocess.run, cmd, env=env, capture_output=True, text=True, timeout=60)
        return Run(done.returncode, done.stdout, done.stderr)

    return run


@needs_kubectl
async def test_kubectl_get_pods_wide_prints_the_server_side_table(fake_kube: FakeKube, kubectl: Any) -> None:
    crashloop_world(fake_kube)
    r = await kubectl("get", "pods", "-o", "wide")
    assert (r.rc, r.err) == (0, "")
    header, row = r.out.splitlines()
    assert header.split() == [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED",
        "NODE",
        "READINESS",
        "GATES",
    ]
    assert row.split() == [
        "api-8b76-x2x9q",
        "0/1",
        "CrashLoopBackOff",
        "7",
        "(10m",
        "ago)",
        "60m",
        "10.244.1.17",
        "node-a",
        "<none>",
        "<none>",
    ]
    table_reqs = [q for q in fake_kube.requests if q.path == f"/api/v1/namespaces/{NS}/pods"]
    assert "as=Table" in table_reqs[0].headers["Accept"]
    # discovery is asked aggregated first and taken legacy; OpenAPI is never asked for by get
    assert [q.path for q in fake_kube.requests if q.path.startswith("/openapi")] == []


@needs_kubectl
async def test_kubectl_describe_deploy_shows_template_replicasets_and_events(fake_kube: FakeKube, kubectl: Any) -> None:
    crashloop_world(fake_kube)
    r = await kubectl("describe", "deploy", "api")
    assert (r.rc, r.err) == (0, "")
    out = r.out
    assert "Replicas:               3 desired | 3 updated | 3 total | 3 available | 0 unavailable" in out
    assert "Image:         api:1.42" in out
    new_rs = next(r for r in fake_kube.objects("ReplicaSet", NS) if _image(r) == "api:1.42")
    assert f"NewReplicaSet:   {new_rs['metadata']['name']} (3/3 replicas created)" in out
    assert "Normal  ScalingReplicaSet  10m   deployment-controller  Scaled up replica set api-8b76 to 3" in out
    assert "BackOff" not in out  # the pod's event is not the deployment's: the field selector worked
    events_req = next(q for q in fake_kube.requests if q.path == f"/api/v1/namespaces/{NS}/events")
    assert "involvedObject.uid=" in events_req.query["fieldSelector"]


def _image(obj: dict[str, Any]) -> str:
    image: str = obj["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


@needs_kubectl
async def test_kubectl_logs_previous_tail(fake_kube: FakeKube, kubectl: Any) -> None:
    crashloop_world(fake_kube)
    r = await kubectl("logs", "api-8b76-x2x9q", "--previous", "--tail=2")
    assert (r.rc, r.out, r.err) == (0, "connecting to db\npanic: nil map\n", "")
    log_req = next(q for q in fake_kube.requests if q.path.endswith("/log"))
    assert log_req.query == {"container": "app", "previous": "true", "tailLines": "2", "timeout": "10s"}


@needs_kubectl
async def test_kubectl_scale_server_dry_run_stores_nothing(fake_kube: FakeKube, kubectl: Any) -> None:
    crashloop_world(fake_kube)
    before = fake_kube.get("Deployment", NS, "api")
    r = await kubectl("scale", "deploy/api", "--replicas=6", "--dry-run=server", "-o", "yaml")
    assert (r.rc, r.err) == (0, "")
    # kubectl prints the object it fetched before the dry run (its own behaviour), as YAML.
    assert "kind: Deployment" in r.out and "name: api" in r.out
    scale = [q for q in fake_kube.requests if q.path.endswith("/deployments/api/scale")]
    assert [(q.method, q.query["dryRun"], q.content_type, q.body, q.status) for q in scale] == [
        ("PATCH", "All", "application/merge-patch+json", {"spec": {"replicas": 6}}, 200)
    ]
    assert fake_kube.get("Deployment", NS, "api") == before
    assert fake_kube.writes() == []


@needs_kubectl
async def test_kubectl_rollout_restart_makes_a_new_revision(fake_kube: FakeKube, kubectl: Any) -> None:
    crashloop_world(fake_kube)
    r = await kubectl("rollout", "restart", "deploy/api")
    assert (r.rc, r.out, r.err) == (0, "deployment.apps/api restarted\n", "")
    [write] = fake_kube.writes()
    assert (write.method, write.content_type) == ("PATCH", "application/strategic-merge-patch+json")
    dep = fake_kube.get("Deployment", NS, "api")
    assert dep is not None
    assert "kubectl.kubernetes.io/restartedAt" in dep["spec"]["template"]["metadata"]["annotations"]
    assert dep["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    assert dep["metadata"]["generation"] == 2
    rev = "deployment.kubernetes.io/revision"
    revisions = {
        int(r["metadata"]["annotations"][rev]): (_image(r), r["spec"]["replicas"])
        for r in fake_kube.objects("ReplicaSet", NS)
    }
    assert revisions == {1: ("api:1.41", 0), 2: ("api:1.42", 0), 3: ("api:1.42", 3)}


@needs_kubectl
async def test_kubectl_rollout_history_lists_revisions_with_change_causes(fake_kube: FakeKube, kubectl: Any) -> None:
    crashloop_world(fake_kube)
    r = await kubectl("rollout", "history", "deploy/api")
    assert (r.rc, r.err) == (0, "")
    assert [line.split(None, 1) for line in r.out.splitlines()[1:] if line.strip()] == [
        ["REVISION", "CHANGE-CAUSE"],
        ["1", "deploy api 1.41"],
        ["2", "deploy api 1.42"],
    ]
    detail = await kubectl("rollout", "history", "deploy/api", "--revision=1")
    assert detail.rc == 0 and "Image:\tapi:1.41" in detail.out


@needs_kubectl
async def test_kubectl_rollout_undo_brings_back_the_old_template_as_a_new_revision(
    fake_kube: FakeKube, kubectl: Any
) -> None:
    crashloop_world(fake_kube)
    dry = await kubectl("rollout", "undo", "deploy/api", "--dry-run=server")
    assert (dry.rc, dry.out) == (0, "deployment.apps/api rolled back (server dry run)\n")
    assert fake_kube.writes() == []
    r = await kubectl("rollout", "undo", "deploy/api")
    assert (r.rc, r.out) == (0, "deployment.apps/api rolled back\n")
    [write] = fake_kube.writes()
    assert write.content_type == "application/json-patch+json"
    dep = fake_kube.get("Deployment", NS, "api")
    assert dep is not None and dep["spec"]["template"]["spec"]["containers"][0]["image"] == "api:1.41"
    history = await kubectl("rollout", "history", "deploy/api")
    assert [line.split(None, 1) for line in history.out.splitlines()[2:] if line.strip()] == [
        ["2", "deploy api 1.42"],
        ["3", "deploy api 1.41"],
    ]


@needs_kubectl
async def test_kubectl_get_denied_secret_is_forbidden(fake_kube: FakeKube, kubectl: Any) -> None:
    crashloop_world(fake_kube)
    fake_kube.deny("get", "secrets", NS)
    r = await kubectl("get", "secret", "db")
    assert (r.rc, r.out) == (1, "")
    assert r.err == (
        'Error from server (Forbidden): secrets "db" is forbidden: User "opsloop" cannot get resource '
        '"secrets" in API group "" in the namespace "web"\n'
    )


@needs_kubectl
async def test_kubectl_with_a_wrong_token_must_log_in(fake_kube: FakeKube, kubectl: Any) -> None:
    fake_kube.token = "rotated"
    r = await kubectl("get", "pods")
    assert r.rc == 1
    assert r.err.endswith(
        "error: You must be logged in to the server (the server has asked for the client to provide credentials)\n"
    )


@needs_kubectl
async def test_kubectl_top_pod_with_and_without_metrics(fake_kube: FakeKube, kubectl: Any) -> None:
    crashloop_world(fake_kube)
    r = await kubectl("top", "pod")
    assert (r.rc, r.err) == (1, "error: Metrics API not available\n")
    fake_kube.set_metrics(
        pods=[FakeKube.pod_metrics("api-8b76-x2x9q", NS, {"app": {"cpu": "250m", "memory": "128Mi"}})]
    )
    r = await kubectl("top", "pod")
    assert (r.rc, r.err) == (0, "")
    assert [line.split() for line in r.out.splitlines()] == [
        ["NAME", "CPU(cores)", "MEMORY(bytes)"],
        ["api-8b76-x2x9q", "250m", "128Mi"],
    ]


# --------------------------------------------------------------------------- the fake's own rules


@pytest.fixture
async def http(fake_kube: FakeKube) -> AsyncIterator[Callable[..., Awaitable[tuple[int, Any]]]]:
    """A raw client with the bearer token: (status, parsed JSON or text)."""
    async with aiohttp.ClientSession() as session:

        async def call(
            method: str,
            path: str,
            *,
            body: Any = None,
            content_type: str = "application/json",
            token: str | None = fake_kube.token,
            **params: str,
        ) -> tuple[int, Any]:
            headers = {"Content-Type": content_type}
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            data = json.dumps(body) if body is not None else None
            async with session.request(
                method, fake_kube.url + path, params=params, data=data, headers=headers, ssl=fake_kube.ssl_context()
            ) as resp:
                text = await resp.text()
                if resp.content_type == "application/json":
                    return resp.status, json.loads(text)
                return resp.status, text

        yield call


DEP = f"/apis/apps/v1/namespaces/{NS}/deployments/api"
PODS = f"/api/v1/namespaces/{NS}/pods"
SMP, MERGE, JSONP = (
    "application/strategic-merge-patch+json",
    "application/merge-patch+json",
    "application/json-patch+json",
)


async def test_without_the_token_every_path_is_401(fake_kube: FakeKube, http: Any) -> None:
    for path in ("/version", "/api", PODS):
        assert await http("GET", path, token=None) == (
            401,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "Unauthorized",
                "reason": "Unauthorized",
                "code": 401,
            },
        )
    assert (await http("GET", "/version", token="other"))[0] == 401


async def test_discovery_and_version(fake_kube: FakeKube, http: Any) -> None:
    assert (await http("GET", "/version"))[1]["gitVersion"] == "v1.32.4"
    groups = (await http("GET", "/apis"))[1]
    assert [g["name"] for g in groups["groups"]] == ["apps", "authorization.k8s.io"]
    apps = (await http("GET", "/apis/apps/v1"))[1]
    assert {"deployments", "deployments/scale", "replicasets", "statefulsets/scale"} <= {
        r["name"] for r in apps["resources"]
    }
    assert (await http("GET", "/apis/metrics.k8s.io/v1beta1"))[0] == 404
    fake_kube.metrics = True
    assert "metrics.k8s.io" in [g["name"] for g in (await http("GET", "/apis"))[1]["groups"]]
    assert (await http("GET", "/openapi/v2"))[0] == 404


async def test_a_list_is_a_kind_list_with_resource_version_and_bare_items(fake_kube: FakeKube, http: Any) -> None:
    crashloop_world(fake_kube)
    status, body = await http("GET", PODS)
    assert status == 200 and body["kind"] == "PodList" and body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"].isdigit()
    assert [set(item) & {"kind", "apiVersion"} for item in body["items"]] == [set()]
    one = (await http("GET", f"{PODS}/api-8b76-x2x9q"))[1]
    assert (one["kind"], one["apiVersion"]) == ("Pod", "v1")


async def test_missing_object_is_a_404_status(fake_kube: FakeKube, http: Any) -> None:
    assert await http("GET", DEP) == (
        404,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": 'deployments.apps "api" not found',
            "reason": "NotFound",
            "details": {"name": "api", "group": "apps", "kind": "deployments"},
            "code": 404,
        },
    )


async def test_label_selectors(fake_kube: FakeKube, http: Any) -> None:
    for name, labels in [("a", {"app": "api", "tier": "web"}), ("b", {"app": "api"}), ("c", {"app": "db"})]:
        fake_kube.add(pod(name, NS, labels=labels))

    async def names(sel: str) -> list[str]:
        return [p["metadata"]["name"] for p in (await http("GET", PODS, labelSelector=sel))[1]["items"]]

    assert await names("app=api") == ["a", "b"]
    assert await names("app==api,tier=web") == ["a"]
    assert await names("app!=api") == ["c"]
    assert await names("app in (db, other)") == ["c"]
    assert await names("app notin (db)") == ["a", "b"]
    assert await names("tier") == ["a"]
    assert await names("!tier") == ["b", "c"]


async def test_field_selectors(fake_kube: FakeKube, http: Any) -> None:
    w = crashloop_world(fake_kube)
    fake_kube.add(pod("done", NS, phase="Succeeded"))
    items = (await http("GET", PODS, fieldSelector="status.phase=Running"))[1]["items"]
    assert [p["metadata"]["name"] for p in items] == ["api-8b76-x2x9q"]
    items = (await http("GET", PODS, fieldSelector="metadata.name!=done,spec.nodeName=node-a"))[1]["items"]
    assert [p["metadata"]["name"] for p in items] == ["api-8b76-x2x9q"]
    uid = w["pod"]["metadata"]["uid"]
    ev = (
        await http(
            "GET",
            f"/api/v1/namespaces/{NS}/events",
            fieldSelector=f"involvedObject.kind=Pod,involvedObject.uid={uid},type=Warning",
        )
    )[1]["items"]
    assert [e["reason"] for e in ev] == ["BackOff"]
    status, body = await http("GET", PODS, fieldSelector="spec.image=x")
    assert (status, body["reason"], body["message"]) == (400, "BadRequest", "field label not supported: spec.image")


async def test_dry_run_all_stores_nothing(fake_kube: FakeKube, http: Any) -> None:
    crashloop_world(fake_kube)
    before: dict[tuple[str, str, str], Any] = {
        k: fake_kube.get(*k) for k in [("Deployment", NS, "api"), ("Pod", NS, "api-8b76-x2x9q")]
    }
    rv_before = (await http("GET", PODS))[1]["metadata"]["resourceVersion"]
    status, body = await http("PATCH", DEP, body={"spec": {"replicas": 6}}, content_type=MERGE, dryRun="All")
    assert (status, body["spec"]["replicas"]) == (200, 6)
    assert body["metadata"]["resourceVersion"] == before[("Deployment", NS, "api")]["metadata"]["resourceVersion"]
    status, body = await http(
        "PATCH",
        DEP,
        content_type=SMP,
        dryRun="All",
        body={
            "spec": {
                "template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}}}
            }
        },
    )
    assert status == 200 and "kubectl.kubernetes.io/restartedAt" in body["spec"]["template"]["metadata"]["annotations"]
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "api"}, "spec": {"replicas": 9}}
    assert (await http("PUT", DEP + "/scale", dryRun="All", body=scale))[0] == 200
    status, body = await http("DELETE", f"{PODS}/api-8b76-x2x9q", dryRun="All")
    assert status == 200 and body["metadata"]["deletionTimestamp"]
    assert (await http("POST", PODS, dryRun="All", body=pod("new", NS)))[0] == 201
    assert {k: fake_kube.get(*k) for k in before} == before
    assert fake_kube.get("Pod", NS, "new") is None
    assert (await http("GET", PODS))[1]["metadata"]["resourceVersion"] == rv_before
    assert len(fake_kube.objects("ReplicaSet", NS)) == 2
    assert fake_kube.writes() == []
    assert (await http("PATCH", DEP, body={}, content_type=MERGE, dryRun="Some"))[0] == 400


async def test_a_stale_resource_version_is_a_409_conflict(fake_kube: FakeKube, http: Any) -> None:
    crashloop_world(fake_kube)
    seen = (await http("GET", DEP))[1]
    fake_kube.touch("Deployment", NS, "api", {"metadata": {"labels": {"touched": "yes"}}})
    conflict = (
        409,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": 'Operation cannot be fulfilled on deployments.apps "api": the object has been modified; please '
            "apply your changes to the latest version and try again",
            "reason": "Conflict",
            "details": {"name": "api", "group": "apps", "kind": "deployments"},
            "code": 409,
        },
    )
    stale_rv = seen["metadata"]["resourceVersion"]
    assert (
        await http(
            "PATCH", DEP, content_type=SMP, body={"metadata": {"resourceVersion": stale_rv}, "spec": {"replicas": 6}}
        )
        == conflict
    )
    assert (
        await http(
            "PATCH",
            DEP,
            content_type=JSONP,
            body=[
                {"op": "replace", "path": "/metadata/resourceVersion", "value": stale_rv},
                {"op": "replace", "path": "/spec/replicas", "value": 6},
            ],
        )
        == conflict
    )
    seen["spec"]["replicas"] = 6
    assert await http("PUT", DEP, body=seen) == conflict
    assert (
        await http(
            "PUT",
            DEP + "/scale",
            body={"metadata": {"name": "api", "resourceVersion": stale_rv}, "spec": {"replicas": 6}},
        )
    )[0] == 409
    assert fake_kube.get("Deployment", NS, "api")["spec"]["replicas"] == 3  # type: ignore[index]
    fresh = (await http("GET", DEP))[1]["metadata"]["resourceVersion"]
    status, body = await http(
        "PATCH", DEP, content_type=MERGE, body={"metadata": {"resourceVersion": fresh}, "spec": {"replicas": 6}}
    )
    assert (status, body["spec"]["replicas"]) == (200, 6)
    assert body["metadata"]["resourceVersion"] != fresh
    assert [(w.method, w.status) for w in fake_kube.writes()] == [("PATCH", 409)] * 2 + [("PUT", 409)] * 2 + [
        ("PATCH", 200)
    ]


async def test_strategic_merge_patch_merges_containers_by_name(fake_kube: FakeKube, http: Any) -> None:
    containers: list[dict[str, Any]] = [
        {"name": "app", "image": "api:1.42", "env": [{"name": "A", "value": "1"}]},
        {"name": "sidecar", "image": "envoy:1"},
    ]
    fake_kube.add(deployment("api", NS, containers=containers))
    status, body = await http(
        "PATCH",
        DEP,
        content_type=SMP,
        body={
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "app", "image": "api:1.41", "env": [{"name": "B", "value": "2"}]},
                            {"name": "sidecar", "$patch": "delete"},
                        ]
                    }
                }
            }
        },
    )
    assert status == 200
    assert body["spec"]["template"]["spec"]["containers"] == [
        {"name": "app", "image": "api:1.41", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    ]
    status, body = await http("PATCH", DEP, content_type=SMP, body={"metadata": {"labels": {"app": None}}})
    assert status == 200 and "app" not in body["metadata"]["labels"]


async def test_merge_patch_replaces_lists_and_null_deletes(fake_kube: FakeKube, http: Any) -> None:
    fake_kube.add(deployment("api", NS, containers=[{"name": "app", "image": "a:1"}, {"name": "b", "image": "b:1"}]))
    status, body = await http(
        "PATCH",
        DEP,
        content_type=MERGE,
        body={
            "metadata": {"annotations": {"deployment.kubernetes.io/revision": None}},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "a:2"}]}}},
        },
    )
    assert status == 200
    assert body["spec"]["template"]["spec"]["containers"] == [{"name": "app", "image": "a:2"}]
    # the template changed, so the fake's deployment controller wrote the new revision back
    assert body["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"


async def test_json_patch_ops_and_a_failed_test_op(fake_kube: FakeKube, http: Any) -> None:
    fake_kube.add(deployment("api", NS, image="api:1.42"))
    status, body = await http(
        "PATCH",
        DEP,
        content_type=JSONP,
        body=[
            {"op": "test", "path": "/spec/replicas", "value": 3},
            {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "api:1.41"},
            {"op": "add", "path": "/metadata/labels/team", "value": "core"},
            {"op": "copy", "from": "/metadata/labels/team", "path": "/metadata/labels/owner"},
            {"op": "remove", "path": "/metadata/labels/team"},
        ],
    )
    assert status == 200
    assert body["spec"]["template"]["spec"]["containers"][0]["image"] == "api:1.41"
    assert body["metadata"]["labels"] == {"app": "api", "owner": "core"}
    status, body = await http(
        "PATCH",
        DEP,
        content_type=JSONP,
        body=[
            {"op": "test", "path": "/spec/replicas", "value": 99},
            {"op": "replace", "path": "/spec/replicas", "value": 1},
        ],
    )
    assert (status, body["reason"]) == (422, "Invalid")
    assert fake_kube.get("Deployment", NS, "api")["spec"]["replicas"] == 3  # type: ignore[index]
    status, body = await http("PATCH", DEP, content_type="application/apply-patch+yaml", body={})
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")


async def test_scale_subresource(fake_kube: FakeKube, http: Any) -> None:
    fake_kube.add(deployment("api", NS, replicas=3))
    status, scale = await http("GET", DEP + "/scale")
    assert status == 200
    assert (scale["kind"], scale["apiVersion"], scale["spec"], scale["status"]) == (
        "Scale",
        "autoscaling/v1",
        {"replicas": 3},
        {"replicas": 3, "selector": "app=api"},
    )
    status, body = await http("PATCH", DEP + "/scale", content_type=MERGE, body={"spec": {"replicas": 5}})
    assert (status, body["kind"], body["spec"]["replicas"]) == (200, "Scale", 5)
    scale["spec"]["replicas"] = 7
    scale["metadata"]["resourceVersion"] = body["metadata"]["resourceVersion"]
    assert (await http("PUT", DEP + "/scale", body=scale))[1]["spec"]["replicas"] == 7
    assert fake_kube.get("Deployment", NS, "api")["spec"]["replicas"] == 7  # type: ignore[index]
    assert (await http("PATCH", DEP + "/scale", content_type=MERGE, body={"spec": {"replicas": -1}}))[0] == 422
    assert (await http("GET", f"{PODS}/x/scale"))[0] == 404


async def test_pod_logs_rules(fake_kube: FakeKube, http: Any) -> None:
    fake_kube.add(pod("two", NS, containers=[{"name": "app", "image": "a"}, {"name": "proxy", "image": "p"}]))
    fake_kube.add(pod("one", NS))
    fake_kube.set_logs(NS, "two", "a1\na2\na3\n", container="app")
    fake_kube.set_logs(NS, "one", "l1\nl2\nl3\n")
    status, body = await http("GET", f"{PODS}/two/log")
    assert (status, body["reason"], body["message"]) == (
        400,
        "BadRequest",
        "a container name must be specified for pod two, choose one of: [app proxy]",
    )
    assert await http("GET", f"{PODS}/two/log", container="app", tailLines="2") == (200, "a2\na3\n")
    assert await http("GET", f"{PODS}/one/log", limitBytes="4") == (200, "l1\nl")
    assert await http("GET", f"{PODS}/one/log", sinceSeconds="60") == (200, "l1\nl2\nl3\n")
    status, body = await http("GET", f"{PODS}/one/log", previous="true")
    assert (status, body["message"]) == (400, 'previous terminated container "app" in pod "one" not found')
    assert (await http("GET", f"{PODS}/one/log", container="nope"))[1]["message"] == (
        "container nope is not valid for pod one"
    )
    assert (await http("GET", f"{PODS}/gone/log"))[0] == 404


async def test_deny_is_a_403_status_for_that_verb_resource_and_namespace(fake_kube: FakeKube, http: Any) -> None:
    crashloop_world(fake_kube)
    fake_kube.deny("patch", "deployments", NS)
    fake_kube.deny("get", "pods/log")
    fake_kube.deny("list", "nodes")
    assert await http("PATCH", DEP, content_type=MERGE, body={"spec": {"replicas": 1}}) == (
        403,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": 'deployments.apps "api" is forbidden: User "opsloop" cannot patch resource "deployments" in API '
            'group "apps" in the namespace "web"',
            "reason": "Forbidden",
            "details": {"name": "api", "group": "apps", "kind": "deployments"},
            "code": 403,
        },
    )
    assert (await http("GET", DEP))[0] == 200
    assert (await http("PATCH", DEP + "/scale", content_type=MERGE, body={"spec": {"replicas": 1}}))[0] == 200
    status, body = await http("GET", f"{PODS}/api-8b76-x2x9q/log")
    assert (status, body["message"]) == (
        403,
        'pods "api-8b76-x2x9q" is forbidden: User "opsloop" cannot get '
        'resource "pods/log" in API group "" in the namespace "web"',
    )
    status, body = await http("GET", "/api/v1/nodes")
    assert (status, body["message"]) == (
        403,
        'nodes is forbidden: User "opsloop" cannot list resource "nodes" in API group "" at the cluster scope',
    )
    fake_kube.allow("list", "nodes")
    fake_kube.add(node("node-a"))
    assert [n["metadata"]["name"] for n in (await http("GET", "/api/v1/nodes"))[1]["items"]] == ["node-a"]


async def test_self_subject_reviews_answer_from_the_deny_list(fake_kube: FakeKube, http: Any) -> None:
    fake_kube.deny("get", "secrets", NS)
    fake_kube.deny("patch", "deployments", NS)
    status, body = await http(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"namespace": NS, "verb": "get", "resource": "secrets"}},
        },
    )
    assert (status, body["status"]) == (201, {"allowed": False})
    status, body = await http(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        body={"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": NS}},
    )
    rules = {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in body["status"]["resourceRules"]}
    assert "get" not in rules[("", "secrets")] and "list" in rules[("", "secrets")]
    assert "patch" not in rules[("apps", "deployments")] and "patch" in rules[("apps", "deployments/scale")]
    assert body["status"]["incomplete"] is False
    assert fake_kube.writes() == []


async def test_delete_pod_with_preconditions(fake_kube: FakeKube, http: Any) -> None:
    p = fake_kube.add(pod("p", NS))
    status, body = await http("DELETE", f"{PODS}/p", body={"preconditions": {"resourceVersion": "1"}})
    assert (status, body["reason"]) == (409, "Conflict")
    status, body = await http(
        "DELETE", f"{PODS}/p", body={"preconditions": {"resourceVersion": p["metadata"]["resourceVersion"]}}
    )
    assert status == 200 and body["kind"] == "Pod"
    assert fake_kube.get("Pod", NS, "p") is None
    assert (await http("DELETE", f"{PODS}/p"))[0] == 404


async def test_server_side_table_when_asked(fake_kube: FakeKube) -> None:
    crashloop_world(fake_kube)
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    async with (
        aiohttp.ClientSession() as s,
        s.get(
            fake_kube.url + f"/apis/apps/v1/namespaces/{NS}/deployments",
            ssl=fake_kube.ssl_context(),
            headers={"Authorization": f"Bearer {fake_kube.token}", "Accept": accept},
        ) as resp,
    ):
        table = await resp.json()
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert [c["name"] for c in table["columnDefinitions"]][:4] == ["Name", "Ready", "Up-to-date", "Available"]
    assert table["rows"][0]["cells"][:4] == ["api", "3/3", 3, 3]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


async def test_down_refuses_connections_and_up_serves_again_on_the_same_port(fake_kube: FakeKube, http: Any) -> None:
    url = fake_kube.url
    assert (await http("GET", "/version"))[0] == 200
    await fake_kube.down()
    with pytest.raises(aiohttp.ClientConnectionError):
        await http("GET", "/version")
    await fake_kube.up()
    assert fake_kube.url == url
    assert (await http("GET", "/version"))[0] == 200


async def test_delay_lets_concurrent_reads_overlap(fake_kube: FakeKube, http: Any) -> None:
    fake_kube.delay_s = 0.2
    await asyncio.gather(*(http("GET", PODS) for _ in range(4)))
    assert fake_kube.max_in_flight == 4


async def test_the_kubernetes_asyncio_client_reads_through_the_kubeconfig(fake_kube: FakeKube, tmp_path: Path) -> None:
    from kubernetes_asyncio import client, config

    crashloop_world(fake_kube)
    cfg = client.Configuration()
    await config.load_kube_config(
        config_file=str(fake_kube.write_kubeconfig(tmp_path / "kc")), client_configuration=cfg
    )
    async with client.ApiClient(cfg) as api:
        pods = await client.CoreV1Api(api).list_namespaced_pod(NS, label_selector="app=api")
        assert [p.metadata.name for p in pods.items] == ["api-8b76-x2x9q"]
        scale = await client.AppsV1Api(api).patch_namespaced_deployment_scale(
            "api", NS, {"spec": {"replicas": 6}}, dry_run="All"
        )
        assert scale.spec.replicas == 6
        with pytest.raises(client.ApiException) as err:
            await client.CoreV1Api(api).read_namespaced_secret("nope", NS)
        assert err.value.status == 404
    assert [q.headers["Authorization"] for q in fake_kube.requests] == [f"Bearer {fake_kube.token}"] * 3
    assert fake_kube.writes() == []


@needs_kubectl
async def test_kubectl_follows_continue_through_every_page(fake_kube: FakeKube, kubectl: Any) -> None:
    for i in range(5):
        fake_kube.add(pod(f"p{i}", NS))
    run = await kubectl("get", "pods", "--chunk-size=2", "-o", "name")
    assert (run.rc, run.out.split()) == (0, [f"pod/p{i}" for i in range(5)])
    pages = [q for q in fake_kube.requests if q.path == PODS]
    assert [q.query.get("limit") for q in pages] == ["2"] * 3
    assert [bool(q.query.get("continue")) for q in pages] == [False, True, True]


async def test_limit_and_continue_through_opsloops_client(fake_kube: FakeKube, tmp_path: Path) -> None:
    from tools.api import ToolError
    from tools.k8s.clusters import KubeClusters
    from tools.k8s.config import ClusterSpec

    for i in range(5):
        fake_kube.add(pod(f"p{i}", NS))
    clusters = KubeClusters(
        (ClusterSpec(name="prod", kubeconfig=fake_kube.write_kubeconfig(tmp_path / "kc"), namespaces=(NS,)),)
    )
    client = clusters.get("prod")
    try:

        async def page(**query: Any) -> Any:
            return await client.request("GET", PODS, verb="list", kind="pods", namespace=NS, query=query)

        first = await page(limit=2)
        assert [p["metadata"]["name"] for p in first["items"]] == ["p0", "p1"]
        assert first["metadata"]["remainingItemCount"] == 3
        fake_kube.add(pod("p10", NS))  # after p1 in key order: the next page shows it
        second = await page(limit=2, **{"continue": first["metadata"]["continue"]})
        assert [p["metadata"]["name"] for p in second["items"]] == ["p10", "p2"]
        assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        last = await page(limit=2, **{"continue": second["metadata"]["continue"]})
        assert [p["metadata"]["name"] for p in last["items"]] == ["p3", "p4"]
        assert "continue" not in last["metadata"]
        everything = await page(limit=500)
        assert len(everything["items"]) == 6 and "continue" not in everything["metadata"]
        selected = await page(limit=1, fieldSelector="metadata.name!=p0")
        assert "remainingItemCount" not in selected["metadata"] and selected["metadata"]["continue"]

        with pytest.raises(ToolError, match="failed with 400: invalid continue token: continue key is not valid"):
            await page(limit=2, **{"continue": "not-a-token"})
        fake_kube.expire_continue_tokens()
        with pytest.raises(ToolError, match="failed with 410: The provided continue parameter is too old"):
            await page(limit=2, **{"continue": first["metadata"]["continue"]})
    finally:
        await clusters.aclose()
