"""`opsloop check`: config, tokens, model and the tool table, one line per problem."""

from __future__ import annotations

import sys

from bot.config import Settings


async def check(settings: Settings) -> int:
    import anthropic
    from slack_sdk.errors import SlackApiError

    from bot.app import anthropic_client, slack_client
    from tools.config import ToolConfigError, build_registry, tool_table

    problems: list[str] = []
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
        try:
            async with anthropic_client(settings) as llm:
                await llm.messages.create(model=settings.model.primary, max_tokens=1,
                                          messages=[{"role": "user", "content": "ping"}])
            print(f"model: ok, {settings.model.primary}")
        except anthropic.APIError as e:
            problems.append(f"model: {settings.model.primary}: {type(e).__name__}: {getattr(e, 'message', e)}")
    for line in problems:
        print(f"opsloop: {line}", file=sys.stderr)
    return 1 if problems else 0
