"""A fake kube-apiserver for tests: the REST API opsloop's Kubernetes tools use, proven against real kubectl.

    async with FakeKube(token="kube-test-token") as kube:
        kube.write_kubeconfig(tmp_path / "kubeconfig")
        kube.add(deployment("api", "web", image="api:1.42"))
        kube.add(pod("api-1", "web", owner=..., waiting_reason="CrashLoopBackOff", restarts=7))
        kube.set_logs("web", "api-1", "panic: boom\\n", previous=True)
        kube.deny("get", "secrets", "web")

It serves HTTPS on 127.0.0.1 (random port; a throwaway CA, in the kubeconfig as certificate-authority-data)
with bearer-token auth -- client-go (kubectl) sends no credentials to an ``http://`` server, so a real
client needs TLS; ``FakeKube(tls=False)`` serves plain HTTP for clients that don't care. It answers like a
1.32 apiserver:
legacy discovery (it never answers aggregated discovery, so clients fall back, as kubectl does), ``/version``,
list/get with label and field selectors (lists carry ``metadata.resourceVersion``, items carry no
``kind``/``apiVersion``, like the real thing), server-side Table printing (what ``kubectl get`` asks for),
``pods/log`` as text, strategic-merge / merge / JSON patches, PUT, POST, DELETE, the ``scale`` subresource,
``dryRun=All`` on every write (the would-be object comes back, nothing is stored, no resourceVersion moves),
``resourceVersion`` preconditions (409 Conflict Status), 403/404/400/401 Status objects with kube's wording,
SelfSubjectRulesReview / SelfSubjectAccessReview answered from the deny list, and metrics.k8s.io when
``metrics`` is on. OpenAPI (``/openapi/v2``, ``/openapi/v3``) answers 404: kubectl copes for everything used
here. There is no watch, no server-side apply, no protobuf (JSON is answered to kubectl's
``application/vnd.kubernetes.protobuf,application/json`` Accept, which it takes; a protobuf *body*, as
``kubectl auth can-i`` sends, is a 415), and no controller except one: a Deployment whose pod template
changes gets a ReplicaSet for that template with the next ``deployment.kubernetes.io/revision`` (an existing
one with an equal template is reused and renumbered, as a rollback does), so ``kubectl rollout history`` and
``rollout undo`` work. Every request is recorded in ``requests``; ``writes()`` is the non-dry-run writes.

Lists page like the real server's: ``limit`` gives at most that many items, objects in key order
(namespace, name), and ``metadata.continue`` (with ``remainingItemCount`` when there is no selector) when more
remain; the ``continue`` query parameter, the real token's shape (unpadded URL-safe base64 of
``{"v":"meta.k8s.io/v1","rv":…,"start":"<key>\\x00"}``), reads on after that key. A token that does not decode
is a 400 ``invalid continue token: continue key is not valid…``; after ``expire_continue_tokens()`` (as etcd
compaction does) an older token is a 410 ``Expired``. Unlike the real server a continued page shows the objects
as they are now, not the first page's snapshot.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import hashlib
import itertools
import json
import re
import ssl
import tempfile
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

__all__ = [
    "FakeKube",
    "Request",
    "deployment",
    "event",
    "node",
    "pod",
    "replicaset",
    "secret",
    "statefulset",
    "status_object",
]

Obj = dict[str, Any]

GIT_VERSION = "v1.32.4"
DEFAULT_USER = "opsloop"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Patch bodies the real server accepts; apply-patch+yaml (server-side apply) is not implemented here.
PATCH_TYPES = {
    "application/strategic-merge-patch+json": "strategic",
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
}
_UNSUPPORTED_PATCH = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, "
    "application/strategic-merge-patch+json"
)


# --------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update")
    subresources: tuple[str, ...] = ()
    singular: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``pods``, ``deployments.apps``: how kube names the resource in its messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


_RW = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "pods", "Pod", True, ("po",), _RW, ("log", "status")),
    Resource("", "v1", "events", "Event", True, ("ev",), _RW),
    Resource("", "v1", "namespaces", "Namespace", False, ("ns",), _RW),
    Resource("", "v1", "nodes", "Node", False, ("no",), _RW),
    Resource("", "v1", "secrets", "Secret", True, (), _RW),
    Resource("", "v1", "configmaps", "ConfigMap", True, ("cm",), _RW),
    Resource("", "v1", "services", "Service", True, ("svc",), _RW),
    Resource("apps", "v1", "deployments", "Deployment", True, ("deploy",), _RW, ("scale", "status")),
    Resource("apps", "v1", "replicasets", "ReplicaSet", True, ("rs",), _RW, ("scale", "status")),
    Resource("apps", "v1", "statefulsets", "StatefulSet", True, ("sts",), _RW, ("scale", "status")),
    Resource("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), _RW, ("status",)),
    Resource("apps", "v1", "controllerrevisions", "ControllerRevision", True, (), _RW),
    Resource("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False, (), ("create",)),
    Resource(
        "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False, (), ("create",)
    ),
    Resource("metrics.k8s.io", "v1beta1", "pods", "PodMetrics", True, (), ("get", "list")),
    Resource("metrics.k8s.io", "v1beta1", "nodes", "NodeMetrics", False, (), ("get", "list")),
)
METRICS_GROUP = "metrics.k8s.io"
REVIEW_GROUP = "authorization.k8s.io"
_SCALABLE = frozenset({"deployments", "replicasets", "statefulsets"})


def _resource(group: str, version: str, plural: str) -> Resource | None:
    return next((r for r in RESOURCES if (r.group, r.version, r.plural) == (group, version, plural)), None)


def _resource_for_kind(kind: str, api_version: str | None = None) -> Resource:
    """The resource of a kind (``Deployment``) or a plural/short name (``deployments``, ``deploy``)."""
    low = kind.lower()
    for r in RESOURCES:
        if api_version is not None and r.api_version != api_version:
            continue
        if low in (r.kind.lower(), r.plural, *r.short_names) and r.group != METRICS_GROUP:
            return r
    for r in RESOURCES:  # metrics kinds only by their own kind names
        if low == r.kind.lower():
            return r
    raise KeyError(f"the fake kube-apiserver does not serve kind {kind!r}")


# --------------------------------------------------------------------------- time and names


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _ts(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _ago(seconds: float) -> str:
    return _ts(_now() - dt.timedelta(seconds=seconds))


def _parse_ts(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration: ``5s``, ``3m20s``, ``2d3h`` (what AGE prints)."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{hours // 24 // 365}y"


def _age(obj: Obj, key: str = "creationTimestamp") -> str:
    when = _parse_ts(obj.get("metadata", {}).get(key) if key == "creationTimestamp" else obj.get(key))
    return "<unknown>" if when is None else human_duration((_now() - when).total_seconds())


_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _template_hash(template: Obj) -> str:
    """A pod-template-hash in kube's safe alphabet, from the template without its own hash label."""
    plain = _strip_hash(template)
    digest = hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).digest()
    return "".join(_SAFE_ALPHABET[b % len(_SAFE_ALPHABET)] for b in digest[:10])


def _strip_hash(template: Obj) -> Obj:
    plain = copy.deepcopy(template)
    labels = plain.get("metadata", {}).get("labels")
    if isinstance(labels, dict):
        labels.pop("pod-template-hash", None)
    return plain


def _drop_nulls(value: Any) -> Any:
    """What decoding into kube's Go types does to JSON nulls: the field is gone (``creationTimestamp: null``)."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def status_object(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    """A ``v1 Status`` failure body, as the apiserver sends it."""
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


class KubeError(Exception):
    """A request the fake answers with a Status object."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.body = status_object(code, reason, message, details)
        self.code = code


def _details(res: Resource, name: str | None) -> Obj:
    d: Obj = {}
    if name:
        d["name"] = name
    if res.group:
        d["group"] = res.group
    d["kind"] = res.plural
    return d


def _not_found(res: Resource, name: str) -> KubeError:
    return KubeError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def _bad_request(message: str) -> KubeError:
    return KubeError(400, "BadRequest", message)


_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of "
    "the results. Continuing with the provided token results in an inconsistent list - objects that were "
    "created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
)


