"""The minimal workload's one tool, for `opsloop run` (`[tools] modules = ["bench.minimal"]`): the `df` the
in-process contenders offer on that workload, and nothing else, so every row of the workload sends the same tools."""

from __future__ import annotations

from bench.tools import df

__all__ = ["df"]
