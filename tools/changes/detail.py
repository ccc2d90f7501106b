"""`change_diff`: the detail of one recent_changes line, read-only and bounded: a commit's patch within the
repository's configured `paths` (tools.changes.git, the same git rules: the configured branch only, never a
fetch), a Deployment's, StatefulSet's or DaemonSet's pod template against its revision before, or a ConfigMap's
key changes (names only, never a value)."""

from __future__ import annotations

import re

from tools.changes.git import git_show
from tools.changes.settings import ChangesConfig
from tools.changes.tool import key_memory
from tools.registry import Category, ToolContext, ToolError, tool

_KUBE = re.compile(
    r"(?P<cluster>[^\s/]+)/(?P<ns>\S+) (?P<kind>deployment|statefulset|daemonset|configmap)/(?P<name>\S+)"
)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True)
async def change_diff(target: str, ref: str = "", *, ctx: ToolContext) -> str:
    """Returns the detail of one change that recent_changes listed: give that line's target and its reference (the last
    field). A git commit (target `deploy-config (main)`, ref the commit id): its author, date and message, `git show
    --stat`, then its patch within the repository's configured paths, cut at 10,000 characters saying how much was
    left out. A Deployment revision (target `prod/web deployment/api`, ref `replicaset/NAME`; a StatefulSet or
    DaemonSet: `controllerrevision/NAME`): each pod template field that differs from the revision before, `field:
    before → after`, at most 120 lines. A ConfigMap (target `prod/web configmap/NAME`, no ref): its data keys, the
    keys added, removed and changed since opsloop last read it, and who wrote which keys when (managedFields); never
    a value.

    Use it after recent_changes, to see what a suspect change actually did before proposing a rollback.
    Read-only: it never fetches, and reads commits on the configured branch only.

    Args:
        target: the line's target, as recent_changes printed it.
        ref: the line's reference: a commit id, replicaset/NAME or controllerrevision/NAME (empty for a ConfigMap).
    """
    config = ctx.require(ChangesConfig, "no [changes] section is configured")
    target, ref = target.strip(), ref.strip()
    if kube := _KUBE.fullmatch(target):
        from tools.changes.k8s import configmap_detail, revision_diff
        from tools.k8s.clusters import KubeClusters

        clusters = ctx.require(KubeClusters, "no Kubernetes cluster is configured ([[kubernetes.clusters]])")
        client = clusters.get(kube["cluster"])
        if kube["kind"] == "configmap":
            return await configmap_detail(client, kube["ns"], kube["name"], key_memory(ctx))
        if not ref:
            raise ToolError("give ref: the revision recent_changes named (replicaset/NAME or controllerrevision/NAME)")
        return await revision_diff(client, kube["ns"], f"{kube['kind']}/{kube['name']}", ref)
    name = target.split(" (", 1)[0]
    repo = next((r for r in config.repos if r.name == name), None)
    if repo is None:
        known = ", ".join(r.name for r in config.repos) or "none"
        raise ToolError(
            f"{target!r} is neither a configured repository (configured: {known}) nor a "
            "`cluster/namespace kind/name` target of recent_changes"
        )
    if not ref:
        raise ToolError("give ref: the commit id recent_changes listed")
    return await git_show(repo, ref)
