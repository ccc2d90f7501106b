"""The disk-full incident's tools for tests that run real `opsloop run` processes (web-03's /var is full).

Loaded like any tool module (`[tools] modules = ["tests.support.disk_tools"]`). `clean_logs` is destructive (a
dry run, then a card); every real execution goes to the same durable log as `tests.support.crash_tools` (with its
kill and hold points), counted by the call's unique ``change`` argument.
"""

from __future__ import annotations

from tests.support.crash_tools import _execute as execute_logged  # one log format and one set of crash points
from tools import Category, tool

__all__ = ["check_disk", "clean_logs"]

DISK_TABLE = "mount  size   used   avail  use%\n/      20G    7.1G   12.9G  36%\n/var   50G    49.8G  0.2G   100%"
CLEAN_PREVIEW = "would delete 212 files, 19.8 GB"


@tool(category=Category.READ_ONLY, parallel=True)
async def check_disk(host: str) -> str:
    """Disk usage per mount on a host.

    Args:
        host: the host name
    """
    return f"{host}:\n{DISK_TABLE}"


@tool(category=Category.DESTRUCTIVE)
def clean_logs(host: str, path: str, change: str, *, confirmed_by: str) -> str:
    """Delete rotated logs under a path on a host.

    Args:
        host: the host name
        path: the log directory
        change: the change ticket this cleanup belongs to
    """
    return execute_logged("clean_logs", change, confirmed_by)


@clean_logs.dry_run
def _clean_preview(host: str, path: str, change: str) -> str:
    return CLEAN_PREVIEW
