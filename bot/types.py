"""Frozen records the runtime passes around: tool calls, decisions, usage, results."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class StopReason(enum.StrEnum):
    """Why a run ended. Each boundary has its own value: 'timeout' is not a diagnosis."""

    COMPLETED = "completed"
    ITERATION_LIMIT = "iteration_limit"
    DEADLINE = "deadline"
    TOKEN_BUDGET = "token_budget"
    COST_BUDGET = "cost_budget"
    LOOP_DETECTED = "loop_detected"
    CONSECUTIVE_ERRORS = "consecutive_errors"
    PERMISSION_DENIED = "permission_denied"
    CANCELLED = "cancelled"
    MODEL_ERROR = "model_error"


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Token counts as the Messages API reports them.

    `input_tokens` excludes cached tokens (API semantics), so the paid tokens of the
    design ("input − cache_read + output", with input meaning the whole prompt) are
    `input_tokens + cache_write_tokens + output_tokens`.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )

    @property
    def paid_tokens(self) -> int:
        return self.input_tokens + self.cache_write_tokens + self.output_tokens

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """One tool_use block from the model."""

    id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ConfirmRequest:
    """What a human is asked to approve: one call, bound to its arguments and preview."""

    run_id: str
    call: ToolCall
    category: str  # "mutating" | "destructive"
    preview: str | None
    args_hash: str
    preview_hash: str | None


@dataclass(frozen=True, kw_only=True)
class Decision:
    """A human's answer to a ConfirmRequest.

    outcome is one of approved, denied, expired, superseded; `reason` carries the
    denial reason or, for superseded, the thread reply that superseded it.
    """

    approved: bool
    confirmed_by: str | None = None
    reason: str = ""
    outcome: str = ""

    def __post_init__(self) -> None:
        if not self.outcome:
            object.__setattr__(self, "outcome", "approved" if self.approved else "denied")
        if self.approved and not self.confirmed_by:
            raise ValueError("an approval needs confirmed_by")


@dataclass(frozen=True, kw_only=True)
class Injected:
    """A thread reply already stored in the run's inbox, waiting to enter the history."""

    id: str
    user: str
    text: str


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """One request. `system` and `tools` are fixed for a run (current models bind thinking to them)."""

    system: str
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    max_tokens: int
    effort: str | None = None  # output_config.effort on models that think adaptively
    thinking_display: str | None = None  # "summarized" | "omitted"
    drop_block: bool = False  # ask the API to drop thinking blocks whose prefix no longer matches


@dataclass(frozen=True, kw_only=True)
class ModelResponse:
    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: Usage
    model: str
    drop_block: bool = False  # the request needed prefix_mismatch_behavior=drop_block (see bot.model)


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """What every run returns, however it ended."""

    run_id: str
    output: str | None
    stop_reason: StopReason
    stop_detail: str = ""
    iterations: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    tools_called: tuple[str, ...] = ()
    wall_seconds: float = 0.0
    model: str = ""
    stopped_by: str | None = None


class ModelError(Exception):
    """The model cannot answer this run: auth failure, a rejected request, or every
    retry and fallback exhausted. Terminal (`model_error`). `usage`: what the failed
    attempts still cost (a degenerate stream is billed for what it streamed)."""

    def __init__(self, message: str, *, usage: Usage | None = None, model: str = "") -> None:
        super().__init__(message)
        self.usage = usage or Usage()
        self.model = model


class ContextOverflow(ModelError):
    """The prompt no longer fits the model's context window."""
