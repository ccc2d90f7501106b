"""opsloop's agent runtime: the Protocols the run layer talks to.

The loop (bot/run/loop.py) receives the model and the tools (and the store, bot.store.Store, whose API is declared
once, by the Ledger's methods); the scheduler (bot/run/scheduler.py) and the approval lifecycle
(bot/run/approvals.py) talk to Slack through `SlackSide`, which handlers/ implements. The run layer never imports
Slack, and only bot/run/model.py imports anthropic.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from bot.core.errors import OpsloopError
from bot.core.types import (
    AnswerSink,
    Approval,
    ModelRequest,
    ModelResponse,
    Run,
    RunResult,
)

if TYPE_CHECKING:
    from bot.run.events import RunEvent
    from tools.api import Offer, RunFacts, RunScope

__all__ = ["ApprovalCards", "ModelClient", "OpsloopError", "RunThread", "SlackSide", "Toolbox"]


class ModelClient(Protocol):
    """One run's model: a fallback chain that retries transient errors itself."""

    @property
    def model(self) -> str: ...

    async def complete(self, request: ModelRequest, *, sink: AnswerSink | None = None) -> ModelResponse: ...


class Toolbox(Protocol):
    """The tools a run may call, as the loop sees them; tools.ToolRegistry implements it."""

    def get(self, name: str) -> Any: ...  # tools.Tool | None
    def __iter__(self) -> Iterator[Any]: ...
    def api_schemas(self) -> list[dict[str, Any]]: ...


class RunThread(Protocol):
    """One drive of a run, as its Slack thread shows it: the status line, the loading status, the task list, the
    streamed answer, and at the end the answer or the handoff report."""

    async def open(self) -> RunScope:
        """The status line up (best effort) and what the run's tools may know of it (an alert run's facts)."""

    async def follow_kind(self) -> None:
        """When some reach keeps what runs saw: the conversation's kind as Slack says it now (it only narrows)."""

    async def offered(self, offers: Sequence[Offer]) -> None:
        """Each offer's thread line, once per run and source."""

    async def on_event(self, event: RunEvent) -> None: ...
    def answer_sink(self, step: int) -> AnswerSink | None: ...

    async def facts(self) -> RunFacts:
        """What Slack knows of the run's conversation as the run ends (asked afresh)."""

    async def end_drive(self, *, paused: bool) -> None:
        """The drive ends without an answer: a pause for an approval, a hand-back, a store outage."""

    def cancelled(self) -> None:
        """The drive was cancelled (shutdown, a lost lease): stop showing progress, without waiting on Slack."""

    async def store_unavailable(self, *, disk_full: bool) -> None:
        """The database keeps failing (said once per run)."""

    async def finish(self, result: RunResult) -> None:
        """The run's answer or handoff report, stored to be sent exactly once; the status line says it ended."""


class ApprovalCards(Protocol):
    """The Slack side of the approval lifecycle: the cards, and who clicked where (failing closed)."""

    async def post_card(self, approval: Approval) -> None:
        """Post the approval's card in its thread, exactly once (stored, then sent)."""

    async def show_card(self, approval: Approval, *, ts: str | None = None) -> None:
        """Show the approval's state on its card (`ts`: on a copy of it too)."""

    async def off_its_card(self, approval: Approval, *, channel: str | None, ts: str | None) -> str | None:
        """None when the clicked message (`channel`, `ts`) is the approval's card, else why the click doesn't count."""

    async def refusal(self, approval: Approval, user: str, *, approve: bool) -> str | None:
        """Why `user` may not decide the approval this way, or None."""

    async def name(self, user: str) -> str:
        """A display name for the audit log (display only, never who may approve)."""


class SlackSide(ApprovalCards, Protocol):
    """What the run layer asks of Slack; handlers.supervisor.slack.Slack implements it."""

    def thread(self, row: Run) -> RunThread: ...

    async def quiet(self) -> None:
        """Return once the Slack deliveries in hand are acked (a run a delivery stored starts after them)."""
