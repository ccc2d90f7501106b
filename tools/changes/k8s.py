"""What changed in one namespace of one cluster: Deployment revisions (ReplicaSets), StatefulSet and DaemonSet
revisions (ControllerRevisions), ConfigMaps written (managedFields times), and scale events.

Five list requests per namespace, concurrently, each bounded like every Kubernetes read (KubeClient's
16 MiB cap, `limit`) and paged: each follows the list's `continue` for at most MAX_PAGES pages, and a list
with objects left past that makes the answer a `Cut` (the changes in what was read, and which lists stopped
short), so a busy namespace never loses changes without saying so. Secrets, Helm's release Secrets included,
are never requested.

ConfigMaps: without a `KeyMemory` they are listed as metadata only (PartialObjectMetadataList): names,
managedFields times and the data keys each manager set (`f:data`), never values. With one (the store is open),
they are listed whole, and each value is at once replaced by an HMAC-SHA256 of it under the install's hash key
(`OPSLOOP_CHANGES_HASH_KEY`, else a random key per process), truncated to 128 bits: no value is kept, logged or
shown, and no short value can be found again by hashing guesses without the key. Each ConfigMap's key → hash map
is kept in the store (`configmap_keys`), so a ConfigMap changed since opsloop last read it names the keys added,
removed and changed. A ConfigMap opsloop never read before names the keys its last writer set (managedFields).
 The namespace goes through KubeClient.namespace first, so one outside
the configured list is refused before any request.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.store import Store
from tools.api import ToolError, some_names
from tools.changes.model import Change, Cut, utc_minute
from tools.changes.store import KeyDiff, KeySnapshot, configmap_snapshots, save_configmap_snapshots
from tools.k8s import columns
from tools.k8s.clusters import METADATA_ONLY, Kind, KubeClient

LIST_LIMIT = 500
MAX_PAGES = 4  # per list: 2,000 objects of a kind in one namespace, then the answer is cut
REPLICASETS = Kind("ReplicaSet", "replicasets", "apps/v1")
CONTROLLER_REVISIONS = Kind("ControllerRevision", "controllerrevisions", "apps/v1")
CONFIGMAPS = Kind("ConfigMap", "configmaps", "v1")
EVENTS = Kind("Event", "events", "v1")
SCALE_REASONS = ("ScalingReplicaSet", "SuccessfulRescale")
_WORKLOADS = {"Deployment": "deployment", "StatefulSet": "statefulset", "DaemonSet": "daemonset"}
CONFIGMAP_PAGE = 100  # ConfigMaps listed whole (values hashed at once): smaller pages, each answer well in its cap
KEYS_NAMED = 8  # key changes named on one timeline line; the rest are counted
_PROCESS_KEY = secrets.token_bytes(32)  # the hash key when the install sets none: values compare within a process


@dataclass(frozen=True)
class KeyMemory:
    """Where ConfigMaps' key snapshots are kept, and the secret their values are hashed with."""

    store: Store
    secret: bytes = _PROCESS_KEY

    @property
    def key_id(self) -> str:
        """Names the secret without revealing it: snapshots under another secret compare keys, not values."""
        return hmac.new(self.secret, b"opsloop configmap key id", hashlib.sha256).hexdigest()[:16]

    def hash(self, where: str, key: str, value: str) -> str:
        return hmac.new(self.secret, f"{where}\0{key}\0{value}".encode(), hashlib.sha256).hexdigest()[:32]


