"""disk_usage, read_file and list_top_processes on an inventory host, over a real OpenSSH server on 127.0.0.1, and
disk_usage through the real app with the scripted model."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import ALICE, bot_env, result_text, tool_results
from tests.support.sshserver import SshServer
from tests.tools.remote.test_host_tools_ssh import host_for
from tests.tools.test_tools_files import LOGROTATE, PRIVATE_KEY, var_with_cores
from tools import ToolError, ToolRegistry
from tools.config import build_registry
from tools.remote import SshHosts
from tools.remote.inventory import Inventory, SshSettings


@pytest.fixture
async def tools(sshd: SshServer, tmp_path: Path) -> AsyncIterator[ToolRegistry]:
    etc = tmp_path / "etc"
    (etc / "logrotate.d").mkdir(parents=True)
    (etc / "logrotate.d" / "nginx").write_text(LOGROTATE)
    (etc / "server.pem").write_text(PRIVATE_KEY)
    (etc / "escape").symlink_to("/etc/hostname")
    var_with_cores(tmp_path)
    host = host_for(sshd, read_dirs=(str(etc),), usage_dirs=(str(tmp_path),))
    registry = await build_registry(
        {"files": {"deny": [str(tmp_path / "var" / "home")]}},
        reaches={"ssh": SshHosts(Inventory(SshSettings(), (host,)))},
    )
    yield registry
    await registry.aclose()


async def call(registry: ToolRegistry, name: str, args: dict[str, object]) -> str:
    t = registry.get(name)
    assert t is not None
    return await t.run({"host": "web-03", **args})


async def test_read_file_on_a_host_reads_the_logrotate_config(tools: ToolRegistry, tmp_path: Path) -> None:
    out = await call(tools, "read_file", {"path": str(tmp_path / "etc" / "logrotate.d" / "nginx")})
    assert (
        out.splitlines()[0]
        == f"{tmp_path}/etc/logrotate.d/nginx on web-03: {len(LOGROTATE)} bytes, 6 lines; lines 1-6 shown"
    )
    assert out.splitlines()[3] == "3: \trotate 14"


@pytest.mark.parametrize(
    ("path", "refusal"),
    [
        ("/etc/shadow", "web-03: /etc/shadow is refused: read_file never reads /etc/shadow (the deny-list)"),
        ("{tmp}/etc/server.pem", "web-03: {tmp}/etc/server.pem is refused: it holds a private key"),
        ("{tmp}/etc/escape", "web-03: {tmp}/etc/escape is outside the directories read_file may read ({tmp}/etc)"),
        ("{tmp}/etc/../var", "web-03: {tmp}/etc/../var is outside the directories read_file may read ({tmp}/etc)"),
    ],
)
async def test_read_file_on_a_host_refuses(tools: ToolRegistry, tmp_path: Path, path: str, refusal: str) -> None:
    with pytest.raises(ToolError) as e:
        await call(tools, "read_file", {"path": path.format(tmp=tmp_path)})
    assert str(e.value) == refusal.format(tmp=tmp_path)


async def test_disk_usage_on_a_host_finds_the_core_dumps(tools: ToolRegistry, tmp_path: Path) -> None:
    out = await call(tools, "disk_usage", {"path": str(tmp_path / "var")})
    assert out.splitlines()[0].startswith(f"disk usage under {tmp_path}/var on web-03, one filesystem, to depth 2: ")
    assert f"{tmp_path}/var/tmp/cores" in out and "secret-name" not in out
    assert "2 entries under denied paths (home and secret directories) not shown" in out


async def test_list_top_processes_on_a_host_leaves_out_its_own_commands(tools: ToolRegistry) -> None:
    out = await call(tools, "list_top_processes", {"sort_by": "memory", "limit": 100})
    assert not [line for line in out.splitlines() if re.search(r"cut -b 1-400|\[0-9\]\*/stat|head -c", line)]
    assert re.fullmatch(r"this tool's own \d+ sampling processes are left out", out.splitlines()[-1])


async def test_disk_usage_through_the_app_names_the_big_directory(
    tmp_path: Path, sshd: SshServer, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    (tmp_path / "host").mkdir()
    var = var_with_cores(tmp_path / "host")
    config = (
        f'[tools]\nmodules = ["tools.builtin"]\n'
        f'[[hosts]]\nname = "web-03"\naddress = "127.0.0.1"\nport = {sshd.port}\n'
        f"identity_file = {json.dumps(str(sshd.client_key))}\nknown_hosts = {json.dumps(str(sshd.known_hosts))}\n"
        f"usage_dirs = [{json.dumps(str(tmp_path / 'host'))}]\n"
    )
    fake_anthropic.script(
        reply(text("Looking at what fills /var."), tool_use("disk_usage", {"path": str(var), "host": "web-03"})),
        reply(text("Core dumps in var/tmp/cores fill the disk.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        channel, ts = await env.mention("web-03 /var is full, what filled it?", user=ALICE)
        await env.wait_final(channel, ts, timeout=30)
        (result,) = tool_results((await env.requests(2))[1])
        out = result_text(result)
        assert f"{var}/tmp/cores" in out and f"disk usage under {var} on web-03" in out
