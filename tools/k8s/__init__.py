"""The Kubernetes reach ([[kubernetes.clusters]]): six reads (parallel) and four changes, each change previewed
by a server-side dry run and bound to the object's resourceVersion. Its tools are offered whenever a cluster is
configured; listing "tools.k8s" in [tools] modules is accepted too.

`REACH` is imported by tools/reaches.py; the tools (and aiohttp behind them) load when first asked for.
"""

from importlib import import_module
from typing import Any

from tools.k8s.reach import REACH

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
_WRITES = ("k8s_rollout_restart", "k8s_scale", "k8s_rollout_undo", "k8s_delete_pod")  # the rest are in reads


def __getattr__(name: str) -> Any:
    if name in __all__:  # a tool (REACH is imported above)
        return getattr(import_module(f"tools.k8s.{'writes' if name in _WRITES else 'reads'}"), name)
    raise AttributeError(f"module 'tools.k8s' has no attribute {name!r}")