async def _list(
    client: KubeClient,
    kind: Kind,
    namespace: str,
    *,
    field_selector: str | None = None,
    accept: str | None = None,
    limit: int | None = None,
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
            query={"limit": min(limit or LIST_LIMIT, LIST_LIMIT), "fieldSelector": field_selector, "continue": token},
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
    for ref in columns.meta(obj).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") in _WORKLOADS and ref.get("controller", True):
            return str(ref["kind"]), str(ref.get("name"))
    return None


def _images(revision: Mapping[str, Any]) -> str:
    return columns.images(_template(revision).get("spec"))


def _number(text: Any) -> int | None:
    try:
        return int(str(text))
    except ValueError:
        return None


def _revisions(items: Sequence[Mapping[str, Any]], kind_name: str) -> list[tuple[tuple[str, str], int, str, Any]]:
    """(owner kind and name, revision, name, object) of each revision a workload owns, oldest first: a Deployment's
    ReplicaSets (`kind_name` "replicaset"), else a StatefulSet's or DaemonSet's ControllerRevisions."""
    replicasets = kind_name == "replicaset"
    rows = []
    for obj in items:
        meta = columns.meta(obj)
        number = _number((meta.get("annotations") or {}).get(columns.REVISION) if replicasets else obj.get("revision"))
        owner = _owner(obj)
        if owner is not None and number is not None and (owner[0] == "Deployment") == replicasets:
            rows.append((owner, number, str(meta.get("name")), obj))
    return sorted(rows, key=lambda r: r[1])


def revision_changes(
    items: Sequence[Mapping[str, Any]], kind_name: str, where: str, since: datetime, until: datetime
) -> list[Change]:
    """Each revision created in the window, with the images of its workload's revision before it."""
    before: dict[tuple[str, str], str] = {}
    changes = []
    for (kind, name), number, ref, obj in _revisions(items, kind_name):
        images = _images(obj)
        created = columns.parse_time(columns.meta(obj).get("creationTimestamp"))
        if created is not None and since <= created <= until:
            old = before.get((kind, name))
            if old is None:
                what = f"image {images}, revision {number} (first)"
            elif old != images:
                what = f"image {old} {columns.ARROW} {images}, revision {number}"
            else:
                what = f"pod template changed (image {images}), revision {number}"
            target = f"{where} {_WORKLOADS[kind]}/{name}"
            changes.append(Change(at=created, source="kubernetes", target=target, what=what, ref=f"{kind_name}/{ref}"))
        before[(kind, name)] = images
    return changes


def data_keys(entry: Mapping[str, Any]) -> list[str]:
    """The data and binaryData keys a managedFields entry's field set names (`f:data` → `f:KEY`), sorted."""
    fields = entry.get("fieldsV1")
    keys: list[str] = []
    for section in ("f:data", "f:binaryData"):
        part = fields.get(section) if isinstance(fields, Mapping) else None
        if isinstance(part, Mapping):
            keys += [k[2:] for k in part if isinstance(k, str) and k.startswith("f:")]
    return sorted(keys)


def key_diff(before: KeySnapshot, hashes: Mapping[str, str], key_id: str) -> KeyDiff:
    """The keys added, removed and changed from `before` to `hashes` (changed: None under another hash key)."""
    same = before.key_id == key_id
    changed = tuple(sorted(k for k in hashes.keys() & before.hashes.keys() if hashes[k] != before.hashes[k]))
    return KeyDiff(
        since=before.seen_at,
        added=tuple(sorted(hashes.keys() - before.hashes.keys())),
        removed=tuple(sorted(before.hashes.keys() - hashes.keys())),
        changed=changed if same else None,
    )


async def remember_keys(
    memory: KeyMemory, cluster: str, namespace: str, items: Sequence[dict[str, Any]]
) -> dict[str, KeySnapshot]:
    """Each listed ConfigMap's snapshot, by name: the stored one while its resourceVersion is the same, else a new
    one (with its key changes against the stored one), stored. The values are hashed and taken out of `items`."""
    old = await configmap_snapshots(memory.store, cluster, namespace)
    now = datetime.now(UTC).timestamp()
    found: dict[str, KeySnapshot] = {}
    new: list[KeySnapshot] = []
    for cm in items:
        values = {**(cm.pop("binaryData", None) or {}), **(cm.pop("data", None) or {})}
        meta = columns.meta(cm)
        name, rv = str(meta.get("name")), str(meta.get("resourceVersion") or "")
        before = old.get(name)
        if before is not None and before.resource_version == rv:
            found[name] = before
            continue
        where = f"{cluster}/{namespace}/{name}"
        hashes = {str(k): memory.hash(where, str(k), str(v)) for k, v in values.items()}
        diff = None if before is None else key_diff(before, hashes, memory.key_id)
        found[name] = KeySnapshot(name, rv, memory.key_id, hashes, now, diff)
        new.append(found[name])
    if new:
        await save_configmap_snapshots(memory.store, cluster, namespace, new)
    return found


def key_changes(snapshot: KeySnapshot | None, writer_keys: Sequence[str], *, limit: int = KEYS_NAMED) -> str:
    """`key DB_URL removed, key DATABASE_URL added since opsloop read it at …`; never a value. Without an earlier
    read to compare with, the keys the last writer set (managedFields); "" when nothing is known."""
    diff = snapshot.diff if snapshot is not None else None
    if diff is None:
        keys = [f"keys it set: {some_names(writer_keys, limit)}"] if writer_keys else []
        if snapshot is not None:
            keys.append("earlier keys unknown (opsloop had not read it before)")
        return "; ".join(keys)
    parts = [
        *(f"key {k} removed" for k in diff.removed),
        *(f"key {k} added" for k in diff.added),
        *(f"key {k} changed" for k in diff.changed or ()),
    ]
    text = some_names(parts, limit) if parts else "no data key added, removed or changed"
    if diff.changed is None:
        text += " (values not compared: the hash key changed since)"
    return f"{text} since opsloop read it at {utc_minute(datetime.fromtimestamp(diff.since, UTC))}"


def configmap_changes(
    items: Sequence[Mapping[str, Any]],
    where: str,
    since: datetime,
    until: datetime,
    snapshots: Mapping[str, KeySnapshot] | None = None,
) -> list[Change]:
    """Each ConfigMap written in the window, at its latest write there, with its key changes (names only)."""
    changes = []
    for cm in items:
        meta = columns.meta(cm)
        name = meta.get("name")
        created = columns.parse_time(meta.get("creationTimestamp"))
        writes = []
        for entry in meta.get("managedFields") or []:
            at = columns.parse_time(entry.get("time")) if isinstance(entry, Mapping) else None
            if at is not None and since <= at <= until:
                manager, operation = str(entry.get("manager") or "unknown"), str(entry.get("operation") or "")
                writes.append((at, manager, operation, data_keys(entry)))
        if created is not None and since <= created <= until and not writes:
            writes.append((created, "", "Create", []))
        if not writes:
            continue
        at, manager, operation, keys = max(writes)
        verb = "created" if created is not None and abs((at - created).total_seconds()) < 1 else "changed"
        by = f" by {manager}" if manager else ""
        keyed = key_changes((snapshots or {}).get(str(name)), keys)
        changes.append(
            Change(
                at=at,
                source="kubernetes",
                target=f"{where} configmap/{name}",
                what=f"configmap {verb}{by}{f' ({operation})' if operation else ''}{f': {keyed}' if keyed else ''}",
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
            columns.parse_time(ev.get("lastTimestamp"))
            or columns.parse_time(ev.get("eventTime"))
            or columns.parse_time(ev.get("firstTimestamp"))
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
    client: KubeClient, namespace: str | None, since: datetime, until: datetime, *, memory: KeyMemory | None = None
) -> list[Change] | Cut:
    """Every change found in one namespace of `client`'s cluster in [since, until], newest first; a Cut with the
    changes found when a list had more objects than MAX_PAGES pages. With `memory`, ConfigMaps name their key
    changes since opsloop last read them."""
    ns = client.namespace(namespace)  # scope first: refused before any request
    where = f"{client.name}/{ns}"
    lists = await asyncio.gather(
        _list(client, REPLICASETS, ns),
        _list(client, CONTROLLER_REVISIONS, ns),
        _list(client, CONFIGMAPS, ns, limit=CONFIGMAP_PAGE)
        if memory
        else _list(client, CONFIGMAPS, ns, accept=METADATA_ONLY),
        *(_list(client, EVENTS, ns, field_selector=f"reason={reason}") for reason in SCALE_REASONS),
    )
    (replicasets, _), (revisions, _), (configmaps, _), *scaled = lists
    snapshots = await remember_keys(memory, client.name, ns, configmaps) if memory else None
    changes = sorted(
        [
            *revision_changes(replicasets, "replicaset", where, since, until),
            *revision_changes(revisions, "controllerrevision", where, since, until),
            *configmap_changes(configmaps, where, since, until, snapshots),
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


DIFF_LINES = 120  # a revision's template diff lines shown; the rest are counted
KEYS_LISTED = 50  # a ConfigMap's keys named in change_diff, per list; the rest are counted


def _template(obj: Mapping[str, Any]) -> Any:
    """A ReplicaSet's or ControllerRevision's pod template, without the labels its controller adds."""
    spec = obj.get("spec") or (obj.get("data") or {}).get("spec")  # list items carry no kind
    template = dict((spec or {}).get("template") or {})
    template.pop("$patch", None)
    meta = dict(template.get("metadata") or {})
    meta["labels"] = {k: v for k, v in (meta.get("labels") or {}).items() if k != "pod-template-hash"}
    template["metadata"] = meta
    return template


async def revision_diff(client: KubeClient, namespace: str | None, workload: str, ref: str) -> str:
    """The pod template of the revision `ref` names (`replicaset/NAME` for a Deployment,
    `controllerrevision/NAME` for a StatefulSet or DaemonSet) against its workload's revision before it, one
    changed field a line (tools.k8s.diff), at most DIFF_LINES."""
    from tools.k8s.diff import field_diff

    ns = client.namespace(namespace)
    kind_name, _, name = ref.partition("/")
    kinds = {"replicaset": REPLICASETS, "controllerrevision": CONTROLLER_REVISIONS}
    if kind_name not in kinds or not name:
        raise ToolError(f"ref {ref!r} names no revision: give replicaset/NAME or controllerrevision/NAME")
    items, _ = await _list(client, kinds[kind_name], ns)
    rows = _revisions(items, kind_name)
    found = next((r for r in rows if r[2] == name), None)
    if found is None:
        raise ToolError(f"no {kind_name} {name} owned by a workload in {client.name}/{ns}")
    owner, number, _, obj = found
    if f"{_WORKLOADS[owner[0]]}/{owner[1]}" != workload:
        raise ToolError(f"{ref} is a revision of {_WORKLOADS[owner[0]]}/{owner[1]}, not of {workload}")
    earlier = [r for r in rows if r[0] == owner and r[1] < number]
    what = f"{client.name}/{ns} {_WORKLOADS[owner[0]]}/{owner[1]} revision {number} ({ref})"
    if not earlier:
        return f"{what}: no earlier revision is kept to compare with; its images: {_images(obj)}"
    _, before_number, before_name, before = earlier[-1]
    lines = field_diff(_template(before), _template(obj), ".spec.template")
    head = f"{what} against revision {before_number} ({kind_name}/{before_name}):"
    if not lines:
        return f"{head} the pod templates are the same"
    shown = lines[:DIFF_LINES]
    more = f"\n… [{len(lines) - DIFF_LINES} more changed fields not shown]" if len(lines) > DIFF_LINES else ""
    return "\n".join([head, *shown]) + more


async def configmap_detail(client: KubeClient, namespace: str | None, name: str, memory: KeyMemory | None) -> str:
    """One ConfigMap's data keys (names only), its key changes since opsloop last read it (with `memory`), and
    each managedFields write: who, when, which keys."""
    ns = client.namespace(namespace)
    items, _ = await _list(
        client, CONFIGMAPS, ns, field_selector=f"metadata.name={name}", accept=None if memory else METADATA_ONLY
    )
    cm = next((i for i in items if columns.meta(i).get("name") == name), None)
    if cm is None:
        raise ToolError(f"no configmap {name} in {client.name}/{ns}")
    meta = columns.meta(cm)
    lines = [f"{client.name}/{ns} configmap/{name} (resourceVersion {meta.get('resourceVersion')}); values never shown"]
    if memory is not None:
        snapshot = (await remember_keys(memory, client.name, ns, [cm]))[name]
        keys = sorted(snapshot.hashes)
        lines.append(f"data keys now ({len(keys)}): {some_names(keys, KEYS_LISTED) or 'none'}")
        lines.append(f"key changes: {key_changes(snapshot, [], limit=KEYS_LISTED)}")
    else:
        lines.append("key changes: not known (opsloop keeps earlier reads in its store, and none is open)")
    writes = []
    for entry in meta.get("managedFields") or []:
        if isinstance(entry, Mapping):
            keys = data_keys(entry)
            at = columns.parse_time(entry.get("time"))
            writes.append(
                f"- {entry.get('manager') or 'unknown'} {entry.get('operation') or ''} at "
                f"{utc_minute(at) if at else 'an unknown time'}: "
                + (f"keys {some_names(keys, KEYS_LISTED)}" if keys else "no data keys")
            )
    lines += ["writes (managedFields; the keys each writer last set):", *(writes or ["- none recorded"])]
    return "\n".join(lines)
