"""Kubernetes objects as the compact text an SRE reads: `kubectl get -o wide`-like tables, describe summaries,
events, rollout history, and the field diff a dry run's card shows. Pure functions of dicts (wire format)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

MAX_ROWS = 200
ARROW = "→"
NONE = "(none)"
REVISION = "deployment.kubernetes.io/revision"
CHANGE_CAUSE = "kubernetes.io/change-cause"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"


# -- small helpers ---------------------------------------------------------------------------------
def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def age(text: str | None, now: datetime | None = None) -> str:
    """'2024-05-01T10:00:00Z' → '3d4h', like kubectl's AGE column."""
    t = parse_time(text)
    if t is None:
        return "<unknown>"
    s = max(0, int(((now or datetime.now(UTC)) - t).total_seconds()))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 48:
        return f"{h}h{m % 60}m" if h < 8 and m % 60 else f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    return f"{d}d" if d < 365 * 2 else f"{d // 365}y"


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def labels_text(labels: Mapping[str, Any] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or NONE


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], *, limit: int = MAX_ROWS, what: str = "rows") -> str:
    """Columns padded like kubectl's (3 spaces apart); more than `limit` rows end with a note."""
    rows = [[str(c) if c not in (None, "") else "<none>" for c in r] for r in rows]
    shown = rows[:limit]
    widths = [max(len(h), *(len(r[i]) for r in shown)) if shown else len(h) for i, h in enumerate(header)]
    lines = ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [list(header), *shown]]
    if len(rows) > limit:
        lines.append(f"… {len(rows) - limit} more {what} not shown; narrow with a selector or a name")
    return "\n".join(lines)


def images(pod_spec: Mapping[str, Any] | None) -> str:
    return ",".join(str(c.get("image", "?")) for c in (pod_spec or {}).get("containers") or []) or NONE


def container_names(pod_spec: Mapping[str, Any] | None) -> str:
    return ",".join(str(c.get("name", "?")) for c in (pod_spec or {}).get("containers") or []) or NONE


