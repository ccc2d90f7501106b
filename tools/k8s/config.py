"""[[kubernetes.clusters]]: parsed and checked, every problem naming its location (kubernetes.clusters[0].name: …)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from bot.config.reader import Reader, setting
from tools.reach import matching, unique_names

CLUSTER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
NAMESPACE_RE = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")  # a DNS label, as Kubernetes wants it


def _kubeconfig(path: Path, r: Reader, key: str) -> Path:
    """The file is a kubeconfig, and names the context (or has a current one): found now, not mid-incident."""
    path = path.resolve()
    if not path.is_file():
        r.problem(f"{str(path)!r} is not a file", key)
        return path
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        r.problem(f"cannot read {str(path)!r}: {type(e).__name__}", key)
        return path
    if not isinstance(doc, dict):
        r.problem(f"{str(path)!r} is not a kubeconfig (no contexts)", key)
        return path
    context = r.table.get("context")
    names = [c.get("name") for c in doc.get("contexts") or [] if isinstance(c, dict)]
    if not isinstance(context, str):
        if not doc.get("current-context"):
            r.problem(
                f"{str(path)!r} has no current-context; name one of: {', '.join(map(str, names)) or '(none)'}",
                "context",
            )
    elif context not in names:
        r.problem(
            f"{context!r} is not a context in {str(path)!r} (it has: {', '.join(map(str, names)) or 'none'})", "context"
        )
    return path


_namespace = matching(NAMESPACE_RE, "is not a namespace name")  # one, or each of a list


def _namespaces(names: tuple[str, ...], r: Reader, key: str) -> tuple[str, ...]:
    found = _namespace(names, r, key)
    if len(set(found)) < len(found):
        r.problem("lists a namespace twice", key)
    return tuple(dict.fromkeys(found))


def _default_namespace(ns: str, r: Reader, key: str) -> str | None:
    if _namespace(ns, r, key) is None:
        return None
    allowed = r.table.get("namespaces")
    if isinstance(allowed, list) and allowed and ns not in allowed:
        r.problem(f"{ns!r} is not one of the cluster's namespaces ({', '.join(map(str, allowed))})", key)
        return None
    return ns


@dataclass(frozen=True)
class ClusterSpec:
    """One cluster opsloop may reach ([[kubernetes.clusters]])."""

    name: str = setting(
        doc="how the tools' `cluster` argument names it",
        check=matching(CLUSTER_NAME_RE, "must be 1-63 letters, digits, '.', '_' or '-'"),
    )
    kubeconfig: Path | None = setting(
        None, "None: the in-cluster service account when there is one, else ~/.kube/config", check=_kubeconfig
    )
    context: str | None = setting(None, "None: the kubeconfig's current context")
    namespaces: tuple[str, ...] = setting(
        (), "the only namespaces opsloop touches; empty: what the credentials allow", check=_namespaces
    )
    default_namespace: str | None = setting(
        None,
        'the namespace a tool call without one touches; unset: the only one of `namespaces`, else "default" '
        "when `namespaces` is empty (with several and no default, the tools ask for one)",
        check=_default_namespace,
    )
    timeout_s: float = setting(
        20.0, "per API request; a cluster that does not answer is down after it", unit="s", high=300
    )

    @property
    def implied_namespace(self) -> str | None:
        """The namespace a call without one touches: `default_namespace`, else the only allowed namespace, else
        "default" when any is allowed; None when several are allowed and none is the default."""
        if self.default_namespace:
            return self.default_namespace
        if len(self.namespaces) == 1:
            return self.namespaces[0]
        return None if self.namespaces else "default"

    @property
    def source(self) -> str:
        """Where the credentials come from, for error messages and `opsloop check`."""
        where = str(self.kubeconfig) if self.kubeconfig else "in-cluster service account or ~/.kube/config"
        return f"{where}, context {self.context}" if self.context else where


@dataclass(frozen=True)
class Kubernetes:
    """[kubernetes]: the clusters opsloop may reach."""

    clusters: tuple[ClusterSpec, ...] = setting((), "[[kubernetes.clusters]]", check=unique_names("cluster"))
