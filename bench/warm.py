"""Warm peers: every contender in ONE process, built once and reused across runs (as a long-lived bot reuses
its clients), interleaved, on two workloads against the same fake Messages API:

- minimal: one tool (`df`), no thinking blocks in the replies;
- thinking: claude-sonnet-5-5 with thinking blocks in every reply, every shipped tool and the bench's offered.

Every row of a workload offers the same tools (`MODULES`): `opsloop run` is started once per workload with them
(it used to offer every shipped tool on the minimal workload too, 17 against the others' 1, and paid for the
larger request in the SDK's copy of it and in the fake's parsing).

Contenders: the bare SDK loop (messages.create), the SDK's beta tool runner, pydantic-ai's Agent (when the
bench extra is installed), opsloop in-process (bot.run.loop.run: SQLite store, stop flag and inbox reads,
JSON trace to a file) and, as its own row, `opsloop run` (the whole bot as a long-lived child process:
Socket Mode, Slack status message and loading status, SQLite, trace). Time per iteration is measured at
the fake: the mean gap between consecutive requests of one run."""

from __future__ import annotations

import io
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic

from bench import product
from bench.peers import CALLED, disk
from bench.product import API_KEY
from bot.core.log import configure_logging
from bot.core.pricing import price_for
from bot.core.types import RunNews
from bot.run import prompts
from bot.run.guards import Limits
from bot.run.loop import RunConfig, run
from bot.run.model import AnthropicModel, claude_client
from bot.store import Store
from tests.support.fakes.anthropic import FakeAnthropic, Reply
from tools import ToolRegistry
from tools.config import build_registry

MODEL = "claude-sonnet-5-5"
TASK = "[incident request from <@U0ALICE> in <#C0INCIDENT>] web-03 is out of disk"
WORKLOADS = ("minimal", "thinking")
MODULES = {"minimal": ["bench.minimal"], "thinking": ["tools.builtin", "bench.tools"]}  # each workload's tools
med = statistics.median


def script(steps: int, stamps: list[float], *, think: bool) -> Callable[[dict[str, Any]], Reply]:
    """Tool calls until the run's `steps`-th request, then the answer; each request's arrival is stamped but the
    summary ask's (product.incident: opsloop alone sends the answer back once for update_summary, and gets the same
    answer), so every contender is timed over the same `steps` requests."""
    return product.incident(steps, stamps, tool=CALLED, think=think)


def per_iteration_ms(stamps: list[float]) -> float:
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1000


async def registries() -> dict[str, ToolRegistry]:
    return {w: await build_registry({"modules": MODULES[w]}) for w in WORKLOADS}


class Contenders:
    """Each contender's long-lived state, built once; `run(name, workload)` is one scripted incident."""

    def __init__(self, fake: FakeAnthropic, tools: dict[str, ToolRegistry], tmp: Path) -> None:
        self.fake, self.tools, self.tmp = fake, tools, tmp
        self.client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=fake.base_url, max_retries=0)  # the peers'
        self.product_client = claude_client(API_KEY, fake.base_url)  # opsloop's own (its transport included)
        self.store: Store | None = None
        self.agents: dict[str, Any] = {}
        self.names = ["bare", "tool_runner", *(["pydantic_ai"] if _has_pydantic_ai() else []), "opsloop"]

    async def open(self) -> None:
        self.store = await Store(self.tmp / "warm.db").open()
        self.log = open(os.devnull, "w")  # noqa: ASYNC230, SIM115 (close() closes it; the trace is encoded and written, then dropped)
        configure_logging("info", stream=self.log)
        if "pydantic_ai" in self.names:
            for w in WORKLOADS:
                self.agents[w] = _pydantic_agent(self.tools[w].api_schemas(), self.fake.base_url)

    async def close(self) -> None:
        await self.client.close()
        await self.product_client.close()
        if self.store is not None:
            await self.store.close()
        self.log.close()
        configure_logging("info", stream=io.StringIO())

    async def run(self, name: str, workload: str, steps: int) -> float:
        stamps: list[float] = []
        n = product.requests(steps) if name == "opsloop" else steps  # the peers have no summary ask
        self.fake.script(*[script(steps, stamps, think=workload == "thinking") for _ in range(n)])
        schemas = self.tools[workload].api_schemas()
        await RUNNERS[name](self, workload, schemas)
        self.fake.assert_complete()  # a response left over would answer the next contender's first request
        assert len(stamps) == steps, (name, workload, len(stamps))
        return per_iteration_ms(stamps)


