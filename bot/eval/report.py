"""What `opsloop eval` shows: one row per case and model (pass rate over the repeats, each check's pass rate, steps,
tokens, dollars, seconds, the judge's score apart), the JSON file, the HTML page, and the baseline comparison."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bot.app.timeline import t as _t
from bot.core.redact import redact, redact_value
from bot.eval.score import CHECKS, Check
from bot.replay.compare import page, stamp

FORMAT = "opsloop-eval/1"
FAILING_MAX = 1500  # characters of a failing case's first reason in the table (the JSON has it whole)


@dataclass(frozen=True, kw_only=True)
class Result:
    """One run of one case on one model."""

    case: str
    model: str
    repeat: int
    checks: tuple[Check, ...] = ()
    steps: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    stop_reason: str = "error"
    answer: str = ""
    judge: float | None = None  # the rubric score (0-1), never part of `passed`
    error: str = ""  # the run could not be made (a model error the loop did not absorb, a broken case)

    @property
    def passed(self) -> bool:
        return not self.error and all(c.passed for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = redact_value(
            {
                "case": self.case,
                "model": self.model,
                "repeat": self.repeat,
                "passed": self.passed,
                "checks": {c.name: {"passed": c.passed, "why": c.why} for c in self.checks},
                "steps": self.steps,
                "tokens": self.tokens,
                "cost_usd": round(self.cost_usd, 6),
                "seconds": round(self.seconds, 3),
                "stop_reason": self.stop_reason,
                "judge": self.judge,
                "error": self.error,
                "answer": self.answer,
            }
        )
        return body


@dataclass(frozen=True, kw_only=True)
class Row:
    """A case on a model, over its repeats."""

    case: str
    model: str
    runs: int
    pass_rate: float
    checks: dict[str, float] = field(default_factory=dict)  # each check's pass rate
    steps: float = 0.0
    tokens: float = 0.0
    cost_usd: float = 0.0
    seconds: float = 0.0
    judge: float | None = None
    failing: str = ""  # the first failed check and why, from the last failed run


def rows(results: Sequence[Result]) -> list[Row]:
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.case, r.model), []).append(r)
    out = []
    for (case, model), rs in sorted(groups.items()):
        n = len(rs)
        judged = [r.judge for r in rs if r.judge is not None]
        failed = [r for r in rs if not r.passed]
        why = ""
        if failed:
            last = failed[-1]
            bad = next((c for c in last.checks if not c.passed), None)
            why = last.error or (f"{bad.name}: {bad.why}" if bad else "")
        out.append(
            Row(
                case=case,
                model=model,
                runs=n,
                pass_rate=sum(r.passed for r in rs) / n,
                checks={
                    name: sum(any(c.name == name and c.passed for c in r.checks) for r in rs) / n for name in CHECKS
                },
                steps=sum(r.steps for r in rs) / n,
                tokens=sum(r.tokens for r in rs) / n,
                cost_usd=sum(r.cost_usd for r in rs) / n,
                seconds=sum(r.seconds for r in rs) / n,
                judge=sum(judged) / len(judged) if judged else None,
                failing=why,
            )
        )
    return out


def table(results: Sequence[Result]) -> str:
    """The text table: one line per case and model, means over its repeats; a failing case's first reason below."""
    head = f"{'case':<30} {'model':<20} {'pass':>6} {'steps':>6} {'tokens':>8} {'dollars':>8} {'secs':>6} {'judge':>5}"
    lines = [head]
    for r in rows(results):
        judge = f"{r.judge:.2f}" if r.judge is not None else "-"
        lines.append(
            f"{r.case[:30]:<30} {r.model[:20]:<20} {r.pass_rate:>6.0%} {r.steps:>6.1f} {r.tokens:>8.0f} "
            f"{r.cost_usd:>8.4f} {r.seconds:>6.1f} {judge:>5}"
        )
        if r.failing:  # wrapped under the row, whole up to a bound: a summary's refusals make it long
            lines += [f"    {part}" for part in textwrap.wrap(r.failing[:FAILING_MAX], 110)]
    passed = sum(r.passed for r in results)
    total = sum(r.cost_usd for r in results)
    lines.append(f"{passed}/{len(results)} runs passed every check · ${total:.4f} in all")
    return "\n".join(redact(line) for line in lines)


def to_json(results: Sequence[Result], *, generated_at: float) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "generated_at": generated_at,
        "cases": [{k: v for k, v in asdict(r).items() if k != "failing"} for r in rows(results)],
        "runs": [r.to_json() for r in results],
    }


def regressions(results: Sequence[Result], baseline: Mapping[str, Any]) -> list[str]:
    """Each case that got worse than in `baseline` (an earlier run's JSON), by case: its pass rate fell, or one of
    its checks' did. A case the baseline does not have is new, never a regression."""
    if baseline.get("format") != FORMAT:
        raise ValueError(f"not an opsloop eval result (format {baseline.get('format')!r}, expected {FORMAT!r})")
    before = {c["case"]: c for c in reversed(baseline.get("cases", []))}  # each case by its first row
    out = []
    for r in rows(results):
        b = before.get(r.case)
        if b is None:
            continue
        if r.pass_rate < b["pass_rate"]:
            out.append(f"{r.case}: pass rate {b['pass_rate']:.0%} → {r.pass_rate:.0%} ({r.model})")
            continue
        worse = [n for n in CHECKS if r.checks.get(n, 0.0) < b.get("checks", {}).get(n, 0.0)]
        if worse:
            out.append(f"{r.case}: {', '.join(worse)} passed less often than in the baseline ({r.model})")
    return out


_EXTRA_CSS = ".pass{color:#2e7d32}.fail{color:#b00020;font-weight:600}"


def html_page(results: Sequence[Result], *, generated_at: float) -> str:
    models = sorted({r.model for r in results})
    title = f"opsloop eval · {', '.join(models)}"
    head = ["case", "model", "pass", *CHECKS, "steps", "tokens", "dollars", "secs", "judge"]
    body = []
    for r in rows(results):
        cells = [_t(r.case), _t(r.model), _rate(r.pass_rate)]
        cells += [_rate(r.checks.get(n, 0.0)) for n in CHECKS]
        cells += [f"{r.steps:.1f}", f"{r.tokens:.0f}", f"{r.cost_usd:.4f}", f"{r.seconds:.1f}"]
        cells.append(f"{r.judge:.2f}" if r.judge is not None else "-")
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    failures = [
        f"<li><b>{_t(r.case)}</b> ({_t(r.model)}, run {r.repeat + 1}): "
        + _t(r.error or "; ".join(f"{c.name}: {c.why}" for c in r.checks if not c.passed))
        + "</li>"
        for r in results
        if not r.passed
    ]
    return page(
        title,
        _EXTRA_CSS,
        f'<p class="muted">generated {stamp(generated_at)} · {len(results)} run(s) · the judge\'s score is shown '
        "apart and never counts toward a pass</p>",
        "<table><tr>" + "".join(f"<th>{_t(h)}</th>" for h in head) + "</tr>" + "".join(body) + "</table>",
        "<h2>Failed runs</h2>",
        f"<ul>{''.join(failures)}</ul>" if failures else '<p class="muted">none</p>',
    )


def _rate(value: float) -> str:
    return f'<span class="{"pass" if value >= 1 else "fail"}">{value:.0%}</span>'
