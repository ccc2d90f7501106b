"""Docs are a tested contract: the manifest matches the listeners, the README names every tool and command."""

from __future__ import annotations

from pathlib import Path

import yaml

from bot.app import ACTIONS, EVENTS, SHORTCUTS
from bot.cli import parser
from handlers import blocks

ROOT = Path(__file__).resolve().parents[1]


def manifest() -> dict:
    return yaml.safe_load((ROOT / "manifest.yml").read_text())


def test_every_manifest_event_has_a_listener_and_back():
    subscribed = {e.split(".")[0] for e in manifest()["settings"]["event_subscriptions"]["bot_events"]}
    assert subscribed == set(EVENTS)


def test_manifest_is_socket_mode_with_interactivity():
    settings = manifest()["settings"]
    assert (settings["socket_mode_enabled"], settings["interactivity"]["is_enabled"]) == (True, True)


def test_every_action_id_the_blocks_use_has_a_listener():
    assert set(ACTIONS) == {blocks.APPROVE, blocks.DENY, blocks.STOP, blocks.FEEDBACK}


def test_every_manifest_shortcut_has_a_listener_and_back():
    shortcuts = manifest()["features"]["shortcuts"]
    assert {s["callback_id"] for s in shortcuts} == set(SHORTCUTS)
    assert {s["type"] for s in shortcuts} == {"message"}


def test_manifest_has_the_home_tab():
    assert manifest()["features"]["app_home"]["home_tab_enabled"] is True


def test_scopes_cover_the_methods_we_call():
    scopes = set(manifest()["oauth_config"]["scopes"]["bot"])
    assert scopes == {
        "app_mentions:read",
        "channels:history",
        "groups:history",
        "chat:write",
        "reactions:write",
        "users:read",
        "usergroups:read",
        "commands",
        # conversations.info (`opsloop check`, the shortcut), users.conversations (App Home)
        "channels:read",
        "groups:read",
        "im:read",
        "mpim:read",
    }


def test_readme_documents_every_command():
    readme = (ROOT / "README.md").read_text()
    commands = parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    missing = [c for c in commands if f"opsloop {c}" not in readme]
    assert missing == []


def test_readme_documents_every_builtin_tool():
    import tools.builtin as builtin
    from tools import Tool

    readme = (ROOT / "README.md").read_text()
    names = [t.name for t in vars(builtin).values() if isinstance(t, Tool)]
    assert names, "tools.builtin exports no tools"
    assert [n for n in names if f"`{n}`" not in readme] == []


async def test_the_readme_tool_example_runs():
    import re

    readme = (ROOT / "README.md").read_text()
    code = re.search(r"### Writing your own\n\n```python\n(.*?)```", readme, re.S).group(1)
    namespace: dict = {}
    exec(code, namespace)
    purge = namespace["purge_queue"]
    assert (purge.category.value, purge.has_dry_run) == ("destructive", True)
    assert "confirmed_by" not in str(purge.api_schema())
    assert await purge.dry_run({"name": "jobs"}) == "would drop 18,204 messages"
    from tools import PermissionDenied

    try:
        await purge.check({"name": "payments-eu"})
    except PermissionDenied as e:
        assert "never purged" in str(e)
    else:
        raise AssertionError("precheck did not refuse")
