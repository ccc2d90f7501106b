"""The scripted model: plays a case's golden or bad script, one turn per request, in order.

It implements the runtime's ModelClient Protocol, so the run loop, the gate and the summary's checks treat it as
any model. Usage is estimated from the request's size (about four characters a token), priced as the model it
stands in for. A request after the script's last turn gets a final answer saying the script ended (the run
then completes and is scored as it stands).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from bot.core.types import AnswerSink, ModelRequest, ModelResponse, Usage
from bot.eval.case import Turn

ENDED = "(the scripted model has no more turns)"
CHARS_PER_TOKEN = 4


@dataclass
class ScriptedModel:
    turns: tuple[Turn, ...]
    name: str = "claude-sonnet-5-5"
    used: int = 0
    _ids: int = field(default=0, repr=False)

    @property
    def model(self) -> str:
        return self.name

    async def complete(self, request: ModelRequest, *, sink: AnswerSink | None = None) -> ModelResponse:
        turn = self.turns[self.used] if self.used < len(self.turns) else Turn(text=ENDED)
        self.used += 1
        content: list[dict[str, object]] = [{"type": "text", "text": turn.text}] if turn.text else []
        for tool, args in turn.calls:
            self._ids += 1
            content.append({"type": "tool_use", "id": f"toolu_eval_{self._ids:04d}", "name": tool, "input": args})
        size = len(request.system) + len(json.dumps(request.tools)) + len(json.dumps(request.messages))
        usage = Usage(input_tokens=size // CHARS_PER_TOKEN, output_tokens=len(json.dumps(content)) // CHARS_PER_TOKEN)
        return ModelResponse(
            content=content, stop_reason="tool_use" if turn.calls else "end_turn", usage=usage, model=self.name
        )
