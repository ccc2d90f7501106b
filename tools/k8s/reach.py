"""The Kubernetes reach: [[kubernetes.clusters]] read, one client per cluster for the tools, and its check."""

from __future__ import annotations

from collections.abc import Mapping

from bot.config.reader import Reader
from tools.api import some_names
from tools.k8s.config import ClusterSpec, Kubernetes
from tools.reach import Reach


class KubernetesReach(Reach):
    name: str = "kubernetes"
    sections: tuple[str, ...] = ("kubernetes",)
    hint: str = "[[kubernetes.clusters]]"
    modules: tuple[str, ...] = ("tools.k8s",)
    settings = Kubernetes

    def parse(self, config: Reader, env: Mapping[str, str]) -> tuple[ClusterSpec, ...] | None:
        found = super().parse(config, env)
        return found.clusters if found is not None and found.clusters else None  # no clusters: nothing to reach

    def open(self, config: tuple[ClusterSpec, ...]) -> Mapping[type, object]:
        from tools.k8s.clusters import KubeClusters  # the Kubernetes client is imported only when configured

        return {KubeClusters: KubeClusters(config)}

    async def aclose(self, resources: Mapping[type, object]) -> None:
        from tools.k8s.clusters import KubeClusters

        clusters = resources.get(KubeClusters)
        if isinstance(clusters, KubeClusters):
            await clusters.aclose()

    def environment(self, config: tuple[ClusterSpec, ...]) -> list[str]:
        """Each cluster's name, the namespaces opsloop is limited to (none: what its credentials allow) and the
        namespace a call without one touches (none with several allowed and no default: the call must name one)."""
        clusters = [f"{c.name} (namespaces: {_namespaces(c)})" for c in config]
        return [f"Kubernetes clusters (the tools' cluster argument): {some_names(clusters, 10)}"]

    async def check(self, config: tuple[ClusterSpec, ...]) -> tuple[list[str], list[str]]:
        from tools.k8s.check import check_clusters  # what each cluster lets opsloop do, per namespace

        return await check_clusters(config)


def _namespaces(c: ClusterSpec) -> str:
    allowed = some_names(c.namespaces) if c.namespaces else "any its credentials allow"
    default = c.implied_namespace
    return f"{allowed}; default {default}" if default else f"{allowed}; no default, give namespace"


REACH = KubernetesReach()