async def _bare(c: Contenders, workload: str, schemas: list[dict[str, Any]]) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    while True:
        response = await c.client.messages.create(
            model=MODEL,
            max_tokens=16000,
            system=prompts.SYSTEM_PROMPT,
            tools=schemas,
            messages=messages,
            output_config={"effort": "medium"},
        )
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in response.content]})
        calls = [b for b in response.content if b.type == "tool_use"]
        if not calls:
            return
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": b.id, "content": disk(**b.input)} for b in calls],
            }
        )


async def _tool_runner(c: Contenders, workload: str, schemas: list[dict[str, Any]]) -> None:
    from anthropic import beta_async_tool

    @beta_async_tool(name=CALLED)
    async def disk_usage(host: str) -> str:
        """Disk usage per mount on a host."""
        return disk(host)

    others = [t for t in schemas if t["name"] != CALLED]
    runner = c.client.beta.messages.tool_runner(
        model=MODEL,
        max_tokens=16000,
        system=prompts.SYSTEM_PROMPT,
        tools=[*others, disk_usage],
        messages=[{"role": "user", "content": TASK}],
        output_config={"effort": "medium"},
    )
    async for _ in runner:
        pass


async def _pydantic(c: Contenders, workload: str, schemas: list[dict[str, Any]]) -> None:
    await c.agents[workload].run(TASK, model_settings={"max_tokens": 16000})


async def _opsloop(c: Contenders, workload: str, schemas: list[dict[str, Any]]) -> None:
    assert c.store is not None
    store = c.store
    row = await store.create_run(
        channel="C0INCIDENT",
        thread_ts=f"{time.time():.6f}",
        requester="U0ALICE",
        task=TASK,
        model=MODEL,
        history=[{"role": "user", "content": [{"type": "text", "text": TASK}]}],
    )

    async def stop_requested() -> str | None:
        return await store.stop_requested_by(row.id)

    async def inject() -> list[Any]:
        return list(await store.queued_inbox(row.id))

    async def news() -> RunNews:
        return await store.run_news(row.id)

    cfg = RunConfig(
        model=AnthropicModel(c.product_client, [MODEL]),
        store=store,
        tools=c.tools[workload],
        price_for=lambda m: price_for(m)[0],
        effort="medium",
        # as `opsloop run`'s bench config: a run's last step is never asked for update_summary, so at the default
        # 20 a 20-request incident would skip the summary ask the script answers
        limits=Limits(max_iterations=50),
        inject=inject,
        stop_requested=stop_requested,
        news=news,
    )
    await run(cfg, row.id)


RUNNERS: dict[str, Callable[[Contenders, str, list[dict[str, Any]]], Awaitable[None]]] = {
    "bare": _bare,
    "tool_runner": _tool_runner,
    "pydantic_ai": _pydantic,
    "opsloop": _opsloop,
}


def _has_pydantic_ai() -> bool:
    try:
        import pydantic_ai  # noqa: F401
    except ImportError:
        return False
    return True


def _pydantic_agent(schemas: list[dict[str, Any]], base_url: str) -> Any:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.models.anthropic import AnthropicModel as PydanticAnthropic
    from pydantic_ai.providers.anthropic import AnthropicProvider

    async def unused(**_: Any) -> str:
        return "not called in this benchmark"

    async def disk_usage(host: str) -> str:
        return disk(host)

    tools = [
        Tool.from_schema(
            disk_usage if t["name"] == CALLED else unused,
            name=t["name"],
            description=t.get("description", ""),
            json_schema=t["input_schema"],
        )
        for t in schemas
    ]
    model = PydanticAnthropic(MODEL, provider=AnthropicProvider(api_key=API_KEY, base_url=base_url))
    return Agent(model, instructions=prompts.SYSTEM_PROMPT, tools=tools)


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


