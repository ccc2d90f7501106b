"""systemd units: status (read-only) and restart (mutating, only units on the allowlist), on this machine or an
inventory host (the same `systemctl` commands over SSH; the allowlist is the host's own, else [tools.services])."""

from __future__ import annotations

import shutil

from tools.api import BadCall
from tools.builtin import reach
from tools.commands import run_argv
from tools.registry import Category, PermissionDenied, ToolContext, ToolError, tool
from tools.remote.inventory import Host
from tools.systemd_units import UNIT_RE

SHOW_PROPERTIES = (
    "Id",
    "Description",
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "MainPID",
    "ExecMainStatus",
    "Result",
    "NRestarts",
    "ActiveEnterTimestamp",
    "StateChangeTimestamp",
    "MemoryCurrent",
    "TasksCurrent",
)
_NO_SYSTEMD = ("System has not been booted with systemd", "Failed to connect to bus")
_REMOTE_TIMEOUT_S = {"show": 20.0, "status": 20.0, "restart": 100.0}  # under the tools' 30 s and 120 s


def check_unit(unit: str) -> str:
    if len(unit) > 256 or not UNIT_RE.fullmatch(unit):
        raise BadCall(f"unit: {unit!r} is not a valid unit name (letters, digits, @ . _ -)")
    return unit


async def _run_systemctl(on: Host | None, ctx: ToolContext, *args: str) -> tuple[int, str, str]:
    """`systemctl --no-pager ARGS` here (on None) or on the inventory host `on`: (exit status, stdout, stderr)."""
    where = "this host" if on is None else on.name
    if on is None:
        path = shutil.which("systemctl")
        code, out, err = await run_argv([path, "--no-pager", *args]) if path else (127, "", "")
    else:
        result = await reach.run(ctx, on, ["systemctl", "--no-pager", *args], timeout_s=_REMOTE_TIMEOUT_S[args[0]])
        code, out, err = result.exit_status, result.stdout, result.stderr
    if code == 127:  # the shell's "command not found"
        raise ToolError(f"systemctl is not available on {where}")
    if code != 0 and any(marker in err for marker in _NO_SYSTEMD):
        raise ToolError(f"systemd is not running on {where} ({err.strip().splitlines()[0]})")
    return code, out, err


async def _show(unit: str, on: Host | None = None, ctx: ToolContext | None = None) -> dict[str, str]:
    code, out, err = await _run_systemctl(
        on, ctx or ToolContext(), "show", f"--property={','.join(SHOW_PROPERTIES)}", "--", unit
    )
    if code != 0:
        raise ToolError(f"systemctl show {unit} failed (exit {code}): {err.strip() or out.strip()}")
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if props.get("LoadState") == "not-found":
        raise BadCall(f"no such unit: {unit}")
    return props


def _summary(props: dict[str, str]) -> str:
    return "\n".join(f"{key}={props[key]}" for key in SHOW_PROPERTIES if props.get(key, "") not in ("", "[not set]"))


def allowed_to_restart(unit: str, allowlist: tuple[str, ...]) -> bool:
    """`nginx` on the allowlist allows `nginx` and `nginx.service`, and the reverse."""
    return any(unit.removesuffix(".service") == entry.removesuffix(".service") for entry in allowlist)


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True)
async def service_status(unit: str, host: str | None = None, *, ctx: ToolContext) -> str:
    """The state of one systemd unit on one host, from `systemctl show` and `systemctl status`.

    Returns key=value lines from systemctl show (ActiveState, SubState, MainPID, Result, NRestarts,
    ActiveEnterTimestamp, MemoryCurrent in bytes, …) followed by the unit's status text with its last 20 journal
    lines. A unit that is not found or a host without systemd is an error saying
    so. Use it when a service is down or flapping, before deciding whether to restart it.

    Args:
        unit: the unit name, e.g. "nginx" or "api.service".
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
    """
    on = reach.target(host, ctx)
    check_unit(unit)
    props = await _show(unit, on, ctx)
    # exit 3 = inactive: still shown
    _code, out, _err = await _run_systemctl(on, ctx, "status", "--lines=20", "--", unit)
    return _summary(props) + ("\n\n" + out.strip() if out.strip() else "")


def restart_allowlist(on: Host | None, ctx: ToolContext) -> tuple[tuple[str, ...], str]:
    """The units that may be restarted on `on` (None: this machine), and where that list comes from."""
    if on is not None and on.restart_allowlist is not None:
        return on.restart_allowlist, f"restart_allowlist of [[hosts]] {on.name!r}"
    return ctx.restart_allowlist, "tools.services.restart_allowlist"


@tool(category=Category.MUTATING, timeout_s=120)
async def restart_service(unit: str, host: str | None = None, *, confirmed_by: str, ctx: ToolContext) -> str:
    """Restart one systemd unit on one host with `systemctl restart`; a person must approve it first.

    Only units on the restart allowlist (the host's own in [[hosts]], else [tools.services]) can be restarted;
    any other is refused before anyone is asked. Returns that the unit was restarted, who approved it, its state
    now and its status summary; a failed restart is an error with systemctl's message. Use it when service_status
    shows a unit stuck or failed and the evidence says a restart is the mitigation.

    Args:
        unit: the unit name, e.g. "nginx" or "api.service".
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
    """
    await _restart_allowed(unit, host, ctx=ctx)  # again at run time: defence in depth
    on = reach.target(host, ctx)
    code, out, err = await _run_systemctl(on, ctx, "restart", "--", unit)
    if code != 0:
        where = "" if on is None else f" on {on.name}"
        raise ToolError(f"systemctl restart {unit}{where} failed (exit {code}): {err.strip() or out.strip()}")
    props = await _show(unit, on, ctx)
    state = f"{props.get('ActiveState', '?')} ({props.get('SubState', '?')})"
    return f"restarted {unit}; approved by {confirmed_by}; now {state}\n{_summary(props)}"


@restart_service.precheck
async def _restart_allowed(unit: str, host: str | None = None, *, ctx: ToolContext) -> None:
    """Refuse a host outside the inventory and units off its allowlist before anyone is asked to approve them."""
    on = reach.target(host, ctx)
    check_unit(unit)
    allowlist, source = restart_allowlist(on, ctx)
    if not allowed_to_restart(unit, allowlist):
        where = "" if on is None else f" on {on.name}"
        raise PermissionDenied(
            f"restarting {unit!r}{where} is not allowed by policy ({source}: {', '.join(allowlist) or 'none'})"
        )
