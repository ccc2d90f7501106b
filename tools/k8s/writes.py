"""The Kubernetes tools that change something, each previewed by a server-side dry run (dryRun=All).

A card's preview is the cluster's own answer: the fields that would change (`spec.replicas: 3 → 6`) and the
object's `resourceVersion`, and, for an object Argo CD or Flux manages, that its controller may revert the change
and where its source of truth is. The approval is bound to that preview's hash, so to that resourceVersion; the
approved write carries it as a precondition. If the object changed since the card, nothing is written and
the tool says so: calling it again makes a fresh dry run, so a new card.
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from bot.core.redact import redact
from tools.api import BadCall
from tools.k8s import columns, render
from tools.k8s.clusters import KINDS, Conflict, Kind, KubeClient, NotFound, check_name, clusters_of, kind_of
from tools.k8s.diff import field_diff, merge_patch
from tools.k8s.gitops import revert_warning
from tools.k8s.reads import get_object, owned_replicasets
from tools.registry import Category, Tool, ToolContext, ToolError, tool

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
RV_LINE = re.compile(r"^resourceVersion: (\S+)$", re.M)
WHEN_WRITTEN = "(the time of the approved write)"
MAX_REPLICAS = 1000


@dataclass
class Change:
    """One write, planned from the object as it is now: the same request is sent as a dry run for the card
    and, once approved, for real."""

    client: KubeClient
    kind: Kind
    namespace: str
    name: str
    what: str  # "scale deployment web/api to 6 replicas"
    resource_version: str
    before: dict[str, Any]  # the object (or subresource) the diff starts from
    method: str
    path: str
    body: Any
    content_type: str | None = None
    verb: str = "patch"
    resource: str = ""
    notes: list[str] = field(default_factory=list)
    stamped: bool = False  # sets restartedAt to the time of the write (shown as such on the card)

    async def send(self, *, dry_run: bool) -> dict[str, Any]:
        query = {"dryRun": "All"} if dry_run else None
        try:
            out = await self.client.request(
                self.method,
                self.path,
                verb=self.verb,
                kind=self.resource or self.kind,
                namespace=self.namespace,
                query=query,
                body=self.body,
                content_type=self.content_type,
                write=not dry_run,
            )
        except Conflict as e:
            raise changed(self, f"the API server answered 409 Conflict: {e}") from None
        except NotFound:
            raise ToolError(
                f"{self.kind.kind.lower()} {self.namespace}/{self.name} no longer exists on cluster "
                f"{self.client.name}; nothing was changed"
            ) from None
        return dict(out)

    def header(self) -> str:
        return f"{self.what} on cluster {self.client.name}"

    def card(self, changes: Iterable[str]) -> str:
        """The preview a card shows: the dry run accepted, the resourceVersion it is bound to, `changes`, notes."""
        accepted = f"{self.header()}: server-side dry run (dryRun=All) accepted"
        return "\n".join([accepted, f"resourceVersion: {self.resource_version}", "changes:", *changes, *self.notes])


def changed(change: Change, why: str) -> ToolError:
    return ToolError(
        f"{change.kind.kind.lower()} {change.namespace}/{change.name} changed since the card was "
        f"shown ({why}): nothing was changed. Call the tool again: a fresh dry run makes a new card"
    )


async def preview(change: Change) -> str:
    """Dry-run `change` and describe it: the cluster's answer, field by field, bound to the resourceVersion."""
    after = await change.send(dry_run=True)
    diff = field_diff(change.before, after)
    if not diff and change.method != "DELETE":
        raise ToolError(f"{change.header()}: the dry run changes nothing (the object already is that way)")
    # The restart stamp is the time of the write: shown as such, the preview (so the card) stays the same while
    # the object does, whenever the dry run is repeated.
    return change.card(
        f"  {d.rpartition(columns.ARROW)[0]}{columns.ARROW} {WHEN_WRITTEN}"
        if change.stamped and columns.RESTARTED_AT in d
        else f"  {d}"
        for d in diff
    )


