"""Per-iteration overhead of the agent loop, in medians over repeated runs.

- in-process: a scripted ModelClient with no I/O, so the time is the loop itself
  plus its SQLite writes (history, trace, totals) on the writer thread.
- http: the real anthropic client streaming from the local fake Messages API.
- baseline: the same model/tool calls made directly, without the loop.
Numbers are machine-dependent; compare ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anthropic

from bot.log import configure_logging
from bot.model import AnthropicModel
from bot.pricing import price_for
from bot.runtime import RunConfig, run
from bot.store import Store
from bot.types import ModelRequest, ModelResponse, StopReason, Usage
from tests.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tools import Category, ToolRegistry, tool


@tool(category=Category.READ_ONLY, parallel=True)
async def check_disk(host: str) -> str:
    """Disk usage."""
    return f"{host}: /var 97%"


REGISTRY = ToolRegistry([check_disk])


class ScriptedModel:
    """A ModelClient answering from memory: N tool calls, then a final answer."""

    def __init__(self, steps: int) -> None:
        self.left = steps
        self.model = "claude-sonnet-4-5"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.left -= 1
        n = self.left
        call = {"type": "tool_use", "id": f"toolu_{n}", "name": "check_disk", "input": {"host": f"w{n}"}}
        content: list[dict[str, Any]] = [call] if self.left > 0 else [{"type": "text", "text": "done"}]
        return ModelResponse(content=content, stop_reason="tool_use" if self.left > 0 else "end_turn",
                             usage=Usage(input_tokens=100, output_tokens=10), model=self.model)


async def one_run(store: Store, model: Any, steps: int) -> float:
    row = await store.create_run(channel="C", thread_ts="1", requester="U", task="t", model="claude-sonnet-4-5",
                                 history=[{"role": "user", "content": [{"type": "text", "text": "disk full"}]}])
    cfg = RunConfig(model=model, store=store, tools=REGISTRY, price_for=lambda m: price_for(m)[0])
    began = time.perf_counter()
    result = await run(cfg, row["id"])
    elapsed = time.perf_counter() - began
    assert result.stop_reason == StopReason.COMPLETED and result.iterations == steps, result
    return elapsed / steps


async def baseline(model: Any, steps: int) -> float:
    """The same calls without the loop: model, then tool, no store, no guards."""
    began = time.perf_counter()
    history: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "disk full"}]}]
    for _ in range(steps):
        response = await model.complete(ModelRequest(system="s", tools=REGISTRY.api_schemas(), messages=history,
                                                     max_tokens=1024))
        history.append({"role": "assistant", "content": response.content})
        calls = [b for b in response.content if b["type"] == "tool_use"]
        if calls:
            out = await check_disk.run(calls[0]["input"])
            history.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0]["id"],
                                                         "content": out}]})
    return (time.perf_counter() - began) / steps


async def main(repeats: int, steps: int) -> None:
    configure_logging("warning")  # the trace is part of the loop's cost only at info level; see --trace
    with tempfile.TemporaryDirectory() as tmp:
        store = await Store(Path(tmp) / "bench.db").open()
        loop_ms = [await one_run(store, ScriptedModel(steps), steps) * 1000 for _ in range(repeats)]
        base_ms = [await baseline(ScriptedModel(steps), steps) * 1000 for _ in range(repeats)]
        async with FakeAnthropic(api_key="sk-ant-bench") as fake:
            client = anthropic.AsyncAnthropic(api_key="sk-ant-bench", base_url=fake.base_url, max_retries=0)

            def script() -> None:
                fake.script(*[reply(tool_use("check_disk", {"host": f"web-{i}"})) for i in range(steps - 1)],
                            reply(text("done")))

            http_ms, http_base_ms = [], []
            for _ in range(repeats):
                script()
                http_ms.append(await one_run(store, AnthropicModel(client, ["claude-sonnet-4-5"]), steps) * 1000)
                script()
                http_base_ms.append(await baseline(AnthropicModel(client, ["claude-sonnet-4-5"]), steps) * 1000)
            await client.close()
        await store.close()
        concurrency = await concurrent_runs(Path(tmp) / "concurrent.db", steps)
        cache = await cache_ratio(steps)
    med = statistics.median
    print(f"per-iteration, median of {repeats} runs x {steps} iterations")
    print(f"  in-process model: loop {med(loop_ms):.2f} ms  vs direct calls {med(base_ms):.3f} ms"
          f"  -> loop overhead {med(loop_ms) - med(base_ms):.2f} ms/iteration")
    print(f"  http fake model : loop {med(http_ms):.2f} ms  vs direct calls {med(http_base_ms):.2f} ms"
          f"  -> ratio {med(http_ms) / med(http_base_ms):.2f}x")
    for n, per_run_ms in concurrency:
        print(f"  {n:>2} concurrent runs (one store writer): {per_run_ms:.1f} ms per run of {steps} iterations")
    read, paid = cache
    print(f"  prompt cache over a {steps}-step run: {read:.0%} of prompt tokens read from cache; "
          f"cost {paid:.0%} of the same run uncached")


async def concurrent_runs(db: Path, steps: int) -> list[tuple[int, float]]:
    """Wall time per run when N runs share the store's single writer thread."""
    store = await Store(db).open()
    out = []
    for n in (1, 4, 16):
        began = time.perf_counter()
        await asyncio.gather(*(one_run(store, ScriptedModel(steps), steps) for _ in range(n)))
        out.append((n, (time.perf_counter() - began) * 1000 / n))
    await store.close()
    return out


async def cache_ratio(steps: int) -> tuple[float, float]:
    """Share of prompt tokens read from cache, and cost relative to the same run uncached (fake's accounting)."""
    runbook = "Runbook: check disks, then logs, then services before changing anything. " * 80
    with tempfile.TemporaryDirectory() as tmp:
        store = await Store(Path(tmp) / "cache.db").open()
        async with FakeAnthropic(api_key="sk-ant-bench") as fake:
            client = anthropic.AsyncAnthropic(api_key="sk-ant-bench", base_url=fake.base_url, max_retries=0)
            fake.script(*[reply(tool_use("check_disk", {"host": f"web-{i}"})) for i in range(steps - 1)],
                        reply(text("done")))
            row = await store.create_run(channel="C", thread_ts="1", requester="U", task="t", model="m",
                                         history=[{"role": "user", "content": [{"type": "text", "text": "disk"}]}])
            cfg = RunConfig(model=AnthropicModel(client, ["claude-sonnet-4-5"]), store=store, tools=REGISTRY,
                            price_for=lambda m: price_for(m)[0], system_prompt=runbook)
            result = await run(cfg, row["id"])
            await client.close()
        await store.close()
    u = result.usage
    price = price_for("claude-sonnet-4-5")[0]
    uncached = price.cost(Usage(input_tokens=u.prompt_tokens, output_tokens=u.output_tokens))
    return u.cache_read_tokens / u.prompt_tokens, price.cost(u) / uncached


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    asyncio.run(main(a.repeats, a.steps))
