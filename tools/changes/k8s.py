"""What changed in one namespace of one cluster: Deployment revisions (ReplicaSets), StatefulSet and DaemonSet
revisions (ControllerRevisions), ConfigMaps written (managedFields times), and scale events.

Five list requests per namespace, concurrently, each bounded like every Kubernetes read (KubeClient's
16 MiB cap, `limit`) and paged: each follows the list's `continue` for at most MAX_PAGES pages, and a list
with objects left past that makes the answer a `Cut` (the changes in what was read, and which lists stopped
short), so a busy namespace never loses changes without saying so. ConfigMaps are listed as metadata only
(PartialObjectMetadataList): their names and managedFields times, never their data. Secrets, Helm's release
Secrets included, are never requested. The namespace goes through KubeClient.namespace first, so one outside
the configured list is refused before any request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tools.changes.model import Change, Cut
from tools.k8s import render
from tools.k8s.clusters import METADATA_ONLY, Kind, KubeClient

LIST_LIMIT = 500
MAX_PAGES = 4  # per list: 2,000 objects of a kind in one namespace, then the answer is cut
REPLICASETS = Kind("ReplicaSet", "replicasets", "apps/v1")
CONTROLLER_REVISIONS = Kind("ControllerRevision", "controllerrevisions", "apps/v1")
CONFIGMAPS = Kind("ConfigMap", "configmaps", "v1")
EVENTS = Kind("Event", "events", "v1")
SCALE_REASONS = ("ScalingReplicaSet", "SuccessfulRescale")
_WORKLOADS = {"Deployment": "deployment", "StatefulSet": "statefulset", "DaemonSet": "daemonset"}


async def _list(
    client: KubeClient, kind: Kind, namespace: str, *, field_selector: str | None = None, accept: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """The objects of up to MAX_PAGES pages, and None when that was all of them, else what was left unread."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    for _ in range(MAX_PAGES):
        body = await client.request(
            "GET",
            kind.path(namespace),
            verb="list",
            kind=kind,
            namespace=namespace,
            query={"limit": LIST_LIMIT, "fieldSelector": field_selector, "continue": token},
            accept=accept,
        )
        items += [i for i in body.get("items") or [] if isinstance(i, dict)]
        meta = body.get("metadata")
        token = meta.get("continue") if isinstance(meta, dict) else None
        if not token:
            return items, None
    remaining = meta.get("remainingItemCount") if isinstance(meta, dict) else None
    more = f"{remaining} more" if isinstance(remaining, int) else "more"
    which = f" ({field_selector})" if field_selector else ""
    return items, f"{kind.resource}{which}: read the first {len(items)}, {more} not read"