async def still_as_approved(change: Change, approved_preview: str, fresh: str) -> str:
    """The resourceVersion the card showed, once the dry run made again now (`fresh`) says what the card said.

    The resourceVersion alone is not enough: a plan may read other objects (undo picks a ReplicaSet's template),
    and those can change while the Deployment doesn't. Any difference: nothing is written, and a new card."""
    m = RV_LINE.search(approved_preview)
    if m is None:
        raise ToolError("the approved preview names no resourceVersion; nothing was changed")
    if m.group(1) != change.resource_version:  # the object must still be at the card's resourceVersion
        raise changed(change, f"resourceVersion {m.group(1)} on the card, {change.resource_version} now")
    if redact(fresh).strip() != redact(approved_preview).strip():
        raise changed(change, "the dry run made again now differs from the one on the card")
    return m.group(1)


async def apply(change: Change, approved_preview: str, confirmed_by: str) -> str:
    rv = await still_as_approved(change, approved_preview, await preview(change))
    after = await change.send(dry_run=False)
    diff = field_diff(change.before, after)
    new_rv = columns.meta(after).get("resourceVersion", "?")
    lines = [f"done: {change.header()}; approved by {confirmed_by}; resourceVersion {rv} → {new_rv}"]
    lines += [f"  {d}" for d in diff if not d.startswith("metadata.annotations[deployment.kubernetes.io")]
    return "\n".join(lines)


def _target(
    ctx: ToolContext, cluster: str | None, namespace: str | None, kind: str, name: str, allowed: tuple[str, ...]
) -> tuple[KubeClient, Kind, str, str]:
    client = clusters_of(ctx).get(cluster)
    k = kind_of(kind, allowed=allowed)
    return client, k, client.namespace(namespace), check_name(name)


def _rv(obj: dict[str, Any]) -> str:
    return str(columns.meta(obj).get("resourceVersion") or "")


Plan = Callable[..., Awaitable[Change]]


def change_tool(
    plan: Plan,
    name: str,
    category: Category = Category.MUTATING,
    card: Callable[[Change], Awaitable[str]] = preview,
    write: Callable[[Change, str, str], Awaitable[str]] = apply,
) -> Tool:
    """The tool `name` and its dry run, both taking `plan`'s arguments (its docstring is the description): the
    dry run shows `card(change)`; the approved call is `write(change, approved_preview, confirmed_by)`."""

    async def run(*, ctx: ToolContext, confirmed_by: str, approved_preview: str, **args: Any) -> str:
        return await write(await plan(**args, ctx=ctx), approved_preview, confirmed_by)

    async def dry_run(*, ctx: ToolContext, **args: Any) -> str:
        return await card(await plan(**args, ctx=ctx))

    signature = inspect.signature(plan).replace(return_annotation="str")
    hidden = [
        inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation="str")
        for p in ("confirmed_by", "approved_preview")
    ]
    for fn, extra in ((run, hidden), (dry_run, [])):
        functools.update_wrapper(fn, plan)
        fn.__annotations__ = {**plan.__annotations__, **{p.name: "str" for p in extra}, "return": "str"}
        fn.__signature__ = signature.replace(parameters=[*signature.parameters.values(), *extra])  # type: ignore[union-attr]
    made = tool(category=category, timeout_s=60, name=name)(run)
    made.dry_run(dry_run)
    return made


# -- scale ---------------------------------------------------------------------------------------------
async def plan_scale(
    name: str,
    replicas: int,
    kind: Literal["deployment", "statefulset", "replicaset"] = "deployment",
    namespace: str | None = None,
    cluster: str | None = None,
    *,
    ctx: ToolContext,
) -> Change:
    """Set the replicas of a Deployment, StatefulSet or ReplicaSet on a configured cluster.

    A person approves it first: the card shows the server's dry run of the change. Returns that it was done,
    who approved it, the resourceVersion before and after, and what changed; an object changed since the card
    was shown is refused. Use it to add capacity during an overload, or to stop a misbehaving workload (0).

    Args:
        name: the object's name.
        replicas: the new number of replicas (0-1000).
        kind: deployment, statefulset or replicaset.
        namespace: the namespace; default: the cluster's default_namespace, else its only allowed namespace,
            else "default" when it allows any; required when it allows several and sets no default (the error
            lists them).
        cluster: the configured cluster name (optional when only one is configured).
    """
    client, k, ns, name = _target(ctx, cluster, namespace, kind, name, ("Deployment", "StatefulSet", "ReplicaSet"))
    if not 0 <= replicas <= MAX_REPLICAS:
        raise ToolError(f"replicas must be between 0 and {MAX_REPLICAS}")
    path = k.path(ns, name, "scale")
    try:
        scale = await client.request("GET", path, verb="get", kind=f"{k.resource}/scale", namespace=ns)
    except NotFound:
        raise BadCall(f"{k.kind.lower()} {name!r} not found in namespace {ns} on cluster {client.name}") from None
    rv = _rv(scale)
    obj = await get_object(client, k.kind, ns, name)  # the scale subresource carries no labels or annotations
    return Change(
        client,
        k,
        ns,
        name,
        f"scale {k.kind.lower()} {ns}/{name} to {replicas} replicas",
        rv,
        dict(scale),
        "PATCH",
        path,
        {"metadata": {"resourceVersion": rv}, "spec": {"replicas": replicas}},
        MERGE,
        resource=f"{k.plural}/scale",
        notes=revert_warning(obj),
    )


