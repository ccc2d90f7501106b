"""Context condensation: when the history no longer fits (an overflow, or a prompt past the context budget),
the older turns are summarised by the model once and replaced by that summary; the newest turns stay.

`Condenser` is a mixin of the run (bot.run.loop._Run), on top of its meters (bot.run.meter): it reads the run's
config through `CondenseConfig` and uses the run's trace, declared below, so this module imports nothing of
the loop.
"""

from __future__ import annotations

from typing import Any, Protocol

from bot.core.redact import redact
from bot.core.types import ModelRequest, StopReason
from bot.run import prompts
from bot.run.guards import Stop
from bot.run.history import final_text, split_for_condensing, transcript, without_thinking
from bot.run.meter import Meter, MeterConfig


class CondenseConfig(MeterConfig, Protocol):
    """What condensation reads of a RunConfig."""

    @property
    def condense(self) -> bool: ...
    @property
    def max_tokens(self) -> int: ...


class Condenser(Meter):
    """The run's history, condensed once (see the module docstring)."""

    cfg: CondenseConfig
    history: list[dict[str, Any]]
    task: str

    # The run's own (bot.run.loop._Run defines it): its trace.
    async def trace(self, kind: str, **data: Any) -> None:
        raise NotImplementedError

    async def condense(self, why: str) -> None:
        if self.condensed or not self.cfg.condense:
            raise Stop(
                StopReason.MODEL_ERROR,
                f"context window exceeded ({why}) and it was already condensed once"
                if self.condensed
                else f"context window exceeded ({why}); condensation is off",
            )
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
        head = {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": redact(
                        f"{self.task}\n\n[Summary of the work so far, condensed to fit the context window]\n{text}"
                    ),
                }
            ],
        }
        # The kept turns lose their thinking blocks: they were bound to the history we just summarised,
        # and current models reject them (400) once their prefix changed. system and tools stay as they were.
        self.history = [head, *without_thinking(self.history[split:])]
        await self.cfg.store.replace_history(self.id, self.history)
        await self.save_totals()
        await self.trace(
            "condense", why=why, kept_messages=len(self.history) - 1, model=summary.model, usage=summary.usage.to_dict()
        )
        self.check_budgets()
