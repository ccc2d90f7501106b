"""opsloop's agent runtime: the Protocols the run loop talks to.

The loop (bot/runtime.py) receives these; it never imports Slack, and only
bot/model.py imports anthropic.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from bot.types import ModelRequest, ModelResponse


class ModelClient(Protocol):
    """One run's model: a fallback chain that retries transient errors itself."""

    @property
    def model(self) -> str: ...

    async def complete(self, request: ModelRequest) -> ModelResponse: ...


class Tool(Protocol):
    name: str
    category: Any  # tools.Category
    parallel: bool
    has_dry_run: bool

    def api_schema(self) -> dict[str, Any]: ...
    def validate(self, args: Any) -> dict[str, Any]: ...
    async def run(self, args: Any, *, confirmed_by: str | None = None) -> str: ...
    async def dry_run(self, args: Any) -> str | None: ...


class ToolRegistry(Protocol):
    def get(self, name: str) -> Any: ...  # Tool | None
    def __iter__(self) -> Iterator[Any]: ...
    def api_schemas(self) -> list[dict[str, Any]]: ...
