"""Kubernetes objects as the compact text an SRE reads: `kubectl get -o wide`-like tables,
rollout history and top. Pure functions of dicts (wire format). The shared cells live in tools.k8s.columns,
describe and events in tools.k8s.describe, the dry-run diff in tools.k8s.diff."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from tools.k8s.columns import (
    CHANGE_CAUSE,
    NONE,
    REVISION,
    age,
    container_names,
    images,
    labels_text,
    meta,
    pod_ready,
    pod_restarts,
    pod_status,
    pod_unhealthy,
    selector_text,
    table,
    template_spec,
)


def _columns(
    kind: str, now: datetime | None, nodes: Mapping[str, Sequence[str]]
) -> tuple[list[str], Callable[[Mapping[str, Any]], list[Any]]]:
    """The header of a kind's table and the function making one object's row."""

    def created(o: Mapping[str, Any]) -> str:
        return age(meta(o).get("creationTimestamp"), now)

    def st(o: Mapping[str, Any]) -> Mapping[str, Any]:
        return o.get("status") or {}

    def sp(o: Mapping[str, Any]) -> Mapping[str, Any]:
        return o.get("spec") or {}

    if kind == "Pod":

        def status(p: Mapping[str, Any]) -> str:
            """A pending, evicted or failed pod on a node with problems (`nodes`: name → problems) names them."""
            problems = nodes.get(str(sp(p).get("nodeName"))) if pod_unhealthy(p) else None
            names = ",".join(x.split(" (", 1)[0] for x in problems or [])
            return f"{pod_status(p)} (node {names})" if names else pod_status(p)

        return ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "IMAGES"], lambda p: [
            meta(p).get("name"),
            pod_ready(p),
            status(p),
            pod_restarts(p, now),
            created(p),
            st(p).get("podIP"),
            sp(p).get("nodeName"),
            images(p.get("spec")),
        ]
    if kind == "Deployment":
        return ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"], lambda o: [
            meta(o).get("name"),
            f"{st(o).get('readyReplicas', 0)}/{sp(o).get('replicas', 1)}",
            st(o).get("updatedReplicas", 0),
            st(o).get("availableReplicas", 0),
            created(o),
            container_names(template_spec(o)),
            images(template_spec(o)),
            selector_text(o),
        ]
    if kind == "ReplicaSet":
        return ["NAME", "DESIRED", "CURRENT", "READY", "AGE", "REVISION", "IMAGES"], lambda o: [
            meta(o).get("name"),
            sp(o).get("replicas", 0),
            st(o).get("replicas", 0),
            st(o).get("readyReplicas", 0),
            created(o),
            (meta(o).get("annotations") or {}).get(REVISION),
            images(template_spec(o)),
        ]
    if kind == "StatefulSet":
        return ["NAME", "READY", "AGE", "CONTAINERS", "IMAGES"], lambda o: [
            meta(o).get("name"),
            f"{st(o).get('readyReplicas', 0)}/{sp(o).get('replicas', 1)}",
            created(o),
            container_names(template_spec(o)),
            images(template_spec(o)),
        ]
    if kind == "DaemonSet":
        return ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "IMAGES"], lambda o: [
            meta(o).get("name"),
            st(o).get("desiredNumberScheduled", 0),
            st(o).get("currentNumberScheduled", 0),
            st(o).get("numberReady", 0),
            st(o).get("updatedNumberScheduled", 0),
            st(o).get("numberAvailable", 0),
            created(o),
            images(template_spec(o)),
        ]
    if kind == "Service":

        def ports(o: Mapping[str, Any]) -> str:
            return (
                ",".join(
                    f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/{p.get('protocol', 'TCP')}"
                    for p in sp(o).get("ports") or []
                )
                or NONE
            )

        def external(o: Mapping[str, Any]) -> str:
            ingress = (st(o).get("loadBalancer") or {}).get("ingress") or []
            return (
                ",".join(str(i.get("ip") or i.get("hostname")) for i in ingress)
                or ",".join(sp(o).get("externalIPs") or [])
                or NONE
            )

        return ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORTS", "AGE", "SELECTOR"], lambda o: [
            meta(o).get("name"),
            sp(o).get("type", "ClusterIP"),
            sp(o).get("clusterIP"),
            external(o),
            ports(o),
            created(o),
            labels_text(sp(o).get("selector")),
        ]
    if kind == "Node":

        def node_status(o: Mapping[str, Any]) -> str:
            ready = next((c for c in st(o).get("conditions") or [] if c.get("type") == "Ready"), None)
            text = "Ready" if ready and ready.get("status") == "True" else "NotReady"
            return text + (",SchedulingDisabled" if sp(o).get("unschedulable") else "")

        def roles(o: Mapping[str, Any]) -> str:
            prefix = "node-role.kubernetes.io/"
            return ",".join(k[len(prefix) :] for k in meta(o).get("labels") or {} if k.startswith(prefix)) or NONE

        def internal_ip(o: Mapping[str, Any]) -> str:
            return next(
                (a.get("address", "") for a in st(o).get("addresses") or [] if a.get("type") == "InternalIP"), NONE
            )

        return ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP"], lambda o: [
            meta(o).get("name"),
            node_status(o),
            roles(o),
            created(o),
            (st(o).get("nodeInfo") or {}).get("kubeletVersion"),
            internal_ip(o),
        ]
    if kind == "ConfigMap":  # keys only: values may be config a person would not paste into a chat
        return ["NAME", "DATA", "KEYS", "AGE"], lambda o: [
            meta(o).get("name"),
            len(o.get("data") or {}) + len(o.get("binaryData") or {}),
            ",".join(sorted([*(o.get("data") or {}), *(o.get("binaryData") or {})])) or NONE,
            created(o),
        ]
    if kind == "Job":
        return ["NAME", "STATUS", "COMPLETIONS", "AGE", "IMAGES"], lambda o: [
            meta(o).get("name"),
            _job_status(o),
            f"{st(o).get('succeeded', 0)}/{sp(o).get('completions', 1)}",
            created(o),
            images(template_spec(o)),
        ]
    if kind == "Namespace":
        return ["NAME", "STATUS", "AGE"], lambda o: [meta(o).get("name"), st(o).get("phase"), created(o)]
    return ["NAME", "AGE"], lambda o: [meta(o).get("name"), created(o)]


def _job_status(job: Mapping[str, Any]) -> str:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("status") == "True" and c.get("type") in ("Complete", "Failed", "Suspended"):
            return str(c["type"])
    return "Running"


def get_table(
    kind: str,
    items: Sequence[Mapping[str, Any]],
    *,
    now: datetime | None = None,
    more: bool = False,
    nodes: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """A list of one kind as `kubectl get -o wide` would print it."""
    if not items:
        return f"no {kind} objects found"
    header, row = _columns(kind, now, nodes or {})
    out = table(header, [row(o) for o in items], what=f"{kind} objects")
    if more:
        out += "\n… the API has more objects than were listed; narrow with a selector"
    return out


# -- rollout history --------------------------------------------------------------------------------
def revision_of(obj: Mapping[str, Any]) -> int:
    try:
        return int((meta(obj).get("annotations") or {}).get(REVISION, 0))
    except (TypeError, ValueError):
        return 0


def history_table(
    deployment: Mapping[str, Any], replicasets: Sequence[Mapping[str, Any]], now: datetime | None = None
) -> str:
    m = meta(deployment)
    current = revision_of(deployment)
    ordered = sorted(replicasets, key=revision_of)
    rows = [
        [
            f"{revision_of(rs) or '?'}{' (current)' if revision_of(rs) == current else ''}",
            images(template_spec(rs)),
            (meta(rs).get("annotations") or {}).get(CHANGE_CAUSE) or NONE,
            f"{(rs.get('status') or {}).get('readyReplicas', 0)}/{(rs.get('spec') or {}).get('replicas', 0)}",
            age(meta(rs).get("creationTimestamp"), now),
            meta(rs).get("name"),
        ]
        for rs in ordered
    ]
    head = f"deployment {m.get('namespace')}/{m.get('name')}: {len(ordered)} revisions, current {current or '?'}"
    if not rows:
        return head + "\n(no ReplicaSets found for it)"
    return (
        head
        + "\n"
        + table(["REVISION", "IMAGES", "CHANGE-CAUSE", "READY", "AGE", "REPLICASET"], rows, what="revisions")
    )


# -- metrics ---------------------------------------------------------------------------------------
_CPU = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0}
_MEM = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "": 1}


def cpu_cores(q: str) -> float:
    m = re.fullmatch(r"([0-9.]+)([num]?)", str(q).strip())
    return float(m.group(1)) * _CPU[m.group(2)] if m else 0.0


def mem_bytes(q: str) -> float:
    m = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|K|k|M|G|T)?", str(q).strip())
    return float(m.group(1)) * _MEM[m.group(2) or ""] if m else 0.0


def top_table(items: Sequence[Mapping[str, Any]], *, nodes: bool) -> str:
    rows = []
    for it in items:
        usages = [it.get("usage") or {}] if nodes else [c.get("usage") or {} for c in it.get("containers") or []]
        cpu = sum(cpu_cores(u.get("cpu", "0")) for u in usages)
        mem = sum(mem_bytes(u.get("memory", "0")) for u in usages)
        rows.append((cpu, mem, meta(it).get("name")))
    if not rows:
        return "no metrics reported yet"
    rows.sort(key=lambda r: (-r[0], -r[1]))
    return table(
        ["NAME", "CPU(cores)", "MEMORY(bytes)"],
        [[n, f"{round(c * 1000)}m", f"{round(mb / 2**20)}Mi"] for c, mb, n in rows],
        what="objects",
    )
