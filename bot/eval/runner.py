"""One case on one model: the real run loop (bot.run.loop.run) against the case's world, in a throwaway store.

The run is built as the app builds one: the case's config read by the real reaches (the tool registry, its
schemas, the context block's environment lines), the task a mention or an alert makes, the context block with
the case's "now", and the limits (twice the case's steps and dollars, so a run over them is seen, not cut
short). The model is the caller's: Claude through the anthropic client, or the scripted model. Afterwards the run
is read back from the store (its answer, its accepted summaries, its stored results with their handles) for
the scoring, and the store is removed.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bot import ModelClient
from bot.core.pricing import Price
from bot.eval.case import Case
from bot.eval.world import Call, FixtureWorld
from bot.run import prompts
from bot.run.guards import Limits, Pause
from bot.run.history import continue_history
from bot.run.loop import RunConfig, run
from bot.run.summary import Summary, handle_number
from bot.store import Ledger, Store
from tools.api import SUMMARY_TOOL, RunScope
from tools.config import build_registry
from tools.reaches import TABLES, parse_reaches


@dataclass(frozen=True, kw_only=True)
class Ran:
    """What a case's run did, read back from its store."""

    case: Case
    model: str
    answer: str
    stop_reason: str
    steps: int
    tokens: int  # paid tokens
    cost_usd: float
    seconds: float
    summary: Summary | None  # the last accepted living summary
    calls: tuple[Call, ...]
    handles: dict[int, Call]  # a result's handle number -> the call it answered
    results: tuple[str, ...]  # every stored result's text, as the model read it
    refusals: tuple[str, ...] = ()  # each refused update_summary call's reason, one line (its first problem)


async def run_case(case: Case, *, model: ModelClient, price_for: Callable[[str], Price]) -> Ran:
    began = time.monotonic()
    config = case.config
    reaches = parse_reaches({k: v for k, v in config.items() if k != "tools"}, base_dir=case.folder, env={})
    with tempfile.TemporaryDirectory(prefix="opsloop-eval-") as tmp:
        db = str(Path(tmp) / "eval.db")
        async with contextlib.AsyncExitStack() as closing:  # closed in reverse: the registry, then the store
            store = await Store(db, tables=TABLES).open()
            closing.push_async_callback(store.close)
            registry = await build_registry(
                config.get("tools"), base_dir=case.folder, reaches=reaches, shared={Store: store}
            )
            closing.push_async_callback(registry.aclose)
            world = FixtureWorld(case, registry)
            world.attach(store)
            row = await store.create_run(
                channel=case.channel,
                thread_ts=case.name,
                requester=case.requester,
                task=case.task,
                model=model.model,
                history=continue_history([], case.task),  # the first user turn, as a mention or an alert makes it
            )
            scope = RunScope(
                run_id=row.id,
                conversation=case.channel,
                started_at=case.now,
                anchor=case.alert_start or case.now,
                task=case.task,
                alertname=case.alertname,
            )

            async def prelude() -> list[str]:
                context = prompts.run_context(
                    now=case.now,
                    started=case.now,
                    channel=case.channel,
                    requester=case.requester,
                    alertname=case.alertname,
                    alert_start=case.alert_start,
                    environment=registry.environment,
                )
                return [context, *case.offers]

            cfg = RunConfig(
                model=model,
                store=store,
                tools=world,
                price_for=price_for,
                limits=Limits(
                    max_iterations=case.expect.max_steps * 2, cost_budget_usd=max(case.expect.max_dollars * 2, 0.01)
                ),
                confirm=world.confirm,
                inject=world.inject,
                scope=scope,
                prelude=prelude,
            )
            with contextlib.suppress(Pause):  # the world decides at once: a pause would be a surprise, not a wait
                await run(cfg, row.id)
        ledger = Ledger(db)
        try:
            stored = ledger.find_run(row.id)
            summaries = ledger.summaries(row.id)
            results = ledger.tool_results(row.id)
        finally:
            ledger.close()
    assert stored is not None
    handles: dict[int, Call] = {}
    for r in results.values():
        if r.content is None or (n := handle_number(r.content)) is None:
            continue
        call = next((c for c in world.log if c.tool == r.tool and c.args == r.args), None)
        if call is not None:
            handles[n] = call
    return Ran(
        case=case,
        model=model.model,
        answer=stored.output or "",
        stop_reason=stored.stop_reason.value if stored.stop_reason else stored.status.value,
        steps=stored.iterations,
        tokens=stored.usage.paid_tokens,
        cost_usd=stored.cost_usd,
        seconds=time.monotonic() - began,
        summary=summaries[-1].summary if summaries else None,
        calls=tuple(world.log),
        handles=handles,
        results=tuple(r.content or "" for r in results.values()),
        refusals=tuple(
            refusal_line(r.content or "") for r in results.values() if r.tool == SUMMARY_TOOL and r.is_error
        ),
    )


def refusal_line(text: str) -> str:
    """A refused update_summary's result in one line: the first line that says why (its first problem, after
    the refusal's heading), and how many more problems it listed."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines and lines[0].startswith(f"{SUMMARY_TOOL} refused"):
        lines = lines[1:]
    if not lines:
        return "(no reason given)"
    more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
    return lines[0].removeprefix("- ") + more
