"""Issue 12's benchmarks: what the Postgres store costs one agent step, and what replicas buy on this machine.

    python -m bench                   # everything, RESULTS.md rewritten
    python -m bench --only postgres   # just these (sections 9 and 10), spliced into the existing RESULTS.md

9. The store work of one read-only agent step, timed through the real `Store` facade on SQLite and on
   Postgres (fsync on, as in production, and fsync off), then the same scripted incident through a real
   `opsloop run` on each store.
10. Thirty incidents at once through the fake Slack (`delivery = "round_robin"`) on 1 vs 3 `opsloop run`
    replicas sharing one Postgres, the fake model answering in 200 ms; with the CPU each party used.

The Postgres servers are throwaway ones (`tests.support.pgserver.PgServer`: Unix socket in a temp dir, no TCP).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench import product
from bench.product import ROOT, Product, bot_env, incident, requests, running, write_config
from bench.tools import DF_OUTPUT
from bot.core.types import StopReason, Totals, Usage
from bot.store import Store
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.slack import FakeSlack
from tests.support.pgserver import PgServer, find_bindir, new_database

med = statistics.median
MODEL = "claude-sonnet-5-5"
SQLITE, PG, PG_FAST = "SQLite", "Postgres", "Postgres, fsync off"
LABELS = {
    SQLITE: "SQLite (WAL, synchronous=NORMAL: the shipped default)",
    PG: "Postgres (fsync on, synchronous_commit on: production)",
    PG_FAST: "Postgres (fsync off, synchronous_commit off)",
}
# One read-only step, in the order the runtime and its supervisor issue these calls (bot/run/loop.py).
STEP_OPS = (
    "stop_requested_by",
    "queued_inbox",
    "add_step(request)",
    "put_message(assistant, totals)",
    "add_step(response)",
    "tool_results",
    "add_step(tool)",
    "save_tool_result",
    "put_message(results, totals)",
)
EXTRA_OPS = ("save_tool_result(started marker)", "renew_leases")  # a change tool's claim; once a second


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def available() -> bool:
    return find_bindir() is not None


@contextlib.contextmanager
def servers() -> Iterator[dict[str, PgServer]]:
    """A durable throwaway Postgres (the production settings) and a fast one (fsync off), both on sockets."""
    with PgServer(durable=True) as durable, PgServer() as fast:
        yield {PG: durable, PG_FAST: fast}


# --------------------------------------------------------------------------- 9a the store, per step


def _assistant(run: int, i: int) -> dict[str, Any]:
    """An assistant turn the size of the fake model's: thinking with its signature, a line of text, one call."""
    return {
        "role": "assistant",
        "content": [
            {
                "type": "thinking",
                "thinking": "The disk on web-03 is filling; check which mount and why. " * 14,
                "signature": "EqQBCkgIARABGAIiQL" + "x" * 330,
            },
            {"type": "text", "text": "Checking disk usage."},
            {"type": "tool_use", "id": f"toolu_{run}_{i:03d}", "name": "disk_usage", "input": {"host": f"web-{i:02d}"}},
        ],
    }


def _results(run: int, i: int) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{run}_{i:03d}", "content": DF_OUTPUT, "is_error": False}
        ],
    }


def _totals(i: int) -> Totals:
    usage = Usage(input_tokens=40 * i, output_tokens=850 * i, cache_read_tokens=2000 * i, cache_write_tokens=160 * i)
    return Totals(
        iterations=i,
        usage=usage,
        cost_usd=0.01 * i,
        agent_seconds=0.2 * i,
        tools_called=("disk_usage",) * i,
        condensed=False,
        model=MODEL,
    )


@dataclass
class StepTimes:
    """Per-step totals (ms) and per-call times (ms) of one backend."""

    steps: list[float] = field(default_factory=list)
    ops: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in (*STEP_OPS, *EXTRA_OPS)})


async def _timed(times: StepTimes, op: str, call: Awaitable[Any]) -> Any:
    began = time.perf_counter()
    result = await call
    times.ops[op].append((time.perf_counter() - began) * 1000)
    return result


