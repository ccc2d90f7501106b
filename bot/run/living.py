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
from bot.run.summary import DESCRIPTION, INPUT_SCHEMA, TOOL_NAME, CallOutcome, CallStatus, Summary, refusal, validate

if TYPE_CHECKING:
    from bot.store import Store

__all__ = ["ACCEPTED", "TOOL_NAME", "offered", "outcomes", "schema", "update"]

ACCEPTED = "Summary updated; it is shown in the thread's status message."


def schema() -> dict[str, Any]:
    """The tool's API schema, appended to a new run's fixed tools block."""
    return {"name": TOOL_NAME, "description": DESCRIPTION, "input_schema": INPUT_SCHEMA}


def offered(schemas: Iterable[dict[str, Any]]) -> bool:
    """The run's tools block has it (a run stored before it existed doesn't, and keeps its block as it is)."""
    return any(s.get("name") == TOOL_NAME for s in schemas)


def outcomes(
    results: dict[str, ToolResultRow], turn: Sequence[ToolCall], answered: Sequence[CallResult] = ()
) -> dict[str, CallOutcome]:
    """Every call of the run by tool_use id: stored results and this turn's `answered` ones (ran and not an
    error: succeeded), and this turn's calls not answered yet (pending)."""
    calls = {c.id: CallOutcome(c.name, CallStatus.PENDING) for c in turn}
    for tid, r in results.items():
        calls[tid] = CallOutcome(
            r.tool, CallStatus.SUCCEEDED if r.content is not None and not r.is_error else CallStatus.FAILED
        )
    for a in answered:
        calls[a.tool_use_id] = CallOutcome(a.tool, CallStatus.FAILED if a.is_error else CallStatus.SUCCEEDED)
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
