"""The tool API: declare tools with @tool, build a registry from config, run them with timeouts and limits.

Light on purpose: importing `tools` loads the tool API (tools.api, tools.registry) only. `build_registry`,
`tool_context` and `tool_table` (tools.config, which reads [tools] and the reaches) load when first asked for.
"""

from typing import Any

from bot.core.errors import OpsloopError
from tools.api import ToolConfigError
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

_FROM_CONFIG = ("build_registry", "tool_context", "tool_table")


def __getattr__(name: str) -> Any:
    if name in _FROM_CONFIG:
        import tools.config

        return getattr(tools.config, name)
    raise AttributeError(f"module 'tools' has no attribute {name!r}")
