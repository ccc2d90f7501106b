"""opsloop's benchmarks: `make bench` (or `python -m bench`) runs them all and writes bench/RESULTS.md.

Everything runs against the local fakes on loopback: the fake Slack (Web API + Socket
Mode) and the fake Messages API (with its cache and thinking-token accounting). The
product is `opsloop run` as a child process with the shipped defaults; the peers are
child processes too, talking to the same fake. Timings are medians over repeats and
every ratio compares numbers measured in this same invocation.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic

from bench import alerts, postgres, product, ssh, surfaces, warm
from bench import changes as changes_bench
from bench import memory as memory_bench_
from bench import replay as replay_bench
from bench import runbooks as runbooks_bench_
from bench import summary as summary_bench_
from bench.product import API_KEY, incident, running
from bot.core.pricing import price_for
from bot.run import prompts
from bot.run.guards import Limits
from bot.run.loop import RunConfig, run
from bot.run.model import AnthropicModel, claude_client
from bot.store import Store
from tests.support.fakes.anthropic import EFFORT_THINKING_TOKENS, FakeAnthropic, cost_usd, reply, text, tool_use
from tools.config import build_registry

HERE = Path(__file__).resolve().parent
MODEL = "claude-sonnet-5-5"  # the shipped default
TASK = "[incident request from <@U0ALICE> in <#C0INCIDENT>] web-03 is out of disk"
med = statistics.median


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


@dataclass
class Report:
    """What RESULTS.md says: one summary row per benchmark, then a section each."""

    summary: list[tuple[str, str, str, str]] = field(default_factory=list)  # name, result, target, verdict
    sections: list[str] = field(default_factory=list)

    def row(self, name: str, result: str, target: str, ok: bool | None, miss: str = "") -> None:
        verdict = "n/a" if ok is None else "met" if ok else f"missed{': ' + miss if miss else ''}"
        self.summary.append((name, result, target, verdict))

    def section(self, title: str, body: str) -> None:
        self.sections.append(f"## {title}\n\n{body.strip()}\n")


def table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join([*lines, *("| " + " | ".join(str(c) for c in r) + " |" for r in rows)])


def per_iteration_ms(stamps: list[float]) -> float:
    """Mean time between consecutive model requests of one run: one loop iteration each."""
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1000


def read_share(usages: list[dict[str, int]]) -> float:
    total = sum(u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] for u in usages)
    return sum(u["cache_read_input_tokens"] for u in usages) / total if total else 0.0


def uncached_cost(model: str, usages: list[dict[str, int]]) -> float:
    """What the same requests cost without any cache_control: every prompt token at the input price."""
    return sum(
        cost_usd(
            model,
            {
                **u,
                "input_tokens": u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"],
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            },
        )
        or 0.0
        for u in usages
    )


# --------------------------------------------------------------------------- 1 ack latency


async def ack_burst(p: product.Product, n: int) -> tuple[list[float], list[float]]:
    """`n` mentions sent at once to `opsloop run`: each envelope's ms from sent to acked, and to its `:eyes:`."""
    acked = p.slack.acked_at  # when each ack frame was read (the stand-in stamps it; a scan per change grew
    # with every burst: O(acks so far) on each of a burst's ~700 calls and frames)
    p.model.script(*[incident(1) for _ in range(n)])
    sent: dict[str, tuple[str, float]] = {}  # envelope id -> (mention ts, sent at)

    async def one(i: int) -> None:
        event = product.mention_event(
            product.CHANNEL, product.ALICE, f"host web-{i:03d} is out of disk", bot_user_id=p.slack.bot_user_id
        )
        at = time.monotonic()
        envelope_id = await p.slack.send_event(event)
        sent[envelope_id] = (event["ts"], at)

    answered = len(p._final_calls())  # a second burst on the same process: count only its own answers
    with product.collector_paused():
        await asyncio.gather(*(one(i) for i in range(n)))
        await p.wait_answers(answered + n)
        await p.slack._wait(
            lambda: True if sent.keys() <= acked.keys() else None,
            product.TIMEOUT,
            lambda: f"acks for {n} envelopes (have {len(sent.keys() & acked.keys())})",
        )
    eyes = {
        c.args.get("timestamp"): c.at
        for c in p.slack.calls
        if c.method == "reactions.add" and c.ok and c.args.get("name") == "eyes"
    }
    ack_ms = [(acked[e] - at) * 1000 for e, (_, at) in sent.items()]
    eyes_ms = [(eyes[ts] - at) * 1000 for _, (ts, at) in sent.items() if ts in eyes]
    assert len(eyes_ms) == n, f"{len(eyes_ms)} of {n} mentions got :eyes:"
    return ack_ms, eyes_ms


