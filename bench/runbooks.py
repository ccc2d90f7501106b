"""Runbooks at scale: a cold load of 1,000 runbooks, a `current()` with nothing changed, and matching.

`python -m bench.runbooks [N]` writes N runbooks to a temp dir and prints the timings (median of several
rounds). Not yet one of `python -m bench`'s benchmarks: it is registered there when runbooks are wired in.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tools.runbooks.library import RunbookLibrary
from tools.runbooks.match import best, find

BODY = "".join(f"{i}. `check_disk` on the host, then look at /var/log/app-{i}; note what is full.\n"
               for i in range(1, 9))


def write_runbooks(root: Path, n: int) -> None:
    for i in range(n):
        (root / f"rb-{i:04d}.md").write_text(
            "---\n"
            f"title: Runbook {i} for service svc-{i}\n"
            "match:\n"
            f"  alertname: [Alert{i}, Other{i}]\n"
            f"  labels: {{team: team-{i % 40}, service: svc-{i}}}\n"
            f"  keywords: [\"symptom {i} seen\", \"svc-{i} down\", \"error code E{i}\"]\n"
            f"---\n{BODY}")


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
        text = (f"DiskFull on web-03: /var at 97%, nginx says no space left on device; svc-{k} down since 14:10. "
                * 3)
        labels = {"team": f"team-{k % 40}", "service": f"svc-{k}", "severity": "page", "instance": "web-03:9100"}
        at_start = timed(lambda: best(books, text=text, alertname=f"Alert{k}", labels=labels), 50)
        no_match = timed(lambda: find(books, query="something else entirely", alertname="Nope", labels={}), 50)
        found = best(books, text=text, alertname=f"Alert{k}", labels=labels)
        assert found is not None and found.runbook.name == f"rb-{k:04d}", found
    return {"runbooks": n, "cold_load_ms": cold, "current_unchanged_ms": unchanged,
            "best_match_ms": at_start, "find_no_match_ms": no_match}


if __name__ == "__main__":
    for key, value in main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000).items():
        print(f"{key}: {value:.2f}" if isinstance(value, float) else f"{key}: {value}")