# -- pods --------------------------------------------------------------------------------------------
def pod_status(pod: Mapping[str, Any]) -> str:
    """The STATUS column as kubectl computes it: the first waiting/terminated container reason wins."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        state = cs.get("state") or {}
        if "terminated" in state and state["terminated"].get("exitCode") == 0:
            continue
        if "terminated" in state:
            t = state["terminated"]
            return f"Init:{t.get('reason') or 'Error'}" if t.get("reason") else f"Init:ExitCode:{t.get('exitCode')}"
        if "waiting" in state and state["waiting"].get("reason") not in (None, "PodInitializing"):
            return f"Init:{state['waiting']['reason']}"
        total = len((pod.get("spec") or {}).get("initContainers") or [])
        return f"Init:{i}/{total}"
    for cs in reversed(status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            t = state["terminated"]
            reason = t.get("reason") or (
                f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode')}"
            )
    if meta(pod).get("deletionTimestamp"):
        reason = "Terminating"
    return str(reason)


def pod_ready(pod: Mapping[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or []) or len(statuses)
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def pod_restarts(pod: Mapping[str, Any], now: datetime | None = None) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    count = sum(int(c.get("restartCount") or 0) for c in statuses)
    last = [parse_time(((c.get("lastState") or {}).get("terminated") or {}).get("finishedAt")) for c in statuses]
    latest = max((t for t in last if t is not None), default=None)
    if count and latest is not None:
        return f"{count} ({age(latest.isoformat(), now)} ago)"
    return str(count)


def _rows_pods(items: Sequence[Mapping[str, Any]], now: datetime | None) -> tuple[list[str], list[list[Any]]]:
    header = ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "IMAGES"]
    rows = [
        [
            meta(p).get("name"),
            pod_ready(p),
            pod_status(p),
            pod_restarts(p, now),
            age(meta(p).get("creationTimestamp"), now),
            (p.get("status") or {}).get("podIP"),
            (p.get("spec") or {}).get("nodeName"),
            images(p.get("spec")),
        ]
        for p in items
    ]
    return header, rows


def _template(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}


def _selector(obj: Mapping[str, Any]) -> str:
    sel = (obj.get("spec") or {}).get("selector") or {}
    if isinstance(sel, Mapping) and "matchLabels" in sel:
        return labels_text(sel.get("matchLabels"))
    return labels_text(sel) if isinstance(sel, Mapping) else str(sel)


def _rows(kind: str, items: Sequence[Mapping[str, Any]], now: datetime | None) -> tuple[list[str], list[list[Any]]]:
    def created(o: Mapping[str, Any]) -> str:
        return age(meta(o).get("creationTimestamp"), now)

    def st(o: Mapping[str, Any]) -> Mapping[str, Any]:
        return o.get("status") or {}

    def sp(o: Mapping[str, Any]) -> Mapping[str, Any]:
        return o.get("spec") or {}

    if kind == "Pod":
        return _rows_pods(items, now)
    if kind == "Deployment":
        return (
            ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"],
            [
                [
                    meta(o).get("name"),
                    f"{st(o).get('readyReplicas', 0)}/{sp(o).get('replicas', 1)}",
                    st(o).get("updatedReplicas", 0),
                    st(o).get("availableReplicas", 0),
                    created(o),
                    container_names(_template(o)),
                    images(_template(o)),
                    _selector(o),
                ]
                for o in items
            ],
        )
    if kind == "ReplicaSet":
        return (
            ["NAME", "DESIRED", "CURRENT", "READY", "AGE", "REVISION", "IMAGES"],
            [
                [
                    meta(o).get("name"),
                    sp(o).get("replicas", 0),
                    st(o).get("replicas", 0),
                    st(o).get("readyReplicas", 0),
                    created(o),
                    (meta(o).get("annotations") or {}).get(REVISION),
                    images(_template(o)),
                ]
                for o in items
            ],
        )
    if kind == "StatefulSet":
        return (
            ["NAME", "READY", "AGE", "CONTAINERS", "IMAGES"],
            [
                [
                    meta(o).get("name"),
                    f"{st(o).get('readyReplicas', 0)}/{sp(o).get('replicas', 1)}",
                    created(o),
                    container_names(_template(o)),
                    images(_template(o)),
                ]
                for o in items
            ],
        )
    if kind == "DaemonSet":
        return (
            ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "IMAGES"],
            [
                [
                    meta(o).get("name"),
                    st(o).get("desiredNumberScheduled", 0),
                    st(o).get("currentNumberScheduled", 0),
                    st(o).get("numberReady", 0),
                    st(o).get("updatedNumberScheduled", 0),
                    st(o).get("numberAvailable", 0),
                    created(o),
                    images(_template(o)),
                ]
                for o in items
            ],
        )
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

        return (
            ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORTS", "AGE", "SELECTOR"],
            [
                [
                    meta(o).get("name"),
                    sp(o).get("type", "ClusterIP"),
                    sp(o).get("clusterIP"),
                    external(o),
                    ports(o),
                    created(o),
                    labels_text(sp(o).get("selector")),
                ]
                for o in items
            ],
        )
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

        return (
            ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP"],
            [
                [
                    meta(o).get("name"),
                    node_status(o),
                    roles(o),
                    created(o),
                    (st(o).get("nodeInfo") or {}).get("kubeletVersion"),
                    internal_ip(o),
                ]
                for o in items
            ],
        )
    if kind == "ConfigMap":  # keys only: values may be config a person would not paste into a chat
        return (
            ["NAME", "DATA", "KEYS", "AGE"],
            [
                [
                    meta(o).get("name"),
                    len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                    ",".join(sorted([*(o.get("data") or {}), *(o.get("binaryData") or {})])) or NONE,
                    created(o),
                ]
                for o in items
            ],
        )
    if kind == "Job":
        return (
            ["NAME", "STATUS", "COMPLETIONS", "AGE", "IMAGES"],
            [
                [
                    meta(o).get("name"),
                    _job_status(o),
                    f"{st(o).get('succeeded', 0)}/{sp(o).get('completions', 1)}",
                    created(o),
                    images(_template(o)),
                ]
                for o in items
            ],
        )
    if kind == "Namespace":
        return (["NAME", "STATUS", "AGE"], [[meta(o).get("name"), st(o).get("phase"), created(o)] for o in items])
    return (["NAME", "AGE"], [[meta(o).get("name"), created(o)] for o in items])


def _job_status(job: Mapping[str, Any]) -> str:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("status") == "True" and c.get("type") in ("Complete", "Failed", "Suspended"):
            return str(c["type"])
    return "Running"


def get_table(kind: str, items: Sequence[Mapping[str, Any]], *, now: datetime | None = None, more: bool = False) -> str:
    """A list of one kind as `kubectl get -o wide` would print it."""
    if not items:
        return f"no {kind} objects found"
    header, rows = _rows(kind, items, now)
    out = table(header, rows, what=f"{kind} objects")
    if more:
        out += "\n… the API has more objects than were listed; narrow with a selector"
    return out


# -- events --------------------------------------------------------------------------------------
def event_time(e: Mapping[str, Any]) -> str:
    return str(
        e.get("lastTimestamp")
        or e.get("eventTime")
        or (e.get("series") or {}).get("lastObservedTime")
        or e.get("firstTimestamp")
        or meta(e).get("creationTimestamp")
        or ""
    )


def sort_events(events: Sequence[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    """Warnings first, then the newest first."""
    newest = sorted(events, key=event_time, reverse=True)
    return sorted(newest, key=lambda e: e.get("type") != "Warning")


def events_table(events: Sequence[Mapping[str, Any]], *, now: datetime | None = None, limit: int = 50) -> str:
    if not events:
        return "no events"
    warnings = sum(1 for e in events if e.get("type") == "Warning")
    rows = []
    for e in sort_events(events):
        obj = e.get("involvedObject") or e.get("regarding") or {}
        count = e.get("count") or (e.get("series") or {}).get("count") or 1
        rows.append(
            [
                age(event_time(e), now),
                e.get("type"),
                e.get("reason"),
                f"{str(obj.get('kind', '')).lower()}/{obj.get('name', '')}",
                f"{count}x" if count and int(count) > 1 else "",
                _one_line(str(e.get("message") or e.get("note") or ""), 240),
            ]
        )
    head = f"{len(events)} events ({warnings} warnings), warnings first:"
    return (
        head
        + "\n"
        + table(["LAST SEEN", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE"], rows, limit=limit, what="events")
    )


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- describe ------------------------------------------------------------------------------------
def env_lines(container: Mapping[str, Any]) -> list[str]:
    """Environment as references where values come from elsewhere: a secretKeyRef is never resolved."""
    out = []
    for e in container.get("env") or []:
        name, src = e.get("name"), e.get("valueFrom") or {}
        if "secretKeyRef" in src:
            ref = src["secretKeyRef"]
            out.append(f"{name} (from secret {ref.get('name')}, key {ref.get('key')})")
        elif "configMapKeyRef" in src:
            ref = src["configMapKeyRef"]
            out.append(f"{name} (from configmap {ref.get('name')}, key {ref.get('key')})")
        elif "fieldRef" in src:
            out.append(f"{name} (from field {src['fieldRef'].get('fieldPath')})")
        elif "resourceFieldRef" in src:
            out.append(f"{name} (from resource {src['resourceFieldRef'].get('resource')})")
        else:
            out.append(f"{name}={_one_line(str(e.get('value', '')), 120)}")
    for ref in container.get("envFrom") or []:
        prefix = f" (prefix {ref['prefix']})" if ref.get("prefix") else ""
        if "secretRef" in ref:
            out.append(f"(all keys of secret {ref['secretRef'].get('name')}){prefix}")
        elif "configMapRef" in ref:
            out.append(f"(all keys of configmap {ref['configMapRef'].get('name')}){prefix}")
    return out


def _resources(c: Mapping[str, Any]) -> str:
    r = c.get("resources") or {}
    parts = [
        f"{k} {','.join(f'{n}={v}' for n, v in sorted((r.get(k) or {}).items()))}"
        for k in ("requests", "limits")
        if r.get(k)
    ]
    return "; ".join(parts)


def _probe(p: Mapping[str, Any] | None) -> str:
    if not p:
        return ""
    if "httpGet" in p:
        how = f"http-get {p['httpGet'].get('path', '/')}:{p['httpGet'].get('port')}"
    elif "tcpSocket" in p:
        how = f"tcp :{p['tcpSocket'].get('port')}"
    elif "exec" in p:
        how = "exec " + _one_line(" ".join(map(str, p["exec"].get("command") or [])), 60)
    elif "grpc" in p:
        how = f"grpc :{p['grpc'].get('port')}"
    else:
        how = "?"
    return (
        f"{how} delay={p.get('initialDelaySeconds', 0)}s period={p.get('periodSeconds', 10)}s "
        f"failure={p.get('failureThreshold', 3)}"
    )


def container_lines(
    pod_spec: Mapping[str, Any], statuses: Sequence[Mapping[str, Any]] | None = None, now: datetime | None = None
) -> list[str]:
    by_name = {s.get("name"): s for s in statuses or []}
    lines = []
    for kind, key in (("init container", "initContainers"), ("container", "containers")):
        for c in pod_spec.get(key) or []:
            lines.append(f"  {kind} {c.get('name')}: image {c.get('image')}")
            if c.get("command") or c.get("args"):
                cmd = " ".join(map(str, [*(c.get("command") or []), *(c.get("args") or [])]))
                lines.append(f"    command: {_one_line(cmd, 160)}")
            ports = ",".join(f"{p.get('containerPort')}/{p.get('protocol', 'TCP')}" for p in c.get("ports") or [])
            if ports:
                lines.append(f"    ports: {ports}")
            if res := _resources(c):
                lines.append(f"    resources: {res}")
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                if text := _probe(c.get(probe)):
                    lines.append(f"    {probe[:-5]}: {text}")
            env = env_lines(c)
            if env:
                lines.append("    env: " + "; ".join(env[:30]) + (f"; … {len(env) - 30} more" if len(env) > 30 else ""))
            s = by_name.get(c.get("name"))
            if s is not None:
                lines.append(
                    f"    state: {_state(s.get('state'), now)}; ready={s.get('ready')}; "
                    f"restarts={s.get('restartCount', 0)}"
                )
                if s.get("lastState"):
                    lines.append(f"    last state: {_state(s.get('lastState'), now)}")
    return lines


def _state(state: Mapping[str, Any] | None, now: datetime | None) -> str:
    if not state:
        return "unknown"
    ((name, detail),) = list(state.items())[:1] or [("unknown", {})]
    detail = detail or {}
    parts = [name]
    if detail.get("reason"):
        parts.append(str(detail["reason"]))
    if "exitCode" in detail:
        parts.append(f"exit code {detail['exitCode']}")
    when = detail.get("finishedAt") or detail.get("startedAt")
    if when:
        parts.append(f"{'finished' if detail.get('finishedAt') else 'started'} {age(when, now)} ago")
    if detail.get("message"):
        parts.append(_one_line(str(detail["message"]), 160))
    return ", ".join(parts)


def conditions_table(conditions: Sequence[Mapping[str, Any]] | None, now: datetime | None = None) -> str:
    if not conditions:
        return "  (none)"
    rows = [
        [
            c.get("type"),
            c.get("status"),
            c.get("reason"),
            age(c.get("lastTransitionTime"), now),
            _one_line(str(c.get("message") or ""), 160),
        ]
        for c in conditions
    ]
    return "\n".join("  " + line for line in table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], rows).splitlines())


def describe(
    obj: Mapping[str, Any], *, owners: list[str], events: Sequence[Mapping[str, Any]], now: datetime | None = None
) -> str:
    """One object: identity, owner chain, spec summary, status and conditions, recent events."""
    m = meta(obj)
    kind = str(obj.get("kind", "?"))
    where = f"{m.get('namespace')}/" if m.get("namespace") else ""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    lines = [
        f"{kind} {where}{m.get('name')}  (created {age(m.get('creationTimestamp'), now)} ago, "
        f"resourceVersion {m.get('resourceVersion')})",
        f"labels: {labels_text(m.get('labels'))}",
    ]
    notes = {
        k: v
        for k, v in (m.get("annotations") or {}).items()
        if k in (REVISION, CHANGE_CAUSE) or not k.startswith("kubectl.kubernetes.io/last-applied")
    }
    if notes:
        lines.append("annotations: " + "; ".join(f"{k}={_one_line(str(v), 120)}" for k, v in sorted(notes.items())))
    lines.append("owner chain: " + (" ← ".join([f"{kind} {m.get('name')}", *owners]) if owners else "(no owner)"))
    if kind == "Pod":
        lines.append(
            f"status: {pod_status(obj)}  ready {pod_ready(obj)}  restarts {pod_restarts(obj, now)}  "
            f"node {spec.get('nodeName') or NONE}  ip {status.get('podIP') or NONE}  "
            f"qos {status.get('qosClass') or NONE}"
        )
        lines.append("containers:")
        lines += container_lines(
            spec, [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])], now
        )
    elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        strategy = spec.get("strategy") or spec.get("updateStrategy") or {}
        rolling = strategy.get("rollingUpdate") or {}
        lines.append(
            f"replicas: {spec.get('replicas', '-')} desired, {status.get('replicas', 0)} current, "
            f"{status.get('updatedReplicas', 0)} updated, {status.get('readyReplicas', 0)} ready, "
            f"{status.get('availableReplicas', 0)} available"
        )
        if strategy:
            lines.append(
                f"strategy: {strategy.get('type')}"
                + (
                    f" (maxSurge {rolling.get('maxSurge')}, maxUnavailable {rolling.get('maxUnavailable')})"
                    if rolling
                    else ""
                )
            )
        lines.append(f"selector: {_selector(obj)}")
        template = spec.get("template") or {}
        tmeta = template.get("metadata") or {}
        if tmeta.get("annotations"):
            lines.append(
                "pod template annotations: " + "; ".join(f"{k}={v}" for k, v in sorted(tmeta["annotations"].items()))
            )
        lines.append("pod template:")
        lines += container_lines(template.get("spec") or {}, None, now)
    elif kind == "Service":
        lines.append(
            f"type {spec.get('type', 'ClusterIP')}, clusterIP {spec.get('clusterIP')}, selector "
            f"{labels_text(spec.get('selector'))}, ports "
            + ", ".join(
                f"{p.get('name', '')}:{p.get('port')}→{p.get('targetPort')}/{p.get('protocol', 'TCP')}"
                for p in spec.get("ports") or []
            )
        )
    elif kind == "ConfigMap":
        keys = sorted([*(obj.get("data") or {}), *(obj.get("binaryData") or {})])
        lines.append(f"keys (values not shown): {', '.join(keys) or NONE}")
    elif kind == "Node":
        alloc = status.get("allocatable") or {}
        lines.append("allocatable: " + ", ".join(f"{k}={v}" for k, v in sorted(alloc.items())))
        if spec.get("taints"):
            lines.append(
                "taints: " + ", ".join(f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in spec["taints"])
            )
    else:
        lines.append("spec: " + _one_line(json.dumps(spec, sort_keys=True, default=str), 600))
    lines.append("conditions:")
    lines.append(conditions_table(status.get("conditions"), now))
    lines.append(f"events (recent {min(len(events), 20)} of {len(events)}):" if events else "events: none")
    if events:
        lines += ["  " + line for line in events_table(events, now=now, limit=20).splitlines()[1:]]
    return "\n".join(lines)


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
            images(_template(rs)),
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


# -- the dry-run diff ------------------------------------------------------------------------------
_IGNORED = {
    ("metadata", "resourceVersion"),
    ("metadata", "generation"),
    ("metadata", "managedFields"),
    ("metadata", "uid"),
    ("metadata", "creationTimestamp"),
    ("metadata", "selfLink"),
}


def _key(k: str) -> str:
    return f"[{k}]" if re.search(r"[./\s\[\]]", k) else f".{k}"


def _value(v: Any) -> str:
    if v is None:
        return NONE
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    return _one_line(json.dumps(v, sort_keys=True, default=str), 120)


def field_diff(before: Any, after: Any, path: str = "") -> list[str]:
    """The fields that differ, one line each: `spec.replicas: 3 → 6`,
    `spec.template.spec.containers[api].image: api:1.42 → api:1.41`. Lists of named things are keyed by name."""
    maps = (before is None or isinstance(before, Mapping)) and (after is None or isinstance(after, Mapping))
    if maps and (before is not None or after is not None):
        b, a = before or {}, after or {}
        out = []
        for k in sorted(set(b) | set(a), key=str):
            if (path == ".metadata" and ("metadata", k) in _IGNORED) or (path == "" and k == "status"):
                continue
            out += field_diff(b.get(k), a.get(k), f"{path}{_key(str(k))}")
        return out
    lists = (before is None or isinstance(before, list)) and (after is None or isinstance(after, list))
    if lists and (before or after) and all(_named(x) for x in (before, after) if x):
        bl, al = {x["name"]: x for x in before or []}, {x["name"]: x for x in after or []}
        out = []
        for name in [*bl, *(n for n in al if n not in bl)]:
            out += field_diff(bl.get(name), al.get(name), f"{path}[{name}]")
        return out
    if before == after:
        return []
    return [f"{path.lstrip('.')}: {_value(before)} {ARROW} {_value(after)}"]


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(x, Mapping) and isinstance(x.get("name"), str) for x in items)


def merge_patch(current: Any, target: Any) -> Any:
    """The RFC 7386 merge patch that turns `current` into `target` (removed keys become null)."""
    if not isinstance(current, Mapping) or not isinstance(target, Mapping):
        return target
    patch: dict[str, Any] = {}
    for k in set(current) | set(target):
        if k not in target:
            patch[k] = None
        elif k not in current:
            patch[k] = target[k]
        elif current[k] != target[k]:
            patch[k] = merge_patch(current[k], target[k])
    return patch
