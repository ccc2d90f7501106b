"""Kubernetes tools for [[kubernetes.clusters]]: six reads (parallel) and four changes, each change previewed
by a server-side dry run and bound to the object's resourceVersion. List "tools.k8s" in [tools] modules."""

from tools.k8s.check import check_clusters
from tools.k8s.reads import k8s_describe, k8s_events, k8s_get, k8s_logs, k8s_rollout_history, k8s_top
from tools.k8s.writes import k8s_delete_pod, k8s_rollout_restart, k8s_rollout_undo, k8s_scale

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
    "check_clusters",
]
