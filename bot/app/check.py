"""`opsloop check`: config, tokens, models, the tool table and each configured reach, one line per problem, and a
verdict: what `opsloop run` would do."""

from __future__ import annotations

import asyncio
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from bot.app.startup import Findings, Listen, preflight
from bot.config.settings import Settings
from bot.core.errors import OpsloopError
from bot.core.pricing import Status, lifecycle, model_problems
from bot.core.providers import LACKS, provider_id, split
from bot.core.unreachable import is_unreachable, reason, unreachable

CHECK_TIMEOUT_S = 10.0  # per service: a firewall that drops packets costs this, not the SDKs' 30-600 s


async def slack_check(settings: Settings, *, timeout_s: float) -> tuple[list[str], list[str]]:
    """auth.test with the bot token: print who the bot is, or return the problem as (stops `run`, unreachable
    now): a token Slack refuses stops `run` too; a Slack out of reach is one `run` keeps retrying."""
    from slack_sdk.errors import SlackApiError

    from bot.app.wiring import slack_client

    url = settings.slack_api_url
    try:
        async with asyncio.timeout(timeout_s):
            auth = await slack_client(settings, timeout_s=timeout_s, retries=False).auth_test()
    except SlackApiError as e:
        return [f"slack: auth.test failed: {e.response.get('error')}"], []
    except Exception as e:
        if not is_unreachable(e):
            return [f"slack: auth.test failed: {type(e).__name__}: {reason(e)}"], []
        return [], [f"slack: {unreachable(e, url, proxy=settings.proxy, timeout_s=timeout_s)}"]
    print(f"slack: ok, bot user {auth.get('user_id')} in team {auth.get('team')}")
    return [], []


def model_lines(settings: Settings) -> list[str]:
    """Which id each model of the chain is called by, where, and what each provider used lacks (how runs cope)."""
    lines = []
    for label in settings.model.chain:
        provider = split(label)[0]
        model_id, listed = provider_id(label, settings.model.ids)
        how = "" if listed else f' (by rule: set [model.ids] "{label}" if yours differs)'
        lines.append(f"model: {label}: {provider} calls {model_id}{how}")
    for provider in dict.fromkeys(split(label)[0] for label in settings.model.chain):
        lines += [f"model: {provider}: {lack}" for lack in LACKS[provider]]
    return lines


async def model_check(settings: Settings, *, timeout_s: float) -> list[str]:
    """One tiny request per model of the chain, each to its provider (retired ones are already an error and are
    not asked; Anthropic's models only with ANTHROPIC_API_KEY set)."""
    import anthropic

    from bot.app.wiring import model_clients
    from bot.run.model import CREDENTIALS_HINT, ping

    problems: list[str] = []
    retired = {m for m in settings.model.chain if lifecycle(m).status is Status.RETIRED}
    try:
        clients = model_clients(settings, timeout_s=timeout_s)
    except OpsloopError as e:
        return [str(e)]
    given_up: set[str] = set()  # providers out of reach, or refusing the credentials: every model says the same
    try:
        for model in settings.model.chain:
            provider = split(model)[0]
            if model in retired or provider in given_up or (provider == "anthropic" and not settings.anthropic_api_key):
                continue
            with warnings.catch_warnings():  # the SDK warns about deprecated models; the lifecycle table says it
                warnings.simplefilter("ignore", DeprecationWarning)
                try:
                    problem = await ping(clients, model, settings.model.ids)
                except anthropic.APIConnectionError as e:  # APITimeoutError is one too
                    url = str(clients[provider].base_url)
                    problems.append(f"{provider}: {unreachable(e, url, proxy=settings.proxy, timeout_s=timeout_s)}")
                    given_up.add(provider)
                    continue
                except Exception as e:  # the provider's credentials could not be found or used
                    problems.append(f"model: {model}: {type(e).__name__}: {e} ({CREDENTIALS_HINT[provider]})")
                    given_up.add(provider)
                    continue
            if problem is None:
                print(f"model: ok, {model}")
                continue
            instead = lifecycle(model).replacement if problem.startswith("not found") else None
            problems.append(f"model: {model}: {problem}" + (f"; replace it with {instead}" if instead else ""))
            if problem.startswith(("AuthenticationError", "PermissionDeniedError")):
                given_up.add(provider)
    finally:
        for client in clients.values():
            await client.close()
    return problems


