"""Frozen records the runtime passes around (tool calls, decisions, usage, results) and the store's rows."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.core.errors import OpsloopError


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


class RunStatus(enum.StrEnum):
    """Where a stored run is: going, paused on a human, or done."""

    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    FINISHED = "finished"


ACTIVE_STATUSES = (RunStatus.RUNNING, RunStatus.WAITING_APPROVAL)
TERMINAL = "terminal:"  # an `opsloop ask` run's conversation is `terminal:<person>`: never a Slack channel id


class ApprovalState(enum.StrEnum):
    """An approval's state; only PENDING ever changes (compare-and-set in the store)."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"


class DecisionCause(enum.StrEnum):
    """What ended a pending approval."""

    CLICK = "click"  # an Approve (the last one required) or Deny click
    REPLY = "reply"  # a thread reply superseded it
    EXPIRY = "expiry"  # nobody decided within the window
    STOP = "stop"  # the run stopped
    CHANGED_CALL = "changed_call"  # the call's arguments or dry-run preview changed; a new approval was asked


class InboxState(enum.StrEnum):
    """A thread reply stored for a run: waiting, in the history, or carried by a superseded approval."""

    QUEUED = "queued"
    CONSUMED = "consumed"
    SUPERSEDING = "superseding"


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Token counts as the Messages API reports them. `input_tokens` excludes cached tokens (API semantics), so the
    design's paid tokens ("input − cache_read + output", input being the whole prompt) are `paid_tokens`."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @classmethod
    def of(cls, raw: Any) -> Usage | None:
        """The usage a trace event or a stored row holds (a mapping of these fields), or None when it holds none."""
        if not isinstance(raw, Mapping):
            return None
        return cls(**{k: int(v or 0) for k, v in raw.items() if k in cls.__dataclass_fields__})

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{k: n + getattr(other, k) for k, n in self.to_dict().items()})

    @property
    def paid_tokens(self) -> int:
        return self.input_tokens + self.cache_write_tokens + self.output_tokens

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def to_dict(self) -> dict[str, int]:
        """The four counts, in the order of the fields (input, output, cache read, cache write)."""
        return dataclasses.asdict(self)


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
    """A human's answer to a ConfirmRequest. `outcome`: approved, denied, expired or superseded; `reason`: the
    denial's reason or, for superseded, the thread reply that superseded it."""

    approved: bool
    confirmed_by: str | None = None
    reason: str = ""
    outcome: str = ""
    preview: str | None = None  # the dry-run preview the decision was made on (what the card showed)

    def __post_init__(self) -> None:
        if not self.outcome:
            object.__setattr__(self, "outcome", "approved" if self.approved else "denied")
        if self.approved and not self.confirmed_by:
            raise ValueError("an approval needs confirmed_by")


@dataclass(frozen=True, kw_only=True)
class Totals:
    """A run's counters so far, saved with every turn; `model`: the one that answered last (a fallback may have)."""

    iterations: int
    usage: Usage
    cost_usd: float
    agent_seconds: float
    tools_called: tuple[str, ...]
    condensed: bool
    model: str | None = None


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
    tool_choice: dict[str, Any] | None = None  # {"type": "none"}: no tool call allowed (the tools are still sent)


@dataclass(frozen=True, kw_only=True)
class ModelResponse:
    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: Usage
    model: str
    drop_block: bool = False  # the request needed prefix_mismatch_behavior=drop_block (see bot.run.model)
    # Each attempt's (model, usage) when retries were needed (empty or degenerate replies): priced one by one,
    # since a price can depend on the model and on each prompt's own size. `usage` is their sum.
    billed: tuple[tuple[str, Usage], ...] = ()

    @property
    def bills(self) -> tuple[tuple[str, Usage], ...]:
        return self.billed or ((self.model, self.usage),)


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


