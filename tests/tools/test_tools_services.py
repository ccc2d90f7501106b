"""systemd tools against a stand-in `systemctl` on PATH that speaks the real CLI's output format,
and against this machine's own systemctl (which, in a container, reports that systemd is not running)."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from tools import PermissionDenied, ToolContext, ToolError
from tools.builtin import restart_service, service_status

FAKE_SYSTEMCTL = textwrap.dedent('''\
    #!{python}
    """A stand-in systemctl: `show`, `status` and `restart` for a few units, state kept in a JSON file."""
    import json, sys
    from pathlib import Path

    state_file = Path(__file__).with_name("units.json")
    units = json.loads(state_file.read_text())
    args = [a for a in sys.argv[1:] if a not in ("--no-pager", "--")]
    verb, unit = args[0], args[-1]
    name = unit if "." in unit else unit + ".service"
    with Path(__file__).with_name("calls.log").open("a") as log:
        log.write(" ".join(sys.argv[1:]) + "\\n")
    u = units.get(name)
    if verb == "show":
        if u is None:
            print(f"Id={{name}}\\nLoadState=not-found\\nActiveState=inactive\\nSubState=dead")
            sys.exit(0)
        props = {{"Id": name, "Description": u["description"], "LoadState": "loaded",
                 "ActiveState": u["active"], "SubState": u["sub"], "MainPID": u["pid"],
                 "NRestarts": u["restarts"], "Result": "success", "MemoryCurrent": "[not set]"}}
        wanted = next(a for a in args if a.startswith("--property=")).split("=", 1)[1].split(",")
        for key in wanted:
            if key in props:
                print(f"{{key}}={{props[key]}}")
    elif verb == "status":
        print(f"● {{name}} - {{u['description']}}\\n     Active: {{u['active']}} ({{u['sub']}})")
        print(f"Jan 01 00:00:00 web-1 {{unit}}[{{u['pid']}}]: started")
        sys.exit(0 if u["active"] == "active" else 3)
    elif verb == "restart":
        if u is None:
            print(f"Failed to restart {{name}}: Unit {{name}} not found.", file=sys.stderr)
            sys.exit(5)
        if u.get("broken"):
            print(f"Job for {{name}} failed because the control process exited with error code.",
                  file=sys.stderr)
            sys.exit(1)
        u.update(active="active", sub="running", pid=u["pid"] + 1, restarts=u["restarts"] + 1)
        state_file.write_text(json.dumps(units))
''')

UNITS = {
    "nginx.service": {
        "description": "A high performance web server",
        "active": "failed",
        "sub": "failed",
        "pid": 0,
        "restarts": 0,
    },
    "api.service": {
        "description": "The API",
        "active": "active",
        "sub": "running",
        "pid": 4242,
        "restarts": 2,
        "broken": True,
    },
    "postgresql.service": {"description": "PostgreSQL", "active": "active", "sub": "running", "pid": 99, "restarts": 0},
}


@pytest.fixture
def systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "systemctl"
    script.write_text(FAKE_SYSTEMCTL.format(python=sys.executable))
    script.chmod(0o755)
    (bin_dir / "units.json").write_text(json.dumps(UNITS))
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


CTX = ToolContext(restart_allowlist=("nginx", "api.service"))


@pytest.mark.processes
async def test_service_status_shows_state_and_recent_lines(systemctl: Path) -> None:
    out = await service_status.run({"unit": "nginx"})
    assert out == (
        "Id=nginx.service\nDescription=A high performance web server\nLoadState=loaded\nActiveState=failed\n"
        "SubState=failed\nMainPID=0\nResult=success\nNRestarts=0\n\n"
        "● nginx.service - A high performance web server\n     Active: failed (failed)\n"
        "Jan 01 00:00:00 web-1 nginx[0]: started"
    )


@pytest.mark.processes
async def test_service_status_of_an_unknown_unit_is_a_tool_error(systemctl: Path) -> None:
    with pytest.raises(ToolError, match="no such unit: ghost"):
        await service_status.run({"unit": "ghost"})


@pytest.mark.parametrize("unit", ["--all", "nginx; reboot", "../etc", ""])
async def test_invalid_unit_names_are_refused_before_running_anything(systemctl: Path, unit: str) -> None:
    with pytest.raises(ToolError, match="is not a valid unit name"):
        await service_status.run({"unit": unit})
    assert not (systemctl / "calls.log").exists()


@pytest.mark.processes
async def test_restart_service_restarts_an_allowed_unit_and_reports_the_new_state(systemctl: Path) -> None:
    out = await restart_service.bind(CTX).run({"unit": "nginx"}, confirmed_by="U024BE7LH")
    assert out.splitlines()[0] == "restarted nginx; approved by U024BE7LH; now active (running)"
    assert "NRestarts=1" in out.splitlines() and "MainPID=1" in out.splitlines()
    assert "restart -- nginx" in (systemctl / "calls.log").read_text()


async def test_restart_of_a_unit_not_on_the_allowlist_is_permission_denied(systemctl: Path) -> None:
    with pytest.raises(PermissionDenied) as e:
        await restart_service.bind(CTX).run({"unit": "postgresql"}, confirmed_by="U1")
    assert str(e.value) == (
        "restarting 'postgresql' is not allowed by policy (tools.services.restart_allowlist: nginx, api.service)"
    )
    assert not (systemctl / "calls.log").exists()


async def test_restart_with_an_empty_allowlist_is_permission_denied(systemctl: Path) -> None:
    with pytest.raises(PermissionDenied, match=r"restart_allowlist: none\)"):
        await restart_service.run({"unit": "nginx"}, confirmed_by="U1")


@pytest.mark.processes
async def test_failed_restart_is_a_tool_error_with_systemctls_message(systemctl: Path) -> None:
    with pytest.raises(ToolError) as e:
        await restart_service.bind(CTX).run({"unit": "api"}, confirmed_by="U1")
    assert str(e.value) == (
        "systemctl restart api failed (exit 1): Job for api.service failed because the "
        "control process exited with error code."
    )


async def test_restart_needs_an_approver(systemctl: Path) -> None:
    with pytest.raises(PermissionDenied, match="requires an approver"):
        await restart_service.bind(CTX).run({"unit": "nginx"})


async def test_without_systemctl_the_tools_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolError) as e:
        await service_status.run({"unit": "nginx"})
    assert str(e.value) == "systemctl is not available on this host"
    with pytest.raises(ToolError, match="systemctl is not available on this host"):
        await restart_service.bind(CTX).run({"unit": "nginx"}, confirmed_by="U1")


@pytest.mark.skipif(
    shutil.which("systemctl") is None or Path("/run/systemd/system").exists(),
    reason="needs a systemctl binary on a host where systemd is not running (a container)",
)
@pytest.mark.processes
async def test_real_systemctl_without_systemd_is_a_clear_tool_error() -> None:
    with pytest.raises(ToolError, match="systemd is not running on this host"):
        await service_status.run({"unit": "ssh"})


async def test_the_allowlist_is_checked_before_anyone_is_asked_to_approve() -> None:
    with pytest.raises(PermissionDenied, match="not allowed by policy"):
        await restart_service.bind(CTX).check({"unit": "postgresql"})
    await restart_service.bind(CTX).check({"unit": "nginx"})  # allowed: no error, nothing run