def store_check(settings: Settings) -> list[str]:
    """Connect to the store and read its schema version (changing nothing); print it, or return the problem."""
    from bot.store.backends import describe, inspect_schema, is_postgres
    from tools.reaches import TABLES

    where = describe(settings.db_path)
    if not is_postgres(settings.db_path) and settings.db_path != ":memory:" and not Path(settings.db_path).exists():
        print(f"store: ok, no database at {where} yet: `opsloop run` creates it")
        return []
    try:
        version = inspect_schema(settings.db_path, TABLES)
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
    settings: Settings, found: Findings, tool_names: Sequence[str] = (), notes: list[str] | None = None
) -> list[str]:
    """Each configured reach, in the list's order: its lines printed (those the start-up checks already read,
    `found.lines`), and the problems of the reaches that connect to a backend returned (run does not ask them).
    A reach with a `warnings(config, tool_names)` method (optional) adds warnings to `notes` about what it names
    against the registry's tools (a runbook's backticked tool no registry has)."""
    from tools.reaches import REACHES

    problems: list[str] = []
    for reach in REACHES:
        if (config := settings.reaches.get(reach.name)) is None:
            continue
        if reach.name in found.lines:
            lines = found.lines[reach.name]
        else:
            lines, unusable = await reach.check(config)
            problems += unusable
        for line in lines:
            print(line)
        if notes is not None and (warn := getattr(reach, "warnings", None)) is not None:
            notes += await warn(config, tool_names)
    return problems


def verdict(stops: int, unusable: int, warnings: int) -> str:
    """The line `check` ends with: what `run` would do."""
    count = stops + unusable
    said = f"{count} problem{'s' if count != 1 else ''}"
    if stops:
        return f"{said}: run would refuse"
    if unusable:
        return f"{said}: run would start, but can't reach or use what {'it names' if count == 1 else 'they name'} now"
    return f"ready: run would start{f' ({warnings} warning' + ('s' if warnings != 1 else '') + ')' if warnings else ''}"


async def check(settings: Settings, *, timeout_s: float = CHECK_TIMEOUT_S, listen: Listen | None = None) -> int:
    """Exit status 2 when `run` would refuse to start (its start-up checks, bot.app.startup, found a problem, or Slack
    refused the token), 1 when it would start but something it reaches can't be reached or used now (Slack or
    Anthropic out of reach, a model or key refused, a host or cluster down), else 0. Each problem is one
    `error:` line on stderr, each warning one `warning:` line; the last line on stdout is the verdict."""
    from handlers.policy import approval_warnings, policy_lines
    from tools.api import ToolConfigError
    from tools.config import build_registry, tool_table

    found = await preflight(settings, listen or Listen())
    settings = found.settings or settings
    _, deprecated = model_problems(settings.model.chain)  # a retired model: missing_for_run says it
    stops: list[str] = list(found.problems)  # `run` refuses these too (exit 2)
    unusable: list[str] = []  # `run` starts; these can't be reached or used now (exit 1)
    notes = [*found.warnings, *deprecated, *approval_warnings(settings.approvals)]
    try:
        registry = await build_registry(settings.tools, reaches=settings.reaches)
    except ToolConfigError as e:
        stops.append(str(e))
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
    if registry is not None:
        unusable += await reaches_check(settings, found, tool_names, notes)
    if not any(p.startswith("store:") for p in stops):
        stops += store_check(settings)
    if settings.slack_bot_token:
        refused, down = await slack_check(settings, timeout_s=timeout_s)
        stops += refused
        unusable += down
    for line in settings.alerts.check_lines():  # an unset token: bot.app.startup's tokens says it
        print(line)
    for line in found.lines.get("channels", []):
        print(line)
    for line in model_lines(settings):
        print(line)
    if settings.anthropic_api_key or any(split(m)[0] != "anthropic" for m in settings.model.chain):
        unusable += await model_check(settings, timeout_s=timeout_s)
    return report(stops=stops, unusable=unusable, notes=notes)


def report(*, stops: Sequence[str], unusable: Sequence[str] = (), notes: Sequence[str] = ()) -> int:
    """Print the warnings and problems (stderr) and the verdict (stdout, last); the exit status."""
    sys.stdout.flush()
    for line in notes:
        print(f"opsloop: warning: {line}", file=sys.stderr)
    for line in [*stops, *unusable]:
        print(f"opsloop: error: {line}", file=sys.stderr)
    sys.stderr.flush()
    print(verdict(len(stops), len(unusable), len(notes)))
    return 2 if stops else 1 if unusable else 0
