"""A ModelClient that plays back steps in-process (no HTTP), for tests that must not time the network.

Like openai-agents' ScriptedModel: steps are replies or callables building one from
the request, and `assert_complete()` checks every step was used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.types import ModelRequest, ModelResponse, Usage

Step = list[dict[str, Any]] | Callable[[ModelRequest], list[dict[str, Any]]]


class ScriptedModel:
    def __init__(self, *steps: Step, model: str = "claude-sonnet-4-5") -> None:
        self.steps = list(steps)
        self.model = model
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if not self.steps:
            raise AssertionError("ScriptedModel: no step left")
        step = self.steps.pop(0)
        content = step(request) if callable(step) else step
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        return ModelResponse(content=content, stop_reason=stop, usage=Usage(input_tokens=100, output_tokens=10),
                             model=self.model)

    def assert_complete(self) -> None:
        assert not self.steps, f"{len(self.steps)} scripted step(s) not used"


def call(name: str, args: dict[str, Any], id: str) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": id, "name": name, "input": args}]
