"""`opsloop replay --suite DIR`: every incident record in a folder replayed on one model, one row each.

A row says whether the replay reached the same final change and the same stop reason, and the steps, cost
and time against the original. An incident regresses when the original succeeded and the replay reached no
change or a different one; any regression makes the suite fail (exit 1), so it can gate a model switch. A replay
whose model call failed or was refused is no regression: without any regression, it makes the suite exit 3.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.core.redact import redact
from bot.replay.compare import Comparison
from bot.replay.world import Source


def table(rows: Sequence[Comparison], model: str) -> str:
    head = (
        f"{'incident':<24} {'same change':<11} {'same stop':<20} {'steps':>9} {'cost Δ':>10} "
        f"{'time Δ':>9} {'results r/u/l':>13}  verdict"
    )
    out = [f"replay suite on {model}: {len(rows)} incident(s)", head]
    for c in rows:
        o, r = c.original, c.replay
        stop = "yes" if c.same_stop else f"no ({r.stop_reason})"
        rul = "/".join(str(c.sources[s]) for s in (Source.REPLAYED, Source.UNRECORDED, Source.LIVE))
        verdict = (
            "REGRESSION"
            if c.regression
            else "MODEL FAILED"
            if c.model_failed
            else ("identical" if c.identical else f"diverged at step {c.diverged_at}" if c.diverged_at else "ok")
        )
        out.append(
            f"{c.name[:24]:<24} {'yes' if c.same_change else 'no':<11} {stop:<20} "
            f"{f'{o.steps}→{r.steps}':>9} {r.cost_usd - o.cost_usd:>+10.4f} "
            f"{r.agent_seconds - o.agent_seconds:>+8.2f}s {rul:>13}  {verdict}"
        )
    bad, failed = sum(c.regression for c in rows), sum(c.model_failed for c in rows)
    out.append(f"{bad} regression(s)" if bad else "no regression")
    if failed:
        out.append(f"{failed} replay(s) where the model call failed or was refused: neither passed nor regressed")
    out.append(
        "results r/u/l: the replay's read-only results that were replayed from the record / unrecorded "
        "(an error result) / live (--live-readonly)"
    )
    return "\n".join(redact(line) for line in out)
