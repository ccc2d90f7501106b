"""Run a sync tool function in a child process that is killed on timeout or cancel.

A runaway regex or a call stuck on a dead NFS mount then stalls neither the event loop nor
the bot's GIL, and never outlives its call: a thread cannot be killed, a process can.

Protocol: the parent writes two pickles to the child's stdin (its sys.path, then the
WorkerTarget and the keyword arguments); the child imports the tool's module, calls the
function and writes one JSON object to its stdout: {"kind": "ok"|"tool_error"|
"permission_denied"|"exception", "text": ...}. Anything the function prints goes to stderr.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import pickle
import sys
from typing import Any

from tools.commands import child_env, kill_group
from tools.registry import (
    PermissionDenied,
    Tool,
    ToolError,
    WorkerTarget,
    bounded_text,
    exception_text,
    render_result,
    truncate_output,
)

WORKER_MARK = "opsloop-tool-worker"  # in the child's command line, so ps (and tests) can tell it apart
_BOOTSTRAP = (
    "import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
    f"from tools.worker import serve; serve()  # {WORKER_MARK}"
)
_MAX_STDERR_SHOWN = 500
_STDERR_TAIL_BYTES = 64 * 1024  # what is decoded of a dead worker's stderr, for its last line


async def run_in_worker(target: WorkerTarget, kwargs: dict[str, Any]) -> str:
    """Call the function `target` names with `kwargs` in a fresh child process; its rendered result.

    If the caller is cancelled (the tool's timeout, a Stop click, shutdown) the child is killed
    and reaped before the cancellation goes on.
    """
    payload = pickle.dumps([p for p in sys.path if isinstance(p, str)]) + pickle.dumps((target, kwargs))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _BOOTSTRAP,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
        start_new_session=True,
    )
    try:
        out, err = await proc.communicate(payload)
    except BaseException:
        await kill_group(proc)
        raise
    return _outcome(target, proc.returncode, out, err)


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


# -- the child side ------------------------------------------------------------------------------


def serve() -> None:
    """The child's entry point (see _BOOTSTRAP): one call, one JSON answer on the original stdout."""
    result_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints go to stderr, never into the answer
    target, kwargs = pickle.load(sys.stdin.buffer)
    answer = _call(target, kwargs)
    with os.fdopen(result_fd, "w", encoding="utf-8") as out:
        json.dump(answer, out)


def _call(target: WorkerTarget, kwargs: dict[str, Any]) -> dict[str, str]:
    try:
        fn = resolve(target)
        result = fn(**kwargs)
    except ToolError as e:  # every text is bounded here, in the child: the parent reads it on the event loop
        return {"kind": "tool_error", "text": bounded_text(str(e))}
    except PermissionDenied as e:
        return {"kind": "permission_denied", "text": bounded_text(str(e))}
    except Exception as e:
        return {"kind": "exception", "text": bounded_text(exception_text(e))}
    return {"kind": "ok", "text": truncate_output(render_result(result))}


def resolve(target: WorkerTarget) -> Any:
    """The function behind `target`: module attribute `tool_attr` is the Tool, `role` picks impl, preview or guard."""
    module = importlib.import_module(target.module)
    found = getattr(module, target.tool_attr, None)
    impl = getattr(found, target.role, None) if isinstance(found, Tool) else None
    if impl is None:
        raise RuntimeError(f"{target.module}.{target.tool_attr} has no {target.role} to run in a worker")
    return impl.fn
