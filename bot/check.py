"""`opsloop check`: config, tokens, models, the tool table and each configured reach, one line per problem."""

from __future__ import annotations

import asyncio
import sys
import warnings
from collections.abc import Sequence

from bot.config import Settings
from bot.pricing import Status, lifecycle, model_problems, replacement_for
from bot.startup import Listen, preflight
from bot.unreachable import is_unreachable, reason, unreachable

CHECK_TIMEOUT_S = 10.0  # per service: a firewall that drops packets costs this, not the SDKs' 30-600 s


async def slack_check(settings: Settings, *, timeout_s: float) -> list[str]:
    """auth.test with the bot token: print who the bot is, or return the one-line problem."""
    from slack_sdk.errors import SlackApiError

    from bot.app import slack_client

    url = settings.slack_api_url
    try:
        async with asyncio.timeout(timeout_s):
            auth = await slack_client(settings, timeout_s=timeout_s, retries=False).auth_test()
    except SlackApiError as e:
        return [f"slack: auth.test failed: {e.response.get('error')}"]
    except Exception as e:
        if not is_unreachable(e):
            return [f"slack: auth.test failed: {type(e).__name__}: {reason(e)}"]
        return [f"slack: {unreachable(e, url, proxy=settings.proxy, timeout_s=timeout_s)}"]
    print(f"slack: ok, bot user {auth.get('user_id')} in team {auth.get('team')}")
    return []


async def alerts_check(settings: Settings, *, timeout_s: float) -> list[str]:
    """[[alerts.slack]] and [alerts.webhook]: the regexes compiled at load time; here the token variable, and
    every alert channel exists with the bot in it (conversations.info)."""
    from slack_sdk.errors import SlackApiError

    from bot.app import slack_client

    alerts = settings.alerts
    problems: list[str] = []
    if alerts.webhook is not None and alerts.webhook.token is not None:  # unset: bot.startup's tokens says it
        print(
            f"alerts: webhook on {alerts.webhook.host}:{alerts.webhook.port}/alertmanager, token from "
            f"{alerts.webhook.token_env}"
        )
    if not settings.slack_bot_token:
        return problems
    client = slack_client(settings, timeout_s=timeout_s, retries=False)
    for channel in dict.fromkeys(alerts.channels()):
        try:
            async with asyncio.timeout(timeout_s):
                info = (await client.conversations_info(channel=channel)).get("channel") or {}
        except SlackApiError as e:
            error = e.response.get("error")
            hint = (
                " (add channels:read and groups:read to the app's scopes, see manifest.yml)"
                if error == "missing_scope"
                else ""
            )
            problems.append(f"alerts: channel {channel}: conversations.info failed: {error}{hint}")
            continue
        except Exception as e:
            problems.append(f"alerts: channel {channel}: {type(e).__name__}: {reason(e)}")
            continue
        if not info.get("is_member"):
            problems.append(
                f"alerts: channel {channel} (#{info.get('name', '?')}): the bot is not in it; invite it "
                "(/invite @opsloop)"
            )
        else:
            print(f"alerts: ok, channel {channel} (#{info.get('name', '?')})")
    return problems


async def model_check(settings: Settings, *, timeout_s: float) -> list[str]:
    """One tiny request per model of the chain (retired ones are already an error and are not asked)."""
    import anthropic

    from bot.app import anthropic_client
    from bot.model import ping

    problems: list[str] = []
    retired = {m for m in settings.model.chain if lifecycle(m).status is Status.RETIRED}
    url = settings.anthropic_base_url or "https://api.anthropic.com"
    async with anthropic_client(settings, timeout_s=timeout_s) as llm:
        for model in settings.model.chain:
            if model in retired:
                continue
            with warnings.catch_warnings():  # the SDK warns about deprecated models; the lifecycle table says it
                warnings.simplefilter("ignore", DeprecationWarning)
                try:
                    problem = await ping(llm, model)
                except anthropic.APIConnectionError as e:  # APITimeoutError is one too
                    problems.append(f"anthropic: {unreachable(e, url, proxy=settings.proxy, timeout_s=timeout_s)}")
                    break  # every model is behind the same unreachable endpoint
            if problem is None:
                print(f"model: ok, {model}")
                continue
            instead = replacement_for(model) if problem.startswith("not found") else None
            problems.append(f"model: {model}: {problem}" + (f"; replace it with {instead}" if instead else ""))
            if problem.startswith(("AuthenticationError", "PermissionDeniedError")):
                break  # the key is wrong: every model would say the same
    return problems


