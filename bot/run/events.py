"""What a run tells its watchers as it goes: typed events, one class per kind.

The runtime (bot/run/loop.py, bot/run/gate.py) sends each to `RunConfig.on_event`; the Slack side (the status message,
the task list, the loading status: handlers/supervisor/thread.py and status.py) is one subscriber, and another (a
pager's write-back, a dashboard) matches on the classes it cares about instead of reading dict keys. Every event says
which run, its step, and what the run has spent so far. Events are for display: a failing subscriber is logged
and never breaks the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.core.types import RunResult
from bot.run.summary import Summary


@dataclass(frozen=True, kw_only=True)
class RunEvent:
    run_id: str
    tokens: int  # paid tokens so far
    cost_usd: float  # so far
    step: int = 0  # the iteration it belongs to


@dataclass(frozen=True, kw_only=True)
class Iteration(RunEvent):
    """A step begins: the model is asked."""


@dataclass(frozen=True, kw_only=True)
class Reasoning(RunEvent):
    """What the model said it is thinking (its visible text before tool calls)."""

    text: str


@dataclass(frozen=True, kw_only=True)
class Summarized(RunEvent):
    """The model's living summary was accepted (bot/run/living.py)."""

    summary: Summary


@dataclass(frozen=True)
class Announced:
    """One call of a step's turn, before any runs."""

    id: str
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ToolsAnnounced(RunEvent):
    """The calls this drive is about to make for the step (ones answered before a restart are not in it)."""

    calls: tuple[Announced, ...]


@dataclass(frozen=True, kw_only=True)
class ToolStarted(RunEvent):
    call_id: str
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ToolDone(RunEvent):
    call_id: str
    tool: str
    is_error: bool
    result: str  # the text the model gets (redacted, bounded)


@dataclass(frozen=True, kw_only=True)
class WaitingApproval(RunEvent):
    call_id: str
    tool: str
    category: str  # "mutating" / "destructive": who may approve depends on it


@dataclass(frozen=True, kw_only=True)
class ApprovalDecided(RunEvent):
    call_id: str
    tool: str
    approved: bool
    by: str | None  # who clicked (None: it expired, or was superseded)
    outcome: str


@dataclass(frozen=True, kw_only=True)
class Finished(RunEvent):
    result: RunResult
