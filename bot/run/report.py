"""The handoff report: why a run stopped, what the model concluded in its wrap-up turn (a budget's stop), and where
it left off, built from the result and the history alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.core.types import RunResult, StopReason
from bot.run.history import result_text

STOP_WORDS = {
    "completed": "finished the task and gave an answer",
    "iteration_limit": "reached the maximum number of agent steps",
    "deadline": "ran out of time: the run's deadline passed",
    "token_budget": "used up its token budget",
    "cost_budget": "used up its cost budget (USD)",
    "loop_detected": "kept making the same tool call and getting the same result",
    "consecutive_errors": "hit too many tool errors in a row",
    "permission_denied": "a tool refused with a permission error, which opsloop never works around",
    "cancelled": "was stopped by a person",
    "model_error": "the model API kept failing or rejected the request, after retries and the fallback models",
}
CONCLUSION = "Conclusion (its wrap-up as the limit was reached)"  # how every export labels such an output


def is_conclusion(stop_reason: StopReason | None) -> bool:
    """A run's output is its wrap-up's conclusion, not an answer, when the run did not complete."""
    return stop_reason is not None and stop_reason != StopReason.COMPLETED


@dataclass(frozen=True, kw_only=True)
class ToolSummary:
    name: str
    calls: int
    last_result: str
    last_is_error: bool


@dataclass(frozen=True, kw_only=True)
class HandoffReport:
    result: RunResult
    stop_words: str
    tools: tuple[ToolSummary, ...]
    last_reasoning: str | None
    pending: tuple[str, ...]
    conclusion: str | None  # what the model concluded in its wrap-up turn, when a budget ended the run


def handoff_report(result: RunResult, history: Sequence[dict[str, Any]]) -> HandoffReport:
    """Summarise a stopped run for the humans taking over. No model call."""
    names: dict[str, str] = {}
    summaries: dict[str, dict[str, Any]] = {}
    last_text = None
    unanswered: list[str] = []
    for message in history:
        content = message["content"] if isinstance(message["content"], list) else []
        for block in content:
            kind = block.get("type")
            if kind == "tool_use":
                names[block["id"]] = block["name"]
                s = summaries.setdefault(block["name"], {"calls": 0, "last": "", "error": False})
                s["calls"] += 1
            elif kind == "tool_result" and block["tool_use_id"] in names:
                s = summaries[names[block["tool_use_id"]]]
                s["last"] = result_text(block.get("content"))
                s["error"] = bool(block.get("is_error"))
                if s["last"].startswith(("Not run: the run stopped", "No result: the run stopped")):
                    unanswered.append(f"{names[block['tool_use_id']]} was not run before the stop")
                elif s["last"].startswith("Outcome unknown"):
                    unanswered.append(f"{names[block['tool_use_id']]}: outcome unknown, verify before retrying")
            elif message["role"] == "assistant" and kind in ("text", "thinking"):
                # Current models put what they say between tool calls in (summarized) thinking blocks.
                said = (block.get("text") if kind == "text" else block.get("thinking")) or ""
                if said.strip():
                    last_text = said.strip()
    return HandoffReport(
        result=result,
        stop_words=STOP_WORDS.get(result.stop_reason.value, result.stop_reason.value),
        tools=tuple(
            ToolSummary(name=n, calls=s["calls"], last_result=s["last"], last_is_error=s["error"])
            for n, s in summaries.items()
        ),
        last_reasoning=last_text,
        pending=tuple(unanswered),
        conclusion=result.output if is_conclusion(result.stop_reason) and result.output else None,
    )
