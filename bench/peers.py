"""The same scripted incident through other agent loops, each run as its own process.

    python -m bench.peers bare|pydantic_ai|tool_runner SPEC.json

SPEC.json holds base_url, api_key, model, system, tools (the API schemas opsloop sends),
task, max_tokens, effort. The fake Messages API scripts the answers; every loop runs the
one tool the script calls (`df`) and offers the others without running them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from bench.tools import DF_OUTPUT

CALLED = "df"  # bench.tools.df: the built-in disk_usage is another tool


def disk(host: str) -> str:
    return f"{host}:\n{DF_OUTPUT}"


async def bare(spec: dict[str, Any]) -> None:
    """The minimal loop from the SDK's docs: messages.create, run the tools, append, repeat. No persistence."""
    import anthropic

    client = anthropic.AsyncAnthropic(api_key=spec["api_key"], base_url=spec["base_url"], max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": spec["task"]}]
    while True:
        response = await client.messages.create(
            model=spec["model"],
            max_tokens=spec["max_tokens"],
            system=spec["system"],
            tools=spec["tools"],
            messages=messages,
            output_config={"effort": spec["effort"]},
        )
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in response.content]})
        calls = [b for b in response.content if b.type == "tool_use"]
        if not calls:
            break
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": c.id, "content": disk(**c.input)} for c in calls],
            }
        )
    await client.close()


async def pydantic_ai(spec: dict[str, Any]) -> None:
    """pydantic-ai's Agent with its Anthropic model, pointed at the fake; settings as shipped (no cache)."""
    from pydantic_ai import Agent, Tool
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    async def unused(**_: Any) -> str:
        return "not called in this benchmark"

    tools = [
        Tool.from_schema(unused, name=t["name"], description=t.get("description", ""), json_schema=t["input_schema"])
        for t in spec["tools"]
        if t["name"] != CALLED
    ]

    async def disk_usage(host: str) -> str:
        return disk(host)

    called = next(t for t in spec["tools"] if t["name"] == CALLED)
    tools.append(
        Tool.from_schema(
            disk_usage, name=CALLED, description=called.get("description", ""), json_schema=called["input_schema"]
        )
    )
    model = AnthropicModel(
        spec["model"], provider=AnthropicProvider(api_key=spec["api_key"], base_url=spec["base_url"])
    )
    agent = Agent(model, instructions=spec["system"], tools=tools)
    await agent.run(spec["task"], model_settings={"max_tokens": spec["max_tokens"]})


async def tool_runner(spec: dict[str, Any]) -> None:
    """The SDK's beta tool runner: a server-side thread by default, so each turn uploads only new messages."""
    import anthropic
    from anthropic import beta_async_tool

    @beta_async_tool(name=CALLED)
    async def disk_usage(host: str) -> str:
        """Disk usage per mount on a host."""
        return disk(host)

    client = anthropic.AsyncAnthropic(api_key=spec["api_key"], base_url=spec["base_url"], max_retries=0)
    others = [t for t in spec["tools"] if t["name"] != CALLED]
    runner = client.beta.messages.tool_runner(
        model=spec["model"],
        max_tokens=spec["max_tokens"],
        system=spec["system"],
        tools=[*others, disk_usage],
        messages=[{"role": "user", "content": spec["task"]}],
        output_config={"effort": spec["effort"]},
        **({"cache_control": {"type": "ephemeral"}} if spec.get("cache") else {}),
    )
    async for _ in runner:
        pass
    await client.close()


PEERS = {"bare": bare, "pydantic_ai": pydantic_ai, "tool_runner": tool_runner}

if __name__ == "__main__":
    with open(sys.argv[2]) as f:
        spec = json.load(f)
    asyncio.run(PEERS[sys.argv[1]](spec))
