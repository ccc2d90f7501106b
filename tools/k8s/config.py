"""[[kubernetes.clusters]]: parsed and checked, every error naming its location (kubernetes.clusters[0].name: …)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools.api import ToolConfigError

CLUSTER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
NAMESPACE_RE = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")  # a DNS label, as Kubernetes wants it
DEFAULT_TIMEOUT_S = 20.0
_KEYS = ("name", "kubeconfig", "context", "namespaces", "timeout_s")


@dataclass(frozen=True)
class ClusterSpec:
    """One cluster opsloop may reach."""

    name: str
    kubeconfig: Path | None = None  # None: the in-cluster service account when there is one, else ~/.kube/config
    context: str | None = None  # None: the kubeconfig's current context
    namespaces: tuple[str, ...] = ()  # the only namespaces opsloop touches; empty: what the credentials allow
    timeout_s: float = DEFAULT_TIMEOUT_S  # per API request; a cluster that does not answer is "down" after it

    @property
    def source(self) -> str:
        """Where the credentials come from, for error messages and `opsloop check`."""
        where = str(self.kubeconfig) if self.kubeconfig else "in-cluster service account or ~/.kube/config"
        return f"{where}, context {self.context}" if self.context else where


def parse_clusters(table: Any, *, base_dir: Path) -> tuple[ClusterSpec, ...]:
    """The [kubernetes] table's clusters; ToolConfigError at the first problem, naming where it is."""
    if not isinstance(table, Mapping):
        raise ToolConfigError(f"kubernetes: expected a table, got {type(table).__name__}")
    extra = sorted(set(table) - {"clusters"})
    if extra:
        raise ToolConfigError(f"kubernetes.{extra[0]}: unknown key (known: clusters)")
    entries = table.get("clusters", [])
    if not isinstance(entries, list):
        raise ToolConfigError("kubernetes.clusters: expected a list of tables ([[kubernetes.clusters]])")
    specs: list[ClusterSpec] = []
    for i, entry in enumerate(entries):
        spec = _cluster(entry, f"kubernetes.clusters[{i}]", base_dir)
        if any(s.name == spec.name for s in specs):
            raise ToolConfigError(f"kubernetes.clusters[{i}].name: duplicate cluster name {spec.name!r}")
        specs.append(spec)
    return tuple(specs)


def _cluster(entry: Any, where: str, base_dir: Path) -> ClusterSpec:
    if not isinstance(entry, Mapping):
        raise ToolConfigError(f"{where}: expected a table, got {type(entry).__name__}")
    for key in entry:
        if key not in _KEYS:
            raise ToolConfigError(f"{where}.{key}: unknown key (known: {', '.join(_KEYS)})")
    if "name" not in entry:
        raise ToolConfigError(f"{where}: missing required key 'name'")
    name = _str(entry["name"], f"{where}.name")
    if not CLUSTER_NAME_RE.fullmatch(name):
        raise ToolConfigError(f"{where}.name: {name!r} must be 1-63 letters, digits, '.', '_' or '-'")
    kubeconfig: Path | None = None
    if "kubeconfig" in entry:
        kubeconfig = (base_dir / Path(_str(entry["kubeconfig"], f"{where}.kubeconfig")).expanduser()).resolve()
        if not kubeconfig.is_file():
            raise ToolConfigError(f"{where}.kubeconfig: {str(kubeconfig)!r} is not a file")
    context = _str(entry["context"], f"{where}.context") if "context" in entry else None
    if kubeconfig is not None:
        _check_kubeconfig(kubeconfig, context, where)
    namespaces: tuple[str, ...] = ()
    if "namespaces" in entry:
        raw = entry["namespaces"]
        if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
            raise ToolConfigError(f"{where}.namespaces: expected a list of strings")
        for j, ns in enumerate(raw):
            if not NAMESPACE_RE.fullmatch(ns):
                raise ToolConfigError(f"{where}.namespaces[{j}]: {ns!r} is not a namespace name")
        if len(set(raw)) != len(raw):
            raise ToolConfigError(f"{where}.namespaces: lists a namespace twice")
        namespaces = tuple(raw)
    timeout_s = DEFAULT_TIMEOUT_S
    if "timeout_s" in entry:
        value = entry["timeout_s"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 300:
            raise ToolConfigError(f"{where}.timeout_s: expected seconds between 0 and 300, got {value!r}")
        timeout_s = float(value)
    return ClusterSpec(name=name, kubeconfig=kubeconfig, context=context, namespaces=namespaces, timeout_s=timeout_s)


def _check_kubeconfig(path: Path, context: str | None, where: str) -> None:
    """The file is a kubeconfig, and names the context (or has a current one): found now, not mid-incident."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ToolConfigError(f"{where}.kubeconfig: cannot read {str(path)!r}: {type(e).__name__}") from None
    if not isinstance(doc, dict):
        raise ToolConfigError(f"{where}.kubeconfig: {str(path)!r} is not a kubeconfig (no contexts)")
    names = [c.get("name") for c in doc.get("contexts") or [] if isinstance(c, dict)]
    if context is None:
        if not doc.get("current-context"):
            raise ToolConfigError(f"{where}.context: {str(path)!r} has no current-context; name one of: "
                                  f"{', '.join(map(str, names)) or '(none)'}")
    elif context not in names:
        raise ToolConfigError(f"{where}.context: {context!r} is not a context in {str(path)!r} "
                              f"(it has: {', '.join(map(str, names)) or 'none'})")


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolConfigError(f"{where}: expected a non-empty string, got {value!r}")
    return value
