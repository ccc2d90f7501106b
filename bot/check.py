"""`opsloop check`: config, tokens, models and the tool table, one line per problem."""

from __future__ import annotations

import sys
import warnings

from bot.config import Settings


def model_warnings(settings: Settings) -> list[str]:
    """Configured models that the SDK marks deprecated, each with its replacement."""
    from bot.model import deprecation
    from bot.pricing import replacement_for

    out = []
    for model in settings.model.chain:
        if (end := deprecation(model)) is not None:
            instead = replacement_for(model)
            out.append(f"model {model} is deprecated and reaches end of life on {end}"
                       + (f"; replace it with {instead}" if instead else ""))
    return out


def store_check(settings: Settings) -> list[str]:
    """Connect to the store and read its schema version (changing nothing); print it, or return the problem."""
    from bot.backends import describe, inspect_schema

    where = describe(settings.db_path)
    try:
        version = inspect_schema(settings.db_path)
    except Exception as e:
        return [f"store: can't open {where}: {type(e).__name__}: {e}".strip()]
    if version.unknown:
        return [f"store: {where} was migrated by a newer opsloop ({', '.join(version.unknown)}): "
                "run that version or newer"]
    state = "current" if version.ok else f"{version.known - version.current} migration(s) applied at start-up"
    print(f"store: ok, {where}, schema version {version.current} of {version.known} ({state})")
    return []


async def check(settings: Settings) -> int:
    from slack_sdk.errors import SlackApiError

    from bot.app import anthropic_client, slack_client
    from bot.model import ping
    from bot.pricing import replacement_for
    from handlers.policy import approval_warnings
    from tools.config import ToolConfigError, build_registry, tool_table

    problems: list[str] = []
    notes = [*model_warnings(settings), *approval_warnings(settings.approvals)]
    try:
        registry = await build_registry(settings.tools)
    except ToolConfigError as e:
        problems.append(str(e))
        registry = None
    if registry is not None:
        print(f"{'tool':<28} {'category':<12} {'parallel':<9} source")
        for row in tool_table(registry):
            print(f"{row['name']:<28} {row['category']:<12} {'yes' if row['parallel'] else 'no':<9} {row['source']}")
        await registry.aclose()
    problems += store_check(settings)
    if not settings.slack_bot_token:
        problems.append("SLACK_BOT_TOKEN is not set")
    else:
        try:
            auth = await slack_client(settings).auth_test()
            print(f"slack: ok, bot user {auth.get('user_id')} in team {auth.get('team')}")
        except SlackApiError as e:
            problems.append(f"slack: auth.test failed: {e.response.get('error')}")
    if not settings.anthropic_api_key:
        problems.append("ANTHROPIC_API_KEY is not set")
    else:
        async with anthropic_client(settings) as llm:
            for model in settings.model.chain:
                with warnings.catch_warnings():  # the SDK warns about deprecated models; we say it once, below
                    warnings.simplefilter("ignore", DeprecationWarning)
                    problem = await ping(llm, model)
                if problem is None:
                    print(f"model: ok, {model}")
                    continue
                instead = replacement_for(model) if problem.startswith("not found") else None
                problems.append(f"model: {model}: {problem}" + (f"; replace it with {instead}" if instead else ""))
                if problem.startswith(("AuthenticationError", "PermissionDeniedError")):
                    break  # the key is wrong: every model would say the same
    for line in notes:
        print(f"opsloop: warning: {line}", file=sys.stderr)
    for line in problems:
        print(f"opsloop: {line}", file=sys.stderr)
    return 1 if problems else 0
