"""The tool API: declare tools with @tool, build a registry from config, run them with timeouts and limits.

Light on purpose: importing `tools` loads the tool API (tools.api, tools.registry) only. `build_registry`
and `tool_table` (which read [tools] and the reaches) are imported from tools.config.
"""

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
    "tool",
    "truncate_output",
]