def _encode_continue(start: str, rv: int) -> str:
    """The apiserver's continue token: unpadded URL-safe base64 of its JSON."""
    doc = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(doc.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[str, int]:
    """(start key, resourceVersion) of a continue token, else the 400 the apiserver answers."""
    invalid = "invalid continue token: continue key is not valid"
    try:
        doc = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, TypeError) as e:
        raise _bad_request(f"{invalid}: {e}") from None
    if not isinstance(doc, dict) or doc.get("v") != "meta.k8s.io/v1":
        raise _bad_request(f"{invalid}: server does not recognize this encoded version")
    rv, start = doc.get("rv"), doc.get("start")
    if not isinstance(rv, int) or rv == 0:
        raise _bad_request(f"{invalid}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    if not isinstance(start, str) or not start:
        raise _bad_request(f"{invalid}: encoded start key empty (version meta.k8s.io/v1)")
    return start, rv


# --------------------------------------------------------------------------- object builders


def _meta(
    name: str,
    namespace: str | None,
    labels: dict[str, str] | None,
    annotations: dict[str, str] | None,
    age_s: float,
    owner: Obj | None,
) -> Obj:
    meta: Obj = {"name": name, "creationTimestamp": _ago(age_s)}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        om = owner.setdefault("metadata", {})
        om.setdefault("uid", str(uuid.uuid4()))
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": om["name"],
                "uid": om["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return meta


def _containers(image: str, containers: list[Obj] | None, env: list[Obj] | None) -> list[Obj]:
    if containers is not None:
        return copy.deepcopy(containers)
    c: Obj = {
        "name": "app",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    if env:
        c["env"] = copy.deepcopy(env)
    return [c]


def pod(
    name: str,
    namespace: str = "default",
    *,
    image: str = "nginx:1.27",
    containers: list[Obj] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    env: list[Obj] | None = None,
    owner: Obj | None = None,
    phase: str = "Running",
    ready: bool = True,
    restarts: int = 0,
    waiting_reason: str | None = None,
    last_terminated_reason: str | None = None,
    last_exit_code: int = 1,
    last_terminated_ago_s: float = 60,
    node: str | None = "node-1",
    ip: str | None = "10.244.0.5",
    age_s: float = 3600,
) -> Obj:
    """A Pod with a status like the kubelet's: ``waiting_reason="CrashLoopBackOff"`` plus ``restarts`` and
    ``last_terminated_reason="Error"`` is a crash-looping pod. ``owner`` (a ReplicaSet dict) sets the
    controller ownerReference (and a uid on the owner if it has none)."""
    specs = _containers(image, containers, env)
    statuses = []
    for c in specs:
        st: Obj = {
            "name": c["name"],
            "image": c["image"],
            "imageID": "",
            "restartCount": restarts,
            "ready": ready and waiting_reason is None,
            "started": waiting_reason is None,
            "containerID": f"containerd://{hashlib.sha1(c['name'].encode()).hexdigest()}",
        }
        if waiting_reason is not None:
            st["state"] = {
                "waiting": {
                    "reason": waiting_reason,
                    "message": f"back-off 5m0s restarting failed container={c['name']} pod={name}_{namespace}",
                }
            }
        elif phase == "Running":
            st["state"] = {"running": {"startedAt": _ago(min(age_s, last_terminated_ago_s))}}
        else:
            st["state"] = {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": _ago(age_s),
                    "finishedAt": _ago(age_s / 2),
                }
            }
        if last_terminated_reason is not None:
            st["lastState"] = {
                "terminated": {
                    "exitCode": last_exit_code,
                    "reason": last_terminated_reason,
                    "startedAt": _ago(last_terminated_ago_s + 5),
                    "finishedAt": _ago(last_terminated_ago_s),
                }
            }
        else:
            st["lastState"] = {}
        statuses.append(st)
    all_ready = all(s["ready"] for s in statuses)
    spec: Obj = {
        "containers": specs,
        "restartPolicy": "Always",
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
    }
    if node:
        spec["nodeName"] = node
    status: Obj = {
        "phase": phase,
        "conditions": [
            {"type": "Initialized", "status": "True", "lastTransitionTime": _ago(age_s)},
            {
                "type": "Ready",
                "status": "True" if all_ready else "False",
                "lastTransitionTime": _ago(age_s),
                **(
                    {}
                    if all_ready
                    else {
                        "reason": "ContainersNotReady",
                        "message": "containers with unready status: ["
                        + " ".join(s["name"] for s in statuses if not s["ready"])
                        + "]",
                    }
                ),
            },
            {"type": "ContainersReady", "status": "True" if all_ready else "False", "lastTransitionTime": _ago(age_s)},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": _ago(age_s)},
        ],
        "containerStatuses": statuses,
        "qosClass": "BestEffort",
        "startTime": _ago(age_s),
    }
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
        status["hostIP"] = "192.168.49.2"
    if labels is None and owner is not None:
        labels = dict(owner.get("spec", {}).get("selector", {}).get("matchLabels", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(name, namespace, labels, annotations, age_s, owner),
        "spec": spec,
        "status": status,
    }


def _pod_template(
    labels: dict[str, str],
    image: str,
    containers: list[Obj] | None,
    env: list[Obj] | None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    meta: Obj = {"labels": dict(labels)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "metadata": meta,
        "spec": {
            "containers": _containers(image, containers, env),
            "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 30,
        },
    }


def deployment(
    name: str,
    namespace: str = "default",
    *,
    image: str = "app:1.0",
    replicas: int = 3,
    ready_replicas: int | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    containers: list[Obj] | None = None,
    env: list[Obj] | None = None,
    change_cause: str | None = None,
    revision: int = 1,
    age_s: float = 86400,
) -> Obj:
    """A Deployment at ``revision`` selecting ``labels`` (default ``{"app": name}``) with its status as if rolled out
    (``ready_replicas`` lower than ``replicas`` makes it unavailable). ``FakeKube.add`` gives it its
    current ReplicaSet unless one with its template is already stored."""
    selector = dict(labels or {"app": name})
    ready = replicas if ready_replicas is None else ready_replicas
    ann = {"deployment.kubernetes.io/revision": str(revision), **(annotations or {})}
    if change_cause is not None:
        ann["kubernetes.io/change-cause"] = change_cause
    conditions = [
        {
            "type": "Available",
            "status": "True" if ready >= replicas else "False",
            "reason": "MinimumReplicasAvailable" if ready >= replicas else "MinimumReplicasUnavailable",
            "message": "Deployment has minimum availability."
            if ready >= replicas
            else "Deployment does not have minimum availability.",
            "lastUpdateTime": _ago(age_s),
            "lastTransitionTime": _ago(age_s),
        },
        {
            "type": "Progressing",
            "status": "True",
            "reason": "NewReplicaSetAvailable",
            "message": f'ReplicaSet "{name}" has successfully progressed.',
            "lastUpdateTime": _ago(age_s),
            "lastTransitionTime": _ago(age_s),
        },
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**_meta(name, namespace, selector, ann, age_s, None), "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": _pod_template(selector, image, containers, env),
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        },
        "status": {
            "observedGeneration": 1,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            **({"unavailableReplicas": replicas - ready} if ready < replicas else {}),
            "conditions": conditions,
        },
    }


def replicaset(
    owner: Obj,
    *,
    revision: int,
    image: str | None = None,
    containers: list[Obj] | None = None,
    change_cause: str | None = None,
    replicas: int = 0,
    age_s: float = 86400 * 2,
) -> Obj:
    """A ReplicaSet of Deployment ``owner`` at ``revision``: the owner's pod template with ``image`` (or
    ``containers``) in place of its own. Its name is ``<deployment>-<pod-template-hash>``, so one with the
    deployment's current template replaces the one ``add`` made."""
    template = copy.deepcopy(owner["spec"]["template"])
    if containers is not None:
        template["spec"]["containers"] = copy.deepcopy(containers)
    elif image is not None:
        template["spec"]["containers"][0]["image"] = image
    return _replicaset_for(owner, template, revision, replicas, change_cause, age_s)


def _replicaset_for(
    owner: Obj, template: Obj, revision: int, replicas: int, change_cause: str | None, age_s: float
) -> Obj:
    template = _strip_hash(template)
    h = _template_hash(template)
    template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
    selector = {**owner["spec"]["selector"].get("matchLabels", {}), "pod-template-hash": h}
    ann = {
        "deployment.kubernetes.io/revision": str(revision),
        "deployment.kubernetes.io/desired-replicas": str(owner["spec"].get("replicas", 1)),
        "deployment.kubernetes.io/max-replicas": str(owner["spec"].get("replicas", 1) + 1),
    }
    if change_cause is not None:
        ann["kubernetes.io/change-cause"] = change_cause
    om = owner["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {**_meta(f"{om['name']}-{h}", om.get("namespace"), selector, ann, age_s, owner), "generation": 1},
        "spec": {"replicas": replicas, "selector": {"matchLabels": selector}, "template": template},
        "status": {
            "replicas": replicas,
            "fullyLabeledReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "observedGeneration": 1,
        },
    }


def statefulset(
    name: str,
    namespace: str = "default",
    *,
    image: str = "app:1.0",
    replicas: int = 3,
    labels: dict[str, str] | None = None,
    age_s: float = 86400,
) -> Obj:
    """A StatefulSet selecting ``labels`` (default ``{"app": name}``), all replicas ready."""
    selector = dict(labels or {"app": name})
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {**_meta(name, namespace, selector, None, age_s, None), "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "serviceName": name,
            "template": _pod_template(selector, image, None, None),
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "podManagementPolicy": "OrderedReady",
            "revisionHistoryLimit": 10,
        },
        "status": {
            "observedGeneration": 1,
            "replicas": replicas,
            "readyReplicas": replicas,
            "currentReplicas": replicas,
            "updatedReplicas": replicas,
            "availableReplicas": replicas,
        },
    }


def event(
    involved: Obj,
    reason: str,
    message: str,
    *,
    type: str = "Warning",
    count: int = 1,
    last_seen_ago_s: float = 30,
    first_seen_ago_s: float | None = None,
    component: str = "kubelet",
    name: str | None = None,
    field_path: str | None = None,
) -> Obj:
    """A core/v1 Event about ``involved`` (any object dict with metadata)."""
    im = involved["metadata"]
    first = last_seen_ago_s if first_seen_ago_s is None else first_seen_ago_s
    ref: Obj = {
        "kind": involved["kind"],
        "namespace": im.get("namespace", "default"),
        "name": im["name"],
        "apiVersion": involved["apiVersion"],
    }
    if im.get("uid"):
        ref["uid"] = im["uid"]
    if field_path:
        ref["fieldPath"] = field_path
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": name or f"{im['name']}.{uuid.uuid4().hex[:16]}",
            "namespace": im.get("namespace", "default"),
            "creationTimestamp": _ago(first),
        },
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "type": type,
        "count": count,
        "firstTimestamp": _ago(first),
        "lastTimestamp": _ago(last_seen_ago_s),
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": "",
    }


