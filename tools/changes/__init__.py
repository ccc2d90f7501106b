"""What changed (docs/context.md, What changed): Kubernetes revisions, host package changes, git commits and stored
change events, read concurrently and merged into one timeline, newest first.

`model` holds the records and the timeline; `git`, `packages`, `k8s` and `events` each read one source;
`gather` runs them together, a failing source becoming one line; `reach` reads `[changes]` and `tool` is
`recent_changes`, offered whenever `[changes]` is configured; `detail` is `change_diff`, one line's detail.
"""

from tools.changes.reach import REACH

__all__ = ["REACH"]
