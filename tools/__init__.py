"""The tool API: declare tools with @tool, build a registry from config, run them with timeouts and limits."""

from bot.errors import OpsloopError
from tools.api import ToolConfigError
from tools.config import build_registry, tool_context, tool_table
from tools.registry import (
    DEFAULT_TIMEOUT_S,
    MAX_OUTPUT_CHARS,
    Category,
    PermissionDenied,
    Tool,
    ToolContext,
    ToolError,
    ToolRegistry,
    tool,
    truncate_output,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_OUTPUT_CHARS",
    "Category",
    "OpsloopError",
    "PermissionDenied",
    "Tool",
    "ToolConfigError",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "build_registry",
    "tool",
    "tool_context",
    "tool_table",
    "truncate_output",
]
