"""Context condensation: when the history no longer fits (an overflow, or a prompt past the context budget),
the older turns are summarised by the model and replaced by a head that keeps the run's state; the newest turns
stay. It runs as often as the context fills again.

The head opsloop writes (`head_blocks`): the task and the model's summary; the record of every call condensed
so far (each result's first line verbatim, the result's handle, then the call, its error, who approved it and
a change's outcome), carried over from the previous head; and the living summary as last accepted (from the
store), re-attached after the condensed history.

`Condenser` is a mixin of the run (bot.run.loop._Run), on top of its meters (bot.run.meter): it reads the run's
config through `RunView` and uses the run's trace and gate rule, declared below, so this module imports
nothing of the loop.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bot.core.redact import redact
from bot.core.types import ModelRequest, StopReason, ToolCall
from bot.run import prompts
from bot.run.guards import Stop
from bot.run.history import final_text, first_line, result_text, split_for_condensing, transcript, without_thinking
from bot.run.meter import Meter
from bot.run.summary import render_text

RECORD = "[Calls so far: each result's first line, then the call (cite results by that first line)]"
LIVING = "[The living summary, as last accepted (update_summary)]"
CONDENSED = "[Summary of the work so far, condensed to fit the context window]"
OUTCOME_CHARS = 300  # of a change's result, after its first line: what it did, or why it was not run


class Condenser(Meter):
    """The run's history, condensed (see the module docstring)."""

    history: list[dict[str, Any]]
    task: str

    read_only: Callable[[ToolCall], bool]  # the gate's rule (bot.run.gate), which the run has too
    trace: Callable[..., Awaitable[None]]  # the run's own (bot.run.loop._Run defines it)

    async def condense(self, why: str) -> None:
        if not self.cfg.condense:
            raise Stop(StopReason.MODEL_ERROR, f"context window exceeded ({why}); condensation is off")
        split = split_for_condensing(self.history)
        if split is None:
            raise Stop(StopReason.MODEL_ERROR, f"context window exceeded ({why}) with nothing left to condense")
        self.condensed = True
        older = transcript(self.history[:split])
        request = ModelRequest(
            system=prompts.CONDENSE_SYSTEM,
            tools=[],
            max_tokens=self.cfg.max_tokens,
            effort="low",
            thinking_display=None,
            messages=[{"role": "user", "content": [{"type": "text", "text": older}]}],
        )
        async with self.deadline("condensing the history"):
            summary = await self.cfg.model.complete(request)
        self.charge_response(summary)
        # No summary text (the model only thought): keep the newest part of the plain transcript instead.
        text = final_text(summary.content) or older[-8000:]
        head = {"role": "user", "content": await self.head_blocks(text, self.history[:split])}
        # The kept turns lose their thinking blocks: they were bound to the history we just summarised,
        # and current models reject them (400) once their prefix changed. system and tools stay as they were.
        self.history = [head, *without_thinking(self.history[split:])]
        await self.cfg.store.replace_history(self.id, self.history)
        await self.save_totals()
        await self.trace(
            "condense", why=why, kept_messages=len(self.history) - 1, model=summary.model, usage=summary.usage.to_dict()
        )
        self.check_budgets()

    async def head_blocks(self, text: str, older: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The condensed head's text blocks, redacted: the task and `text`, the record, the living summary."""
        blocks = [f"{self.task}\n\n{CONDENSED}\n{text}"]
        if record := await self.call_record(older):
            blocks.append("\n".join([RECORD, *record]))
        if (living := await self.cfg.store.last_summary(self.id)) is not None:
            blocks.append(f"{LIVING}\n{render_text(living)}")
        return [{"type": "text", "text": redact(b)} for b in blocks]

    async def call_record(self, older: Sequence[dict[str, Any]]) -> list[str]:
        """One line per call in `older`, after the lines of the record a previous condensation left there."""
        lines: list[str] = []
        calls: dict[str, ToolCall] = {}
        answered: list[tuple[ToolCall, dict[str, Any]]] = []
        for message in older:
            content = message["content"] if isinstance(message["content"], list) else []
            for b in content:
                kind = b.get("type")
                if kind == "text" and message["role"] == "user" and b["text"].startswith(RECORD + "\n"):
                    lines += b["text"].splitlines()[1:]
                elif kind == "tool_use":
                    calls[b["id"]] = ToolCall(id=b["id"], name=b["name"], args=dict(b.get("input") or {}))
                elif kind == "tool_result" and (call := calls.get(b["tool_use_id"])) is not None:
                    answered.append((call, b))
        stored = await self.cfg.store.tool_results(self.id, [c.id for c, _ in answered]) if answered else {}
        for call, b in answered:
            head, _, rest = result_text(b.get("content")).strip().partition("\n")
            line = f"- {first_line(head)} | {call.name} {json.dumps(call.args, sort_keys=True)[:200]} [{call.id}]"
            if b.get("is_error"):
                line += " (error)"
            if (row := stored.get(call.id)) is not None and row.confirmed_by:
                line += f"; approved by {row.confirmed_by}"
            if not self.read_only(call) and rest.strip():
                line += f"; outcome: {' '.join(rest.split())[:OUTCOME_CHARS]}"
            lines.append(line)
        return lines