async def store_incident(store: Store, steps: int, times: StepTimes, n: int) -> None:
    """One run of `steps` read-only steps, each the runtime's store calls in its order; plus the two extras."""
    task = "web-03 is out of disk"
    row = await store.create_run(
        channel="C0INCIDENT",
        thread_ts=f"{n}.0001",
        requester="U0ALICE",
        task=task,
        model=MODEL,
        history=[{"role": "user", "content": [{"type": "text", "text": task}]}],
    )
    rid = row.id
    await store.claim_run(rid, "bench-owner", until=time.time() + 10, now=time.time())  # so renew_leases writes
    for i in range(1, steps + 1):
        began = time.perf_counter()
        t = times
        call_id = f"toolu_{n}_{i:03d}"
        await _timed(t, "stop_requested_by", store.stop_requested_by(rid))
        await _timed(t, "queued_inbox", store.queued_inbox(rid))
        await _timed(
            t,
            "add_step(request)",
            store.add_step(rid, "request", {"iteration": i, "messages": 2 * i - 1, "max_tokens": 16000}),
        )
        await _timed(
            t, "put_message(assistant, totals)", store.put_message(rid, 2 * i - 1, _assistant(n, i), totals=_totals(i))
        )
        await _timed(
            t,
            "add_step(response)",
            store.add_step(
                rid,
                "response",
                {
                    "usage": {"input_tokens": 40, "output_tokens": 850},
                    "stop_reason": "tool_use",
                    "model": MODEL,
                    "latency_ms": 200,
                    "text": "Checking disk usage.",
                    "reasoning": "The disk on web-03 is filling. " * 17,
                    "tool_calls": ["disk_usage"],
                },
            ),
        )
        await _timed(t, "tool_results", store.tool_results(rid, [call_id]))
        await _timed(
            t,
            "add_step(tool)",
            store.add_step(
                rid,
                "tool",
                {
                    "tool": "disk_usage",
                    "args": {"host": f"web-{i:02d}"},
                    "confirmed_by": None,
                    "is_error": False,
                    "result": DF_OUTPUT[:500],
                    "latency_ms": 0,
                },
            ),
        )
        await _timed(
            t,
            "save_tool_result",
            store.save_tool_result(
                rid,
                tool_use_id=call_id,
                tool="disk_usage",
                args={"host": f"web-{i:02d}"},
                content=DF_OUTPUT,
                is_error=False,
                confirmed_by=None,
            ),
        )
        await _timed(
            t, "put_message(results, totals)", store.put_message(rid, 2 * i, _results(n, i), totals=_totals(i))
        )
        times.steps.append((time.perf_counter() - began) * 1000)
        # Not part of a read-only step: a change tool's started marker, and the lease renewal (once a second).
        await _timed(
            t,
            "save_tool_result(started marker)",
            store.save_tool_result(
                rid,
                tool_use_id=f"toolu_change_{n}_{i:03d}",
                tool="restart_service",
                args={"host": "web-03"},
                content=None,
                is_error=False,
                confirmed_by="U0CAROL",
            ),
        )
        await _timed(t, "renew_leases", store.renew_leases("bench-owner", [rid], until=time.time() + 10))
    await store.finish_run(rid, stop_reason=StopReason.COMPLETED, stop_detail="")


async def store_latency(urls: dict[str, str], steps: int, repeats: int) -> dict[str, StepTimes]:
    """`repeats` interleaved incidents of `steps` steps on each store (the order rotates every repeat)."""
    with tempfile.TemporaryDirectory(prefix="opsloop-bench-") as tmp:
        where = {SQLITE: str(Path(tmp) / "bench.db"), **urls}
        stores = {name: await Store(loc).open() for name, loc in where.items()}
        times = {name: StepTimes() for name in stores}
        try:
            for store in stores.values():  # warm-up: connections, statement caches, first pages
                await store_incident(store, 3, StepTimes(), -1)
            names = list(stores)
            for r in range(repeats):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    await store_incident(stores[name], steps, times[name], r)
        finally:
            for store in stores.values():
                await store.close()
    return times


