"""A tool that says what the run calling it is (`tools.api.current_run()`), for tests of the run scope.

Loaded like any tool module (`[tools] modules = ["tests.support.scope_tools"]`)."""

from __future__ import annotations

import json

from tools import Category, tool
from tools.api import current_run

__all__ = ["run_scope"]


@tool(category=Category.READ_ONLY)
async def run_scope() -> str:
    """What this run is: its id, conversation, start, anchor, alert name and labels (JSON)."""
    scope = current_run()
    if scope is None:
        return "null"
    return json.dumps(
        {
            "run_id": scope.run_id,
            "conversation": scope.conversation,
            "started_at": scope.started_at,
            "anchor": scope.anchor,
            "alertname": scope.alertname,
            "labels": dict(scope.labels),
        }
    )
