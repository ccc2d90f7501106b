"""systemd units: status (read-only) and restart (mutating, only units on the configured allowlist)."""

from __future__ import annotations

import re
import shutil

from tools.commands import run_argv
from tools.registry import Category, PermissionDenied, ToolContext, ToolError, tool

UNIT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9@._-]*")  # no leading "-": a unit name is never an option
SHOW_PROPERTIES = (
    "Id", "Description", "LoadState", "ActiveState", "SubState", "UnitFileState", "MainPID", "ExecMainStatus",
    "Result", "NRestarts", "ActiveEnterTimestamp", "StateChangeTimestamp", "MemoryCurrent", "TasksCurrent",
)
_NO_SYSTEMD = ("System has not been booted with systemd", "Failed to connect to bus")


def check_unit(unit: str) -> str:
    if len(unit) > 256 or not UNIT_RE.fullmatch(unit):
        raise ToolError(f"unit: {unit!r} is not a valid unit name (letters, digits, @ . _ -)")
    return unit


def _systemctl() -> str:
    path = shutil.which("systemctl")
    if path is None:
        raise ToolError("systemctl is not available on this host")
    return path


async def _run_systemctl(*args: str) -> tuple[int, str, str]:
    code, out, err = await run_argv([_systemctl(), "--no-pager", *args])
    if code != 0 and any(marker in err for marker in _NO_SYSTEMD):
        raise ToolError(f"systemd is not running on this host ({err.strip().splitlines()[0]})")
    return code, out, err


async def _show(unit: str) -> dict[str, str]:
    code, out, err = await _run_systemctl("show", f"--property={','.join(SHOW_PROPERTIES)}", "--", unit)
    if code != 0:
        raise ToolError(f"systemctl show {unit} failed (exit {code}): {err.strip() or out.strip()}")
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if props.get("LoadState") == "not-found":
        raise ToolError(f"no such unit: {unit}")
    return props


def _summary(props: dict[str, str]) -> str:
    return "\n".join(f"{key}={props[key]}" for key in SHOW_PROPERTIES if props.get(key, "") not in ("", "[not set]"))


def allowed_to_restart(unit: str, allowlist: tuple[str, ...]) -> bool:
    """`nginx` on the allowlist allows `nginx` and `nginx.service`, and the reverse."""

    def base(name: str) -> str:
        return name.removesuffix(".service")

    return any(base(unit) == base(entry) for entry in allowlist)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True)
async def service_status(unit: str) -> str:
    """State of a systemd unit (active, sub-state, main PID, restarts) and its latest log lines.

    Args:
        unit: the unit name, e.g. "nginx" or "api.service".
    """
    check_unit(unit)
    props = await _show(unit)
    _code, out, _err = await _run_systemctl("status", "--lines=20", "--", unit)  # exit 3 = inactive: still shown
    return _summary(props) + ("\n\n" + out.strip() if out.strip() else "")


@tool(category=Category.MUTATING, timeout_s=120)
async def restart_service(unit: str, *, confirmed_by: str, ctx: ToolContext) -> str:
    """Restart a systemd unit that is on the restart allowlist.

    Args:
        unit: the unit name, e.g. "nginx" or "api.service".
    """
    _restart_allowed(unit, ctx)  # again at run time: defence in depth
    code, out, err = await _run_systemctl("restart", "--", unit)
    if code != 0:
        raise ToolError(f"systemctl restart {unit} failed (exit {code}): {err.strip() or out.strip()}")
    props = await _show(unit)
    state = f"{props.get('ActiveState', '?')} ({props.get('SubState', '?')})"
    return f"restarted {unit}; approved by {confirmed_by}; now {state}\n{_summary(props)}"


@restart_service.precheck
def _restart_allowed(unit: str, ctx: ToolContext) -> None:
    """Refuse units off the allowlist before anyone is asked to approve them."""
    check_unit(unit)
    if not allowed_to_restart(unit, ctx.restart_allowlist):
        allowed = ", ".join(ctx.restart_allowlist) or "none"
        raise PermissionDenied(
            f"restarting {unit!r} is not allowed by policy (tools.services.restart_allowlist: {allowed})"
        )