k8s_scale = change_tool(plan_scale, "k8s_scale")


# -- rollout restart -------------------------------------------------------------------------------------
async def plan_restart(
    name: str,
    kind: Literal["deployment", "statefulset", "daemonset"] = "deployment",
    namespace: str | None = None,
    cluster: str | None = None,
    *,
    ctx: ToolContext,
) -> Change:
    """Restart the pods of a Deployment, StatefulSet or DaemonSet by a rolling replacement, as
    `kubectl rollout restart` does, on a configured cluster.

    A person approves it first: the card shows the server's dry run. Returns that it was done, who approved it,
    the resourceVersion before and after, and what changed. Use it when pods are stuck in a bad state that a
    fresh start clears, e.g. a leaked connection pool.

    Args:
        name: the object's name.
        kind: deployment, statefulset or daemonset.
        namespace: the namespace; default: the cluster's default_namespace, else its only allowed namespace,
            else "default" when it allows any; required when it allows several and sets no default (the error
            lists them).
        cluster: the configured cluster name (optional when only one is configured).
    """
    client, k, ns, name = _target(ctx, cluster, namespace, kind, name, ("Deployment", "StatefulSet", "DaemonSet"))
    obj = await get_object(client, k.kind, ns, name)
    rv = _rv(obj)
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "metadata": {"resourceVersion": rv},
        "spec": {"template": {"metadata": {"annotations": {columns.RESTARTED_AT: at}}}},
    }
    return Change(
        client,
        k,
        ns,
        name,
        f"rollout restart {k.kind.lower()} {ns}/{name}",
        rv,
        obj,
        "PATCH",
        k.path(ns, name),
        body,
        STRATEGIC,
        resource=k.plural,
        stamped=True,
        notes=["every pod is replaced, following the rollout strategy", *revert_warning(obj)],
    )


k8s_rollout_restart = change_tool(plan_restart, "k8s_rollout_restart")


