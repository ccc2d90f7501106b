"""Issue 33's bench: the cost of one `update_summary` call, and the status message's size at the limits.

    python -m bench.summary           # prints the table
    python -m bench --only summary    # the same, spliced into bench/RESULTS.md (section `summary`)

One call is what the runtime does with it (bot/run/living.py `update`: read the run's tool results, validate, store the
accepted update through the real async SQLite `Store`, the writer-thread hop included) plus what the Slack side
does next (handlers/blocks.py `status_message(summary=…)`: render the status line, the three summary sections and
15 task cards). Each is timed on its own too, over a run with 40 stored tool results. The size is the status
message at the limits: 5 hypotheses and 5 steps at their longest, a 300-character situation, 15 tasks, for plain
text and for fills that escaping or revealing makes longer (`&` → `&amp;`, U+202E → `⟨U+202E⟩`), checked with the
stand-in's Block Kit validation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.core.types import ToolCall
from bot.playground.standin.blockkit import block_errors
from bot.run import living
from bot.run.summary import (
    HYPOTHESES_MAX,
    SITUATION_MAX,
    STATEMENT_MAX,
    STEP_MAX,
    STEPS_MAX,
    CallOutcome,
    CallStatus,
    Summary,
    handle,
    validate,
)
from bot.store import Store
from handlers.blocks import MAX_BLOCKS, SECTION_TEXT_MAX, Task, status_message

CALLS = 200
RESULTS = 40
TASKS = 15
FILLS = {
    "plain": "the pool size dropped to 10 after the 14:08 deploy ",
    "escaped (&)": "&",
    "revealed (U+202E)": "\u202e",
}
Row = Callable[..., None]
Section = Callable[[str, str], None]


def update_input(fill: str, evidence: list[dict[str, str]]) -> dict[str, Any]:
    def text(n: int) -> str:
        return (fill * n)[:n]

    return {
        "situation": text(SITUATION_MAX),
        "next_steps": [text(STEP_MAX)] * STEPS_MAX,
        "hypotheses": [
            {
                "id": f"h{i}",
                "statement": text(STATEMENT_MAX),
                "status": "confirmed",
                "confidence": "high",
                "evidence": evidence[:3],
            }
            for i in range(HYPOTHESES_MAX)
        ],
    }


def tasks() -> list[Task]:
    return [
        Task(
            task_id=f"toolu_{i:02d}",
            title=f"check_disk host=web-{i:02d} " + "x" * 200,
            status="complete",
            output="y" * 500,
        )
        for i in range(TASKS)
    ]


def render(summary: Summary, cards: list[Task]) -> list[dict[str, Any]]:
    return status_message(
        state="running",
        step=12,
        activity="running check_disk",
        tokens=12_345,
        cost_usd=0.12,
        run_id="run_0123456789abcdef",
        max_iterations=20,
        tasks=cards,
        summary=summary,
    ).blocks


async def timings(calls: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"store": [], "render": [], "call": []}
    cards = tasks()
    with tempfile.TemporaryDirectory(prefix="opsloop-bench-summary-") as tmp:
        store = await Store(str(Path(tmp) / "bench.db")).open()
        try:
            run = await store.create_run(
                channel="C0BENCH", thread_ts="1.1", requester="U0ALICE", task="bench", model="claude-sonnet-5-5"
            )
            evidence = []
            for i in range(RESULTS):  # stored as the run stores a result: its handle line first
                await store.save_tool_result(
                    run.id,
                    tool_use_id=f"toolu_r{i:03d}",
                    tool="check_disk",
                    args={"host": "web-03"},
                    content=f"{handle(i + 1, 'check_disk', 'web-03')}\n/var 50G 49.8G 0.2G 100%",
                    is_error=False,
                    confirmed_by=None,
                )
                evidence.append({"handle": f"#{i + 1}", "quote": "49.8G 0.2G 100%"})
            raw = update_input(FILLS["plain"], evidence)
            for i in range(calls):
                call = ToolCall(id=f"toolu_s{i:04d}", name=living.TOOL_NAME, args=raw)
                t0 = time.perf_counter()
                summary, _ = await living.update(store, run.id, call, step=i + 1, turn=[call])
                t1 = time.perf_counter()
                assert summary is not None
                render(summary, cards)
                t2 = time.perf_counter()
                out["store"].append((t1 - t0) * 1000)
                out["render"].append((t2 - t1) * 1000)
                out["call"].append((t2 - t0) * 1000)
        finally:
            await store.close()
    return out


def sizes() -> list[list[Any]]:
    rows = []
    body = "/var 50G 49.8G 0.2G 100%"
    calls = {
        f"toolu_{i}": CallOutcome("check_disk", CallStatus.SUCCEEDED, f"{handle(i + 1, 'check_disk')}\n{body}")
        for i in range(3)
    }
    evidence = [{"handle": f"#{i + 1}", "quote": body} for i in range(3)]
    for name, fill in FILLS.items():
        checked = validate(update_input(fill, evidence), calls=calls)
        assert isinstance(checked, Summary)
        blocks = render(checked, tasks())
        assert block_errors(blocks) == [], block_errors(blocks)
        longest = max(len(b["text"]["text"]) for b in blocks if b["type"] == "section")
        summary_bytes = len(json.dumps(blocks[1:4], ensure_ascii=False).encode())
        total = len(json.dumps(blocks, ensure_ascii=False).encode())
        rows.append([name, len(blocks), f"{longest:,} / {SECTION_TEXT_MAX:,}", f"{summary_bytes:,}", f"{total:,}"])
    return rows


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


async def run_all(row: Row, section: Section, *, calls: int = CALLS) -> None:
    t = await timings(calls)
    size_rows = sizes()
    med = {k: statistics.median(v) for k, v in t.items()}
    worst = max(int(r[4].replace(",", "")) for r in size_rows)
    blocks = max(int(r[1]) for r in size_rows)
    row(
        "summary: one update_summary call",
        f"p50 {med['call']:.2f} ms (update {med['store']:.2f}: read, validate, "
        f"store; render {med['render']:.2f}), p99 {pct(t['call'], 99):.2f} ms; status message at the limits "
        f"{blocks} blocks, {worst:,} bytes at most",
        "valid Block Kit at the limits; ≤ 50 blocks",
        blocks <= MAX_BLOCKS,
    )
    lines = ["| part | p50 ms | p99 ms |", "|---|---|---|"]
    names = {
        "store": "living.update (read results, validate, store)",
        "render": "status_message (render)",
        "call": "one call, both",
    }
    lines += [f"| {names[k]} | {med[k]:.3f} | {pct(v, 99):.3f} |" for k, v in t.items()]
    sizes_table = [
        "| fill | blocks | longest section (chars) | summary sections (bytes) | whole message (bytes) |",
        "|---|---|---|---|---|",
    ] + ["| " + " | ".join(str(c) for c in r) + " |" for r in size_rows]
    section(
        "summary: the living summary (summary)",
        "\n".join(
            [
                (__doc__ or "").split("\n\n", 2)[2].strip(),
                "",
                f"{calls} accepted calls on one run with {RESULTS} stored tool results (SQLite, this machine):",
                "",
                *lines,
                "",
                f"The status message at the limits ({HYPOTHESES_MAX} hypotheses, {STEPS_MAX} steps, {TASKS} tasks; "
                f"Slack: ≤ {MAX_BLOCKS} blocks, ≤ {SECTION_TEXT_MAX:,} characters a section; every one passed the "
                "stand-in's `block_errors`):",
                "",
                *sizes_table,
            ]
        ),
    )


async def main(args: argparse.Namespace) -> None:
    rows: list[tuple[Any, ...]] = []
    sections: list[tuple[str, str]] = []
    await run_all(lambda *a, **k: rows.append(a), lambda t, b: sections.append((t, b)), calls=args.calls)
    for r in rows:
        print(" · ".join(str(c) for c in r[:2]))
    for title, body in sections:
        print(f"\n## {title}\n\n{body}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.summary", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=CALLS)
    asyncio.run(main(parser.parse_args()))