def _owner(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """The controlling Deployment/StatefulSet/DaemonSet: (kind, name)."""
    for ref in render.meta(obj).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") in _WORKLOADS and ref.get("controller", True):
            return str(ref["kind"]), str(ref.get("name"))
    return None


def _images(template: Any) -> str:
    spec = template.get("spec") if isinstance(template, Mapping) else None
    return render.images(spec if isinstance(spec, Mapping) else None)


def _revision_changes(
    revisions: Sequence[tuple[str, str, int, datetime | None, str, str]], where: str, since: datetime, until: datetime
) -> list[Change]:
    """(owner kind, owner name, revision, created, images, object ref) rows as Changes: each revision created
    in the window, with the images of the owner's revision before it."""
    by_owner: dict[tuple[str, str], list[tuple[int, datetime | None, str, str]]] = {}
    for kind, name, number, created, images, ref in revisions:
        by_owner.setdefault((kind, name), []).append((number, created, images, ref))
    changes = []
    for (kind, name), rows in by_owner.items():
        rows.sort(key=lambda r: r[0])
        for i, (number, created, images, ref) in enumerate(rows):
            if created is None or not since <= created <= until:
                continue
            before = rows[i - 1][2] if i else None
            if before is None:
                what = f"image {images}, revision {number} (first)"
            elif before != images:
                what = f"image {before} {render.ARROW} {images}, revision {number}"
            else:
                what = f"pod template changed (image {images}), revision {number}"
            changes.append(
                Change(at=created, source="kubernetes", target=f"{where} {_WORKLOADS[kind]}/{name}", what=what, ref=ref)
            )
    return changes


def _number(text: Any) -> int | None:
    try:
        return int(str(text))
    except ValueError:
        return None


def replicaset_changes(
    items: Sequence[Mapping[str, Any]], where: str, since: datetime, until: datetime
) -> list[Change]:
    rows = []
    for rs in items:
        meta = render.meta(rs)
        owner = _owner(rs)
        number = _number((meta.get("annotations") or {}).get(render.REVISION))
        if owner is None or owner[0] != "Deployment" or number is None:
            continue
        rows.append(
            (
                owner[0],
                owner[1],
                number,
                render.parse_time(meta.get("creationTimestamp")),
                _images((rs.get("spec") or {}).get("template")),
                f"replicaset/{meta.get('name')}",
            )
        )
    return _revision_changes(rows, where, since, until)


def controller_revision_changes(
    items: Sequence[Mapping[str, Any]], where: str, since: datetime, until: datetime
) -> list[Change]:
    rows = []
    for cr in items:
        meta = render.meta(cr)
        owner = _owner(cr)
        number = _number(cr.get("revision"))
        if owner is None or owner[0] == "Deployment" or number is None:
            continue
        data = cr.get("data")
        spec = data.get("spec") if isinstance(data, Mapping) else None
        template = spec.get("template") if isinstance(spec, Mapping) else None
        rows.append(
            (
                owner[0],
                owner[1],
                number,
                render.parse_time(meta.get("creationTimestamp")),
                _images(template),
                f"controllerrevision/{meta.get('name')}",
            )
        )
    return _revision_changes(rows, where, since, until)


def configmap_changes(items: Sequence[Mapping[str, Any]], where: str, since: datetime, until: datetime) -> list[Change]:
    """Each ConfigMap written in the window, at its latest write there (metadata only: names, managers, times)."""
    changes = []
    for cm in items:
        meta = render.meta(cm)
        name = meta.get("name")
        created = render.parse_time(meta.get("creationTimestamp"))
        writes = []
        for entry in meta.get("managedFields") or []:
            at = render.parse_time(entry.get("time")) if isinstance(entry, Mapping) else None
            if at is not None and since <= at <= until:
                writes.append((at, str(entry.get("manager") or "unknown"), str(entry.get("operation") or "")))
        if created is not None and since <= created <= until and not writes:
            writes.append((created, "", "Create"))
        if not writes:
            continue
        at, manager, operation = max(writes)
        verb = "created" if created is not None and abs((at - created).total_seconds()) < 1 else "changed"
        by = f" by {manager}" if manager else ""
        changes.append(
            Change(
                at=at,
                source="kubernetes",
                target=f"{where} configmap/{name}",
                what=f"configmap {verb}{by}" + (f" ({operation})" if operation else ""),
                ref="managedFields",
            )
        )
    return changes


def scale_changes(items: Sequence[Mapping[str, Any]], where: str, since: datetime, until: datetime) -> list[Change]:
    changes = []
    for ev in items:
        if ev.get("reason") not in SCALE_REASONS:
            continue
        at = (
            render.parse_time(ev.get("lastTimestamp"))
            or render.parse_time(ev.get("eventTime"))
            or render.parse_time(ev.get("firstTimestamp"))
        )
        if at is None or not since <= at <= until:
            continue
        obj = ev.get("involvedObject") or {}
        target = f"{where} {str(obj.get('kind', '?')).lower()}/{obj.get('name', '?')}"
        count = ev.get("count")
        times = f" ({count} times)" if isinstance(count, int) and count > 1 else ""
        changes.append(
            Change(
                at=at,
                source="kubernetes",
                target=target,
                what=f"{ev.get('message', '')}{times}",
                ref=f"event {ev.get('reason')}",
            )
        )
    return changes


async def namespace_changes(
    client: KubeClient, namespace: str | None, since: datetime, until: datetime
) -> list[Change] | Cut:
    """Every change found in one namespace of `client`'s cluster in [since, until], newest first; a Cut with the
    changes found when a list had more objects than MAX_PAGES pages."""
    ns = client.namespace(namespace)  # scope first: refused before any request
    where = f"{client.name}/{ns}"
    lists = await asyncio.gather(
        _list(client, REPLICASETS, ns),
        _list(client, CONTROLLER_REVISIONS, ns),
        _list(client, CONFIGMAPS, ns, accept=METADATA_ONLY),
        *(_list(client, EVENTS, ns, field_selector=f"reason={reason}") for reason in SCALE_REASONS),
    )
    (replicasets, _), (revisions, _), (configmaps, _), *scaled = lists
    changes = sorted(
        [
            *replicaset_changes(replicasets, where, since, until),
            *controller_revision_changes(revisions, where, since, until),
            *configmap_changes(configmaps, where, since, until),
            *scale_changes([e for batch, _ in scaled for e in batch], where, since, until),
        ],
        key=lambda c: c.at,
        reverse=True,
    )
    missing = [why for _, why in lists if why]
    return Cut(changes, "; ".join(missing)) if missing else changes


def namespaces(client: KubeClient, namespace: str | None = None) -> list[str]:
    """The namespaces to read: `namespace` (checked against the configured ones), else every configured one."""
    if namespace:
        return [client.namespace(namespace)]
    return list(client.spec.namespaces) or [client.namespace(None)]
