"""One object as `kubectl describe` would summarise it, and events as the table an SRE reads first."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tools.k8s.columns import (
    CHANGE_CAUSE,
    NONE,
    REVISION,
    age,
    labels_text,
    meta,
    one_line,
    pod_ready,
    pod_restarts,
    pod_status,
    selector_text,
    table,
)


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
                one_line(str(e.get("message") or e.get("note") or ""), 240),
            ]
        )
    head = f"{len(events)} events ({warnings} warnings), warnings first:"
    return (
        head
        + "\n"
        + table(["LAST SEEN", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE"], rows, limit=limit, what="events")
    )


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
            out.append(f"{name}={one_line(str(e.get('value', '')), 120)}")
    for ref in container.get("envFrom") or []:
        prefix = f" (prefix {ref['prefix']})" if ref.get("prefix") else ""
        for key, what in (("secretRef", "secret"), ("configMapRef", "configmap")):
            if key in ref:
                out.append(f"(all keys of {what} {ref[key].get('name')}){prefix}")
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
        how = "exec " + one_line(" ".join(map(str, p["exec"].get("command") or [])), 60)
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
                lines.append(f"    command: {one_line(cmd, 160)}")
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
        parts.append(one_line(str(detail["message"]), 160))
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
            one_line(str(c.get("message") or ""), 160),
        ]
        for c in conditions
    ]
    return "\n".join("  " + line for line in table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], rows).splitlines())


def describe(
    obj: Mapping[str, Any],
    *,
    owners: list[str],
    events: Sequence[Mapping[str, Any]],
    now: datetime | None = None,
    extra: Sequence[str] = (),
) -> str:
    """One object: identity, owner chain, `extra` (GitOps, node problems), spec summary, status and conditions,
    recent events."""
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
        lines.append("annotations: " + "; ".join(f"{k}={one_line(str(v), 120)}" for k, v in sorted(notes.items())))
    lines.append("owner chain: " + (" ← ".join([f"{kind} {m.get('name')}", *owners]) if owners else "(no owner)"))
    lines += extra
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
        lines.append(f"selector: {selector_text(obj)}")
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
        lines.append("spec: " + one_line(json.dumps(spec, sort_keys=True, default=str), 600))
    lines.append("conditions:")
    lines.append(conditions_table(status.get("conditions"), now))
    lines.append(f"events (recent {min(len(events), 20)} of {len(events)}):" if events else "events: none")
    if events:
        lines += ["  " + line for line in events_table(events, now=now, limit=20).splitlines()[1:]]
    return "\n".join(lines)
