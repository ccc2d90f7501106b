"""`update_summary` at the runtime: the living summary's tool, offered to every run from its start (docs/context.md).

Not a registry tool: read-only, no card, no approval, not a task. The runtime hands each call here; the update is
checked against the run's own calls (bot.run.summary.validate, with each call's outcome from the stored tool
results), and an accepted one is stored with its step. A refused one is an error result naming each problem; the
summary stays as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from bot.core.types import CallResult, ToolCall, ToolResultRow
from bot.run.history import tool_calls
from bot.run.summary import (
    DESCRIPTION,
    INPUT_SCHEMA,
    TOOL_NAME,
    CallOutcome,
    CallStatus,
    Summary,
    handle,
    refusal,
    validate,
)

if TYPE_CHECKING:
    from bot.store import Store

__all__ = ["ACCEPTED", "TOOL_NAME", "behind", "handles", "numbered", "offered", "outcomes", "schema", "update"]

ACCEPTED = "Summary updated; it is shown in the thread's status message."


def schema() -> dict[str, Any]:
    """The tool's API schema, appended to a new run's fixed tools block."""
    return {"name": TOOL_NAME, "description": DESCRIPTION, "input_schema": INPUT_SCHEMA}


def offered(schemas: Iterable[dict[str, Any]]) -> bool:
    """The run's tools block has it (a run stored before it existed doesn't, and keeps its block as it is)."""
    return any(s.get("name") == TOOL_NAME for s in schemas)


def numbered(results: dict[str, ToolResultRow], turn: Sequence[ToolCall]) -> int:
    """How many calls of the run have a handle before `turn` (the turn being answered): every stored call but
    update_summary's. Read from the store, so handles stay the same across restarts and condensation."""
    pending = {c.id for c in turn}
    return sum(1 for tid, r in results.items() if tid not in pending and r.tool != TOOL_NAME)


def handles(schemas: Sequence[dict[str, Any]], turn: Sequence[ToolCall], before: int) -> dict[str, str]:
    """Each call of `turn` by tool_use id with its handle (`#7 check_disk web-03`), numbered in call order after
    the `before` earlier calls; its main argument is the first of its schema's parameters it was given.
    update_summary has none: it is not evidence."""
    params = {s["name"]: list(s.get("input_schema", {}).get("properties", {})) for s in schemas}
    out: dict[str, str] = {}
    for call in turn:
        if call.name == TOOL_NAME:
            continue
        main = next((call.args[p] for p in params.get(call.name, list(call.args)) if p in call.args), None)
        out[call.id] = handle(before + len(out) + 1, call.name, main)
    return out


def behind(history: Sequence[dict[str, Any]]) -> bool:
    """A call succeeded after the last accepted summary, in call order, or the run never summarised after a
    successful call: the summary doesn't cover everything the final answer could cite. A run with no successful
    call (a question answered without tools) is not behind."""
    errors = {
        b["tool_use_id"]: bool(b.get("is_error"))
        for m in history
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    }
    stale = False
    for m in history:
        for call in tool_calls(m["content"]) if m["role"] == "assistant" else ():
            if errors.get(call.id) is False:
                stale = call.name != TOOL_NAME
    return stale


def outcomes(
    results: dict[str, ToolResultRow], turn: Sequence[ToolCall], answered: Sequence[CallResult] = ()
) -> dict[str, CallOutcome]:
    """Every call of the run by tool_use id, with its result's text: stored results and this turn's `answered`
    ones (ran and not an error: succeeded), and this turn's calls not answered yet (pending)."""
    calls = {c.id: CallOutcome(c.name, CallStatus.PENDING) for c in turn}
    for tid, r in results.items():
        calls[tid] = CallOutcome(
            r.tool,
            CallStatus.SUCCEEDED if r.content is not None and not r.is_error else CallStatus.FAILED,
            r.content or "",
        )
    for a in answered:
        calls[a.tool_use_id] = CallOutcome(a.tool, CallStatus.FAILED if a.is_error else CallStatus.SUCCEEDED, a.content)
    return calls


async def update(
    store: Store,
    run_id: str,
    call: ToolCall,
    *,
    step: int,
    turn: Sequence[ToolCall],
    answered: Sequence[CallResult] = (),
) -> tuple[Summary | None, str]:
    """The accepted (stored) summary and the tool result, or None and the refusal naming each problem.
    `answered`: this turn's results not stored yet (they go with the turn that answers them)."""
    checked = validate(call.args, calls=outcomes(await store.tool_results(run_id), turn, answered))
    if not isinstance(checked, Summary):
        return None, refusal(checked)
    await store.add_summary(run_id, step=step, summary=checked)
    return checked, ACCEPTED
