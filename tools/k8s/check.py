"""`opsloop check` for Kubernetes: per cluster, is it reachable, and per namespace, which tools will work
(SelfSubjectAccessReviews for every permission each tool needs)."""

from __future__ import annotations

import asyncio

from tools.k8s.clusters import KubeClient, KubeClusters
from tools.k8s.config import ClusterSpec
from tools.registry import PermissionDenied, ToolError

# What each tool needs: (verb, API group, resource, subresource)
NEEDS: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    "k8s_get": (("list", "", "pods", ""), ("get", "", "pods", "")),
    "k8s_describe": (("get", "", "pods", ""), ("list", "", "events", "")),
    "k8s_events": (("list", "", "events", ""),),
    "k8s_logs": (("get", "", "pods", ""), ("get", "", "pods", "log")),
    "k8s_rollout_history": (("get", "apps", "deployments", ""), ("list", "apps", "replicasets", "")),
    "k8s_top": (("list", "metrics.k8s.io", "pods", ""),),
    "k8s_rollout_restart": (("get", "apps", "deployments", ""), ("patch", "apps", "deployments", "")),
    "k8s_scale": (("get", "apps", "deployments", "scale"), ("patch", "apps", "deployments", "scale")),
    "k8s_rollout_undo": (
        ("get", "apps", "deployments", ""),
        ("list", "apps", "replicasets", ""),
        ("patch", "apps", "deployments", ""),
    ),
    "k8s_delete_pod": (("get", "", "pods", ""), ("delete", "", "pods", "")),
}
REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def _name(need: tuple[str, str, str, str]) -> str:
    verb, group, resource, sub = need
    return f"{verb} {resource}{'/' + sub if sub else ''}{'.' + group if group else ''}"


async def _allowed(client: KubeClient, namespace: str, need: tuple[str, str, str, str]) -> bool:
    verb, group, resource, sub = need
    attrs = {"namespace": namespace, "verb": verb, "group": group, "resource": resource}
    if sub:
        attrs["subresource"] = sub
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attrs},
    }
    answer = await client.request("POST", REVIEWS, verb="create", kind="selfsubjectaccessreviews", body=body)
    return bool((answer.get("status") or {}).get("allowed"))


async def check_cluster(client: KubeClient) -> tuple[list[str], list[str]]:
    spec = client.spec
    try:
        version = await client.request("GET", "/version", verb="get", kind="version")
    except (ToolError, PermissionDenied) as e:
        return [f"kubernetes cluster {spec.name}: UNREACHABLE ({spec.source})"], [
            f"kubernetes cluster {spec.name}: {e}"
        ]
    lines = [
        f"kubernetes cluster {spec.name}: {client.server} ({version.get('gitVersion', '?')}), "
        f"credentials: {spec.source}"
    ]
    namespaces = spec.namespaces or ("",)  # "": every namespace (what the credentials allow)
    needs = sorted({n for ns in NEEDS.values() for n in ns})
    try:
        answers = await asyncio.gather(*(_allowed(client, ns, n) for ns in namespaces for n in needs))
    except (ToolError, PermissionDenied) as e:
        return [*lines, f"  cannot review permissions: {e}"], []
    allowed = dict(zip([(ns, n) for ns in namespaces for n in needs], answers, strict=True))
    rows = [["tool", *(ns or "(all namespaces)" for ns in namespaces)]]
    for tool_name, tool_needs in NEEDS.items():
        row = [tool_name]
        for ns in namespaces:
            missing = [_name(n) for n in tool_needs if not allowed[(ns, n)]]
            row.append("ok" if not missing else "no: cannot " + ", ".join(missing))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["  " + "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return lines, []


async def check_clusters(specs: tuple[ClusterSpec, ...]) -> tuple[list[str], list[str]]:
    """Lines for `opsloop check` and its problems (an unreachable cluster), one client per cluster, closed after."""
    if not specs:
        return ["kubernetes: no clusters configured"], []
    clusters = KubeClusters(specs)
    try:
        results = await asyncio.gather(*(check_cluster(clusters.get(s.name)) for s in specs))
    finally:
        await clusters.aclose()
    lines = [line for r in results for line in r[0]]
    problems = [p for r in results for p in r[1]]
    return lines, problems
