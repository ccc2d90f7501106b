"""opsloop's agent runtime: the Protocols the run loop talks to.

The loop (bot/run/loop.py) receives these; it never imports Slack, and only
bot/run/model.py imports anthropic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from bot.core.errors import OpsloopError
from bot.core.types import (
    AnswerSink,
    CallResult,
    ModelRequest,
    ModelResponse,
    Run,
    RunNews,
    RunStatus,
    StepEntry,
    StopReason,
    ToolResultRow,
    Totals,
)

__all__ = ["ModelClient", "OpsloopError", "RunStore", "RunTool", "Toolbox"]


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
