"""The read-only Kubernetes tools: get, describe, events, logs, rollout history, top. Each checks its cluster,
namespace and kind before any request, and answers compact text (never the raw JSON)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, Literal

from bot.core.redact import redact
from tools.api import BadCall, PermissionDenied, some_names
from tools.k8s import describe, render
from tools.k8s.clusters import KINDS, KubeClient, NotFound, check_name, clusters_of, kind_of
from tools.k8s.columns import meta, node_problems, one_line, parse_since, parse_time, pod_unhealthy, when_text
from tools.k8s.gitops import managed_line, source_of_truth
from tools.patterns import compile_pattern
from tools.registry import Category, ToolContext, ToolError, tool

LIST_LIMIT = 500
MAX_LOG_BYTES = 512 * 1024
LOG_CHARS = 10_000
MAX_TAIL_LINES = 2_000
PATTERN_TAIL_LINES = 2_000  # a pattern searches this many of the last lines unless tail_lines says otherwise
MAX_MATCHES = 200
MAX_NODES = 10  # the nodes whose conditions one read looks up
METRICS = "/apis/metrics.k8s.io/v1beta1"


def _ns(client: KubeClient, namespaced: bool, namespace: str | None) -> str | None:
    return client.namespace(namespace) if namespaced else None


async def list_objects(
    client: KubeClient,
    kind: str,
    namespace: str | None,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    k = KINDS[kind]
    body = await client.request(
        "GET",
        k.path(namespace),
        verb="list",
        kind=k,
        namespace=namespace,
        query={"labelSelector": label_selector, "fieldSelector": field_selector, "limit": LIST_LIMIT},
    )
    items = [dict(i, kind=k.kind) for i in body.get("items") or []]
    return items, bool((body.get("metadata") or {}).get("continue"))


async def get_object(client: KubeClient, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
    k = KINDS[kind]
    try:
        obj = await client.request("GET", k.path(namespace, name), verb="get", kind=k, namespace=namespace)
    except NotFound:
        where = f" in namespace {namespace}" if namespace else ""
        raise BadCall(f"{k.kind.lower()} {name!r} not found{where} on cluster {client.name}") from None
    obj.setdefault("kind", k.kind)
    return dict(obj)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def k8s_get(
    kind: str,
    name: str | None = None,
    selector: str | None = None,
    namespace: str | None = None,
    cluster: str | None = None,
    *,
    ctx: ToolContext,
) -> str:
    """List Kubernetes objects, or get one, on a configured cluster.

    Returns a `kubectl get -o wide` table (pods: ready, status, restarts, age, node, images), at most 500 objects
    per call; an empty answer names the kind, selector, namespace and cluster that matched nothing. Secrets are
    never read.
    Use it to see which pods are not ready or restarting, e.g. k8s_get("pod", selector="app=api").

    Args:
        kind: pod, deployment, replicaset, statefulset, daemonset, service, configmap, job, cronjob, ingress,
            pvc, hpa, node, namespace (Secrets are never read).
        name: one object by name; omit to list.
        selector: a label selector when listing, e.g. app=api,tier!=cache.
        namespace: the namespace; default: the cluster's default_namespace, else its only allowed namespace,
            else "default" when it allows any; required when it allows several and sets no default (the error
            lists them).
        cluster: the configured cluster name (optional when only one is configured).
    """
    client = clusters_of(ctx).get(cluster)
    k = kind_of(kind)
    ns = _ns(client, k.namespaced, namespace)
    if name is not None:
        items, more = [await get_object(client, k.kind, ns, check_name(name))], False
    else:
        items, more = await list_objects(client, k.kind, ns, label_selector=selector or None)
    if not items:  # name what was asked, so "nothing" can be trusted
        scope = f" in namespace {ns}" if ns else ""
        matching = f" matching {selector!r}" if selector else ""
        return f"no {k.kind} objects{matching}{scope} on cluster {client.name}"
    if k.kind == "Event":
        return describe.events_table(items)
    nodes, unread = await pod_nodes(client, items) if k.kind == "Pod" else ({}, "")
    out = render.get_table(k.kind, items, more=more, nodes=nodes)
    notes = [*node_notes(nodes), *([unread] if unread else []), *gitops_notes(items)]
    return "\n".join([out, *notes])


async def pod_nodes(client: KubeClient, pods: list[dict[str, Any]]) -> tuple[dict[str, list[str]], str]:
    """The problems (DiskPressure, NotReady, …) of the nodes that pending, evicted or failed pods are on, at most
    ten nodes; and a note when the nodes could not be read (credentials limited to namespaces)."""
    names = sorted({str((p.get("spec") or {}).get("nodeName")) for p in pods if pod_unhealthy(p)} - {"None", ""})
    names = names[:MAX_NODES]

    async def one(name: str) -> list[str]:
        return node_problems(await get_object(client, "Node", None, name))

    try:
        found = await asyncio.gather(*(one(n) for n in names))
    except (ToolError, PermissionDenied) as e:
        return {}, f"(the conditions of node(s) {', '.join(names)} could not be read: {str(e)[:200]})"
    return {n: problems for n, problems in zip(names, found, strict=True) if problems}, ""


def node_notes(nodes: dict[str, list[str]]) -> list[str]:
    return [f"node {name}: {'; '.join(problems)}" for name, problems in sorted(nodes.items())]


def gitops_notes(items: list[dict[str, Any]], limit: int = 10) -> list[str]:
    """'managed by GitOps (Argo CD application shop): api, web': the objects a controller may put back."""
    by_source: dict[str, list[str]] = {}
    for o in items:
        if source := source_of_truth(o):
            by_source.setdefault(source, []).append(str(meta(o).get("name")))
    return [
        f"managed by GitOps ({source}; a change made by hand may be reverted at its next sync): "
        + some_names(names, limit)
        for source, names in by_source.items()
    ]


async def owner_chain(client: KubeClient, obj: dict[str, Any], namespace: str | None) -> list[str]:
    """`ReplicaSet api-5d8`, `Deployment api`: each controller owner, up to three levels."""
    chain: list[str] = []
    current = obj
    for _ in range(3):
        refs = meta(current).get("ownerReferences") or []
        ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
        if ref is None:
            break
        chain.append(f"{ref.get('kind')} {ref.get('name')}")
        if ref.get("kind") not in KINDS or not KINDS[ref["kind"]].namespaced or namespace is None:
            break
        try:
            current = await get_object(client, ref["kind"], namespace, str(ref.get("name")))
        except ToolError:
            break
    return chain


async def object_events(client: KubeClient, namespace: str, kind: str | None, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={name},involvedObject.namespace={namespace}"
    if kind:
        selector += f",involvedObject.kind={kind}"
    items, _ = await list_objects(client, "Event", namespace, field_selector=selector)
    return items


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def k8s_describe(
    kind: str, name: str, namespace: str | None = None, cluster: str | None = None, *, ctx: ToolContext
) -> str:
    """Describe one Kubernetes object on a configured cluster, as `kubectl describe` does.

    Returns its spec summary (containers, images, resources, probes, env as references: never values), status
    and conditions, its owner chain (pod ← replicaset ← deployment) and its recent events (at most 50). Secrets
    are never read. Use it when k8s_get shows a pod failing, to see why (OOMKilled, probe failures, image pull).

    Args:
        kind: pod, deployment, replicaset, statefulset, daemonset, service, node, job, … (never Secret).
        name: the object's name.
        namespace: the namespace; default: the cluster's default_namespace, else its only allowed namespace,
            else "default" when it allows any; required when it allows several and sets no default (the error
            lists them).
        cluster: the configured cluster name (optional when only one is configured).
    """
    client = clusters_of(ctx).get(cluster)
    k = kind_of(kind)
    ns = _ns(client, k.namespaced, namespace)
    obj = await get_object(client, k.kind, ns, check_name(name))
    if ns is not None:
        owners, events = await asyncio.gather(owner_chain(client, obj, ns), object_events(client, ns, k.kind, name))
    else:
        owners, events = await owner_chain(client, obj, ns), []
    extra = [line] if (line := managed_line(obj)) else []
    if k.kind == "Node" and (problems := node_problems(obj)):
        extra.append(f"node problems: {'; '.join(problems)}")
    elif k.kind == "Pod":
        nodes, unread = await pod_nodes(client, [obj])
        extra += [*node_notes(nodes), *([unread] if unread else [])]
    return describe.describe(obj, owners=owners, events=events, extra=extra)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def k8s_events(
    namespace: str | None = None,
    kind: str | None = None,
    name: str | None = None,
    warnings_only: bool = False,
    since: str | None = None,
    cluster: str | None = None,
    *,
    ctx: ToolContext,
) -> str:
    """The events of a namespace, or of one object, on a configured cluster, optionally over a time window.

    Returns a table of events, warnings first then the newest: last seen, type, reason, object, count and
    message, at most 50; with `since` only the events last seen in the window (by lastTimestamp, else eventTime),
    and the result names the window and how many events it left out. With none it names the namespace and window
    asked. Kubernetes keeps events for about an hour, so older problems are not there. Use it to see what the
    cluster did recently, e.g. scheduling failures, evictions or failed probes; since="30m" for the incident's
    window.

    Args:
        namespace: the namespace; default: the cluster's default_namespace, else its only allowed namespace,
            else "default" when it allows any; required when it allows several and sets no default (the error
            lists them).
        kind: with name: only this object's events (pod, deployment, …).
        name: only the events of the object with this name.
        warnings_only: only Warning events.
        since: only events last seen in this window: a duration before now ("30m", "2h", "1d") or an ISO 8601
            time ("2024-05-01T10:00:00Z"; no zone: UTC).
        cluster: the configured cluster name (optional when only one is configured).
    """
    client = clusters_of(ctx).get(cluster)
    ns = client.namespace(namespace)
    k = kind_of(kind) if kind else None
    now = datetime.now(UTC)
    start = parse_since(since, now) if since is not None else None
    if name is not None:
        items = await object_events(client, ns, k.kind if k else None, check_name(name))
    else:
        items, _ = await list_objects(client, "Event", ns)
    if warnings_only:
        items = [e for e in items if e.get("type") == "Warning"]
    window, older = "", 0
    if start is not None:
        window = f" since {when_text(start, now)}"
        kept = [e for e in items if (t := parse_time(describe.event_time(e))) is None or t >= start]
        items, older = kept, len(items) - len(kept)
    if not items:  # name what was asked, so "nothing" can be trusted
        which = "Warning events" if warnings_only else "events"
        of = f" of {name}" if name is not None else ""
        left = f" ({older} older events left out)" if older else ""
        return (
            f"no {which}{of} in namespace {ns} on cluster {client.name}{window}{left} "
            "(Kubernetes keeps events about an hour)"
        )
    out = describe.events_table(items, now=now)
    if start is not None:
        out = f"events{window}; {older} older events left out\n" + out
    return out


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def k8s_logs(
    pod: str,
    container: str | None = None,
    previous: bool = False,
    tail_lines: int | None = None,
    since_seconds: int | None = None,
    pattern: str | None = None,
    namespace: str | None = None,
    cluster: str | None = None,
    *,
    ctx: ToolContext,
) -> str:
    """The recent log lines of one container of a pod on a configured cluster, or the lines matching a pattern,
    and when and why the container last restarted.

    Returns the last tail_lines lines (1 to 2,000; default 200), secrets redacted, bounded to about 10,000
    characters (the newest kept) and 512 KiB read; `previous` reads the terminated instance, e.g. the one that
    crashed. With `pattern` (RE2, as grep_log: no backreferences or lookaround) it searches the last tail_lines
    lines (default 2,000), says how many matched in all, and shows the newest matches (at most 200 lines, about
    10,000 characters). The second line gives the container's restart count and its last termination: reason
    (OOMKilled, Error), exit code and when. Use it after k8s_get shows a pod in CrashLoopBackOff, with
    previous=true to see why it died, or with pattern="(?i)error|panic" to find the one error among many lines.

    Args:
        pod: the pod's name.
        container: the container; required when the pod has more than one.
        previous: the previous (terminated) instance's logs, e.g. after a CrashLoopBackOff.
        tail_lines: how many of the last lines to read (1-2000); default 200, or 2000 with a pattern.
        since_seconds: only lines newer than this many seconds.
        pattern: only the lines this regular expression (RE2 syntax) matches, all of them counted.
        namespace: the namespace; default: the cluster's default_namespace, else its only allowed namespace,
            else "default" when it allows any; required when it allows several and sets no default (the error
            lists them).
        cluster: the configured cluster name (optional when only one is configured).
    """
    client = clusters_of(ctx).get(cluster)
    ns = client.namespace(namespace)
    check_name(pod, "pod")
    regex = compile_pattern(pattern, "k8s_logs") if pattern is not None else None
    if tail_lines is None:
        tail_lines = PATTERN_TAIL_LINES if regex is not None else 200
    if not 1 <= tail_lines <= MAX_TAIL_LINES:
        raise ToolError(f"tail_lines must be between 1 and {MAX_TAIL_LINES}")
    if since_seconds is not None and since_seconds < 1:
        raise ToolError("since_seconds must be at least 1")
    obj = await get_object(client, "Pod", ns, pod)
    spec = obj.get("spec") or {}
    names = [str(c.get("name")) for c in spec.get("containers") or []]
    inits = [str(c.get("name")) for c in spec.get("initContainers") or []]
    if container is None:
        if len(names) != 1:
            raise ToolError(
                f"pod {pod} has {len(names)} containers; give container, one of: {', '.join(names)}"
                + (f" (init containers: {', '.join(inits)})" if inits else "")
            )
        container = names[0]
    elif container not in names + inits:
        raise ToolError(f"pod {pod} has no container {container!r}; its containers: {', '.join(names + inits)}")
    query = {
        "container": container,
        "previous": "true" if previous else None,
        "tailLines": tail_lines,
        "sinceSeconds": since_seconds,
        "limitBytes": MAX_LOG_BYTES,
    }
    text = await client.request(
        "GET", KINDS["Pod"].path(ns, pod, "log"), verb="get", kind="pods/log", namespace=ns, query=query, text=True
    )
    lines = redact(str(text)).splitlines()
    which = "previous instance of " if previous else ""
    restarts = restart_line(obj, container)
    if regex is not None:
        read = len(lines)
        lines = [line for line in lines if regex.search(line)]
        head = (
            f"logs of {which}pod {ns}/{pod} container {container}: {len(lines)} of the last {read} lines "
            f"match {pattern!r}"
        )
        if not lines:
            return f"{head}\n{restarts}\n(no line matched)"
        if len(lines) > MAX_MATCHES:
            head += f"; the oldest {len(lines) - MAX_MATCHES} matches not shown"
            lines = lines[-MAX_MATCHES:]
    else:
        head = f"logs of {which}pod {ns}/{pod} container {container}: last {len(lines)} lines"
        if not lines:
            return f"{head}\n{restarts}\n(no log lines)"
    body, cut = "\n".join(lines), 0
    while len(body) > LOG_CHARS and len(lines) > 1:  # keep the newest lines: the end of a log is what matters
        drop = max(1, len(lines) // 10)
        lines, cut = lines[drop:], cut + drop
        body = "\n".join(lines)
    if len(body) > LOG_CHARS:
        body = body[-LOG_CHARS:]
    if cut:
        head += f" (the oldest {cut} of them not shown: narrow with tail_lines, since_seconds or pattern)"
    return f"{head}\n{restarts}\n{body}"


def restart_line(pod: dict[str, Any], container: str) -> str:
    """'container api: 7 restarts; last terminated OOMKilled, exit code 137, at 2024-…Z (5m ago)'."""
    status = pod.get("status") or {}
    found = [
        s
        for s in [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])]
        if s.get("name") == container
    ]
    if not found:
        return f"container {container}: no status reported yet"
    count = int(found[0].get("restartCount") or 0)
    last = (found[0].get("lastState") or {}).get("terminated") or {}
    line = f"container {container}: {count} restart{'s' if count != 1 else ''}"
    if not last:
        return line + ("; no earlier instance's end is recorded" if count else "; never restarted")
    parts = [str(last.get("reason") or "terminated"), f"exit code {last.get('exitCode', '?')}"]
    finished = parse_time(last.get("finishedAt"))
    if finished is not None:
        parts.append(f"at {when_text(finished)}")
    if last.get("message"):
        parts.append(one_line(str(last["message"]), 160))
    return f"{line}; last terminated {', '.join(parts)}"


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def k8s_rollout_history(
    name: str, namespace: str | None = None, cluster: str | None = None, *, ctx: ToolContext
) -> str:
    """The revisions of one Deployment on a configured cluster, read from its ReplicaSets.

    Returns the number of revisions and the current one, then one line per revision, oldest first, with its
    images and change cause, the current one marked. Use it when a rollout is suspected, to find the revision
    to go back to with k8s_rollout_undo.

    Args:
        name: the Deployment's name.
        namespace: the namespace; default: the cluster's default_namespace, else its only allowed namespace,
            else "default" when it allows any; required when it allows several and sets no default (the error
            lists them).
        cluster: the configured cluster name (optional when only one is configured).
    """
    client = clusters_of(ctx).get(cluster)
    ns = client.namespace(namespace)
    deployment = await get_object(client, "Deployment", ns, check_name(name))
    return render.history_table(deployment, await owned_replicasets(client, ns, deployment))


async def owned_replicasets(client: KubeClient, namespace: str, deployment: dict[str, Any]) -> list[dict[str, Any]]:
    match = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(match.items())) or None
    items, _ = await list_objects(client, "ReplicaSet", namespace, label_selector=selector)
    uid = meta(deployment).get("uid")
    return [
        rs
        for rs in items
        if any(
            r.get("uid") == uid or (uid is None and r.get("name") == meta(deployment).get("name"))
            for r in meta(rs).get("ownerReferences") or []
        )
    ]


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def k8s_top(
    what: Literal["pods", "nodes"] = "pods",
    selector: str | None = None,
    namespace: str | None = None,
    cluster: str | None = None,
    *,
    ctx: ToolContext,
) -> str:
    """CPU and memory use of pods (in one namespace) or of nodes, from metrics.k8s.io on a configured cluster.

    Returns a table, busiest first: CPU in millicores (m) and memory in MiB (Mi), per pod (its containers
    summed) or per node. A cluster without metrics-server is an error saying so. Use it when pods are
    slow or OOM-killed, to see which use the most.

    Args:
        what: pods or nodes.
        selector: a label selector for pods, e.g. app=api.
        namespace: the pods' namespace; default: the cluster's default_namespace, else its only allowed
            namespace, else "default" when it allows any; required when it allows several and sets no default
            (the error lists them).
        cluster: the configured cluster name (optional when only one is configured).
    """
    client = clusters_of(ctx).get(cluster)
    ns = client.namespace(namespace) if what == "pods" else None
    path = f"{METRICS}/namespaces/{ns}/pods" if ns else f"{METRICS}/nodes"
    try:
        body = await client.request(
            "GET",
            path,
            verb="list",
            kind=f"{what}.metrics.k8s.io",
            namespace=ns,
            query={"labelSelector": selector or None},
        )
    except NotFound:
        raise ToolError(
            f"metrics API not available on cluster {client.name}: metrics.k8s.io is not served "
            "(no metrics-server?); use k8s_describe for requests/limits instead"
        ) from None
    except ToolError as e:
        if " 503: " in str(e):
            raise ToolError(f"metrics API not available on cluster {client.name}: {e}") from None
        raise
    where = f"pods in {ns}" if ns else "nodes"
    return f"{where} on cluster {client.name}, from metrics.k8s.io:\n" + render.top_table(
        list(body.get("items") or []), nodes=what == "nodes"
    )
