"""Ready-made states of the fake kube-apiserver that the Kubernetes tests and `bench.k8s` both start from."""

from __future__ import annotations

from typing import Any

from tests.support.fakes.kube import FakeKube, _ago, deployment, event, node, pod, replicaset

NS = "web"


def crashloop(kube: FakeKube) -> dict[str, Any]:
    """api in web: revision 1 ran api:1.41, revision 2 (now) runs api:1.42 and crash-loops."""
    d = deployment(
        "api",
        NS,
        image="api:1.42",
        change_cause="deploy api 1.42",
        containers=[
            {
                "name": "api",
                "image": "api:1.42",
                "env": [
                    {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                    {"name": "LOG_LEVEL", "value": "info"},
                ],
                "envFrom": [{"secretRef": {"name": "api-env"}}],
            }
        ],
    )
    d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "2"
    d = kube.add(d)
    kube.add(
        replicaset(d, revision=1, containers=[{"name": "api", "image": "api:1.41"}], change_cause="deploy api 1.41")
    )
    current = next(
        o
        for o in kube.objects("ReplicaSet")
        if o["metadata"]["annotations"].get("deployment.kubernetes.io/revision") == "2"
    )
    p = kube.add(
        pod(
            "api-7d9f-x2k4q",
            NS,
            owner=current,
            containers=[{"name": "api", "image": "api:1.42"}],
            waiting_reason="CrashLoopBackOff",
            restarts=7,
            last_terminated_reason="Error",
        )
    )
    kube.add(event(p, "Pulled", "Successfully pulled image api:1.42", type="Normal", last_seen_ago_s=5))
    kube.add(event(p, "BackOff", "Back-off restarting failed container api", count=12, last_seen_ago_s=40))
    kube.set_logs(
        NS,
        "api-7d9f-x2k4q",
        "booting\nconnecting to postgres://app:s3cr3tpw@db:5432/app\npanic: missing config key FEATURE_X\n",
        previous=True,
    )
    kube.set_logs(NS, "api-7d9f-x2k4q", "booting\n")
    return d


def events_over_time(kube: FakeKube) -> None:
    """Events in web last seen 5 minutes, 40 minutes and 2 hours ago, and one (events.k8s.io style) with only an
    eventTime, 10 minutes ago."""
    d = kube.add(deployment("shop", NS))
    kube.add(event(d, "ScalingReplicaSet", "Scaled up replica set shop-1 to 3", type="Normal", last_seen_ago_s=5 * 60))
    kube.add(event(d, "FailedCreate", "quota exceeded: old news", last_seen_ago_s=2 * 3600))
    kube.add(event(d, "ProgressDeadlineExceeded", "shop has timed out progressing", last_seen_ago_s=40 * 60))
    only_event_time = event(d, "FailedGetScale", "no matches for kind HPA", last_seen_ago_s=10 * 60)
    only_event_time["eventTime"] = _ago(10 * 60).replace("Z", ".000000Z")
    only_event_time.update(lastTimestamp=None, firstTimestamp=None)
    kube.add(only_event_time)


def oom_killed(kube: FakeKube) -> dict[str, Any]:
    """worker-5c7-abcde in web: running again after 3 restarts, the last one an OOM kill (exit 137) 4 minutes ago;
    its log has two ERROR lines among many."""
    p = kube.add(
        pod(
            "worker-5c7-abcde",
            NS,
            containers=[{"name": "worker", "image": "worker:2.3"}],
            restarts=3,
            last_terminated_reason="OOMKilled",
            last_exit_code=137,
            last_terminated_ago_s=240,
        )
    )
    lines = [f"INFO processed batch {i}" for i in range(300)]
    lines[120] = "ERROR batch 120: upstream timeout"
    lines[280] = "ERROR batch 280: cannot allocate 2GiB buffer"
    kube.set_logs(NS, "worker-5c7-abcde", "\n".join(lines) + "\n")
    return p


def disk_pressure(kube: FakeKube) -> None:
    """node-2 under DiskPressure: cache-0 in web evicted from it; node-1 healthy with api-ok."""
    kube.add(node("node-1"))
    kube.add(node("node-2", pressure=("DiskPressure",)))
    kube.add(pod("api-ok", NS, node="node-1"))
    evicted = pod("cache-0", NS, node="node-2", phase="Failed", ready=False, ip=None)
    evicted["status"].update(
        reason="Evicted",
        message="The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 512Mi.",
    )
    evicted["status"]["containerStatuses"][0]["state"] = {  # what a 1.32 kubelet reports for an evicted pod
        "terminated": {
            "exitCode": 137,
            "reason": "ContainerStatusUnknown",
            "message": "The container could not be located when the pod was terminated",
        }
    }
    kube.add(evicted)


ARGO_APP = "shop-api"


def argo_managed(kube: FakeKube) -> dict[str, Any]:
    """Deployment api in web, synced by Argo CD application shop-api (its tracking annotation and label, the
    argocd-controller's managed fields) from kustomize with origin annotations."""
    d = deployment(
        "api",
        NS,
        image="api:1.42",
        annotations={
            "argocd.argoproj.io/tracking-id": f"{ARGO_APP}:apps/Deployment:{NS}/api",
            "config.kubernetes.io/origin": "path: apps/api/deployment.yaml\nrepo: https://git.example.com/ops/deploy\n",
        },
    )
    d["metadata"]["labels"]["app.kubernetes.io/instance"] = ARGO_APP
    d["metadata"]["managedFields"] = [
        {"manager": "argocd-controller", "operation": "Apply", "apiVersion": "apps/v1", "fieldsType": "FieldsV1"},
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1", "subresource": "status"},
    ]
    return kube.add(d)
