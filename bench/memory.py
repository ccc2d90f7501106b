"""Issue 32's bench: incident-memory search at 10,000 and 100,000 stored incidents, p50 and p99, both backends.

    python -m bench --only memory     # this section, spliced into bench/RESULTS.md
    python -m bench.memory [--sqlite] # printed; SQLite only with --sqlite

The corpus is synthetic and seeded: titles, targets and answers drawn from an SRE vocabulary (5 host prefixes,
10 services, 15 symptoms, 8 fixes: words in 5-20% of the records, like a real team's service names) plus
filler words, 30% of records in private channels. Timed through the real async `Store` (the writer-thread hop
included):
- offer: the run-start offer itself (`offer_for`: its one search, limit 10, and the similarity check), for
  five tasks in 50 channels; that is the whole delay it adds before a run's first model request. Target: under
  20 ms p50 at 100,000 incidents on SQLite.
- host filter: `search_incidents(task, host="web-03")`, the tool's filtered search.
- best 3 = plain: of 50 offers, how many got the same best three as the plain search that ranks every match.
  From 20,000 records on, the search considers the records holding the query's rare words first
  (tools.memory.incidents.search_plans), which is what makes it fast; this column says what that costs.
The Postgres server is a throwaway one (Unix socket, fsync off).
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
from typing import Any

from bot.store import Ledger, Store
from bot.store.backends import is_postgres
from tools.api import RunScope
from tools.memory.incidents import IncidentChange, IncidentFeedback, IncidentRow, Targets, build_record
from tools.memory.offer import CANDIDATES, offer_for
from tools.memory.store import TABLES, count_all, search_incidents, write_record

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
    out: list[tuple[dict[str, object], str, Targets, str, tuple[IncidentChange, ...]]] = []
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


def records(n: int) -> list[IncidentRow]:
    rng = random.Random(32)
    return [
        build_record(
            run,
            kind=kind,
            answer=answer,
            changes=changes,
            targets=targets,
            feedback=IncidentFeedback.NOT_HELPFUL if rng.random() < 0.05 else IncidentFeedback.NONE,
            ended_at=float(str(run["updated_at"])),
        )
        for run, kind, targets, answer, changes in corpus(rng, n)
    ]


def fill(location: str, n: int) -> float:
    """Store n incidents; the seconds it took. SQLite: through the run end's own write (write_record, one
    transaction per 5,000). Postgres: that write costs ~27 ms a record here (100,000 would take 45 minutes), so
    the same rows go in by psycopg's pipelined executemany and the word counts are counted once after, as m018
    does: what is searched is the same."""
    rows = records(n)
    began = time.perf_counter()
    if is_postgres(location):
        import psycopg

        Ledger(location, [TABLES]).close()  # migrated
        columns = list(rows[0].fields)
        insert = f"INSERT INTO incidents ({', '.join(columns)}) VALUES ({', '.join('%s' for _ in columns)})"
        with psycopg.connect(location) as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(insert, [[r.fields[c] for c in columns] for r in rows])
            cur.executemany(
                "INSERT INTO incident_facets (run_id, facet, value) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                [(r.fields["run_id"], facet, value) for r in rows for facet, value in r.facets],
            )

            def select(sql: str, params: list[Any]) -> list[dict[str, Any]]:
                found = conn.execute(sql.replace("?", "%s"), params)
                names = [c.name for c in found.description or []]
                return [dict(zip(names, r, strict=True)) for r in found.fetchall()]

            count_all(select, lambda sql, params: int(conn.execute(sql.replace("?", "%s"), params).rowcount))
        return time.perf_counter() - began
    ledger = Ledger(location, [TABLES])
    try:
        for start in range(0, n, 5000):
            with ledger.sql.atomic():
                for row in rows[start : start + 5000]:
                    write_record(ledger.sql.select, ledger.sql.execute, row)
    finally:
        ledger.close()
    return time.perf_counter() - began


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


async def timed(location: str, *, host: str | None = None) -> tuple[float, float, float]:
    """p50, p99 (ms) through the async Store (the writer-thread hop included), and the mean matches: with no
    host, the run-start offer itself (tools.memory.offer.offer_for: its one search and the similarity check);
    with one, the search_incidents tool's filtered search."""
    store = await Store(location, tables=[TABLES]).open()
    times, found = [], []
    try:
        for i in range(QUERIES):
            task, channel = TASKS[i % len(TASKS)], f"C{i % 50:03d}"
            began = time.perf_counter()
            if host is None:
                scope = RunScope(run_id="run_new", conversation=channel, started_at=0, anchor=0, task=task)
                offer = await offer_for({Store: store}, scope)
                n = int(offer.prompt.split(": ", 1)[1].split(" ", 1)[0]) if offer is not None else 0  # "…: 3 earlier"
            else:
                n = len(await search_incidents(store, task, channel=channel, limit=5, host=host))
            times.append((time.perf_counter() - began) * 1000)
            found.append(n)
    finally:
        await store.close()
    return statistics.median(times), pct(times, 99), statistics.mean(found)


