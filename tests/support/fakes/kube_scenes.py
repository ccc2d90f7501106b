"""Ready-made states of the fake kube-apiserver that the Kubernetes tests and `bench.k8s` both start from."""

from __future__ import annotations

from typing import Any

from tests.support.fakes.kube import FakeKube, deployment, event, pod, replicaset

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