def store_check(settings: Settings) -> list[str]:
    """Connect to the store and read its schema version (changing nothing); print it, or return the problem."""
    from bot.backends import describe, inspect_schema

    where = describe(settings.db_path)
    try:
        version = inspect_schema(settings.db_path)
    except Exception as e:
        return [f"store: can't open {where}: {type(e).__name__}: {e}".strip()]
    if version.unknown:
        return [
            f"store: {where} was migrated by a newer opsloop ({', '.join(version.unknown)}): run that version or newer"
        ]
    state = "current" if version.ok else f"{version.known - version.current} migration(s) applied at start-up"
    print(f"store: ok, {where}, schema version {version.current} of {version.known} ({state})")
    return []


async def reaches_check(
    settings: Settings, tool_names: Sequence[str] = (), notes: list[str] | None = None
) -> list[str]:
    """Each configured reach's own check (tools/reaches.py), in the list's order: its lines printed, its
    problems returned. A reach with a `warnings(config, tool_names)` method (optional) adds warnings to `notes`
    about what it names against the registry's tools (a runbook's backticked tool no registry has)."""
    from tools.reaches import REACHES

    problems: list[str] = []
    for reach in REACHES:
        if (config := settings.reaches.get(reach.name)) is None:
            continue
        lines, found = await reach.check(config)
        for line in lines:
            print(line)
        problems += found
        if notes is not None and (warn := getattr(reach, "warnings", None)) is not None:
            notes += await warn(config, tool_names)
    return problems


async def check(settings: Settings, *, timeout_s: float = CHECK_TIMEOUT_S, listen: Listen | None = None) -> int:
    """Exit status 2 when anything must be fixed (as `run` would refuse to start); every problem and warning is
    one line on stderr. The start-up checks are `run`'s own (bot.startup), then what only a check asks."""
    from handlers.policy import approval_warnings, policy_lines
    from tools.api import ToolConfigError
    from tools.config import build_registry, tool_table

    found = await preflight(settings, listen or Listen(), strict=True)
    _, deprecated = model_problems(settings.model.chain)  # a retired model: missing_for_run says it
    problems: list[str] = list(found.problems)
    notes = [*found.warnings, *deprecated, *approval_warnings(settings.approvals)]
    try:
        registry = await build_registry(settings.tools, reaches=settings.reaches)
    except ToolConfigError as e:
        problems.append(str(e))
        registry = None
    tool_names: list[str] = []
    if registry is not None:
        tool_names = [t.name for t in registry]
        print(f"{'tool':<28} {'category':<12} {'parallel':<9} source")
        for row in tool_table(registry):
            print(f"{row['name']:<28} {row['category']:<12} {'yes' if row['parallel'] else 'no':<9} {row['source']}")
        await registry.aclose()
    for line in policy_lines(settings.approvals):
        print(line)
    reach_problems = await reaches_check(settings, tool_names, notes) if registry is not None else []
    if not any(p.startswith("store:") for p in problems):
        problems += store_check(settings)
    problems += reach_problems
    if settings.slack_bot_token:
        problems += await slack_check(settings, timeout_s=timeout_s)
    problems += await alerts_check(settings, timeout_s=timeout_s)
    if settings.anthropic_api_key:
        problems += await model_check(settings, timeout_s=timeout_s)
    for line in notes:
        print(f"opsloop: warning: {line}", file=sys.stderr)
    for line in problems:
        print(f"opsloop: {line}", file=sys.stderr)
    return 2 if problems else 0
