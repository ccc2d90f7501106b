"""Tools a model can use, through the real app and the scripted model: every tool's whole docstring reaches the
model, a forgotten `host` is refused naming the inventory, and an empty recent_changes says what it covered."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import answered, bot_env, result_text, tool_results
from tests.support.sshserver import SshServer

BUILTIN = '[tools]\nmodules = ["tools.builtin"]\n'


async def test_the_first_request_carries_each_tools_whole_docstring(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Looked.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, BUILTIN) as env:
        channel, ts = await env.mention("is the status page up?")
        await env.wait_final(channel, ts)
        (first,) = await env.requests(1)
    assert first.body is not None
    tools = {t["name"]: t for t in first.body["tools"]}
    check_url = tools["check_url"]["description"]
    assert "Reaches public addresses only (plus hosts the operator allowed)" in check_url
    assert "Returns the HTTP status" in check_url
    assert 'or "self" (the machine opsloop runs on)' in tools["list_hosts"]["description"]
    host = tools["check_disk"]["input_schema"]["properties"]["host"]
    assert host["default"] is None and 'without them it defaults to "self"' in host["description"]


async def test_check_disk_without_a_host_is_refused_naming_the_inventory(
    tmp_path: Path, sshd: SshServer, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    config = BUILTIN + "".join(
        f'[[hosts]]\nname = "{name}"\naddress = "127.0.0.1"\nport = {sshd.port}\n'
        f"identity_file = {json.dumps(str(sshd.client_key))}\nknown_hosts = {json.dumps(str(sshd.known_hosts))}\n"
        for name in ("web-03", "db-01")
    )
    fake_anthropic.script(
        reply(text("Checking the disk."), tool_use("check_disk", {})),
        reply(text("I need to name a host.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        channel, ts = await env.mention("is the disk full?")
        await env.wait_final(channel, ts)
        first, second = await env.requests(2)
    assert first.body is not None
    host = {t["name"]: t for t in first.body["tools"]}["check_disk"]["input_schema"]["properties"]["host"]
    assert "default" not in host and host["description"].endswith("Hosts: web-03, db-01, self.")
    (result,) = tool_results(second)
    assert result.get("is_error") is True
    assert result_text(result) == (
        "#1 check_disk\n"  # the handle: no host, no main argument
        "host is required: one of the inventory's 2 hosts (web-03, db-01) or 'self' (the machine opsloop runs on)"
    )
    fake_anthropic.assert_complete()


async def test_an_empty_recent_changes_names_its_window_and_sources(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(text("What changed?"), tool_use("recent_changes", {"since_minutes": 2880})),
        *answered(reply(text("Nothing changed in two days."))),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[changes]\nwindow_minutes = 60\n") as env:
        channel, ts = await env.mention("checkout is slow since yesterday")
        await env.wait_final(channel, ts)
        _, second, _ = await env.requests(3)  # the third: the answer again, asked once for the summary
    (result,) = tool_results(second)
    handle, first_line, covered = result_text(result).splitlines()
    assert handle == "#1 recent_changes 2880"
    assert first_line.startswith("no changes found; now is ")
    minute = r"\d{4}-\d\d-\d\d \d\d:\d\d UTC"
    assert re.fullmatch(
        rf"window: {minute} to {minute} \(2880 min before the start, up to now\); "
        r"sources read: webhook stored events",
        covered,
    ), covered
    fake_anthropic.assert_complete()
