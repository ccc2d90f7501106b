"""The child side of a tool worker (see tools/worker.py): import the tool's module, make one call, answer in JSON."""

from __future__ import annotations

import importlib
import json
import os
import pickle
import sys
from typing import Any

from tools.api import (
    PermissionDenied,
    ToolError,
    WorkerTarget,
    bounded_text,
    exception_text,
    render_result,
    truncate_output,
)
from tools.registry import Tool


def serve() -> None:
    """The child's entry point (see tools.worker._BOOTSTRAP): one call, one JSON answer on the original stdout."""
    result_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints go to stderr, never into the answer
    target, kwargs = pickle.load(sys.stdin.buffer)
    answer = _call(target, kwargs)
    with os.fdopen(result_fd, "w", encoding="utf-8") as out:
        json.dump(answer, out)


def _call(target: WorkerTarget, kwargs: dict[str, Any]) -> dict[str, str]:
    try:  # module attribute `tool_attr` is the Tool, `role` picks its impl, preview or guard
        found = getattr(importlib.import_module(target.module), target.tool_attr, None)
        impl = getattr(found, target.role, None) if isinstance(found, Tool) else None
        if impl is None:
            raise RuntimeError(f"{target.module}.{target.tool_attr} has no {target.role} to run in a worker")
        result = impl.fn(**kwargs)
    except ToolError as e:  # every text is bounded here, in the child: the parent reads it on the event loop
        return {"kind": "tool_error", "text": bounded_text(str(e))}
    except PermissionDenied as e:
        return {"kind": "permission_denied", "text": bounded_text(str(e))}
    except Exception as e:
        return {"kind": "exception", "text": bounded_text(exception_text(e))}
    return {"kind": "ok", "text": truncate_output(render_result(result))}
