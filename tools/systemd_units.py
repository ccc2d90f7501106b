"""The systemd unit-name grammar, shared by the service tools, [tools.services] and [[hosts]] restart_allowlist
(a module of its own, so the inventory can check names without importing the tools that use it)."""

from __future__ import annotations

import re

UNIT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9@._-]*")  # no leading "-": a unit name is never an option
