"""Rerun an incident: the real run loop (bot.run.loop.run) with a real model client, against the recorded world.

The replay is a run of its own in a throwaway SQLite store (a temp dir): the record's first turns, its system
prompt (or `system_prompt`), its tool schemas and its limits. It has no Slack, no stop button and no real
approver: the world (bot/replay/world.py) answers the tools, the approvals and the replies. Afterwards the
replay's run is read back from that store into a record of its own, the same shape as the original's, and
the store is removed.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bot import ModelClient, Toolbox
from bot.core.pricing import Price
from bot.core.types import StopReason
from bot.replay.record import Incident, export_run
from bot.replay.world import RecordedWorld
from bot.run.guards import Limits, Pause
from bot.run.loop import RunConfig, run
from bot.store import Ledger, Store


@dataclass(frozen=True, kw_only=True)
class Replayed:
    original: Incident
    replay: Incident
    world: RecordedWorld
    model: str
    wall_seconds: float  # the replay's whole wall time, store included
    model_failure: str = ""  # why the replay's model gave no usable answer (a failed or refused call); "" if it did


async def replay(
    incident: Incident,
    *,
    model: ModelClient,
    price_for: Callable[[str], Price],
    system_prompt: str | None = None,
    max_tokens: int | None = None,
    effort: str | None = None,
    thinking_display: str | None = "summarized",
    live: Toolbox | None = None,
    context_budget_tokens: int | None = None,
) -> Replayed:
    """One replay of `incident` on `model`, under the record's limits; `effort` and `max_tokens` None: the record's
    own (what it ran under; 16,000 max_tokens for a record without them)."""
    world = RecordedWorld(incident, live=live)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="opsloop-replay-") as tmp:
        db = str(Path(tmp) / "replay.db")
        store = await Store(db).open()
        try:
            row = await store.create_run(
                channel="replay",
                thread_ts=incident.run_id,
                requester=incident.requester,
                task=incident.task,
                model=model.model,
                history=incident.prefix,
            )
            cfg = RunConfig(
                model=model,
                store=store,
                tools=world,
                price_for=price_for,
                system_prompt=system_prompt if system_prompt is not None else incident.system,
                limits=incident.run_limits(Limits()),
                max_tokens=max_tokens or incident.max_tokens or 16_000,
                effort=effort if effort is not None else incident.effort,
                thinking_display=thinking_display,
                confirm=world.confirm,
                inject=world.inject,
                condense=True,
                context_budget_tokens=context_budget_tokens,
            )
            # Pause never comes (the world decides at once); suppressed so a surprise ends the replay, not the suite.
            with contextlib.suppress(Pause):
                await run(cfg, row.id)
        finally:
            await store.close()
        ledger = Ledger(db)
        try:
            replayed = export_run(ledger, row.id, categories=incident.categories, limits=cfg.limits)
            refused = any(s.kind == "response" and s.data.get("stop_reason") == "refusal" for s in ledger.steps(row.id))
        finally:
            ledger.close()
    assert replayed is not None
    failure = (
        f"{StopReason.MODEL_ERROR.value}: {replayed.stop_detail}".rstrip(": ")
        if replayed.stop_reason == StopReason.MODEL_ERROR.value
        else "the model refused: stop_reason refusal"
        if refused
        else ""
    )
    return Replayed(
        original=incident,
        replay=replayed,
        world=world,
        model=model.model,
        wall_seconds=time.monotonic() - began,
        model_failure=failure,
    )
