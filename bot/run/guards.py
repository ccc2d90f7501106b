"""The run's hard boundaries: limits, the loop detector and the error breaker.

A boundary ends the run by raising `Stop`; it never asks the model for one more try. A budget's stop
(`WRAP_UP`) gets one wrap-up turn first (bot.run.loop): the model concludes, with no tool allowed.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from dataclasses import dataclass
from typing import Any

from bot.core.errors import OpsloopError
from bot.core.types import StopReason


class Stop(OpsloopError):
    """Ends a run with a reason, a human-readable detail and who caused it."""

    def __init__(self, reason: StopReason, detail: str = "", *, by: str | None = None) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason, self.detail, self.by = reason, detail, by


class Pause(OpsloopError):
    """Ends this driver's turn without ending the run: it waits in the store for a human decision, or is
    handed back to another process (shutdown). Whoever resumes it next continues from the store."""


# The budgets: the run reached one, so the model gets one more call, with no tool allowed, to conclude. Not a
# person's Stop or a policy's refusal, nor a loop or a breaker (the model's own turns went wrong).
WRAP_UP = frozenset({StopReason.ITERATION_LIMIT, StopReason.TOKEN_BUDGET, StopReason.COST_BUDGET, StopReason.DEADLINE})


@dataclass(frozen=True, kw_only=True)
class Limits:
    max_iterations: int = 20
    deadline_seconds: float = 3600.0
    token_budget: int = 500_000
    cost_budget_usd: float = 5.0
    max_consecutive_errors: int = 3
    loop_window: int = 10
    loop_warn_at: int = 3
    loop_stop_at: int = 6
    parallelism: int = 4


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def digest(value: Any) -> str:
    return hashlib.sha256((value if isinstance(value, str) else canonical(value)).encode()).hexdigest()


class LoopDetector:
    """Counts identical (tool, args, output) signatures in a sliding window."""

    def __init__(self, *, window: int = 10) -> None:
        self._recent: deque[str] = deque(maxlen=window)

    def observe(self, name: str, args: Any, output: str) -> int:
        """Record one call; return how often its signature is now in the window."""
        signature = digest(f"{name}|{canonical(args)}|{output}")
        self._recent.append(signature)
        return self._recent.count(signature)


class ErrorBreaker:
    """Trips after N turns in a row whose counted calls all failed. A turn counts as one, however many calls it
    made (parallel guesses at a log path are one error turn); a turn with any success resets it; a turn with no
    counted call (a human's "no", an error the model can fix from its message) leaves the streak as it is."""

    def __init__(self, limit: int = 3) -> None:
        self.limit = limit
        self.streak = 0
        self.last_error = ""
        self._turn: list[bool] = []

    def observe(self, is_error: bool, content: str = "") -> None:
        """One counted call of the current turn."""
        self._turn.append(is_error)
        if is_error:
            self.last_error = content

    def end_turn(self) -> bool:
        """Close the current turn; True when the breaker trips."""
        turn, self._turn = self._turn, []
        if turn:
            self.streak = self.streak + 1 if all(turn) else 0
        return self.streak >= self.limit
