"""The Kubernetes reach ([[kubernetes.clusters]]): six reads (parallel) and four changes, each change previewed
by a server-side dry run and bound to the object's resourceVersion. Its tools are offered whenever a cluster is
configured; listing "tools.k8s" in [tools] modules is accepted too.

`REACH` is imported by tools/reaches.py; the tools (and aiohttp behind them) load when first asked for.
"""

from importlib import import_module
from typing import Any

from tools.k8s.reach import REACH

_TOOLS = {
    "k8s_get": "reads",
    "k8s_describe": "reads",
    "k8s_events": "reads",
    "k8s_logs": "reads",
    "k8s_rollout_history": "reads",
    "k8s_top": "reads",
    "k8s_rollout_restart": "writes",
    "k8s_scale": "writes",
    "k8s_rollout_undo": "writes",
    "k8s_delete_pod": "writes",
}

__all__ = [  # noqa: RUF022  (the order the model sees them)
    "k8s_get",
    "k8s_describe",
    "k8s_events",
    "k8s_logs",
    "k8s_rollout_history",
    "k8s_top",
    "k8s_rollout_restart",
    "k8s_scale",
    "k8s_rollout_undo",
    "k8s_delete_pod",
    "REACH",
]


def __getattr__(name: str) -> Any:
    if name in _TOOLS:
        return getattr(import_module(f"tools.k8s.{_TOOLS[name]}"), name)
    if name == "check_clusters":
        return import_module("tools.k8s.check").check_clusters
    raise AttributeError(f"module 'tools.k8s' has no attribute {name!r}")