async def ack_latency(p: product.Product, n: int, report: Report) -> None:
    ack_ms, eyes_ms = await ack_burst(p, n)
    a50, a99, e50, e99 = pct(ack_ms, 50), pct(ack_ms, 99), pct(eyes_ms, 50), pct(eyes_ms, 99)
    report.row(
        "1. Event ack latency (100-mention burst)",
        f"ack p50 {a50:.1f} / p99 {a99:.1f} ms; :eyes: p50 {e50:.0f} / p99 {e99:.0f} ms",
        "ack p99 < 50 ms; :eyes: p99 < 250 ms",
        a99 < 50 and e99 < 250,
        miss=_miss(("ack p99", a99, 50), (":eyes: p99", e99, 250)),
    )
    report.section(
        "1. Event ack latency",
        f"""
{n} `app_mention` envelopes sent at once over Socket Mode to `opsloop run`; times from the moment
the fake Slack sent each envelope to the ack frame, and to the `reactions.add` call (`:eyes:`,
made once the run is stored). Every mention starts a run that answers at once, so the
acks compete with 100 runs starting.

{
            table(
                ["", "p50 ms", "p99 ms", "max ms", "target"],
                [
                    ["ack", f"{a50:.1f}", f"{a99:.1f}", f"{max(ack_ms):.1f}", "p99 < 50"],
                    [":eyes:", f"{e50:.0f}", f"{e99:.0f}", f"{max(eyes_ms):.0f}", "p99 < 250"],
                ],
            )
        }
""",
    )


def _miss(*checks: tuple[str, float, float]) -> str:
    return "; ".join(
        f"{name} {value:.0f} vs {limit:g} ({value / limit:.1f}x)" for name, value, limit in checks if value >= limit
    )


# --------------------------------------------------------------------------- 2 + 6 overhead and peers


async def peer_spec(p: product.Product, tmp: Path, *, cache: bool = False) -> Path:
    registry = await build_registry({"modules": ["tools.builtin", "bench.tools"]})
    spec = {
        "base_url": p.model.base_url,
        "api_key": API_KEY,
        "model": MODEL,
        "system": prompts.SYSTEM_PROMPT,
        "tools": registry.api_schemas(),
        "task": TASK,
        "max_tokens": 16000,
        "effort": "medium",
        "cache": cache,
    }
    await registry.aclose()
    path = tmp / f"spec-{int(cache)}.json"
    path.write_text(json.dumps(spec))
    return path


async def peer_run(p: product.Product, name: str, spec: Path, steps: int) -> tuple[list[float], list[dict[str, int]]]:
    stamps: list[float] = []
    first = len(p.model.requests)
    p.model.script(*[incident(steps, stamps) for _ in range(steps)])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.peers", name, str(spec), cwd=product.ROOT, stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"peer {name} failed: {err.decode()[-2000:]}")
    usages = [r.usage for r in p.model.requests[first:] if r.status == 200 and r.usage]
    assert len(stamps) == steps, (name, len(stamps))
    return stamps, usages