@dataclass(frozen=True, kw_only=True)
class Run:
    """One stored run (a row of `runs`), decoded."""

    id: str
    channel: str
    thread_ts: str
    mention_ts: str | None
    requester: str
    task: str
    status: RunStatus
    model: str
    stop_reason: StopReason | None = None
    stop_detail: str | None = None
    stopped_by: str | None = None
    output: str | None = None
    iterations: int = 0
    usage: Usage = field(default_factory=Usage)  # the four token columns
    cost_usd: float = 0.0
    agent_seconds: float = 0.0
    condensed: bool = False
    tools_called: tuple[str, ...] = ()
    status_ts: str | None = None
    stop_requested_by: str | None = None
    created_at: float
    updated_at: float
    system: str | None = None  # fixed when the run starts; None until then
    tools: list[dict[str, Any]] | None = None  # the tool schemas, exactly as sent; None until the run starts
    drop_block: bool = False  # the run needed prefix_mismatch_behavior=drop_block
    settings: dict[str, Any] | None = None  # what it ran under (limits, effort, tool categories); None: not recorded
    owner: str | None = None  # the process driving it (its lease), if any
    lease_until: float | None = None
    team_id: str | None = None  # the requester's workspace (a channel stream names it); None: not known
    askers: tuple[str, ...] = ()  # people whose words the run read when asked (message authors), beside the requester
    title: str | None = None  # what people see it by (an alert's "DiskFull web-03 (firing)"); None: its task

    @property
    def active(self) -> bool:
        return self.status != RunStatus.FINISHED

    @property
    def in_terminal(self) -> bool:
        """An `opsloop ask` run: only its own process drives it, never a Slack process's scheduler."""
        return self.channel.startswith(TERMINAL)

    def interrupted(self, now: float) -> bool:
        """A terminal run whose `opsloop ask` died (a second Ctrl-C, SIGKILL) before it ended: active, and its
        lease lapsed, so nothing drives it any more (`opsloop show` and `opsloop runs` say so)."""
        return self.in_terminal and self.active and (self.lease_until or 0.0) < now

    @property
    def headline(self) -> str:
        """What a list of runs names it by: its title, else its task."""
        return self.title or self.task


@dataclass(frozen=True, kw_only=True)
class Approval:
    """One approval (a row of `approvals`): a call bound to its arguments hash and preview hash."""

    id: str
    run_id: str
    tool_use_id: str
    tool: str
    category: str  # "mutating" | "destructive"
    args: dict[str, Any]
    args_hash: str | None = None
    preview: str | None = None
    preview_hash: str | None = None
    requester: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    message_ts: str | None = None  # the card on record
    state: ApprovalState = ApprovalState.PENDING
    cause: DecisionCause | None = None  # set when decided
    required: int = 1
    approvals: tuple[str, ...] = ()  # who approved so far
    decided_by: str | None = None
    decided_name: str | None = None
    reason: str | None = None  # a denial's reason, the superseding reply, or what voided it
    created_at: float
    expires_at: float | None = None
    decided_at: float | None = None
    run_tokens: int | None = None  # the run's paid tokens when it asked
    run_cost_usd: float | None = None
    alert_note: str | None = None  # what the alert that started the run said while this waited (it resolved)

    @property
    def pending(self) -> bool:
        return self.state == ApprovalState.PENDING

    @property
    def waited(self) -> float | None:
        """Seconds from the card to the decision; None while pending."""
        return self.decided_at - self.created_at if self.decided_at and self.created_at else None


@dataclass(frozen=True, kw_only=True)
class AuditEntry:
    """One approval with the result of the call it allowed (None: the call never ran)."""

    approval: Approval
    result: str | None = None
    result_is_error: bool | None = None


class FeedbackValue(enum.StrEnum):
    """A click on the feedback buttons under an answer or a handoff report."""

    POSITIVE = "positive"
    NEGATIVE = "negative"


@dataclass(frozen=True, kw_only=True)
class Feedback:
    """One feedback click (a row of `feedback`): who said whether a run's answer or report helped, and when."""

    id: str
    run_id: str
    user: str
    value: FeedbackValue
    channel: str
    message_ts: str
    at: float


@dataclass(frozen=True, kw_only=True)
class InboxItem:
    """A thread reply stored for a run (a row of `inbox`)."""

    id: str
    run_id: str
    channel: str
    ts: str
    user: str
    text: str
    state: InboxState
    created_at: float


@dataclass(frozen=True, kw_only=True)
class AcceptedReply:
    """A thread reply stored for its run in one transaction, with the approvals it superseded."""

    item: InboxItem
    superseded: tuple[str, ...] = ()  # ids of the run's approvals this reply declined (cause REPLY)


@dataclass(frozen=True, kw_only=True)
class AcceptedMention:
    """A mention stored in one transaction: a new run, or a redirect of the thread's active run."""

    run: Run
    created: bool  # False: the thread's run was going; the mention became `redirect`
    redirect: AcceptedReply | None = None


class OutboxKind(enum.StrEnum):
    """What an outbox item asks Slack to do."""

    POST = "post"  # chat.postMessage in a thread
    UPDATE = "update"  # chat.update of the message another (post) item posted


class OutboxState(enum.StrEnum):
    """An outbox item: waiting to be sent, sent (its ts known), given up on, or replaced by a newer update."""

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"
    SUPERSEDED = "superseded"


@dataclass(frozen=True, kw_only=True)
class OutboxPost:
    """A thread post to enqueue (e.g. one part of a run's answer), before it has an outbox id."""

    key: str
    channel: str
    thread_ts: str
    text: str
    blocks: list[dict[str, Any]] | None = None
    run_id: str | None = None
    approval_id: str | None = None  # a card: the approval whose message_ts the sender records