# -- rollout undo --------------------------------------------------------------------------------------
async def plan_undo(
    name: str,
    revision: int | None = None,
    namespace: str | None = None,
    cluster: str | None = None,
    *,
    ctx: ToolContext,
) -> Change:
    """Roll a Deployment back to an earlier revision's pod template (default: the previous revision), as
    `kubectl rollout undo` does, on a configured cluster.

    A person approves it first: the card shows the server's dry run (e.g. the image going back). Returns that it
    was done, who approved it, the resourceVersion before and after, and what changed. Use it when
    recent_changes and k8s_rollout_history show a rollout started the problem.

    Args:
        name: the Deployment's name.
        revision: the revision to go back to (see k8s_rollout_history); default: the one before the current.
        namespace: the namespace; default: the cluster's default_namespace, else its only allowed namespace,
            else "default" when it allows any; required when it allows several and sets no default (the error
            lists them).
        cluster: the configured cluster name (optional when only one is configured).
    """
    client, _, ns, name = _target(ctx, cluster, namespace, "deployment", name, ("Deployment",))
    deployment = await get_object(client, "Deployment", ns, name)
    rv = _rv(deployment)
    history = sorted(await owned_replicasets(client, ns, deployment), key=render.revision_of)
    current = render.revision_of(deployment) or (render.revision_of(history[-1]) if history else 0)
    if revision is None or revision == 0:
        older = [rs for rs in history if 0 < render.revision_of(rs) < current]
        if not older:
            raise ToolError(f"deployment {ns}/{name} has no revision before {current}; nothing to undo to")
        target = older[-1]
    else:
        found = [rs for rs in history if render.revision_of(rs) == revision]
        if not found:
            known = ", ".join(str(render.revision_of(rs)) for rs in history) or "none"
            raise ToolError(f"deployment {ns}/{name} has no revision {revision} (revisions: {known})")
        target = found[0]
    to = render.revision_of(target)
    template = copy.deepcopy((target.get("spec") or {}).get("template") or {})
    labels = (template.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop("pod-template-hash", None)
    if template == (deployment.get("spec") or {}).get("template"):
        raise ToolError(f"deployment {ns}/{name} already runs revision {to}'s pod template; nothing to undo")
    body: dict[str, Any] = {
        "metadata": {"resourceVersion": rv},
        "spec": {"template": merge_patch(deployment["spec"].get("template") or {}, template)},
    }
    cause = (columns.meta(target).get("annotations") or {}).get(columns.CHANGE_CAUSE)
    if cause:
        body["metadata"]["annotations"] = {columns.CHANGE_CAUSE: cause}
    return Change(
        client,
        KINDS["Deployment"],
        ns,
        name,
        f"rollout undo deployment {ns}/{name} to revision {to} (from {current})",
        rv,
        deployment,
        "PATCH",
        KINDS["Deployment"].path(ns, name),
        body,
        MERGE,
        resource="deployments",
        notes=revert_warning(deployment),
    )


k8s_rollout_undo = change_tool(plan_undo, "k8s_rollout_undo")


# -- delete pod ----------------------------------------------------------------------------------------
async def plan_delete(
    pod: str, namespace: str | None = None, cluster: str | None = None, *, ctx: ToolContext
) -> Change:
    """Delete one pod on a configured cluster; its controller, if any, creates a replacement.

    A person approves it first: the card shows the server's dry run. Returns that it was done, who approved it
    and the resourceVersion the pod was at. Use it to replace one stuck pod when the others are healthy.

    Args:
        pod: the pod's name.
        namespace: the namespace; default: the cluster's default_namespace, else its only allowed namespace,
            else "default" when it allows any; required when it allows several and sets no default (the error
            lists them).
        cluster: the configured cluster name (optional when only one is configured).
    """
    client, k, ns, pod = _target(ctx, cluster, namespace, "pod", pod, ("Pod",))
    obj = await get_object(client, "Pod", ns, pod)
    rv, uid = _rv(obj), columns.meta(obj).get("uid")
    refs = columns.meta(obj).get("ownerReferences") or []
    owner = next((r for r in refs if r.get("controller")), None)
    restarts = sum(int(c.get("restartCount") or 0) for c in (obj.get("status") or {}).get("containerStatuses") or [])
    notes = [
        f"uid: {uid}",
        f"now: {columns.pod_status(obj)}, ready {columns.pod_ready(obj)}, restarts {restarts}, "
        f"node {(obj.get('spec') or {}).get('nodeName') or columns.NONE}",
        f"owner: {owner.get('kind')} {owner.get('name')}: it creates a replacement pod"
        if owner
        else "owner: none: the pod will NOT come back",
    ]
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"resourceVersion": rv, "uid": uid}}
    path = k.path(ns, pod)
    return Change(
        client,
        k,
        ns,
        pod,
        f"delete pod {ns}/{pod}",
        rv,
        obj,
        "DELETE",
        path,
        body,
        verb="delete",
        resource="pods",
        notes=notes,
    )


async def _delete_card(change: Change) -> str:
    """The delete's dry run, described: what the card shows, and what the approved delete is checked against."""
    await change.send(dry_run=True)
    return change.card([f"  pod {change.namespace}/{change.name}: exists {columns.ARROW} deleted"])


async def _delete(change: Change, approved_preview: str, confirmed_by: str) -> str:
    rv = await still_as_approved(change, approved_preview, await _delete_card(change))
    await change.send(dry_run=False)
    return f"done: {change.header()}; approved by {confirmed_by}; it was at resourceVersion {rv}"


k8s_delete_pod = change_tool(plan_delete, "k8s_delete_pod", Category.DESTRUCTIVE, _delete_card, _delete)
