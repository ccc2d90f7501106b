"""A tiny MCP server for the tool tests (stdio by default, `--http PORT` for streamable HTTP).

It plays a Grafana-like server: one read-only tool, one destructive tool, one mutating tool without
annotations, and one that always fails.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("fake-grafana")
DASHBOARDS = {"api-latency": "API latency", "error-rate": "Error rate"}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def list_dashboards(query: str = "") -> str:
    """List dashboards whose title contains the query."""
    return "\n".join(f"{uid}: {title}" for uid, title in DASHBOARDS.items() if query.lower() in title.lower())


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_dashboard(uid: str) -> str:
    """Delete a dashboard by uid."""
    if uid not in DASHBOARDS:
        raise ToolError(f"no dashboard {uid!r}")
    del DASHBOARDS[uid]
    return f"deleted {uid}"


@server.tool()
def silence_alert(alert: str, minutes: int) -> str:
    """Silence an alert for some minutes."""
    return f"silenced {alert} for {minutes} minutes"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def broken_query(expr: str) -> str:
    """A query that always fails, as a datasource outage would."""
    raise ToolError(f"datasource unreachable while running {expr!r}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
