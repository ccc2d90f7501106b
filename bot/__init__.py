"""opsloop's agent runtime: the Protocols the run loop talks to.

The loop (bot/runtime.py) receives these; it never imports Slack, and only
bot/model.py imports anthropic.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from bot.types import ModelRequest, ModelResponse


class ModelClient(Protocol):
    """One run's model: a fallback chain that retries transient errors itself."""

    @property
    def model(self) -> str: ...

    async def complete(self, request: ModelRequest) -> ModelResponse: ...


class RunStore(Protocol):
    """What the loop reads and writes; bot.store.Store is the SQLite implementation."""

    async def get_run(self, run_id: str) -> dict[str, Any]: ...
    async def update_run(self, run_id: str, **fields: Any) -> None: ...
    async def history(self, run_id: str) -> list[dict[str, Any]]: ...
    async def put_message(self, run_id: str, seq: int, message: dict[str, Any], *,
                          consumed_inbox: Iterable[str] = ()) -> None: ...
    async def replace_history(self, run_id: str, history: list[dict[str, Any]]) -> None: ...
    async def tool_results(self, run_id: str) -> dict[str, dict[str, Any]]: ...
    async def save_tool_result(self, run_id: str, *, tool_use_id: str, tool: str, args: dict[str, Any],
                               content: str | None, is_error: bool, confirmed_by: str | None) -> None: ...
    async def add_step(self, run_id: str, kind: str, data: dict[str, Any]) -> None: ...


class Tool(Protocol):
    name: str
    category: Any  # tools.Category
    parallel: bool
    has_dry_run: bool

    def api_schema(self) -> dict[str, Any]: ...
    def validate(self, args: Any) -> dict[str, Any]: ...
    async def run(self, args: Any, *, confirmed_by: str | None = None) -> str: ...
    async def dry_run(self, args: Any) -> str | None: ...
    async def check(self, args: Any) -> None: ...  # policy precheck before the confirm gate


class ToolRegistry(Protocol):
    def get(self, name: str) -> Any: ...  # Tool | None
    def __iter__(self) -> Iterator[Any]: ...
    def api_schemas(self) -> list[dict[str, Any]]: ...