def secret(name: str, namespace: str = "default", data: dict[str, str] | None = None) -> Obj:
    """An Opaque Secret; ``data`` values are given plain and stored base64 like the real thing."""
    enc = {k: base64.b64encode(v.encode()).decode() for k, v in (data or {}).items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _meta(name, namespace, None, None, 86400, None),
        "data": enc,
    }


# The kubelet's words for each pressure condition: (reason, message) when False, then when True.
_NODE_CONDITIONS = {
    "MemoryPressure": (
        ("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
    ),
    "DiskPressure": (
        ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("KubeletHasDiskPressure", "kubelet has disk pressure"),
    ),
    "PIDPressure": (
        ("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
    ),
}


def node(name: str, *, ready: bool = True, pressure: Iterable[str] = (), age_s: float = 86400 * 30) -> Obj:
    """A worker Node with one InternalIP; ``pressure`` names the conditions that are True, as the kubelet sets
    them (``"DiskPressure"``, ``"MemoryPressure"``, ``"PIDPressure"``), the others False."""
    pressed = set(pressure)
    conditions = [
        {
            "type": kind,
            "status": "True" if kind in pressed else "False",
            "reason": texts[kind in pressed][0],
            "message": texts[kind in pressed][1],
            "lastHeartbeatTime": _ago(10),
            "lastTransitionTime": _ago(300 if kind in pressed else age_s),
        }
        for kind, texts in _NODE_CONDITIONS.items()
    ]
    node_obj: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(name, None, {"kubernetes.io/hostname": name}, None, age_s, None),
        "spec": {},
        "status": {
            "conditions": [
                *conditions,
                {
                    "type": "Ready",
                    "status": "True" if ready else "Unknown",
                    "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                    "lastHeartbeatTime": _ago(10),
                    "lastTransitionTime": _ago(age_s),
                },
            ],
            "addresses": [{"type": "InternalIP", "address": "192.168.49.2"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                "kubeletVersion": GIT_VERSION,
                "osImage": "Ubuntu 24.04 LTS",
                "kernelVersion": "6.8.0",
                "containerRuntimeVersion": "containerd://1.7.22",
                "architecture": "amd64",
                "operatingSystem": "linux",
            },
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        },
    }
    if "DiskPressure" in pressed:  # the taint the node lifecycle controller adds
        node_obj["spec"]["taints"] = [{"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}]
    return node_obj


# --------------------------------------------------------------------------- selectors

_REQ_SPLIT = re.compile(r",(?![^()]*\))")
_SET_REQ = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_REQ = re.compile(r"^\s*([\w./-]+)\s*(==|!=|=)\s*([\w.-]*)\s*$")
_EXISTS_REQ = re.compile(r"^\s*(!?)\s*([\w./-]+)\s*$")


def _label_ok(labels: dict[str, str], key: str, op: str, values: frozenset[str]) -> bool:
    if op == "in":
        return labels.get(key) in values
    if op == "notin":
        return labels.get(key) not in values
    if op == "=":
        return key in labels and labels[key] in values
    if op == "!=":
        return labels.get(key) not in values
    if op == "exists":
        return key in labels
    return key not in labels  # "!exists"


def label_matcher(selector: str) -> Callable[[dict[str, str]], bool]:
    """A labels.Parse-compatible matcher (equality, set-based and existence requirements)."""
    reqs: list[tuple[str, str, frozenset[str]]] = []
    for part in _REQ_SPLIT.split(selector):
        if not part.strip():
            continue
        if m := _SET_REQ.match(part):
            vals = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append((m.group(1), m.group(2), vals))
        elif m := _EQ_REQ.match(part):
            key, op, val = m.groups()
            reqs.append((key, "!=" if op == "!=" else "=", frozenset({val})))
        elif m := _EXISTS_REQ.match(part):
            neg, key = m.groups()
            reqs.append((key, "!exists" if neg else "exists", frozenset()))
        else:
            raise _bad_request(f"unable to parse requirement: {part.strip()!r}")
    return lambda labels: all(_label_ok(labels, *r) for r in reqs)


def selector_string(match_labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


_FIELDS: dict[str, frozenset[str]] = {
    "pods": frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    "events": frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
    "secrets": frozenset({"type"}),
    "nodes": frozenset({"spec.unschedulable"}),
    "replicasets": frozenset({"status.replicas"}),
}


def _field_value(obj: Obj, path: str) -> str:
    if path == "source":
        return str(obj.get("source", {}).get("component", ""))
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


def field_matcher(res: Resource, selector: str) -> Callable[[Obj], bool]:
    """A fields.Parse-compatible matcher over the fields kube allows for the resource."""
    allowed = {"metadata.name", "metadata.namespace"} | _FIELDS.get(res.plural, frozenset())
    reqs: list[tuple[str, bool, str]] = []
    for part in selector.split(","):
        if not part.strip():
            continue
        m = re.match(r"^\s*([\w.]+)\s*(==|!=|=)\s*(.*?)\s*$", part)
        if not m:
            raise _bad_request(f"invalid selector: '{selector}'; can't understand '{part}'")
        key, op, val = m.groups()
        if key not in allowed:
            raise _bad_request(f"field label not supported: {key}")
        reqs.append((key, op != "!=", val))
    return lambda obj: all((_field_value(obj, k) == v) == eq for k, eq, v in reqs)


# --------------------------------------------------------------------------- patches

# Lists kube merges by a key in a strategic merge patch (the fields opsloop's writes touch, and their kin).
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "conditions": "type",
    "hostAliases": "ip",
    "envFrom": None,
}
_PRIMITIVE_MERGE = frozenset({"finalizers"})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A strategic merge patch: maps merge, ``null`` deletes, keyed lists merge by their merge key,
    ``$patch: replace|delete``, ``$retainKeys``, ``$setElementOrder/…`` and ``$deleteFromPrimitiveList/…``."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys") or k.startswith("$setElementOrder/"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            result[name] = [x for x in result.get(name, []) if x not in v]
            continue
        if v is None:
            result.pop(k, None)
        elif isinstance(v, list):
            result[k] = _merge_list(k, result.get(k), v)
        else:
            merged = strategic_merge_patch(result.get(k), v)
            if merged is None:
                result.pop(k, None)
            else:
                result[k] = merged
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(name: str, current: Any, patch: list[Any]) -> list[Any]:
    current = copy.deepcopy(current) if isinstance(current, list) else []
    if name in _PRIMITIVE_MERGE:
        return current + [x for x in patch if x not in current]
    key = _MERGE_KEYS.get(name)
    if not key or not all(isinstance(x, dict) for x in patch):
        replace = [x for x in patch if not (isinstance(x, dict) and x.get("$patch") == "replace")]
        return copy.deepcopy(replace)
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [
            copy.deepcopy({k: v for k, v in x.items() if k != "$patch"}) for x in patch if x.get("$patch") != "replace"
        ]
    for item in patch:
        idx = next((i for i, c in enumerate(current) if isinstance(c, dict) and c.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                current.pop(idx)
        elif idx is None:
            current.append(strategic_merge_patch({}, item))
        else:
            current[idx] = strategic_merge_patch(current[idx], item)
    return current


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _invalid_patch(f'JSON pointer must be empty or start with a "/": {path!r}')
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _invalid_patch(message: str) -> KubeError:
    return KubeError(422, "Invalid", message)


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    cur = doc
    for p in parts:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            raise _invalid_patch(f'doc is missing path: "{path}": missing value')
    return cur


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    if not isinstance(ops, list):
        raise _bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(doc)
    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        parts = _pointer(path)
        if kind == "test":
            if _walk(doc, parts, path) != op.get("value"):
                raise _invalid_patch(f"testing value {path} failed: test failed")
            continue
        if kind in ("move", "copy"):
            src = _pointer(op.get("from", ""))
            value = copy.deepcopy(_walk(doc, src, op.get("from", "")))
            if kind == "move":
                doc = _remove(doc, src, op.get("from", ""))
            doc = _add(doc, parts, value, path)
        elif kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), path)
        elif kind == "remove":
            doc = _remove(doc, parts, path)
        elif kind == "replace":
            _walk(doc, parts, path)
            doc = _remove(doc, parts, path)
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), path)
        else:
            raise _invalid_patch(f"Unexpected kind: {kind}")
    return doc


def _add(doc: Any, parts: list[str], value: Any, path: str) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise _invalid_patch(f'add operation does not apply: doc is missing path: "{path}"')
    else:
        raise _invalid_patch(f'doc is missing path: "{path}"')
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> Any:
    if not parts:
        return None
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        parent.pop(int(last))
    else:
        raise _invalid_patch(f'doc is missing path: "{path}": missing value')
    return doc


# --------------------------------------------------------------------------- server-side printing


def _col(name: str, type_: str = "string", priority: int = 0, fmt: str = "", desc: str = "") -> Obj:
    return {"name": name, "type": type_, "format": fmt, "description": desc or name, "priority": priority}


def _images(template_spec: Obj) -> tuple[str, str]:
    cs = template_spec.get("containers", [])
    return ",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs)


def _pod_row(p: Obj) -> list[Any]:
    """printPod from pkg/printers/internalversion, the parts a test pod exercises."""
    status = p.get("status", {})
    reason = status.get("reason") or status.get("phase", "")
    restarts, ready = 0, 0
    last_restart: dt.datetime | None = None
    statuses = status.get("containerStatuses", [])
    for c in reversed(statuses):
        restarts += c.get("restartCount", 0)
        term = c.get("lastState", {}).get("terminated")
        finished = _parse_ts(term.get("finishedAt")) if term else None
        if finished is not None and (last_restart is None or finished > last_restart):
            last_restart = finished
        state = c.get("state", {})
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated", {}).get("reason"):
            reason = state["terminated"]["reason"]
        elif state.get("terminated"):
            reason = f"ExitCode:{state['terminated'].get('exitCode', 0)}"
        elif c.get("ready") and "running" in state:
            ready += 1
    if p["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    restarts_s = str(restarts)
    if restarts and last_restart is not None:
        restarts_s = f"{restarts} ({human_duration((_now() - last_restart).total_seconds())} ago)"
    spec = p.get("spec", {})
    gates = spec.get("readinessGates")
    return [
        p["metadata"]["name"],
        f"{ready}/{len(spec.get('containers', []))}",
        reason,
        restarts_s,
        _age(p),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>" if not gates else f"0/{len(gates)}",
    ]


_POD_COLS = [
    _col("Name", fmt="name"),
    _col("Ready"),
    _col("Status"),
    _col("Restarts"),
    _col("Age"),
    _col("IP", priority=1),
    _col("Node", priority=1),
    _col("Nominated Node", priority=1),
    _col("Readiness Gates", priority=1),
]


def _deploy_row(d: Obj) -> list[Any]:
    st, spec = d.get("status", {}), d.get("spec", {})
    names, images = _images(spec.get("template", {}).get("spec", {}))
    return [
        d["metadata"]["name"],
        f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
        st.get("updatedReplicas", 0),
        st.get("availableReplicas", 0),
        _age(d),
        names,
        images,
        selector_string(spec.get("selector", {}).get("matchLabels", {})) or "<none>",
    ]


_DEPLOY_COLS = [
    _col("Name", fmt="name"),
    _col("Ready"),
    _col("Up-to-date", "integer"),
    _col("Available", "integer"),
    _col("Age"),
    _col("Containers", priority=1),
    _col("Images", priority=1),
    _col("Selector", priority=1),
]


def _rs_row(r: Obj) -> list[Any]:
    st, spec = r.get("status", {}), r.get("spec", {})
    names, images = _images(spec.get("template", {}).get("spec", {}))
    return [
        r["metadata"]["name"],
        spec.get("replicas", 1),
        st.get("replicas", 0),
        st.get("readyReplicas", 0),
        _age(r),
        names,
        images,
        selector_string(spec.get("selector", {}).get("matchLabels", {})) or "<none>",
    ]


_RS_COLS = [
    _col("Name", fmt="name"),
    _col("Desired", "integer"),
    _col("Current", "integer"),
    _col("Ready", "integer"),
    _col("Age"),
    _col("Containers", priority=1),
    _col("Images", priority=1),
    _col("Selector", priority=1),
]


def _sts_row(s: Obj) -> list[Any]:
    st, spec = s.get("status", {}), s.get("spec", {})
    names, images = _images(spec.get("template", {}).get("spec", {}))
    return [s["metadata"]["name"], f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 1)}", _age(s), names, images]


_STS_COLS = [
    _col("Name", fmt="name"),
    _col("Ready"),
    _col("Age"),
    _col("Containers", priority=1),
    _col("Images", priority=1),
]


def _event_row(e: Obj) -> list[Any]:
    io = e.get("involvedObject", {})
    last = e.get("lastTimestamp") or e.get("eventTime") or e["metadata"].get("creationTimestamp")
    first = e.get("firstTimestamp") or e["metadata"].get("creationTimestamp")
    return [
        _age({"t": last}, "t"),
        e.get("type", ""),
        e.get("reason", ""),
        f"{io.get('kind', '').lower()}/{io.get('name', '')}",
        io.get("fieldPath", ""),
        e.get("source", {}).get("component", ""),
        e.get("message", "").strip(),
        _age({"t": first}, "t"),
        e.get("count", 1),
        e["metadata"]["name"],
    ]


_EVENT_COLS = [
    _col("Last Seen"),
    _col("Type"),
    _col("Reason"),
    _col("Object"),
    _col("Subobject", priority=1),
    _col("Source", priority=1),
    _col("Message"),
    _col("First Seen", priority=1),
    _col("Count", "integer", 1),
    _col("Name", priority=1, fmt="name"),
]


def _secret_row(s: Obj) -> list[Any]:
    return [s["metadata"]["name"], s.get("type", "Opaque"), len(s.get("data", {}) or {}), _age(s)]


_SECRET_COLS = [_col("Name", fmt="name"), _col("Type"), _col("Data", "integer"), _col("Age")]


def _node_row(n: Obj) -> list[Any]:
    st = n.get("status", {})
    ready: Obj = next((c for c in st.get("conditions", []) if c.get("type") == "Ready"), {})
    addr = {a["type"]: a["address"] for a in st.get("addresses", [])}
    info = st.get("nodeInfo", {})
    return [
        n["metadata"]["name"],
        "Ready" if ready.get("status") == "True" else "NotReady",
        "<none>",
        _age(n),
        info.get("kubeletVersion", ""),
        addr.get("InternalIP", "<none>"),
        addr.get("ExternalIP", "<none>"),
        info.get("osImage", ""),
        info.get("kernelVersion", ""),
        info.get("containerRuntimeVersion", ""),
    ]


_NODE_COLS = [
    _col("Name", fmt="name"),
    _col("Status"),
    _col("Roles"),
    _col("Age"),
    _col("Version"),
    _col("Internal-IP", priority=1),
    _col("External-IP", priority=1),
    _col("OS-Image", priority=1),
    _col("Kernel-Version", priority=1),
    _col("Container-Runtime", priority=1),
]

_PRINTERS: dict[str, tuple[list[Obj], Callable[[Obj], list[Any]]]] = {
    "pods": (_POD_COLS, _pod_row),
    "deployments": (_DEPLOY_COLS, _deploy_row),
    "replicasets": (_RS_COLS, _rs_row),
    "statefulsets": (_STS_COLS, _sts_row),
    "events": (_EVENT_COLS, _event_row),
    "secrets": (_SECRET_COLS, _secret_row),
    "nodes": (_NODE_COLS, _node_row),
}
_DEFAULT_COLS = [_col("Name", fmt="name"), _col("Created At", "date")]


def _default_row(o: Obj) -> list[Any]:
    return [o["metadata"]["name"], o["metadata"].get("creationTimestamp", "")]


def _partial(obj: Obj) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": copy.deepcopy(obj["metadata"])}


def to_table(res: Resource, objs: list[Obj], resource_version: str, include: str) -> Obj:
    cols, row = _PRINTERS.get(res.plural, (_DEFAULT_COLS, _default_row))
    rows = []
    for o in objs:
        r: Obj = {"cells": row(o)}
        if include == "Object":
            r["object"] = {"apiVersion": res.api_version, "kind": res.kind, **copy.deepcopy(o)}
        elif include != "None":
            r["object"] = _partial(o)
        rows.append(r)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": cols,
        "rows": rows,
    }


def _wants(accept: str, as_kind: str) -> bool:
    """True when the Accept header asks for the meta.k8s.io ``as=<as_kind>`` transformation first among JSON."""
    for item in accept.split(","):
        params = dict(p.strip().split("=", 1) for p in item.split(";")[1:] if "=" in p)
        if params.get("as") == as_kind and params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
            return True
    return False


# --------------------------------------------------------------------------- TLS

_TLS_CACHE: dict[str, bytes] = {}


def _tls_material() -> dict[str, bytes]:
    """A CA and a serving certificate for 127.0.0.1/localhost (PEM), made once per process."""
    if _TLS_CACHE:
        return _TLS_CACHE
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kube-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=False,
                crl_sign=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _TLS_CACHE.update(
        ca=ca.public_bytes(serialization.Encoding.PEM),
        cert=leaf.public_bytes(serialization.Encoding.PEM),
        key=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    return _TLS_CACHE


# --------------------------------------------------------------------------- the server


@dataclass
class Request:
    """One request the fake received; ``status`` is filled in when it was answered."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]
    status: int | None = None

    @property
    def dry_run(self) -> bool:
        return self.query.get("dryRun") == "All"

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "").split(";")[0].strip()


@dataclass
class _Denial:
    verb: str
    resource: str  # "pods", "pods/log", "deployments/scale", "*"
    namespace: str | None

    def matches(self, verb: str, resource: str, namespace: str | None) -> bool:
        return (
            self.verb in ("*", verb)
            and self.resource in ("*", resource)
            and (self.namespace is None or self.namespace == namespace)
        )


@dataclass
class _Route:
    res: Resource
    namespace: str | None
    name: str | None
    sub: str | None


class FakeKube:
    """The fake kube-apiserver; see the module docstring. Use ``async with`` (or ``start()``/``close()``)."""

    def __init__(self, token: str = "kube-test-token", *, user: str = DEFAULT_USER, tls: bool = True) -> None:
        self.token = token
        self.user = user
        self.tls = tls
        self.ca_pem = _tls_material()["ca"] if tls else b""
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.ca_file: Path | None = None
        self.requests: list[Request] = []
        self.metrics = False
        self.delay_s = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self._store: dict[tuple[str, str, str], Obj] = {}  # (plural with group, namespace or "", name)
        self._rv = itertools.count(1000)
        self._last_rv = "999"
        self._compacted_rv = 0  # continue tokens from at or before this resourceVersion are expired (410)
        self._denials: list[_Denial] = []
        self._logs: dict[tuple[str, str, str | None, bool], str] = {}
        self._pod_metrics: list[Obj] = []
        self._node_metrics: list[Obj] = []
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._down = False
        self._server_ssl: ssl.SSLContext | None = None
        self.port = 0
        self.url = ""

    # -- lifecycle

    async def start(self) -> FakeKube:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        if self.tls:
            self._tmp = tempfile.TemporaryDirectory(prefix="fake-kube-")
            tmp = Path(self._tmp.name)
            material = _tls_material()
            self.ca_file = tmp / "ca.crt"
            self.ca_file.write_bytes(material["ca"])
            (tmp / "tls.crt").write_bytes(material["cert"])
            (tmp / "tls.key").write_bytes(material["key"])
            self._server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._server_ssl.load_cert_chain(tmp / "tls.crt", tmp / "tls.key")
        self._site = self._new_site(0)
        await self._site.start()
        self.port = self._runner.addresses[0][1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"
        return self

    def _new_site(self, port: int) -> web.TCPSite:
        assert self._runner is not None
        return web.TCPSite(
            self._runner, "127.0.0.1", port, reuse_address=True, ssl_context=self._server_ssl if self.tls else None
        )

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts this server (for a raw aiohttp/httpx client)."""
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        return ctx

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._site = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def __aenter__(self) -> FakeKube:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def down(self) -> None:
        """Stop listening and cut every open connection: the cluster is unreachable (connection refused)."""
        self._down = True
        if self._site is not None:
            await self._site.stop()
            self._site = None
        if self._runner is not None and self._runner.server is not None:
            for conn in list(self._runner.server.connections):
                conn.force_close()
                if conn.transport is not None:
                    conn.transport.abort()

    async def up(self) -> None:
        """Listen again on the same port."""
        assert self._runner is not None, "start() first"
        if self._site is None:
            self._site = self._new_site(self.port)
            await self._site.start()
        self._down = False

    # -- test-facing API

    def write_kubeconfig(
        self,
        path: str | Path,
        context: str = "fake",
        namespace: str = "default",
        *,
        token_file: str | Path | None = None,
        cluster: str = "fake-cluster",
    ) -> Path:
        """A kubeconfig whose current context reaches this server with the bearer token (or ``tokenFile``)."""
        path = Path(path)
        user: Obj = {"tokenFile": str(token_file)} if token_file is not None else {"token": self.token}
        cluster_info: Obj = {"server": self.url}
        if self.tls:
            cluster_info["certificate-authority-data"] = base64.b64encode(self.ca_pem).decode()
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [{"name": cluster, "cluster": cluster_info}],
            "users": [{"name": self.user, "user": user}],
            "contexts": [{"name": context, "context": {"cluster": cluster, "user": self.user, "namespace": namespace}}],
            "current-context": context,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cfg, indent=2))  # JSON is YAML; every kubeconfig loader reads it
        path.chmod(0o600)
        return path

    def add(self, obj: Obj) -> Obj:
        """Store (or replace) an object; fills in uid, resourceVersion and creationTimestamp when missing.
        A Deployment without a ReplicaSet for its template gets one (its current revision)."""
        obj = _drop_nulls(obj)
        res = _resource_for_kind(obj["kind"], obj.get("apiVersion"))
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            meta.setdefault("namespace", "default")
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _ts(_now()))
        meta["resourceVersion"] = self._next_rv()
        obj.setdefault("apiVersion", res.api_version)
        self._store[self._key(res, meta.get("namespace"), meta["name"])] = obj
        if res.plural == "deployments":
            self._reconcile_deployment(obj, initial=True)
        return copy.deepcopy(obj)

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        """The stored object (a copy), or None."""
        res = _resource_for_kind(kind)
        obj = self._store.get(self._key(res, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def objects(self, kind: str, namespace: str | None = None) -> list[Obj]:
        """Every stored object of a kind (copies), in a namespace or all, sorted by namespace and name."""
        return copy.deepcopy(self._objects(_resource_for_kind(kind), namespace))

    def remove(self, kind: str, namespace: str | None, name: str) -> None:
        """Forget an object (as if another actor deleted it)."""
        res = _resource_for_kind(kind)
        self._store.pop(self._key(res, namespace, name), None)
        self._next_rv()

    def touch(self, kind: str, namespace: str | None, name: str, patch: Obj | None = None) -> Obj:
        """Another actor's write: merge-patch ``patch`` (if any) into the stored object and bump its
        resourceVersion, so a client's precondition from before is stale."""
        res = _resource_for_kind(kind)
        key = self._key(res, namespace, name)
        obj = merge_patch(self._store[key], patch or {})
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._store[key] = obj
        return copy.deepcopy(obj)

    def writes(self) -> list[Request]:
        """The requests that would change something: POST/PUT/PATCH/DELETE without dryRun=All (reviews excluded)."""
        return [r for r in self.requests if r.method in WRITE_METHODS and not r.dry_run and "selfsubject" not in r.path]

    def deny(self, verb: str, resource: str, namespace: str | None = None) -> None:
        """Matching requests get 403 Forbidden (``verb``/``resource`` may be ``*``; ``pods/log`` names a
        subresource; ``namespace`` None means every namespace)."""
        self._denials.append(_Denial(verb, resource, namespace))

    def allow(self, verb: str, resource: str, namespace: str | None = None) -> None:
        """Undo a ``deny`` with the same arguments."""
        self._denials = [d for d in self._denials if (d.verb, d.resource, d.namespace) != (verb, resource, namespace)]

    def set_logs(
        self, namespace: str, pod: str, text: str, *, container: str | None = None, previous: bool = False
    ) -> None:
        """What ``pods/log`` returns (``container`` None: the pod's only container, or any container)."""
        self._logs[(namespace, pod, container, previous)] = text

    def set_metrics(self, pods: Iterable[Obj] = (), nodes: Iterable[Obj] = ()) -> None:
        """PodMetrics / NodeMetrics dicts served by metrics.k8s.io (turns ``metrics`` on)."""
        self.metrics = True
        self._pod_metrics = [copy.deepcopy(p) for p in pods]
        self._node_metrics = [copy.deepcopy(n) for n in nodes]

    @staticmethod
    def pod_metrics(name: str, namespace: str, usage: dict[str, dict[str, str]]) -> Obj:
        """A PodMetrics dict: ``usage`` maps container name to ``{"cpu": "250m", "memory": "128Mi"}``."""
        return {
            "kind": "PodMetrics",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": _ts(_now())},
            "timestamp": _ts(_now()),
            "window": "30s",
            "containers": [{"name": c, "usage": u} for c, u in usage.items()],
        }

    @staticmethod
    def node_metrics(name: str, cpu: str, memory: str) -> Obj:
        """A NodeMetrics dict."""
        return {
            "kind": "NodeMetrics",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"name": name, "creationTimestamp": _ts(_now())},
            "timestamp": _ts(_now()),
            "window": "30s",
            "usage": {"cpu": cpu, "memory": memory},
        }

    # -- storage helpers

    def expire_continue_tokens(self) -> None:
        """Every continue token handed out so far is now too old, as after etcd compaction: 410 Expired."""
        self._compacted_rv = int(self._last_rv)

    def _next_rv(self) -> str:
        self._last_rv = str(next(self._rv))
        return self._last_rv

    @staticmethod
    def _key(res: Resource, namespace: str | None, name: str) -> tuple[str, str, str]:
        return (res.qualified, (namespace or "default") if res.namespaced else "", name)

    def _objects(self, res: Resource, namespace: str | None) -> list[Obj]:
        out = [
            o for (q, ns, _), o in self._store.items() if q == res.qualified and (namespace is None or ns == namespace)
        ]
        return sorted(out, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))

    # -- the controller kube would run: ReplicaSet revisions for Deployments

    def _owned_replicasets(self, dep: Obj) -> list[Obj]:
        rs_res = _resource_for_kind("ReplicaSet")
        uid = dep["metadata"]["uid"]
        return [
            r
            for r in self._objects(rs_res, dep["metadata"]["namespace"])
            if any(o.get("uid") == uid and o.get("controller") for o in r["metadata"].get("ownerReferences", []))
        ]

    def _reconcile_deployment(self, dep: Obj, *, initial: bool = False) -> None:
        """Give ``dep`` (the stored dict, changed in place) a ReplicaSet for its template and its revision."""
        owned = self._owned_replicasets(dep)
        revisions = [
            int(r["metadata"].get("annotations", {}).get("deployment.kubernetes.io/revision", "0")) for r in owned
        ]
        top = max(revisions, default=0)
        want = _strip_hash(dep["spec"]["template"])
        current = next((r for r in owned if _strip_hash(r["spec"]["template"]) == want), None)
        rs_res = _resource_for_kind("ReplicaSet")
        replicas = dep["spec"].get("replicas", 1)
        if current is None:
            start_rev = int(dep["metadata"].get("annotations", {}).get("deployment.kubernetes.io/revision", "0"))
            revision = max(top + 1, start_rev if initial else 0, 1)
            cause = dep["metadata"].get("annotations", {}).get("kubernetes.io/change-cause")
            current = _replicaset_for(dep, dep["spec"]["template"], revision, replicas, cause, 0)
            current["metadata"]["uid"] = str(uuid.uuid4())
            current["metadata"]["creationTimestamp"] = _ts(_now())
        else:
            revision = int(current["metadata"]["annotations"].get("deployment.kubernetes.io/revision", "0"))
            if not initial and revision < top:
                revision = top + 1
                current["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = str(revision)
        if not initial:
            for r in owned:
                if r["metadata"]["name"] != current["metadata"]["name"] and r["spec"].get("replicas"):
                    r["spec"]["replicas"] = 0
                    r["status"] = {
                        **r.get("status", {}),
                        "replicas": 0,
                        "readyReplicas": 0,
                        "availableReplicas": 0,
                        "fullyLabeledReplicas": 0,
                    }
                    r["metadata"]["resourceVersion"] = self._next_rv()
            current["spec"]["replicas"] = replicas
        current["metadata"]["resourceVersion"] = self._next_rv()
        self._store[self._key(rs_res, current["metadata"]["namespace"], current["metadata"]["name"])] = current
        dep["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/revision"] = str(revision)

    # -- HTTP

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
        rec = Request(request.method, request.path, dict(request.query), body, dict(request.headers))
        self.requests.append(rec)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if self._down:
                if request.transport is not None:
                    request.transport.abort()
                rec.status = 0
                return web.Response(status=503)
            try:
                resp = self._dispatch(request, rec, raw)
            except KubeError as e:
                resp = web.json_response(e.body, status=e.code)
            rec.status = resp.status
            return resp
        finally:
            self.in_flight -= 1

    def _dispatch(self, request: web.Request, rec: Request, raw: bytes) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if auth != f"Bearer {self.token}":
            return web.json_response(status_object(401, "Unauthorized", "Unauthorized"), status=401)
        path = request.path.rstrip("/") or "/"
        parts = [p for p in path.split("/") if p]
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        if path == "/version":
            return web.json_response(
                {
                    "major": "1",
                    "minor": "32",
                    "gitVersion": GIT_VERSION,
                    "gitCommit": "0" * 40,
                    "gitTreeState": "clean",
                    "buildDate": "2025-04-22T16:00:00Z",
                    "goVersion": "go1.23.8",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                }
            )
        if path == "/api":
            return web.json_response(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.port}"}
                    ],
                }
            )
        if path == "/apis":
            return web.json_response(self._group_list())
        if parts[:1] == ["api"] and len(parts) == 2 and parts[1] == "v1":
            return web.json_response(self._resource_list("", "v1"))
        if parts[:1] == ["apis"] and len(parts) == 2:
            group = next((g for g in self._group_list()["groups"] if g["name"] == parts[1]), None)
            if group is None:
                raise _path_not_found()
            return web.json_response({"kind": "APIGroup", "apiVersion": "v1", **group})
        if parts[:1] == ["apis"] and len(parts) == 3:
            if not self._serves(parts[1], parts[2]):
                raise _path_not_found()
            return web.json_response(self._resource_list(parts[1], parts[2]))
        route = self._route(parts)
        if route is None:
            raise _path_not_found()
        return self._serve(request, rec, route, raw)

    def _serves(self, group: str, version: str) -> bool:
        if group == METRICS_GROUP and not self.metrics:
            return False
        return any(r.group == group and r.version == version for r in RESOURCES)

    def _group_list(self) -> Obj:
        groups = []
        for name in dict.fromkeys(r.group for r in RESOURCES if r.group):
            if name == METRICS_GROUP and not self.metrics:
                continue
            version = next(r.version for r in RESOURCES if r.group == name)
            gv = {"groupVersion": f"{name}/{version}", "version": version}
            groups.append({"name": name, "versions": [gv], "preferredVersion": gv})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _resource_list(self, group: str, version: str) -> Obj:
        resources: list[Obj] = []
        for r in RESOURCES:
            if (r.group, r.version) != (group, version):
                continue
            entry: Obj = {
                "name": r.plural,
                "singularName": r.kind.lower(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(r.verbs),
            }
            if r.short_names:
                entry["shortNames"] = list(r.short_names)
            if r.group in ("", "apps") and r.plural in (
                "pods",
                "deployments",
                "replicasets",
                "statefulsets",
                "daemonsets",
                "services",
            ):
                entry["categories"] = ["all"]
            resources.append(entry)
            for sub in r.subresources:
                sub_entry: Obj = {
                    "name": f"{r.plural}/{sub}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
                if sub == "scale":
                    sub_entry.update(kind="Scale", group="autoscaling", version="v1")
                elif sub == "log":
                    sub_entry.update(kind="Pod", verbs=["get"])
                resources.append(sub_entry)
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}

    def _route(self, parts: list[str]) -> _Route | None:
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
            if not self._serves(group, version):
                return None
        else:
            return None
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        res = _resource(group, version, rest[0])
        if res is None or (namespace is not None and not res.namespaced):
            return None
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in res.subresources:
            return None
        return _Route(res, namespace, name, sub)

    # -- verbs

    def _check(self, verb: str, route: _Route) -> None:
        resource = f"{route.res.plural}/{route.sub}" if route.sub else route.res.plural
        namespace = route.namespace if route.res.namespaced else None
        if any(d.matches(verb, resource, namespace) for d in self._denials):
            what = f'{route.res.qualified} "{route.name}"' if route.name else route.res.qualified
            where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
            raise KubeError(
                403,
                "Forbidden",
                f'{what} is forbidden: User "{self.user}" cannot {verb} resource "{resource}" '
                f'in API group "{route.res.group}" {where}',
                _details(route.res, route.name),
            )

    def _serve(self, request: web.Request, rec: Request, route: _Route, raw: bytes) -> web.Response:
        method = request.method
        q = request.query
        res = route.res
        if res.group == REVIEW_GROUP:
            if method != "POST" or route.name is not None:
                raise _not_allowed()
            return self._review(request, res, rec.body)
        dry = q.get("dryRun")
        if dry is not None and dry not in ("All", ""):
            raise _bad_request(f'Invalid dryRun value: "{dry}"; supported: "All"')
        if q.get("watch") in ("true", "1"):
            self._check("watch", route)
            raise KubeError(405, "MethodNotAllowed", "the fake kube-apiserver does not serve watch")
        if method == "GET":
            if route.name is None:
                self._check("list", route)
                return self._list(request, route)
            self._check("get", route)
            if route.sub == "log":
                return self._log(route, q)
            if route.sub == "scale":
                return web.json_response(self._scale_of(route, self._stored(route)))
            return self._respond_one(request, res, self._stored(route))
        if method == "POST" and route.name is None:
            self._check("create", route)
            return self._create(request, route, rec.body, dry == "All")
        if method == "DELETE" and route.name is not None and route.sub is None:
            self._check("delete", route)
            return self._delete(route, rec.body, dry == "All")
        if method in ("PUT", "PATCH") and route.name is not None and route.sub in (None, "scale", "status"):
            self._check("update" if method == "PUT" else "patch", route)
            return self._write(request, route, rec.body, raw, dry == "All")
        raise _not_allowed()

    def _stored(self, route: _Route) -> Obj:
        assert route.name is not None
        if route.res.group == METRICS_GROUP:
            pool = self._pod_metrics if route.res.plural == "pods" else self._node_metrics
            for m in pool:
                if m["metadata"]["name"] == route.name and m["metadata"].get("namespace") == route.namespace:
                    return m
            raise KubeError(
                404,
                "NotFound",
                f'{route.res.plural}.metrics.k8s.io "{route.name}" not found',
                _details(route.res, route.name),
            )
        obj = self._store.get(self._key(route.res, route.namespace, route.name))
        if obj is None:
            raise _not_found(route.res, route.name)
        return obj

    def _respond_one(self, request: web.Request, res: Resource, obj: Obj) -> web.Response:
        accept = request.headers.get("Accept", "")
        if _wants(accept, "Table"):
            return web.json_response(
                to_table(
                    res,
                    [obj],
                    obj["metadata"].get("resourceVersion", ""),
                    request.query.get("includeObject", "Metadata"),
                )
            )
        if _wants(accept, "PartialObjectMetadata"):
            return web.json_response(_partial(obj))
        return web.json_response({"apiVersion": res.api_version, "kind": res.kind, **copy.deepcopy(obj)})

    def _list(self, request: web.Request, route: _Route) -> web.Response:
        res, q = route.res, request.query
        if res.group == METRICS_GROUP:
            pool = self._pod_metrics if res.plural == "pods" else self._node_metrics
            objs = [
                copy.deepcopy(m)
                for m in pool
                if route.namespace is None or m["metadata"].get("namespace") == route.namespace
            ]
        else:
            objs = self._objects(res, route.namespace if res.namespaced else None)
        if sel := q.get("labelSelector"):
            match = label_matcher(sel)
            objs = [o for o in objs if match(o["metadata"].get("labels", {}) or {})]
        if sel := q.get("fieldSelector"):
            fmatch = field_matcher(res, sel)
            objs = [o for o in objs if fmatch(o)]
        rv = self._last_rv
        list_meta: Obj = {"resourceVersion": rv}
        if res.group != METRICS_GROUP:
            objs, list_meta = self._page(objs, q, keyed_by_name=route.namespace is not None or not res.namespaced)
        accept = request.headers.get("Accept", "")
        if _wants(accept, "Table"):
            table = to_table(res, objs, list_meta["resourceVersion"], q.get("includeObject", "Metadata"))
            return web.json_response({**table, "metadata": {**table["metadata"], **list_meta}})
        if _wants(accept, "PartialObjectMetadataList"):
            return web.json_response(
                {
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": list_meta,
                    "items": [_partial(o) for o in objs],
                }
            )
        # List items carry no kind/apiVersion, like the real server's.
        items = [{k: copy.deepcopy(v) for k, v in o.items() if k not in ("kind", "apiVersion")} for o in objs]
        return web.json_response(
            {
                "kind": f"{res.kind}List",
                "apiVersion": res.api_version,
                "metadata": list_meta,
                "items": items,
            }
        )

    def _page(self, objs: list[Obj], q: Any, *, keyed_by_name: bool) -> tuple[list[Obj], Obj]:
        """`objs` (in key order, selectors applied) cut to the page `limit` and `continue` ask for, and the list's
        metadata: resourceVersion (the first page's, on every later page), continue, remainingItemCount."""

        def key(o: Obj) -> str:
            meta = o["metadata"]
            return meta["name"] if keyed_by_name else f"{meta.get('namespace', '')}/{meta['name']}"

        rv = int(self._last_rv)
        if token := q.get("continue"):
            if q.get("resourceVersion") not in (None, "", "0"):
                raise _bad_request("specifying resource version is not allowed when using continue")
            start, rv = _decode_continue(token)
            if rv <= self._compacted_rv:
                raise KubeError(410, "Expired", _EXPIRED)
            objs = [o for o in objs if key(o) >= start]
        limit = int(q.get("limit") or 0)
        meta: Obj = {"resourceVersion": str(rv)}
        if 0 < limit < len(objs):
            meta["continue"] = _encode_continue(key(objs[limit - 1]) + "\x00", rv)
            if not q.get("labelSelector") and not q.get("fieldSelector"):
                meta["remainingItemCount"] = len(objs) - limit
            objs = objs[:limit]
        return objs, meta

    def _log(self, route: _Route, q: Any) -> web.Response:
        p = self._stored(route)
        names = [c["name"] for c in p.get("spec", {}).get("containers", [])]
        inits = [c["name"] for c in p.get("spec", {}).get("initContainers", [])]
        container = q.get("container")
        if not container:
            if len(names) != 1:
                msg = f"a container name must be specified for pod {route.name}, choose one of: [{' '.join(names)}]"
                if inits:
                    msg += f" or one of the init containers: [{' '.join(inits)}]"
                raise _bad_request(msg)
            container = names[0]
        elif container not in names + inits:
            raise _bad_request(f"container {container} is not valid for pod {route.name}")
        previous = q.get("previous") in ("true", "1")
        ns = route.namespace or "default"
        assert route.name is not None
        text = self._logs.get((ns, route.name, container, previous))
        if text is None:
            text = self._logs.get((ns, route.name, None, previous))
        if text is None:
            if previous:
                raise _bad_request(f'previous terminated container "{container}" in pod "{route.name}" not found')
            text = ""
        lines = text.splitlines(keepends=True)
        if since := q.get("sinceSeconds"):
            cutoff = _now() - dt.timedelta(seconds=int(since))
            kept = []
            for line in lines:
                when = _parse_ts(line.split(" ", 1)[0])
                if when is None or when >= cutoff:
                    kept.append(line)
            lines = kept
        if (tail := q.get("tailLines")) is not None:
            n = int(tail)
            lines = lines[-n:] if n > 0 else []
        out = "".join(lines).encode()
        if limit := q.get("limitBytes"):
            out = out[: int(limit)]
        return web.Response(body=out, content_type="text/plain")

    def _scale_of(self, route: _Route, obj: Obj) -> Obj:
        if route.res.plural not in _SCALABLE:
            raise _path_not_found()
        m = obj["metadata"]
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": m["name"],
                "namespace": m.get("namespace"),
                "uid": m.get("uid"),
                "resourceVersion": m.get("resourceVersion"),
                "creationTimestamp": m.get("creationTimestamp"),
            },
            "spec": {"replicas": obj.get("spec", {}).get("replicas", 1)},
            "status": {
                "replicas": obj.get("status", {}).get("replicas", 0),
                "selector": selector_string(obj.get("spec", {}).get("selector", {}).get("matchLabels", {})),
            },
        }

    def _conflict(self, res: Resource, name: str) -> KubeError:
        return KubeError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {res.qualified} "{name}": the object has been modified; '
            f"please apply your changes to the latest version and try again",
            _details(res, name),
        )

    def _create(self, request: web.Request, route: _Route, body: Any, dry: bool) -> web.Response:
        _json_body(request)
        if not isinstance(body, dict):
            raise _bad_request("the body of the request was in an unknown format")
        res = route.res
        meta = body.setdefault("metadata", {})
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = meta["generateName"] + uuid.uuid4().hex[:5]
            meta["name"] = name
        if not name:
            raise KubeError(
                422,
                "Invalid",
                f'{res.kind} "" is invalid: metadata.name: Required value: name or generateName is required',
            )
        if res.namespaced:
            if meta.get("namespace") not in (None, route.namespace):
                raise _bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = route.namespace
        key = self._key(res, route.namespace, name)
        if key in self._store:
            raise KubeError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists', _details(res, name))
        obj = _drop_nulls({**body, "apiVersion": res.api_version, "kind": res.kind})
        meta = obj["metadata"]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _ts(_now())
        meta["resourceVersion"] = self._last_rv if dry else self._next_rv()
        if not dry:
            self._store[key] = copy.deepcopy(obj)
        return web.json_response(obj, status=201)

    def _delete(self, route: _Route, body: Any, dry: bool) -> web.Response:
        obj = self._stored(route)
        pre = (body or {}).get("preconditions") or {} if isinstance(body, dict) else {}
        m = obj["metadata"]
        if pre.get("resourceVersion") and pre["resourceVersion"] != m.get("resourceVersion"):
            raise KubeError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {route.res.qualified} "{route.name}": the '
                f"ResourceVersion in the precondition ({pre['resourceVersion']}) does not match the "
                f"ResourceVersion in record ({m.get('resourceVersion')}). The object might have been "
                f"modified",
                _details(route.res, route.name),
            )
        if pre.get("uid") and pre["uid"] != m.get("uid"):
            raise KubeError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {route.res.qualified} "{route.name}": Precondition '
                f"failed: UID in precondition: {pre['uid']}, UID in object meta: {m.get('uid')}",
                _details(route.res, route.name),
            )
        gone = {"apiVersion": route.res.api_version, "kind": route.res.kind, **copy.deepcopy(obj)}
        if route.res.plural == "pods":
            grace = (body or {}).get("gracePeriodSeconds", 30) if isinstance(body, dict) else 30
            gone["metadata"]["deletionTimestamp"] = _ts(_now() + dt.timedelta(seconds=grace or 0))
            gone["metadata"]["deletionGracePeriodSeconds"] = grace
        if not dry:
            del self._store[self._key(route.res, route.namespace, m["name"])]
            self._next_rv()
        return web.json_response(gone)

    def _write(self, request: web.Request, route: _Route, body: Any, raw: bytes, dry: bool) -> web.Response:
        res = route.res
        stored = self._stored(route)
        current_rv = stored["metadata"].get("resourceVersion")
        is_scale = route.sub == "scale"
        if is_scale and res.plural not in _SCALABLE:
            raise _path_not_found()
        base = (
            self._scale_of(route, stored)
            if is_scale
            else {"apiVersion": res.api_version, "kind": res.kind, **copy.deepcopy(stored)}
        )
        if request.method == "PUT":
            _json_body(request)
            if not isinstance(body, dict):
                raise _bad_request("the body of the request was in an unknown format")
            new = copy.deepcopy(body)
        else:
            ptype = PATCH_TYPES.get(request.content_type)
            if ptype is None:
                raise KubeError(415, "UnsupportedMediaType", _UNSUPPORTED_PATCH)
            if body is None or isinstance(body, str):
                raise _bad_request(f"error decoding patch: {raw[:80]!r}")
            if ptype == "json":
                new = json_patch(base, body)
            elif ptype == "merge":
                if not isinstance(body, dict):
                    raise _bad_request("json: cannot unmarshal array into Go value of type map[string]interface {}")
                new = merge_patch(base, body)
            else:
                if not isinstance(body, dict):
                    raise _bad_request("json: cannot unmarshal array into Go value of type map[string]interface {}")
                new = strategic_merge_patch(base, body)
        if not isinstance(new, dict):
            raise _invalid_patch("the patch produced something that is not an object")
        new = _drop_nulls(new)
        nm = new.setdefault("metadata", {})
        sent_rv = nm.get("resourceVersion")
        if sent_rv and sent_rv != current_rv:
            raise self._conflict(res, route.name or "")
        if nm.get("name") not in (None, route.name):
            raise _bad_request(
                f"the name of the object ({nm.get('name')}) does not match the name on the URL ({route.name})"
            )
        if is_scale:
            replicas = new.get("spec", {}).get("replicas")
            if not isinstance(replicas, int) or replicas < 0:
                raise KubeError(
                    422,
                    "Invalid",
                    f'Scale.autoscaling "{route.name}" is invalid: spec.replicas: '
                    f"Invalid value: {replicas}: must be greater than or equal to 0",
                )
            result = copy.deepcopy(stored)
            result["spec"]["replicas"] = replicas
        elif route.sub == "status":
            result = copy.deepcopy(stored)
            result["status"] = new.get("status", {})
        else:
            result = new
            result["apiVersion"], result["kind"] = res.api_version, res.kind
            # What the server owns, whatever the client sent.
            for k in ("uid", "creationTimestamp", "namespace", "name"):
                if k in stored["metadata"]:
                    result["metadata"][k] = stored["metadata"][k]
            result["status"] = copy.deepcopy(stored.get("status", {})) if "status" in stored else result.get("status")
            if result.get("status") is None:
                result.pop("status", None)
        if result.get("spec") != stored.get("spec") and "generation" in stored["metadata"]:
            result["metadata"]["generation"] = stored["metadata"]["generation"] + 1
        result["metadata"]["resourceVersion"] = current_rv
        if not dry and result != stored:  # a no-op write keeps its resourceVersion, as kube's does
            result["metadata"]["resourceVersion"] = self._next_rv()
            if res.plural == "deployments" and result["spec"].get("template") != stored["spec"].get("template"):
                self._reconcile_deployment(result)
            self._store[self._key(res, route.namespace, route.name or "")] = copy.deepcopy(result)
        if is_scale:
            return web.json_response(self._scale_of(route, result))
        return web.json_response({"apiVersion": res.api_version, "kind": res.kind, **copy.deepcopy(result)})

    def _review(self, request: web.Request, res: Resource, body: Any) -> web.Response:
        _json_body(request)
        if not isinstance(body, dict):
            raise _bad_request("the body of the request was in an unknown format")
        spec = body.get("spec", {})
        out = {"apiVersion": res.api_version, "kind": res.kind, "metadata": {"creationTimestamp": None}, "spec": spec}
        if res.plural == "selfsubjectaccessreviews":
            attrs = spec.get("resourceAttributes") or {}
            resource = attrs.get("resource", "")
            if attrs.get("subresource"):
                resource += "/" + attrs["subresource"]
            denied = any(
                d.matches(attrs.get("verb", ""), resource, attrs.get("namespace") or None) for d in self._denials
            )
            out["status"] = {"allowed": not denied}
        else:
            namespace = spec.get("namespace") or None
            rules = []
            for r in RESOURCES:
                if r.group in (REVIEW_GROUP,) or (r.group == METRICS_GROUP and not self.metrics):
                    continue
                for name in (r.plural, *(f"{r.plural}/{s}" for s in r.subresources)):
                    verbs = [
                        v
                        for v in (r.verbs if "/" not in name else ("get", "patch", "update"))
                        if not any(d.matches(v, name, namespace) for d in self._denials)
                    ]
                    if verbs:
                        rules.append({"verbs": verbs, "apiGroups": [r.group], "resources": [name]})
            rules.append(
                {
                    "verbs": ["create"],
                    "apiGroups": [REVIEW_GROUP],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                }
            )
            out["status"] = {
                "resourceRules": rules,
                "nonResourceRules": [
                    {
                        "verbs": ["get"],
                        "nonResourceURLs": [
                            "/api",
                            "/api/*",
                            "/apis",
                            "/apis/*",
                            "/healthz",
                            "/livez",
                            "/readyz",
                            "/version",
                            "/version/",
                        ],
                    }
                ],
                "incomplete": False,
            }
        return web.json_response(out, status=201)


def _path_not_found() -> KubeError:
    return KubeError(404, "NotFound", "the server could not find the requested resource", {})


def _not_allowed() -> KubeError:
    return KubeError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def _json_body(request: web.Request) -> None:
    """POST/PUT bodies must be JSON: the real server also reads protobuf (kubectl's typed clients send it for
    ``auth can-i``), the fake does not, and says so with the real server's 415 for unknown formats."""
    ctype = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
    if ctype not in ("application/json", ""):
        raise KubeError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"application/json (the fake kube-apiserver reads no {ctype})",
        )
