"""Runbooks at scale: a cold load of 1,000 runbooks, a `current()` with nothing changed, and matching.

`python -m bench.runbooks [N]` writes N runbooks to a temp dir and prints the timings (median of several
rounds); `python -m bench --only runbooks` (and the full `python -m bench`) writes them into RESULTS.md as the
section `Runbooks`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.runbooks.library import RunbookLibrary
from tools.runbooks.match import best, find

BODY = "".join(
    f"{i}. `check_disk` on the host, then look at /var/log/app-{i}; note what is full.\n" for i in range(1, 9)
)


def write_runbooks(root: Path, n: int) -> None:
    for i in range(n):
        (root / f"rb-{i:04d}.md").write_text(
            "---\n"
            f"title: Runbook {i} for service svc-{i}\n"
            "match:\n"
            f"  alertname: [Alert{i}, Other{i}]\n"
            f"  labels: {{team: team-{i % 40}, service: svc-{i}}}\n"
            f'  keywords: ["symptom {i} seen", "svc-{i} down", "error code E{i}"]\n'
            f"---\n{BODY}"
        )


def timed(fn: Callable[[], object], rounds: int) -> float:
    """Median wall time of `fn` in milliseconds."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main(n: int = 1000) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        write_runbooks(root, n)
        cold = timed(lambda: RunbookLibrary([root]).current(), 5)
        library = RunbookLibrary([root])
        books = library.current()
        assert len(books.runbooks) == n and not books.problems
        unchanged = timed(library.current, 20)
        k = n * 977 // 1000  # the one that matches, near the end of the list
        text = f"DiskFull on web-03: /var at 97%, nginx says no space left on device; svc-{k} down since 14:10. " * 3
        labels = {"team": f"team-{k % 40}", "service": f"svc-{k}", "severity": "page", "instance": "web-03:9100"}
        at_start = timed(lambda: best(books, text=text, alertname=f"Alert{k}", labels=labels), 50)
        no_match = timed(lambda: find(books, query="something else entirely", alertname="Nope", labels={}), 50)
        found = best(books, text=text, alertname=f"Alert{k}", labels=labels)
        assert found is not None and found.runbook.name == f"rb-{k:04d}", found
    return {
        "runbooks": n,
        "cold_load_ms": cold,
        "current_unchanged_ms": unchanged,
        "best_match_ms": at_start,
        "find_no_match_ms": no_match,
    }


def run_all(row: Callable[..., None], section: Callable[[str, str], None], n: int = 1000) -> None:
    """The `Runbooks` summary row and section of RESULTS.md (no target in the issue: numbers for the docs)."""
    r: dict[str, Any] = main(n)
    row(
        "Runbooks (1,000 files)",
        f"cold load {r['cold_load_ms']:.0f} ms; best match at run start "
        f"{r['best_match_ms']:.2f} ms; re-check unchanged {r['current_unchanged_ms']:.1f} ms",
        "numbers for the docs",
        None,
    )
    section(
        "Runbooks (runbooks)",
        f"""
{r["runbooks"]:,} runbooks in one directory (Markdown with YAML front matter: 2 alert names, 2 labels, 3
keywords and 8 steps each), loaded by `tools.runbooks.library.RunbookLibrary`. The cold load reads and parses
every file (a fresh process's first offer or `opsloop check`); a later `current()` with nothing changed only
lists the directory and stats each file. The best match is the run-start offer's work for an alert whose
runbook is near the end of the list (name, labels and a keyword in a 300-character task); `find_runbooks`
with a query that matches nothing scans them all. Medians: 5 cold loads, 20 unchanged re-checks, 50 matches.

| runbooks | cold load ms | current(), unchanged ms | best match ms | find, no match ms |
|---|---|---|---|---|
| {r["runbooks"]:,} | {r["cold_load_ms"]:.1f} | {r["current_unchanged_ms"]:.2f} | {r["best_match_ms"]:.2f} | \
{r["find_no_match_ms"]:.2f} |
""",
    )


async def bench(report: Any, args: argparse.Namespace) -> None:
    """`python -m bench`'s Runbooks section (`--only runbooks`), off the event loop."""
    await asyncio.to_thread(run_all, report.row, report.section)


if __name__ == "__main__":
    for key, value in main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000).items():
        print(f"{key}: {value:.2f}" if isinstance(value, float) else f"{key}: {value}")
