"""opsloop's agent runtime: the Protocols the run layer talks to.

The loop (bot/run/loop.py) receives the model, the store and the tools; the scheduler (bot/run/scheduler.py) and
the approval lifecycle (bot/run/approvals.py) talk to Slack through `SlackSide`, which handlers/ implements. The
run layer never imports Slack, and only bot/run/model.py imports anthropic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from bot.core.errors import OpsloopError
from bot.core.types import (
    AnswerSink,
    Approval,
    CallResult,
    ModelRequest,
    ModelResponse,
    Run,
    RunNews,
    RunResult,
    RunStatus,
    StepEntry,
    StopReason,
    ToolResultRow,
    Totals,
)

if TYPE_CHECKING:
    from bot.run.events import RunEvent
    from tools.api import Offer, RunFacts, RunScope

__all__ = ["ApprovalCards", "ModelClient", "OpsloopError", "RunStore", "RunThread", "RunTool", "SlackSide", "Toolbox"]


class ModelClient(Protocol):
    """One run's model: a fallback chain that retries transient errors itself."""

    @property
    def model(self) -> str: ...

    async def complete(self, request: ModelRequest, *, sink: AnswerSink | None = None) -> ModelResponse: ...


class RunStore(Protocol):
    """What the loop reads and writes; bot.store.Store implements it (on SQLite or Postgres)."""

    async def get_run(self, run_id: str) -> Run: ...
    async def fix_prompt(self, run_id: str, *, system: str, tools: list[dict[str, Any]]) -> None: ...
    async def record_settings(self, run_id: str, settings: dict[str, Any]) -> None: ...
    async def set_status(self, run_id: str, status: RunStatus) -> None: ...
    async def set_drop_block(self, run_id: str) -> None: ...
    async def save_totals(self, run_id: str, totals: Totals) -> None: ...
    async def finish_run(
        self,
        run_id: str,
        *,
        stop_reason: StopReason,
        stop_detail: str,
        stopped_by: str | None = None,
        output: str | None = None,
        at_end: Sequence[Callable[[Any], None]] = (),
    ) -> None: ...
    async def history(self, run_id: str) -> list[dict[str, Any]]: ...
    async def put_message(
        self,
        run_id: str,
        seq: int,
        message: dict[str, Any],
        *,
        consumed_inbox: Iterable[str] = (),
        totals: Totals | None = None,
        steps: Iterable[StepEntry] = (),
    ) -> None: ...
    async def answer_turn(
        self,
        run_id: str,
        seq: int,
        message: dict[str, Any],
        *,
        calls: dict[str, Any] | None = None,
        results: Iterable[CallResult] = (),
        totals: Totals | None = None,
        steps: Iterable[StepEntry] = (),
    ) -> RunNews: ...
    async def save_tool_results(
        self, run_id: str, results: Iterable[CallResult], *, steps: Iterable[StepEntry] = ()
    ) -> None: ...
    async def replace_history(self, run_id: str, history: list[dict[str, Any]]) -> None: ...
    async def tool_results(self, run_id: str, ids: Sequence[str] | None = None) -> dict[str, ToolResultRow]: ...
    async def save_tool_result(
        self,
        run_id: str,
        *,
        tool_use_id: str,
        tool: str,
        args: dict[str, Any],
        content: str | None,
        is_error: bool,
        confirmed_by: str | None,
        steps: Iterable[StepEntry] = (),
    ) -> bool: ...
    async def add_steps(self, run_id: str, steps: Iterable[StepEntry]) -> None: ...
    async def add_summary(self, run_id: str, *, step: int, summary: Any) -> None: ...  # bot.run.summary.Summary


class RunTool(Protocol):
    """One tool as the loop sees it; tools.Tool implements it."""

    name: str
    category: Any  # tools.Category
    parallel: bool
    has_dry_run: bool

    def api_schema(self) -> dict[str, Any]: ...
    def validate(self, args: Any) -> dict[str, Any]: ...
    async def run(self, args: Any, *, confirmed_by: str | None = None, approved_preview: str | None = None) -> str: ...
    async def dry_run(self, args: Any) -> str | None: ...
    async def check(self, args: Any) -> None: ...  # policy precheck before the confirm gate


class Toolbox(Protocol):
    """The tools a run may call, as the loop sees them; tools.ToolRegistry implements it."""

    def get(self, name: str) -> Any: ...  # RunTool | None
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