async def measure(steps: int, repeats: int, *, full: bool = True) -> dict[str, Any]:
    """{workload: {contender: [ms/iteration per repeat]}}, plus the load averages seen, interleaved."""
    tools = await registries()
    out: dict[str, Any] = {w: {} for w in WORKLOADS}
    loads: dict[str, list[str]] = {w: [] for w in WORKLOADS}
    with tempfile.TemporaryDirectory(prefix="opsloop-warm-") as tmp:
        for w in WORKLOADS:
            # `opsloop run` with this workload's tools: started once, warm for every repeat; the in-process
            # contenders talk to the same fake Messages API
            async with product.running(modules=MODULES[w]) as p:
                (Path(tmp) / w).mkdir()
                c = Contenders(p.model, tools, Path(tmp) / w)
                await c.open()
                try:
                    names = [*c.names, *(["opsloop_run"] if full else [])]
                    for n in c.names:  # one warm-up run each: imports, first connections, SQLite pages
                        await c.run(n, w, 3)
                    if full:
                        await p.incident(3, think=w == "thinking")
                    for i in range(repeats):
                        order = names[i % len(names) :] + names[: i % len(names)]  # rotate who goes first
                        for n in order:
                            if n == "opsloop_run":
                                stamps, _ = await p.incident(steps, think=w == "thinking")
                                ms = per_iteration_ms(stamps)
                            else:
                                ms = await c.run(n, w, steps)
                            out[w].setdefault(n, []).append(ms)
                            p.model.forget()
                        loads[w].append(load())
                finally:
                    await c.close()
    return {"ms": out, "loads": loads, "tools": {w: len(tools[w].api_schemas()) for w in WORKLOADS}}


LABELS = {
    "bare": "bare SDK loop (messages.create)",
    "tool_runner": "SDK beta tool runner",
    "pydantic_ai": "pydantic-ai Agent",
    "opsloop": "opsloop in-process (runtime, SQLite, trace)",
    "opsloop_run": "`opsloop run` (Slack status + loading status, SQLite, trace)",
}


def tables(result: dict[str, Any], steps: int, repeats: int) -> tuple[str, dict[str, dict[str, float]]]:
    """The Markdown tables (one per workload, each with the load average beside it) and the ratios to bare."""
    parts, ratios = [], {}
    for w in WORKLOADS:
        ms = result["ms"][w]
        base = med(ms["bare"])
        ratios[w] = {n: med(v) / base for n, v in ms.items()}
        rows = [
            f"| {LABELS[n]} | {med(v):.2f} | {min(v):.2f} | {ratios[w][n]:.2f}x "
            f"| {med(a / b for a, b in zip(v, ms['bare'], strict=True)):.2f}x | {min(v) / min(ms['bare']):.2f}x |"
            for n, v in ms.items()
        ]
        tools = result["tools"][w]
        parts.append(
            f"**{w}** ({tools} tool{'s' if tools != 1 else ''}{', thinking blocks' if w == 'thinking' else ''}; "
            f"{steps} requests per run, median of {repeats} interleaved runs; "
            f"{result['loads'][w][0]} at the first repeat, {result['loads'][w][-1]} at the last)\n\n"
            "| contender | median ms/iteration | best | vs bare (medians) | vs bare (each repeat's own, median) "
            "| best vs best |\n|---|---|---|---|---|---|\n" + "\n".join(rows)
        )
    parts.append(
        "The verdict reads the ratio of medians. Beside it, two readings that this box's noise moves less: the "
        "median of each repeat's own ratio (a contender against the bare loop's run next to it), and best against "
        "best (what each costs when nothing else got in its way)."
    )
    return "\n\n".join(parts), ratios