async def overhead_and_peers(p: product.Product, steps: int, repeats: int, report: Report) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        spec = await peer_spec(p, Path(tmp))
        spec_cached = await peer_spec(p, Path(tmp), cache=True)
        n_tools = len(json.loads(spec.read_text())["tools"])
        names = ["opsloop", "bare", "pydantic_ai", "tool_runner", "tool_runner+cache"]
        ms: dict[str, list[float]] = {n: [] for n in names}
        share: dict[str, list[float]] = {n: [] for n in names}
        e2e: list[float] = []
        for _ in range(repeats):  # interleaved, so drift on a busy machine hits every contender alike
            first = len(p.model.requests)
            stamps, wall = await p.incident(steps)
            ms["opsloop"].append(per_iteration_ms(stamps))
            share["opsloop"].append(read_share([r.usage for r in p.model.requests[first:] if r.usage]))
            e2e.append(wall)
            for name in names[1:]:
                peer = name.removesuffix("+cache")
                stamps, usages = await peer_run(p, peer, spec_cached if name.endswith("+cache") else spec, steps)
                ms[name].append(per_iteration_ms(stamps))
                share[name].append(read_share(usages))
    base = med(ms["bare"])
    ratio = {n: med(ms[n]) / base for n in names}
    labels = {
        "opsloop": "opsloop run (Slack status, SQLite, trace)",
        "bare": "bare SDK loop (messages.create)",
        "pydantic_ai": "pydantic-ai Agent",
        "tool_runner": "SDK beta tool runner (thread)",
        "tool_runner+cache": "SDK beta tool runner + cache_control",
    }
    rows = [
        [labels[n], f"{med(ms[n]):.2f}", f"{min(ms[n]):.2f}", f"{ratio[n]:.2f}x", f"{med(share[n]):.0%}"] for n in names
    ]
    report.row(
        "2. Loop overhead per iteration",
        f"opsloop {med(ms['opsloop']):.2f} ms vs bare {base:.2f} ms = {ratio['opsloop']:.2f}x",
        "<= 1.5x bare",
        ratio["opsloop"] <= 1.5,
        miss=f"{ratio['opsloop']:.2f}x, {ratio['opsloop'] / 1.5:.2f}x over target; see profile",
    )
    best_peer = min(ratio["pydantic_ai"], ratio["tool_runner"])
    report.row(
        "6. Peers: overhead",
        f"opsloop {ratio['opsloop']:.2f}x, pydantic-ai {ratio['pydantic_ai']:.2f}x, "
        f"tool runner {ratio['tool_runner']:.2f}x",
        "ahead of both",
        ratio["opsloop"] < best_peer,
        miss=f"{ratio['opsloop'] / best_peer:.2f}x the best peer",
    )
    report.row(
        "6. Peers: cache read share",
        f"opsloop {med(share['opsloop']):.0%}, pydantic-ai "
        f"{med(share['pydantic_ai']):.0%}, tool runner {med(share['tool_runner']):.0%}",
        ">= 90% and ahead of both",
        med(share["opsloop"]) >= 0.9
        and med(share["opsloop"]) > max(med(share["pydantic_ai"]), med(share["tool_runner"])),
        miss=f"{med(share['opsloop']):.0%}",
    )
    report.section(
        "2 and 6. Loop overhead per iteration, and peers",
        f"""
The same {steps}-request incident ({steps - 1} `df` calls, then the answer) with zero model latency
and an instant tool. Each contender is its own process talking to the same fake Messages API
(model `{MODEL}`, the fake's thinking blocks included), with the same system prompt and the same
{n_tools} tool schemas (opsloop's built-ins plus the bench tools). Time per iteration is
measured at the fake: the mean gap between consecutive requests of one run, i.e. receive the reply,
run the tool, persist, build and send the next request. Median over {repeats} interleaved repeats.
opsloop runs with its shipped defaults: status message in the thread (updates at most every 2 s),
SQLite persistence, JSON trace at info level to a file. opsloop alone sends the answer back once for
`update_summary` (the peers have no such ask) and the script gives the same answer again: that extra request
is left out of the gaps, so every contender is timed over the same {steps} requests and {steps - 1} tool calls;
the end-to-end time below includes it.

{table(["contender", "median ms/iteration", "best ms/iteration", "vs bare", "cache read share"], rows)}

opsloop end to end (mention sent -> answer posted, {steps} requests and the summary ask's one): median
{med(e2e) * 1000:.0f} ms.
Cache read share = cache-read tokens / all prompt tokens over the run. pydantic-ai and the tool
runner ship with caching off (`anthropic_cache*` settings, `cache_control`); the last row turns it
on for the tool runner, whose server-side thread uploads only the new turn.
""",
    )


# --------------------------------------------------------------------------- 3 concurrency


async def concurrency(threads: int, steps: int, latency: float, report: Report) -> None:
    async with running() as p:
        p.model.latency_seconds = latency
        _, single = await p.incident(steps)
        p.model.script(*[incident(steps) for _ in range(threads * product.requests(steps))])
        before = len(p._final_calls())
        began = time.monotonic()
        sent = await asyncio.gather(*(p.mention(f"host web-{i:03d} is out of disk") for i in range(threads)))
        answers = await p.wait_answers(before + threads)
        total = max(answers[ts] for ts, _ in sent) - began
    ratio = total / single
    report.row(
        f"3. Concurrency ({threads} threads)",
        f"{total:.2f} s / {single:.2f} s = {ratio:.2f}",
        "<= 1.5",
        ratio <= 1.5,
        miss=f"{ratio / 1.5:.2f}x over",
    )
    report.section(
        "3. Concurrency",
        f"""
{threads} mentions sent at once, each a thread with a {steps}-request run; the fake model takes
{latency * 1000:.0f} ms per request. One run alone: mention -> answer {single:.2f} s. All {threads}: first
mention sent -> last answer posted {total:.2f} s. Ratio {ratio:.2f} (target <= 1.5).
""",
    )


# --------------------------------------------------------------------------- 4 prompt cache


async def prompt_cache(p: product.Product, steps: int, report: Report) -> None:
    first = len(p.model.requests)
    await p.incident(steps)
    usages = [r.usage for r in p.model.requests[first:] if r.usage]
    shares = [read_share([u]) for u in usages]
    later = shares[1:]
    cost = sum(r.cost_usd or 0.0 for r in p.model.requests[first:])
    plain = uncached_cost(MODEL, usages)
    report.row(
        "4. Prompt cache (15 iterations)",
        f"read share from iteration 2: min {min(later):.0%}, "
        f"median {med(later):.0%}; cost {cost / plain:.0%} of uncached",
        ">= 80% from iteration 2",
        min(later) >= 0.8,
        miss=f"min {min(later):.0%}",
    )
    rows = [
        [i + 1, u["input_tokens"], u["cache_creation_input_tokens"], u["cache_read_input_tokens"], f"{s:.0%}"]
        for i, (u, s) in enumerate(zip(usages, shares, strict=True))
    ]
    report.section(
        "4. Prompt cache",
        f"""
A {steps}-request run through `opsloop run`, plus the summary ask's request after the answer (shipped cache
breakpoints: system prompt, the previous request's newest user turn, the newest message). The fake's
accounting: min 1,024 tokens per cached prefix, 20-block look-back. Cost at the fake's prices for `{MODEL}`:
${cost:.4f} with caching vs ${plain:.4f} for the same requests without (every prompt token at the
input price) = {cost / plain:.0%}.

{table(["request", "input", "cache write", "cache read", "read share"], rows)}
""",
    )


