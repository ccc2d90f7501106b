"""Whether Argo CD or Flux manages an object, read from its labels, annotations and managedFields managers, and
what that means for a change made by hand: the controller may put its source of truth back at its next sync."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.k8s.columns import meta, one_line

ARGO_TRACKING = "argocd.argoproj.io/tracking-id"  # "<app>:<group>/<kind>:<namespace>/<name>"
ARGO_INSTANCE = "argocd.argoproj.io/instance"
INSTANCE = "app.kubernetes.io/instance"  # Argo CD's default tracking label, but Helm sets it too
KUSTOMIZATION = "kustomize.toolkit.fluxcd.io"
HELM_RELEASE = "helm.toolkit.fluxcd.io"
ORIGIN = "config.kubernetes.io/origin"  # kustomize's originAnnotations: "path: …\nrepo: …\nref: …"


def _managers(m: Mapping[str, Any]) -> set[str]:
    return {str(f.get("manager") or "") for f in m.get("managedFields") or [] if isinstance(f, Mapping)}


def _origin(annotations: Mapping[str, Any]) -> str:
    """`repo https://…, path apps/api/deployment.yaml, ref main` when kustomize recorded where it came from."""
    fields = {}
    for line in str(annotations.get(ORIGIN) or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("repo", "path", "ref") and value.strip():
            fields[key.strip()] = value.strip()
    return ", ".join(f"{k} {one_line(fields[k], 160)}" for k in ("repo", "path", "ref") if k in fields)


def _argo_app(text: str) -> str:
    """`shop-api`, or `argo-apps/shop-api` for an application outside Argo CD's namespace (`<ns>_<name>`)."""
    ns, sep, name = text.partition("_")
    return f"{ns}/{name}" if sep else text


def source_of_truth(obj: Mapping[str, Any]) -> str | None:
    """'Argo CD application shop-api', 'Flux Kustomization flux-system/apps (repo …, path …)', or None when no
    GitOps controller's marks are on `obj`."""
    m = meta(obj)
    labels, annotations = m.get("labels") or {}, m.get("annotations") or {}
    managers = _managers(m)
    argo_manager = any(x.startswith("argocd") for x in managers)
    found = None
    if ARGO_TRACKING in annotations:
        found = f"Argo CD application {_argo_app(str(annotations[ARGO_TRACKING]).split(':', 1)[0])}"
    elif ARGO_INSTANCE in labels:
        found = f"Argo CD application {_argo_app(str(labels[ARGO_INSTANCE]))}"
    elif argo_manager:
        app = labels.get(INSTANCE)
        found = f"Argo CD application {_argo_app(str(app))}" if app else "an Argo CD application"
    else:
        for group, kind, manager in (
            (KUSTOMIZATION, "Kustomization", "kustomize-controller"),
            (HELM_RELEASE, "HelmRelease", "helm-controller"),
        ):
            name, ns = labels.get(f"{group}/name"), labels.get(f"{group}/namespace")
            if name:
                found = f"Flux {kind} {f'{ns}/' if ns else ''}{name}"
                break
            if manager in managers:
                found = f"a Flux {kind}"
                break
    if found is None:
        return None
    origin = _origin(annotations)
    return f"{found} ({origin})" if origin else found


def managed_line(obj: Mapping[str, Any]) -> str | None:
    """The line reads show: who manages the object, so a change by hand is not its source of truth."""
    source = source_of_truth(obj)
    return (
        f"managed by GitOps: {source}; a change made here by hand may be reverted at its next sync" if source else None
    )


def revert_warning(obj: Mapping[str, Any]) -> list[str]:
    """The lines a change's card carries for a GitOps-managed object (none otherwise)."""
    source = source_of_truth(obj)
    if source is None:
        return []
    return [
        f"warning: GitOps manages this object: {source}. Its controller may revert this change at its next sync "
        "(auto-sync, self-heal); to keep it, change the source of truth too, or pause the sync first"
    ]