@dataclass(frozen=True, kw_only=True)
class OutboxItem:
    """A Slack post or update stored before it is sent (a row of `outbox`), delivered exactly once."""

    id: str
    key: str  # idempotency key: "card:{approval_id}", "card:{approval_id}:{state}", "answer:{run_id}:{i}", ...
    kind: OutboxKind
    run_id: str | None
    channel: str
    thread_ts: str | None
    target: str | None  # UPDATE: the id of the POST item whose message it changes
    approval_id: str | None  # POST of a card: the approval whose message_ts it records once sent
    text: str  # redacted before it was stored
    blocks: list[dict[str, Any]] | None
    state: OutboxState
    ts: str | None  # POST: the message's ts once sent (UPDATE: the ts it changed)
    attempts: int  # Slack calls started for it
    unsure: bool  # a post call started whose outcome is unknown: look in the thread before posting again
    plain: bool  # Slack refused the blocks: the one plain-text fallback is being sent
    owner: str | None
    claimed_until: float | None
    next_at: float  # not sent before this (backoff)
    error: str | None
    created_at: float
    sent_at: float | None = None


class StreamState(enum.StrEnum):
    """A streamed message (chat.startStream): intent stored, started, then finished by the answer's outbox item,
    stopped as it was (a tool call followed the text), or abandoned (startStream never answered with a ts)."""

    STARTING = "starting"  # stored before startStream is called; its ts not known yet
    STREAMING = "streaming"  # its ts stored: appends go to it, and the answer finishes it
    INTERIM = "interim"  # stopped as it was: that step called tools, so it is not the answer
    FINISHED = "finished"  # the answer's outbox item finished it (stopStream or chat.update)
    ABANDONED = "abandoned"  # no message was found for it: the answer is posted as usual


LIVE_STREAM_STATES = (StreamState.STARTING, StreamState.STREAMING)


@dataclass(frozen=True, kw_only=True)
class Stream:
    """One streamed message of a run (a row of `streams`); texts are redacted."""

    id: str
    run_id: str
    step: int
    channel: str
    thread_ts: str
    ts: str | None
    state: StreamState
    start_text: str
    sent: str  # what Slack shows so far
    final: str | None  # the whole answer, once the step it streamed ended as the answer
    broken: bool  # Slack refused an append or it outlived the stream: chat.update finishes it
    created_at: float


class AnswerSink(Protocol):
    """Where one step's streamed text goes while the model writes it (handlers/stream.py streams it to Slack).

    The model adapter calls `attempt` before each attempt (a retry voids what came before), `text` per text
    delta and `tool_use` when a tool_use block starts; the loop calls `end` once the step's turn is known."""

    async def attempt(self) -> None: ...
    async def text(self, delta: str) -> None: ...
    async def tool_use(self) -> None: ...
    async def end(self, *, answer: bool) -> None: ...


@dataclass(frozen=True, kw_only=True)
class ToolResultRow:
    """A tool call's stored result (a row of `tool_results`); content None: started, outcome unknown."""

    run_id: str
    tool_use_id: str
    tool: str
    args: dict[str, Any]
    content: str | None
    is_error: bool
    confirmed_by: str | None
    created_at: float


StepEntry = tuple[str, dict[str, Any]]  # a trace row to write: (kind, data)


@dataclass(frozen=True, kw_only=True)
class CallResult:
    """A finished call's result, to store with the turn that answers it (`answer_turn`): a call that claimed
    no started marker (a read-only one, or one refused before it ran), so nothing waits on its own commit."""

    tool_use_id: str
    tool: str
    args: dict[str, Any]
    content: str
    is_error: bool
    confirmed_by: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunNews:
    """What a run reads at the start of each step, in one store call: who asked it to stop, and the thread
    replies queued for it."""

    stop_requested_by: str | None
    inbox: list[Injected]


@dataclass(frozen=True, kw_only=True)
class Step:
    """One entry of a run's trace (a row of `steps`)."""

    id: int
    run_id: str
    kind: str
    data: dict[str, Any]
    at: float


class ModelError(OpsloopError):
    """The model cannot answer this run: auth failure, a rejected request, or every retry and fallback exhausted.
    Terminal (`model_error`). `usage`: what the failed attempts still cost (a degenerate stream is billed for what
    it streamed)."""

    def __init__(
        self, message: str, *, usage: Usage | None = None, model: str = "", billed: tuple[tuple[str, Usage], ...] = ()
    ) -> None:
        super().__init__(message)
        self.usage = usage or Usage()
        self.model = model
        self.billed = billed  # each failed attempt's (model, usage), when known


class ContextOverflow(ModelError):
    """The prompt no longer fits the model's context window."""