# --------------------------------------------------------------------------- 9b the product, per step


async def product_steps(urls: dict[str, str], steps: int, repeats: int) -> dict[str, list[float]]:
    """ms per iteration of a `steps`-request incident through `opsloop run` on each store, interleaved."""
    out: dict[str, list[float]] = {}
    async with contextlib.AsyncExitStack() as stack:
        products: dict[str, Product] = {SQLITE: await stack.enter_async_context(running())}
        for name, url in urls.items():
            products[name] = await stack.enter_async_context(running(db=url))
        for p in products.values():
            await p.incident(3)  # warm-up
        out = {name: [] for name in products}
        for _ in range(repeats):
            for name, p in products.items():
                stamps, _ = await p.incident(steps)
                out[name].append((stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1000)
    return out


# --------------------------------------------------------------------------- 10 replicas


@dataclass
class Fleet:
    """The fakes plus `n` `opsloop run` replicas on one store."""

    product: Product  # mention / wait_answers on this fleet's fakes
    procs: list[asyncio.subprocess.Process]
    server: PgServer
    probe_url: str  # a database of the same server for the commit-latency probe

    def next_xid(self) -> int:
        """The server's next transaction id: every transaction that writes takes one (reading it takes none)."""
        with psycopg.connect(self.server.url, autocommit=True) as conn:
            row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()
        assert row is not None
        return int(row[0])

    def cpu(self) -> dict[str, dict[int, float]]:
        """CPU seconds so far: each replica, each Postgres process, this process (the fakes), the whole machine."""
        pg = psutil.Process(_postmaster(self.server))
        total = psutil.cpu_times()
        return {
            "replicas": _cpu([psutil.Process(p.pid) for p in self.procs]),
            "postgres": _cpu([pg, *pg.children(recursive=True)]),
            "fakes": _cpu([psutil.Process()]),
            "machine": {0: sum(getattr(total, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq"))},
        }


def _cpu(procs: list[psutil.Process]) -> dict[int, float]:
    out = {}
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = proc.cpu_times()
            out[proc.pid] = t.user + t.system
    return out


def _used(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]) -> dict[str, float]:
    return {k: sum(v - before[k].get(pid, 0.0) for pid, v in after[k].items()) for k in after}


def _postmaster(server: PgServer) -> int:
    assert server.root is not None
    return int((server.root / "data" / "postmaster.pid").read_text().split()[0])


@contextlib.asynccontextmanager
async def fleet(n: int, server: PgServer, latency: float) -> AsyncIterator[Fleet]:
    """`n` replicas of `opsloop run` (shipped defaults, the bench's read-only tools) on a fresh database."""
    url = new_database(server.url)
    # Migrated once here, so the replicas starting together find nothing to do.
    await (await Store(url).open()).close()
    with tempfile.TemporaryDirectory(prefix="opsloop-bench-") as tmp:
        work = Path(tmp)
        async with (
            FakeSlack(bot_token="xoxb-bench", app_token="xapp-bench") as slack,
            FakeAnthropic(api_key=product.API_KEY) as model,
        ):
            slack.add_user(product.ALICE, "alice")
            slack.delivery = "round_robin"
            model.latency_seconds = latency
            config = str(write_config(work / "opsloop.toml", ""))
            procs: list[asyncio.subprocess.Process] = []
            try:
                for i in range(n):  # started together, so the fleet is up in one start-up time
                    with open(work / f"bot-{i}.log", "wb") as log:  # noqa: ASYNC230
                        procs.append(
                            await asyncio.create_subprocess_exec(
                                sys.executable,
                                "-m",
                                "bot.app.cli",
                                "run",
                                "--config",
                                config,
                                cwd=ROOT,
                                env=bot_env(slack, model, url),
                                stdout=log,
                                stderr=log,
                            )
                        )
                await slack.wait_connected(timeout=90, connects=n)
                yield Fleet(
                    Product(slack=slack, model=model, proc=procs[0], workdir=work),
                    procs,
                    server,
                    new_database(server.url),
                )
            finally:
                for proc in procs:
                    if proc.returncode is None:
                        proc.send_signal(signal.SIGTERM)
                for proc in procs:
                    try:
                        await asyncio.wait_for(proc.wait(), 60)
                    except TimeoutError:
                        proc.kill()
                        await proc.wait()


@dataclass
class Burst:
    """One burst of incidents: seconds from the first mention to the last answer, each one's time to answer,
    and the CPU seconds each party used meanwhile."""

    seconds: float
    answers: list[float]
    cpu: dict[str, float]
    writes: int  # write transactions Postgres committed meanwhile (the probe's left out)
    commit_ms: list[float]  # the probe's commits meanwhile: what one small write took under this load


async def burst(f: Fleet, incidents: int, steps: int) -> Burst:
    p = f.product
    p.model.script(*[incident(steps) for _ in range(incidents * requests(steps))])
    before_answers = len(p._final_calls())
    commits: list[float] = []
    async with _probe(f.probe_url, commits):  # the probe's start-up stays outside the measured window
        xid, cpu_before = f.next_xid(), f.cpu()
        began = time.monotonic()
        sent = await asyncio.gather(*(p.mention(f"host web-{i:03d} is out of disk") for i in range(incidents)))
        answered = await p.wait_answers(before_answers + incidents)
        cpu, probes = _used(cpu_before, f.cpu()), len(commits)
        writes = f.next_xid() - xid - probes
    answers = [answered[ts] - at for ts, at in sent]
    return Burst(
        seconds=max(answered[ts] for ts, _ in sent) - began, answers=answers, cpu=cpu, writes=writes, commit_ms=commits
    )


@contextlib.asynccontextmanager
async def _probe(url: str, commits: list[float]) -> AsyncIterator[None]:
    """While the block runs, a separate process (so this busy one does not skew it) times one tiny write every
    50 ms: the commit latency the replicas see meanwhile; each one's ms lands in `commits`."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.postgres", "probe", url, cwd=ROOT, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    ready = await proc.stdout.readline()  # connected, table made
    assert ready.strip() == b"ready", ready

    async def read() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            commits.append(float(line))

    reader = asyncio.create_task(read())
    try:
        yield
    finally:
        proc.kill()
        await proc.wait()
        await reader


def probe_main(url: str, every: float = 0.05) -> None:
    """`python -m bench.postgres probe URL`: print `ready`, then one line per timed autocommit INSERT (ms)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS probe (at DOUBLE PRECISION)")
        print("ready", flush=True)
        while True:
            began = time.perf_counter()
            conn.execute("INSERT INTO probe VALUES (%s)", [time.time()])
            print(f"{(time.perf_counter() - began) * 1000:.3f}", flush=True)
            time.sleep(every)


async def replicas(
    pgs: dict[str, PgServer], sizes: tuple[int, ...], incidents: int, steps: int, latency: float, repeats: int
) -> dict[tuple[str, int], list[Burst]]:
    """`repeats` bursts on each (server, fleet size), interleaved; every fleet on its own database and fakes."""
    keys = [(name, n) for name in pgs for n in sizes]
    out: dict[tuple[str, int], list[Burst]] = {k: [] for k in keys}
    async with contextlib.AsyncExitStack() as stack:
        fleets = {k: await stack.enter_async_context(fleet(k[1], pgs[k[0]], latency)) for k in keys}
        for f in fleets.values():
            await burst(f, 3, 2)  # warm-up
        for _ in range(repeats):
            for k, f in fleets.items():
                out[k].append(await burst(f, incidents, steps))
    return out


# --------------------------------------------------------------------------- report


def table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join([*lines, *("| " + " | ".join(str(c) for c in r) + " |" for r in rows)])


Row = Callable[[str, str, str, "bool | None"], None]


def report_store(
    row: Row,
    section: Callable[[str, str], None],
    times: dict[str, StepTimes],
    per_iter: dict[str, list[float]],
    steps: int,
    repeats: int,
) -> None:
    base = med(times[SQLITE].steps)
    rows = []
    for name, t in times.items():
        m = med(t.steps)
        rows.append(
            [
                LABELS[name],
                f"{m:.2f}",
                f"{pct(t.steps, 95):.2f}",
                f"{m / base:.1f}x",
                "" if name == SQLITE else f"+{m - base:.2f}",
            ]
        )
    ops = [[op, *(f"{med(times[n].ops[op]):.3f}" for n in times)] for op in (*STEP_OPS, *EXTRA_OPS)]
    pbase = med(per_iter[SQLITE])
    prow = [
        [
            LABELS[n],
            f"{med(v):.2f}",
            f"{min(v):.2f}",
            f"{med(v) / pbase:.2f}x",
            "" if n == SQLITE else f"+{med(v) - pbase:.2f}",
        ]
        for n, v in per_iter.items()
    ]
    pg, pgp = med(times[PG].steps), med(per_iter[PG])
    row(
        "9. Postgres store: cost per step",
        f"store calls {pg:.1f} ms vs SQLite {base:.1f} ms per step "
        f"(+{pg - base:.1f} ms); `opsloop run` {pgp:.1f} vs {pbase:.1f} ms per iteration (+{pgp - pbase:.1f} ms)",
        "a number for the docs",
        None,
    )
    n = len(times[SQLITE].steps)
    section(
        "9. Postgres vs SQLite: the store's cost per step",
        f"""
The store calls of one read-only agent step, in the order `bot/run/loop.py` and its supervisor issue them
({len(STEP_OPS)} calls: {", ".join(f"`{o}`" for o in STEP_OPS)}), timed through the real `Store` facade
(its writer thread, one transaction per call; Postgres calls SERIALIZABLE) with payloads the size of the
fake model's. {repeats} interleaved incidents of {steps} steps per store ({n} steps each). Postgres is a
throwaway local server on a Unix socket in the same machine: no network round trip, which a real deployment
adds to every call ({len(STEP_OPS)} per step, each BEGIN/statements/COMMIT).

{table(["store", "median ms/step", "p95 ms/step", "vs SQLite", "extra ms/step"], rows)}

Median ms per call:

{table(["call", *times], ops)}

The last two are not part of a read-only step: a change tool's durable started marker (SQLite
switches to synchronous=FULL for it), and the lease renewal each replica makes once a second for all the
runs it drives. SQLite's shipped setting (WAL, synchronous=NORMAL) does not fsync a commit; Postgres with
synchronous_commit on flushes its WAL at every commit that wrote, so the fsync-on row is mostly this disk's
flush latency (write calls), and the fsync-off row is the price of the protocol and the transactions.

The same {steps}-request incident through a real `opsloop run` on each store (the bench's fakes, zero model
latency, instant tool; ms per iteration measured at the fake model as in section 2), {repeats} interleaved
repeats:

{table(["store", "median ms/iteration", "best ms/iteration", "vs SQLite", "extra ms/iteration"], prow)}
""",
    )


@dataclass(frozen=True)
class FleetNumbers:
    """One fleet's medians over its bursts."""

    rate: float  # incidents per second
    wall: float  # seconds per burst
    answer: float  # median time to answer
    answer95: float
    writes: float  # write transactions per burst
    commit: float  # ms of one small write's commit during the burst (the probe)
    cpu: dict[str, float]  # CPU seconds per burst: replicas, postgres, fakes

    @staticmethod
    def of(bursts: list[Burst], incidents: int) -> FleetNumbers:
        return FleetNumbers(
            rate=med([incidents / b.seconds for b in bursts]),
            wall=med([b.seconds for b in bursts]),
            answer=med([med(b.answers) for b in bursts]),
            answer95=med([pct(b.answers, 95) for b in bursts]),
            writes=med([float(b.writes) for b in bursts]),
            commit=med([med(b.commit_ms) for b in bursts if b.commit_ms]),
            cpu={k: med([b.cpu[k] for b in bursts]) for k in bursts[0].cpu},
        )

    def busy(self, cores: int) -> float:
        """The whole machine's CPU use during the burst, whoever used it."""
        return self.cpu["machine"] / (self.wall * cores)

    @property
    def others(self) -> float:
        """CPU seconds of processes other than this benchmark's (the machine is shared)."""
        return max(0.0, self.cpu["machine"] - self.cpu["replicas"] - self.cpu["postgres"] - self.cpu["fakes"])

    def writer_busy(self, replicas: int) -> float:
        """The share of the burst each replica's store connection spent committing writes (at least)."""
        return self.writes / replicas * self.commit / 1000 / self.wall


def _fleet_label(store: str) -> str:
    return "Postgres (fsync off)" if store == PG_FAST else "Postgres (fsync on)"


def report_replicas(
    row: Row,
    section: Callable[[str, str], None],
    bursts: dict[tuple[str, int], list[Burst]],
    incidents: int,
    steps: int,
    latency: float,
    repeats: int,
) -> None:
    cores = psutil.cpu_count() or 1
    nums = {k: FleetNumbers.of(bs, incidents) for k, bs in bursts.items()}
    sizes = sorted({n for _, n in nums})
    one, many = sizes[0], sizes[-1]
    rows = [
        [
            _fleet_label(store),
            f"{n} replica{'s' if n > 1 else ''}",
            f"{x.rate:.1f}",
            f"{x.wall:.2f}",
            f"{x.answer:.2f}",
            f"{x.answer95:.2f}",
            f"{x.writes / incidents:.0f}",
            f"{x.commit:.2f}",
            f"{x.writer_busy(n):.0%}",
            f"{x.cpu['replicas']:.2f}",
            f"{x.cpu['postgres']:.2f}",
            f"{x.cpu['fakes']:.2f}",
            f"{x.others:.2f}",
            f"{x.busy(cores):.0%}",
        ]
        for (store, n), x in nums.items()
    ]
    ratio = {store: nums[store, many].rate / nums[store, one].rate for store, _ in nums}
    row(
        f"10. Replicas: {incidents} concurrent incidents, 1 vs {many}",
        f"fsync on: {nums[PG, many].rate:.1f} vs "
        f"{nums[PG, one].rate:.1f} incidents/s = {ratio[PG]:.2f}x (median time to answer {nums[PG, many].answer:.2f} "
        f"vs {nums[PG, one].answer:.2f} s); fsync off: {ratio[PG_FAST]:.2f}x",
        "an honest ratio (2 cores)",
        None,
    )
    section(
        f"10. Replicas: {incidents} concurrent incidents on 1 vs {many} replicas",
        f"""
{incidents} mentions sent at once through the fake Slack (`delivery = "round_robin"`: each envelope to the next
open Socket Mode connection), each a {steps}-request incident ({steps - 1} read-only `df` calls, then the
answer); the fake model answers every request after {latency * 1000:.0f} ms, so one incident alone needs at least
{steps * latency:.1f} s. `opsloop run` replicas with the shipped defaults on one Postgres server with fsync on
(production) and on one with fsync off; each fleet has its own database and its own fakes, all fleets are up at
once and take {repeats} bursts each, interleaved. Medians over the bursts of:

- rate = incidents / (first mention sent -> last answer posted); time to answer = a mention -> its answer posted;
- writes = write transactions Postgres committed during the burst (transaction ids taken), per incident;
- commit ms = a probe's tiny autocommit INSERT, every 50 ms during the burst: what one write's commit took
  under that load; store busy = writes per replica x commit ms / burst, the least time each replica's single
  store connection spent committing;
- CPU = seconds of CPU used during the burst by the replicas, by all the Postgres server processes, by the
  bench process (it hosts the fake Slack and the fake model) and by anything else running on the machine;
  machine busy = all of it / (burst x {cores} cores).

{
            table(
                [
                    "store",
                    "fleet",
                    "incidents/s",
                    "burst s",
                    "median time to answer s",
                    "p95 time to answer s",
                    "writes/incident",
                    "commit ms",
                    "store busy",
                    "CPU s: replicas",
                    "CPU s: Postgres",
                    "CPU s: fakes",
                    "CPU s: other processes",
                    "machine busy",
                ],
                rows,
            )
        }

{many} replicas vs 1: {ratio[PG]:.2f}x the rate with fsync on, {ratio[PG_FAST]:.2f}x with fsync off.

{_replicas_reading(nums, incidents, steps, latency, cores)}
""",
    )


def _bound(x: FleetNumbers, n: int, cores: int) -> str:
    """What held one fleet back, from its numbers."""
    if x.writer_busy(n) >= 0.6:
        return (
            f"its store connection{'s were' if n > 1 else ' was'} committing for {x.writer_busy(n):.0%} of the "
            f"burst (writes one after another, {x.commit:.1f} ms each)"
        )
    if x.busy(cores) >= 0.8:
        return f"the machine was {x.busy(cores):.0%} busy"
    return (
        f"neither saturated (store busy {x.writer_busy(n):.0%}, machine {x.busy(cores):.0%}): the runs queued "
        f"in each replica's one event loop and one store thread, sharing one GIL"
    )


def _replicas_reading(
    nums: dict[tuple[str, int], FleetNumbers], incidents: int, steps: int, latency: float, cores: int
) -> str:
    """What bounds the rate, from the measured numbers."""
    sizes = sorted({n for _, n in nums})
    one, many = sizes[0], sizes[-1]
    requests = incidents * steps

    def cpu_ms(store: str, n: int) -> str:
        return f"{nums[store, n].cpu['replicas'] / requests * 1000:.1f}"

    return f"""What bounds it. A replica runs its store calls one at a time on one connection (the store's writer
thread), and every write is a SERIALIZABLE transaction that commits before the run goes on; with fsync on a commit
waits for the WAL flush to this disk. More replicas are more connections committing at once (Postgres flushes
concurrent commits together) and more event loops, and that is all 3 replicas can add here: this machine has
{cores} cores, and the fake Slack, the fake model and Postgres run on the same cores as the replicas.
With fsync on, 1 replica: {_bound(nums[PG, one], one, cores)}; {many} replicas: {_bound(nums[PG, many], many, cores)}.
With fsync off, 1 replica: {_bound(nums[PG_FAST, one], one, cores)}; {many} replicas: \
{_bound(nums[PG_FAST, many], many, cores)}.
The replicas' own CPU per model request was {cpu_ms(PG, one)} ms with 1 replica and {cpu_ms(PG, many)} ms with
{many} (fsync on): more processes each polling, renewing leases and handling the same traffic cost more in total.
With a real model (seconds per request, not {latency * 1000:.0f} ms) a replica mostly waits, and the rate is bounded
by the model and the commit latency, not by the number of replicas: replicas are for availability (a run continues
on another replica when one dies) and for more machines, not for speed on one 2-core box."""


# --------------------------------------------------------------------------- entry


async def run_all(row: Row, section: Callable[[str, str], None], *, repeats: int, bursts: int) -> None:
    """Sections 9 and 10 (they say so and skip when no Postgres 15+ is installed)."""
    if not available():
        row("9. Postgres store: cost per step", "skipped: no Postgres 15+ (make postgres)", "", None)
        row("10. Replicas", "skipped: no Postgres 15+ (make postgres)", "", None)
        return
    steps, incidents = 20, 30
    with servers() as pgs:
        urls = {name: new_database(server.url) for name, server in pgs.items()}
        times = await store_latency(urls, steps, repeats)
        urls = {name: new_database(server.url) for name, server in pgs.items()}
        per_iter = await product_steps(urls, steps, repeats)
        report_store(row, section, times, per_iter, steps, repeats)
        measured = await replicas(pgs, (1, 3), incidents, 5, 0.2, bursts)
        report_replicas(row, section, measured, incidents, 5, 0.2, bursts)


if __name__ == "__main__" and sys.argv[1:2] == ["probe"]:
    probe_main(sys.argv[2])
