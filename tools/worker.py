"""Run a sync tool function in a child process that is killed on timeout or cancel.

A runaway regex or a call stuck on a dead NFS mount then stalls neither the event loop nor
the bot's GIL, and never outlives its call: a thread cannot be killed, a process can.

Protocol: the parent writes two pickles to the child's stdin (its sys.path, then the
WorkerTarget and the keyword arguments); the child imports the tool's module, calls the
function (tools/worker_child.py) and writes one JSON object to its stdout: {"kind": "ok"|"tool_error"|
"permission_denied"|"exception", "text": ...}. Anything the function prints goes to stderr.
"""

from __future__ import annotations

import json
import pickle
import sys
from typing import Any

from tools.api import PermissionDenied, ToolError, WorkerTarget
from tools.process import communicate

WORKER_MARK = "opsloop-tool-worker"  # in the child's command line, so ps (and tests) can tell it apart
_BOOTSTRAP = (
    "import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
    f"from tools.worker_child import serve; serve()  # {WORKER_MARK}"
)
_MAX_STDERR_SHOWN = 500
_STDERR_TAIL_BYTES = 64 * 1024  # what is decoded of a dead worker's stderr, for its last line


async def run_in_worker(target: WorkerTarget, kwargs: dict[str, Any]) -> str:
    """Call the function `target` names with `kwargs` in a fresh child process; its rendered result.

    If the caller is cancelled (the tool's timeout, a Stop click, shutdown) the child is killed
    and reaped before the cancellation goes on.
    """
    payload = pickle.dumps([p for p in sys.path if isinstance(p, str)]) + pickle.dumps((target, kwargs))
    code, out, err = await communicate([sys.executable, "-c", _BOOTSTRAP], payload)
    return _outcome(target, code, out, err)


def _outcome(target: WorkerTarget, code: int | None, out: bytes, err: bytes) -> str:
    try:
        answer = json.loads(out)
        kind, text = answer["kind"], answer["text"]
    except (ValueError, KeyError, TypeError):
        # Only the tail is decoded: a child that printed 50 MB before dying must not stall the event loop.
        last = err[-_STDERR_TAIL_BYTES:].decode(errors="replace").strip().splitlines()[-1:] or [""]
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        detail = f": {last[0][-_MAX_STDERR_SHOWN:]}" if last[0] else ""
        raise ToolError(f"the worker process for {target.tool_attr} {how} without a result{detail}") from None
    if kind == "ok":
        return str(text)
    if kind == "permission_denied":
        raise PermissionDenied(text)
    raise ToolError(text)  # a ToolError, or an unexpected exception as "Type: message"
