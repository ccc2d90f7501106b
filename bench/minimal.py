"""The minimal workload's one tool, for `opsloop run` (`[tools] modules = ["bench.minimal"]`): the `disk_usage` the
in-process contenders offer on that workload, and nothing else, so every row of the workload sends the same tools."""

from __future__ import annotations

from bench.tools import disk_usage

__all__ = ["disk_usage"]