# --------------------------------------------------------------------------- 5 parallel tools


async def parallel_tools(p: product.Product, repeats: int, report: Report) -> None:
    calls = Limits().parallelism
    ratios = []
    for _ in range(repeats):
        stamps, _ = await p.incident(2, tool="slow_probe", calls=calls)
        ratios.append((stamps[1] - stamps[0]) / product_slow_seconds())
    r = med(ratios)
    report.row(
        "5. Parallel read-only tools",
        f"{calls} x 300 ms calls in one turn: {r:.2f}x the slowest call",
        "<= 1.2",
        r <= 1.2,
        miss=f"{r:.2f}",
    )
    report.section(
        "5. Parallel read-only tools",
        f"""
The model asks for {calls} `slow_probe` calls (read-only, parallel-safe, 300 ms each) in one turn
({calls} = the default `limits.parallelism`). Wall time from that reply's request to the next request
(tools plus one loop iteration), divided by 300 ms: median {r:.3f} over {repeats} runs
({", ".join(f"{x:.3f}" for x in ratios)}).
""",
    )


def product_slow_seconds() -> float:
    from bench.tools import SLOW_CALL_SECONDS

    return SLOW_CALL_SECONDS


# --------------------------------------------------------------------------- 7 growth and 8 thinking (in-process)


async def _runtime_run(fake: FakeAnthropic, cfg_kw: dict[str, Any], script: Any, steps: int) -> Any:
    """One run of the real runtime (bot.run.loop.run, SQLite store, real SDK client) against `fake`."""
    from bench import tools as bench_tools
    from tools import ToolRegistry

    registry = ToolRegistry([bench_tools.df, bench_tools.error_log_tail])
    with tempfile.TemporaryDirectory() as tmp:
        store = await Store(Path(tmp) / "bench.db").open()
        client = claude_client(API_KEY, fake.base_url)  # the product's client
        # the run's requests, the summary ask and one condensation request each time the prompt outgrows the budget
        # (a 40-step run condenses more than once): more than enough; `fake` is this run's alone
        fake.script(*[script for _ in range(steps + 10)])
        row = await store.create_run(
            channel="C",
            thread_ts="1",
            requester="U",
            task=TASK,
            model=MODEL,
            history=[{"role": "user", "content": [{"type": "text", "text": TASK}]}],
        )
        cfg = RunConfig(
            model=AnthropicModel(client, [MODEL]),
            store=store,
            tools=registry,
            price_for=lambda m: price_for(m)[0],
            **cfg_kw,
        )
        result = await run(cfg, row.id if hasattr(row, "id") else row["id"])  # a record or (older stores) a dict
        await client.close()
        await store.close()
    return result


async def growth(steps: int, budget: int, report: Report, out_png: Path) -> None:
    curves: dict[str, list[int]] = {}
    costs: dict[str, float] = {}
    for label, kw in (("without condensation", {}), ("with condensation", {"context_budget_tokens": budget})):
        calls = {"n": 0}

        def answer(body: dict[str, Any], calls: dict[str, int] = calls) -> Any:
            if not body.get("tools"):  # the condensation request: no tools, a summary wanted
                return reply(text("Summary: web-03 /var/data0 at 96%; nginx upstream timeouts since 03:12."))
            calls["n"] += 1
            if calls["n"] < steps:
                return reply(tool_use("error_log_tail", {"host": f"web-{calls['n']:02d}"}))
            return reply(text(product.ANSWER))  # again when asked for update_summary: the run's request steps + 1

        async with FakeAnthropic(api_key=API_KEY) as fake:
            result = await _runtime_run(fake, {"limits": Limits(max_iterations=steps + 5), **kw}, answer, steps)
            tools_requests = [r for r in fake.requests if r.status == 200 and r.body and r.body.get("tools")]
            curves[label] = [
                r.usage["input_tokens"] + r.usage["cache_read_input_tokens"] + r.usage["cache_creation_input_tokens"]
                for r in tools_requests[:steps]  # the summary ask's request after the answer is left out
            ]
            costs[label] = fake.cost_usd()
        assert result.iterations == steps + 1, result  # the answer, sent back once for the summary
    plain, condensed = curves["without condensation"], curves["with condensation"]
    _plot(curves, out_png, budget)
    rows = [
        [i + 1, plain[i], condensed[i] if i < len(condensed) else ""]
        for i in range(0, steps, 1)
        if i < 3 or (i + 1) % 5 == 0
    ]
    report.row(
        f"7. Growth ({steps} iterations)",
        f"last prompt {plain[-1]:,} tokens without / {condensed[-1]:,} "
        f"with condensation; run cost ${costs['without condensation']:.3f} / "
        f"${costs['with condensation']:.3f}",
        "table + PNG",
        None,
    )
    report.section(
        "7. Growth of the prompt",
        f"""
A {steps}-iteration run (the real runtime and SQLite store, the SDK client, the fake), each tool
result ~1,000 tokens of log lines (`error_log_tail`). Prompt tokens per request (input + cache read +
cache write) of its {steps} requests (the summary ask's one more after the answer left out), without condensation
and with `context_budget_tokens = {budget}` (opsloop condenses
at most once per run). Cost of the whole run at the fake's prices, cache included:
${costs["without condensation"]:.4f} without, ${costs["with condensation"]:.4f} with condensation.
Sum of prompt tokens over the run: {sum(plain):,} without, {sum(condensed):,} with.

![prompt tokens per request]({out_png.name})

{table(["request", "prompt tokens, no condensation", "prompt tokens, condensation"], rows)}
""",
    )


