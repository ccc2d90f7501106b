"""Issue 32's bench: incident-memory search at 10,000 and 100,000 stored incidents, p50 and p99.

    python -m bench.memory            # SQLite, and Postgres when tests/pgserver.py finds one
    python -m bench.memory --sqlite   # SQLite only

The corpus is synthetic and seeded: titles, targets and answers drawn from an SRE vocabulary (hosts, services,
symptoms, fixes) plus filler words, 30% of records in private channels. Each query is a task's whole text, the
run-start offer's one search (`search_incidents(task, channel=…, limit=3)`), timed through the real async
`Store` (the writer-thread hop included), and the same search with a host filter. Target: the offer under 20 ms
at 100,000 incidents on SQLite. The Postgres server is a throwaway one (Unix socket, fsync off).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bot.incident_rows import write_record
from bot.incidents import IncidentChange, IncidentFeedback, Targets, build_record
from bot.store import Ledger, Store

SIZES = (10_000, 100_000)
QUERIES = 300
SYMPTOMS = [
    "disk full on /var",
    "p99 latency over 2 s",
    "OOMKilled pods",
    "5xx spike",
    "certificate expired",
    "connection pool exhausted",
    "replication lag",
    "queue backlog",
    "dns timeouts",
    "cpu throttling",
    "inode exhaustion",
    "nginx 502",
    "kafka consumer lag",
    "redis evictions",
    "tls handshake errors",
]
SERVICES = ["checkout-api", "payments", "search", "nginx", "postgres", "redis", "kafka", "auth", "cart", "ledger"]
FIXES = [
    "cleaned rotated logs",
    "rolled back to the previous revision",
    "raised the pool size",
    "restarted the unit",
    "scaled the deployment to 6",
    "renewed the certificate",
    "drained the node",
    "flushed the cache",
]
FILLER = [f"w{i}" for i in range(3000)]  # a long tail of rare words, as real answers have
TASKS = [
    "web-03 is paging: disk full on /var again, please fix",
    "checkout-api p99 latency is over 2 s since the deploy, what changed?",
    "payments pods OOMKilled in prod-eu, is it the new release?",
    "Alert KafkaConsumerLag firing for ledger on kafka-2",
    "nginx 502s on edge-7 and edge-8 after the certificate rotation",
]


def corpus(rng: random.Random, n: int) -> list[tuple[dict[str, object], str, Targets, str, tuple[IncidentChange, ...]]]:
    out = []
    for i in range(n):
        host = f"{rng.choice(['web', 'db', 'edge', 'kafka', 'worker'])}-{rng.randint(1, 200):02d}"
        service, symptom = rng.choice(SERVICES), rng.choice(SYMPTOMS)
        task = f"{host} {symptom} ({service}) {' '.join(rng.choices(FILLER, k=4))}"
        answer = f"{rng.choice(FIXES)} on {host}; {service} recovered. " + " ".join(
            rng.choices(FILLER + SYMPTOMS, k=60)
        )
        private = rng.random() < 0.3
        run = {
            "id": f"run_{i:07d}",
            "channel": f"C{'P' if private else ''}{rng.randint(1, 50):03d}",
            "thread_ts": f"{i}.1",
            "task": task,
            "status": "finished",
            "stop_reason": "completed",
            "created_at": 1.7e9 + i * 60,
            "updated_at": 1.7e9 + i * 60 + 600,
        }
        changes = (IncidentChange(tool="clean_logs", args=f"host={host}", confirmed_by="U0CAROL", approver="carol"),)
        out.append(
            (run, "private" if private else "public", Targets(hosts=(host,), services=(service,)), answer, changes)
        )
    return out


def fill(location: str, n: int) -> float:
    """Store n incidents (one transaction per 5,000); the seconds it took."""
    rng = random.Random(32)
    ledger = Ledger(location)
    began = time.perf_counter()
    try:
        rows = corpus(rng, n)
        for start in range(0, n, 5000):
            with ledger.sql.atomic():
                for run, kind, targets, answer, changes in rows[start : start + 5000]:
                    write_record(
                        ledger.sql.execute,
                        build_record(
                            run,
                            kind=kind,
                            answer=answer,
                            changes=changes,
                            targets=targets,
                            feedback=IncidentFeedback.NOT_HELPFUL if rng.random() < 0.05 else IncidentFeedback.NONE,
                            ended_at=float(run["updated_at"]),
                        ),
                    )  # type: ignore[arg-type]
    finally:
        ledger.close()
    return time.perf_counter() - began


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


async def timed(location: str, *, host: str | None = None) -> tuple[float, float, float]:
    """p50, p99 (ms) of the run-start search through the async Store, and the mean matches returned."""
    store = await Store(location).open()
    times, found = [], []
    try:
        for i in range(QUERIES):
            began = time.perf_counter()
            matches = await store.search_incidents(TASKS[i % len(TASKS)], channel=f"C{i % 50:03d}", limit=3, host=host)
            times.append((time.perf_counter() - began) * 1000)
            found.append(len(matches))
    finally:
        await store.close()
    return statistics.median(times), pct(times, 99), statistics.mean(found)


async def bench(label: str, location_for: dict[int, str]) -> None:
    for n, location in location_for.items():
        seconds = fill(location, n)
        offer = await timed(location)
        filtered = await timed(location, host="web-03")
        print(
            f"{label:8} {n:>7,} incidents (stored in {seconds:5.1f} s)  offer p50 {offer[0]:6.1f} ms  "
            f"p99 {offer[1]:6.1f} ms  |  host filter p50 {filtered[0]:6.1f} ms  p99 {filtered[1]:6.1f} ms"
        )
        sys.stdout.flush()


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.memory")
    parser.add_argument("--sqlite", action="store_true", help="SQLite only")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        await bench("SQLite", {n: str(Path(tmp) / f"memory-{n}.db") for n in SIZES})
    if args.sqlite:
        return
    from tests.pgserver import PgServer, find_bindir, new_database

    if find_bindir() is None:
        print("Postgres: not installed (make postgres), skipped")
        return
    with PgServer() as server:
        await bench("Postgres", {n: new_database(server.url) for n in SIZES})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
