"""A ModelClient that plays back steps in-process (no HTTP), for tests that must not time the network.

Like openai-agents' ScriptedModel: steps are replies or callables building one from
the request, and `assert_complete()` checks every step was used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.core.types import AnswerSink, ModelRequest, ModelResponse, Usage

Step = list[dict[str, Any]] | Callable[[ModelRequest], list[dict[str, Any]]]


class ScriptedModel:
    """`delta_chars`: a sink passed to `complete` gets each text block in deltas of that many characters."""

    def __init__(self, *steps: Step, model: str = "claude-sonnet-4-5", delta_chars: int = 7) -> None:
        self.steps = list(steps)
        self.model = model
        self.delta_chars = delta_chars
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, *, sink: AnswerSink | None = None) -> ModelResponse:
        self.requests.append(request)
        if not self.steps:
            raise AssertionError("ScriptedModel: no step left")
        step = self.steps.pop(0)
        content = step(request) if callable(step) else step
        if sink is not None:  # as the adapter feeds a real stream: text deltas, then the start of each tool call
            await sink.attempt()
            for block in content:
                if block["type"] == "text":
                    for i in range(0, len(block["text"]), self.delta_chars):
                        await sink.text(block["text"][i : i + self.delta_chars])
                elif block["type"] == "tool_use":
                    await sink.tool_use()
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        return ModelResponse(
            content=content, stop_reason=stop, usage=Usage(input_tokens=100, output_tokens=10), model=self.model
        )

    def assert_complete(self) -> None:
        assert not self.steps, f"{len(self.steps)} scripted step(s) not used"


def call(name: str, args: dict[str, Any], id: str) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": id, "name": name, "input": args}]


def answered(content: list[dict[str, Any]]) -> tuple[Step, Step]:
    """A final answer given without update_summary after successful calls, and the same answer again when the
    loop asks once for the summary (prompts.SUMMARY_BEHIND): the second is the one the run ends with."""
    return content, content
