"""The field diff a dry run's card shows, and the merge patch that turns one object into another."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from tools.k8s.columns import ARROW, NONE, one_line

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
    return one_line(json.dumps(v, sort_keys=True, default=str), 120)


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