async def agreement(location: str) -> tuple[int, int]:
    """Of the bench's queries (each task in 10 channels), how many get the same best three from the focused
    search as from the plain one that ranks every match (focus_from past any size)."""
    store = await Store(location, tables=[TABLES]).open()
    same = total = 0
    try:
        for i in range(50):
            task, channel = TASKS[i % len(TASKS)], f"C{i % 50:03d}"
            focused = await search_incidents(store, task, channel=channel, limit=CANDIDATES)
            plain = await search_incidents(store, task, channel=channel, limit=CANDIDATES, focus_from=10**12)
            same += [m.incident.run_id for m in focused[:3]] == [m.incident.run_id for m in plain[:3]]
            total += 1
    finally:
        await store.close()
    return same, total


Result = dict[str, object]


async def measure(label: str, location_for: dict[int, str]) -> list[Result]:
    results: list[Result] = []
    for n, location in location_for.items():
        seconds = fill(location, n)
        offer = await timed(location)
        filtered = await timed(location, host="web-03")
        same, total = await agreement(location)
        results.append(
            {"backend": label, "n": n, "fill_s": seconds, "offer": offer, "filtered": filtered, "same": (same, total)}
        )
        print(
            f"{label:8} {n:>7,} incidents (stored in {seconds:5.1f} s)  offer p50 {offer[0]:6.1f} ms  "
            f"p99 {offer[1]:6.1f} ms  |  host filter p50 {filtered[0]:6.1f} ms  p99 {filtered[1]:6.1f} ms  |  "
            f"best three as the plain search: {same}/{total}"
        )
        sys.stdout.flush()
    return results


async def run(*, sqlite_only: bool = False) -> tuple[list[Result], str]:
    """Every measurement, and why Postgres was left out (or "")."""
    with tempfile.TemporaryDirectory() as tmp:
        results = await measure("SQLite", {n: str(Path(tmp) / f"memory-{n}.db") for n in SIZES})
    if sqlite_only:
        return results, "not asked for (--sqlite)"
    from tests.support.pgserver import PgServer, find_bindir, new_database

    if find_bindir() is None:
        return results, "not installed (make postgres)"
    with PgServer() as server:
        results += await measure("Postgres", {n: new_database(server.url) for n in SIZES})
    return results, ""


def table(results: list[Result]) -> str:
    lines = [
        "| backend | incidents | stored in | offer p50 | offer p99 | host filter p50 | host filter p99 "
        "| best 3 = plain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        offer, filtered, same = r["offer"], r["filtered"], r["same"]
        assert isinstance(offer, tuple) and isinstance(filtered, tuple) and isinstance(same, tuple)
        lines.append(
            f"| {r['backend']} | {r['n']:,} | {r['fill_s']:.0f} s | {offer[0]:.1f} ms | {offer[1]:.1f} ms | "
            f"{filtered[0]:.1f} ms | {filtered[1]:.1f} ms | {same[0]}/{same[1]} |"
        )
    return "\n".join(lines)


async def bench(report: Any, args: Any) -> None:
    """`python -m bench --only memory`: the table, and the row for the offer at 100,000 on SQLite."""
    results, skipped = await run()
    at_100k = next(r for r in results if r["backend"] == "SQLite" and r["n"] == max(SIZES))
    offer = at_100k["offer"]
    assert isinstance(offer, tuple)
    report.row(
        "Memory: the run-start offer at 100,000 incidents (SQLite)",
        f"p50 {offer[0]:.1f} / p99 {offer[1]:.1f} ms",
        "p50 < 20 ms",
        offer[0] < 20,
        miss=f"{offer[0]:.1f} ms",
    )
    note = f"\n\nPostgres: {skipped}." if skipped else ""
    report.section(
        "Memory: incident search at 10,000 and 100,000 (memory)",
        (__doc__ or "").strip() + "\n\n" + table(results) + note,
    )


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.memory")
    parser.add_argument("--sqlite", action="store_true", help="SQLite only")
    args = parser.parse_args(argv)
    results, skipped = await run(sqlite_only=args.sqlite)
    print(table(results) + (f"\n\nPostgres: {skipped}." if skipped else ""))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