def _plot(curves: dict[str, list[int]], path: Path, budget: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for label, ys in curves.items():
        ax.plot(range(1, len(ys) + 1), ys, marker=".", label=label)
    ax.axhline(budget, color="grey", linestyle=":", linewidth=1, label=f"context_budget_tokens = {budget:,}")
    ax.set_xlabel("request (iteration)")
    ax.set_ylabel("prompt tokens per request")
    ax.set_title("opsloop: prompt growth over a 40-iteration run")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


async def thinking_cost(steps: int, report: Report) -> None:
    rows = []
    default_cost = 0.0
    for effort in ("low", "medium", "high", "xhigh", "max"):
        async with FakeAnthropic(api_key=API_KEY, thinking_by_effort=EFFORT_THINKING_TOKENS) as fake:
            result = await _runtime_run(fake, {"effort": effort}, incident(steps), steps)
            answered = [r for r in fake.requests if r.status == 200]
            out = sum(r.usage["output_tokens"] for r in answered) / len(answered)
            think = sum(r.usage["output_tokens_details"]["thinking_tokens"] for r in answered) / len(answered)
            cost = fake.cost_usd() / len(answered)
        assert abs(result.cost_usd - fake.cost_usd()) < 1e-9, (result.cost_usd, fake.cost_usd())
        if effort == "medium":
            default_cost = cost
        rows.append(
            [
                effort + (" (default)" if effort == "medium" else ""),
                f"{think:,.0f}",
                f"{out:,.0f}",
                f"${cost:.4f}",
                f"${cost * 20:.2f}",
            ]
        )
    report.row(
        "8. Thinking cost per step",
        f"medium (default): ${default_cost:.4f}/step; see table for each effort",
        "a number for the docs",
        None,
    )
    report.section(
        "8. Thinking on the current models",
        f"""
A {steps}-request incident (plus the summary ask's request, which the answer repeats) through the real runtime
on `{MODEL}` at each `output_config.effort`.
The fake's assumption for reasoning per reply (not measured from the real API):
{", ".join(f"{k} {v:,}" for k, v in EFFORT_THINKING_TOKENS.items())} thinking tokens. Thinking tokens are
output tokens ($10/MTok on Sonnet 5.5). Cost per step includes the prompt (cache reads and writes).
opsloop's cost matched the fake's bill to the cent at every level.

{table(["effort", "thinking tokens / step", "output tokens / step", "cost / step", "20-step incident"], rows)}
""",
    )


# --------------------------------------------------------------------------- profile


async def profile(steps: int, runs: int, report: Report, out: Path) -> None:
    from bench.profile import summarize

    with tempfile.TemporaryDirectory() as tmp:
        base, prof = Path(tmp) / "start.prof", Path(tmp) / "opsloop.prof"
        async with running(profile=base) as p:  # start-up and the warm-up alone: subtracted from the next
            await p.incident(steps)
        async with running(profile=prof) as p:
            await p.incident(steps)  # warm-up: imports, first connections
            began_req = len(p.model.requests)
            for _ in range(runs):
                await p.incident(steps)
            iterations = len(p.model.requests) - began_req
        text_ = summarize(prof, iterations, runs, baseline=base)
    out.write_text(text_)  # noqa: ASYNC240 (once, after the timed part)
    report.section("Profile of `opsloop run` (cProfile, main thread)", text_)


# --------------------------------------------------------------------------- main


def machine() -> str:
    try:
        import psutil

        mem = f"{psutil.virtual_memory().total / 2**30:.1f} GiB RAM"
    except Exception:
        mem = "RAM unknown"
    cpu = platform.processor() or platform.machine()
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
        cpu = model
    except (OSError, StopIteration):
        pass
    return (
        f"{cpu}, {os.cpu_count()} CPUs, {mem}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}; anthropic {anthropic.__version__}"
    )


HISTORY = "### History (kept by the bench)"


def with_history(sections: list[str], old: str) -> list[str]:
    """`sections` (each starting `## title`), each followed by the history its namesake in `old` (RESULTS.md as it
    was) kept under HISTORY: before/after tables written by hand, which a re-run must not drop."""
    history = {}
    for part in re.split(r"(?m)^(?=## )", old):
        title, _, rest = part.partition("\n")
        if HISTORY in rest:
            history[title.strip()] = rest[rest.index(HISTORY) :].rstrip("\n")
    out = []
    for section in sections:
        title = section.partition("\n")[0].strip()
        out.append(f"{section.rstrip(chr(10))}\n\n{history[title]}\n" if title in history else section)
    return out


def write(report: Report, path: Path, started: datetime.datetime, seconds: float, args: argparse.Namespace) -> str:
    summary = table(["benchmark", "result", "target", "verdict"], [list(r) for r in report.summary])
    report.sections[:] = with_history(report.sections, path.read_text() if path.exists() else "")
    text_ = f"""# opsloop benchmark results

Produced by `make bench` (`python -m bench{" --quick" if args.quick else ""}`) on {started:%Y-%m-%d %H:%M} UTC
in {seconds:.0f} s.

Machine: {machine()}

Everything ran on loopback against the local fake Slack and fake Messages API. Times are
medians over repeats; every ratio compares numbers from this same invocation. Numbers are
machine-dependent: compare the ratios.

{summary}

{chr(10).join(report.sections)}"""
    path.write_text(text_)
    return summary


async def main(args: argparse.Namespace) -> None:
    started = datetime.datetime.now(datetime.UTC)
    began = time.monotonic()
    report = Report()
    repeats = 2 if args.quick else args.repeats
    steps = 20
    async with running() as p:
        await p.incident(3)  # warm-up
        await ack_latency(p, 100, report)
        await overhead_and_peers(p, steps, repeats, report)
        await prompt_cache(p, 15, report)
        await parallel_tools(p, 3 if args.quick else 5, report)
    await concurrency(50 if args.quick else 200, 5, 0.2, report)
    await growth(40, 20_000, report, HERE / "growth.png")
    await thinking_cost(5, report)
    await postgres_bench(report, args)
    await ssh_bench(report, args)
    await replay_bench_(report, args)
    await alerts_bench(report, args)
    await surfaces_bench(report, args)
    await peers_bench(report, args)
    await acks_bench(report, args)
    await runbooks_bench_.bench(report, args)
    await changes_bench.bench(report, args)
    await summary_bench(report, args)
    await memory_bench_.bench(report, args)
    await profile(steps, 3 if args.quick else 8, report, HERE / "PROFILE.md")
    report.summary.sort(key=lambda r: ORDER.index(r[0][:2]))
    summary = write(report, HERE / "RESULTS.md", started, time.monotonic() - began, args)
    print(summary)
    print(f"\nwrote {HERE / 'RESULTS.md'} in {time.monotonic() - began:.0f} s")


ORDER = ["1.", "2.", "3.", "4.", "5.", "6.", "7.", "8.", "9.", "10", "11", "12", "13", "14", "15", "16"]
ORDER += ["Ru", "Ch", "su", "Me"]  # runbooks, changes, summary, memory
POSTGRES = ("9.", "10.")  # the summary rows and sections `--only postgres` refreshes
SSH = ("11.",)  # … and `--only ssh`
REPLAY = ("12.",)  # … and `--only replay`
ALERTS = ("13.",)  # … and `--only alerts`
SURFACES = ("14.",)  # … and `--only surfaces`


async def postgres_bench(report: Report, args: argparse.Namespace) -> None:
    """9 and 10: the Postgres store's cost per step, and 1 vs 3 replicas (bench/postgres.py)."""
    await postgres.run_all(
        report.row, report.section, repeats=2 if args.quick else args.repeats, bursts=2 if args.quick else args.bursts
    )


async def ssh_bench(report: Report, args: argparse.Namespace) -> None:
    """11: hosts over SSH, first call vs reused connection and 4 hosts in one turn (bench/ssh.py)."""
    await ssh.run_all(report.row, report.section, repeats=3 if args.quick else args.repeats)


async def replay_bench_(report: Report, args: argparse.Namespace) -> None:
    """12: the demo incident replayed on the scripted model against the original run (bench/replay.py)."""
    await replay_bench.run_all(report.row, report.section, rounds=3 if args.quick else replay_bench.ROUNDS)


async def alerts_bench(report: Report, args: argparse.Namespace) -> None:
    """13: Alertmanager's webhook, ack latency and POST to first model request under a 50-group burst."""
    await alerts.run_all(
        report.row, report.section, repeats=3 if args.quick else args.repeats, bursts=1 if args.quick else 3
    )


async def surfaces_bench(report: Report, args: argparse.Namespace) -> None:
    """14: streamed answers vs posting at the end, and Slack calls per run (bench/surfaces.py)."""
    await surfaces.run_all(report.row, report.section, repeats=1 if args.quick else 3)


PEERS = ("15.",)  # … and `--only peers`


async def peers_bench(report: Report, args: argparse.Namespace) -> None:
    """15: every contender warm in this one process, interleaved, on both workloads (bench/warm.py)."""
    # 11 repeats moved the medians 0.3x from one run to the next, 21 still 0.3x on a noisy day; 61 about 0.1x
    steps, repeats = 20, 3 if args.quick else max(61, args.repeats)
    result = await warm.measure(steps, repeats)
    body, ratios = warm.tables(result, steps, repeats)
    worst_in = max(ratios[w]["opsloop"] for w in warm.WORKLOADS)
    worst_run = max(ratios[w]["opsloop_run"] for w in warm.WORKLOADS)
    report.row(
        "15. Warm peers: opsloop in-process",
        ", ".join(f"{w} {ratios[w]['opsloop']:.2f}x" for w in warm.WORKLOADS),
        "<= 1.4x bare on both",
        worst_in <= 1.4,
        miss=f"{worst_in:.2f}x",
    )
    report.row(
        "15. Warm peers: `opsloop run`",
        ", ".join(f"{w} {ratios[w]['opsloop_run']:.2f}x" for w in warm.WORKLOADS),
        "<= 1.6x bare on both",
        worst_run <= 1.6,
        miss=f"{worst_run:.2f}x",
    )
    report.section("15. Warm peers in one process (peers)", (warm.__doc__ or "").strip() + "\n\n" + body)


ACKS = ("16.",)  # … and `--only acks`


ACK_RUNS = 7  # fresh `opsloop run` processes: each gives one cold burst and one warm one


async def acks_bench(report: Report, args: argparse.Namespace) -> None:
    """16: in each of ACK_RUNS fresh `opsloop run` processes, a 100-mention burst right after start-up (cold), then
    another once it has answered them (warm); the targets are on the median burst's p99."""
    runs = 3 if args.quick else ACK_RUNS
    bursts: dict[str, list[tuple[list[float], list[float]]]] = {"cold start": [], "warm": []}
    for _ in range(runs):
        async with running() as p:
            bursts["cold start"].append(await ack_burst(p, 100))  # the first envelopes of a fresh process
            bursts["warm"].append(await ack_burst(p, 100))
    for label, target in (("cold start", 100), ("warm", 50)):
        p99s = [pct(acks, 99) for acks, _ in bursts[label]]
        a99 = med(p99s)
        report.row(
            f"16. Ack latency, {label}",
            f"ack p99 {a99:.1f} ms (median of {runs} bursts; worst {max(p99s):.1f})",
            f"ack p99 < {target} ms",
            a99 < target,
            miss=f"{a99:.1f} ms",
        )
        rows = [
            [i + 1, f"{pct(acks, 50):.1f}", f"{pct(acks, 99):.1f}", f"{pct(eyes, 50):.0f}", f"{pct(eyes, 99):.0f}"]
            for i, (acks, eyes) in enumerate(bursts[label])
        ]
        rows.append(
            [
                "**median**",
                f"{med(pct(a, 50) for a, _ in bursts[label]):.1f}",
                f"**{a99:.1f}**",
                f"{med(pct(e, 50) for _, e in bursts[label]):.0f}",
                f"{med(pct(e, 99) for _, e in bursts[label]):.0f}",
            ]
        )
        which = "its first burst, right after start-up" if label == "cold start" else "its second, once warm"
        report.section(
            f"16. Ack latency, {label} (acks)",
            f"""
{runs} fresh `opsloop run` processes; from each, {which}: 100 `app_mention` envelopes sent at once over Socket
Mode, times from the moment the fake Slack sent each envelope to its ack frame, and to its `reactions.add` call
(`:eyes:`, made once the run is stored, after the burst's acks). Every mention starts a run that answers at once.
Target: ack p99 < {target} ms on the median burst.

{table(["process", "ack p50 ms", "ack p99 ms", ":eyes: p50 ms", ":eyes: p99 ms"], rows)}
""",
        )


async def profile_bench(report: Report, args: argparse.Namespace) -> None:
    """The cProfile of `opsloop run` (bench/PROFILE.md and the last section of RESULTS.md)."""
    await profile(20, 3 if args.quick else 8, report, HERE / "PROFILE.md")


SUMMARY = ("summary",)  # … and `--only summary`


async def summary_bench(report: Report, args: argparse.Namespace) -> None:
    """summary: one update_summary call (store plus render), the status message's size at the limits."""
    await summary_bench_.run_all(report.row, report.section, calls=50 if args.quick else summary_bench_.CALLS)


# `--only NAME`: (what it runs, the summary rows and sections it refreshes, how its note starts)
ONLY = {
    "postgres": (postgres_bench, POSTGRES, "Sections 9 and 10 "),
    "ssh": (ssh_bench, SSH, "Section 11 "),
    "replay": (replay_bench_, REPLAY, "Section 12 "),
    "alerts": (alerts_bench, ALERTS, "Section 13 "),
    "surfaces": (surfaces_bench, SURFACES, "Section 14 "),
    "peers": (peers_bench, PEERS, "Section 15 "),
    "acks": (acks_bench, ACKS, "Section 16 "),
    "profile": (profile_bench, ("Profile",), "The profile "),
    "runbooks": (runbooks_bench_.bench, ("Runbooks",), "The runbooks section "),
    "changes": (changes_bench.bench, ("Changes",), "The changes section "),
    "summary": (summary_bench, SUMMARY, "Section summary "),
    "memory": (memory_bench_.bench, ("Memory",), "The memory section "),
}


async def only(args: argparse.Namespace) -> None:
    """`--only postgres|ssh|alerts`: those sections alone, spliced into the existing RESULTS.md (the rest stays)."""
    bench, prefixes, note_start = ONLY[args.only]
    started = datetime.datetime.now(datetime.UTC)
    began = time.monotonic()
    report = Report()
    await bench(report, args)
    path = HERE / "RESULTS.md"
    seconds = time.monotonic() - began
    if not path.exists():
        write(report, path, started, seconds, args)
    else:
        note = (
            f"{note_start}refreshed by `python -m bench --only {args.only}{' --quick' if args.quick else ''}` "
            f"on {started:%Y-%m-%d %H:%M} UTC in {seconds:.0f} s (machine: {machine()})."
        )
        path.write_text(splice(path.read_text(), report, note, prefixes, note_start))
    print(table(["benchmark", "result", "target", "verdict"], [list(r) for r in report.summary]))
    print(f"\nupdated {path} in {seconds:.0f} s")


def splice(
    text_: str, report: Report, note: str, prefixes: tuple[str, ...] = POSTGRES, note_start: str = "Sections 9 and 10 "
) -> str:
    """RESULTS.md with the summary rows and sections starting with `prefixes` replaced by `report`'s (inserted
    before the profile)."""
    head, *sections = re.split(r"(?m)^## ", text_)
    lines = [
        ln
        for ln in head.rstrip("\n").splitlines()
        if not ln.startswith(tuple(f"| {n}" for n in prefixes)) and not ln.startswith(note_start)
    ]
    last_row = max((i for i, ln in enumerate(lines) if ln.startswith("|")), default=len(lines) - 1)
    rows = ["| " + " | ".join(r) + " |" for r in report.summary]
    lines[last_row + 1 : last_row + 1] = rows
    produced = next((i for i, ln in enumerate(lines) if ln.startswith("Produced by")), 0)
    blank = next((i for i in range(produced, len(lines)) if not lines[i].strip()), len(lines))
    lines[blank:blank] = ["", note]
    lines = [ln for i, ln in enumerate(lines) if ln.strip() or (i and lines[i - 1].strip())]  # one blank at most
    kept = [s.rstrip("\n") for s in sections if not s.startswith(prefixes)]
    fresh = [s.removeprefix("## ").rstrip("\n") for s in with_history(report.sections, text_)]
    # Where the refreshed sections were (the first of them), else before the profile.
    was = next((i for i, s in enumerate(sections) if s.startswith(prefixes)), None)
    at = (
        sum(1 for s in sections[:was] if not s.startswith(prefixes))
        if was is not None
        else next((i for i, s in enumerate(kept) if s.startswith("Profile")), len(kept))
    )
    kept[at:at] = fresh
    return "\n".join(lines) + "\n\n" + "\n\n".join(f"## {s}" for s in kept) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11, help="repeats of the timed runs (default 11)")
    parser.add_argument(
        "--bursts", type=int, default=7, help="bursts of 30 incidents per fleet in the replicas benchmark (default 7)"
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats and 50 threads: a smoke run")
    parser.add_argument(
        "--only",
        choices=[*sorted(ONLY), "k8s"],
        help="postgres: only the Postgres benchmarks (9 and 10); ssh: only the SSH one (11); replay: "
        "only the replay benchmark (12); alerts: alerts (13); surfaces: streamed answers (14); "
        "peers: warm peers in one process (15); acks: cold and warm ack bursts (16); "
        "runbooks: 1,000 runbooks matched and cold-loaded (Runbooks); changes: recent_changes over every "
        "source vs its slowest, and acks while POST /changes is flooded (Changes); summary: one "
        "update_summary call and the status message at the limits; memory: incident search at 10,000 and "
        "100,000 on both backends (bench/memory.py); spliced "
        "into the existing RESULTS.md; k8s: only the Kubernetes reads benchmark (bench/k8s.py), "
        "printed",
    )
    parsed = parser.parse_args()
    if parsed.only == "k8s":
        from bench import k8s

        print(asyncio.run(k8s.run(3 if parsed.quick else 15)))
    else:
        asyncio.run(only(parsed) if parsed.only else main(parsed))
