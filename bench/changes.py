"""Issue 31's benchmark: `recent_changes` over every source at once against its slowest source alone, and Slack
acks while `POST /changes` is flooded.

    python -m bench --only changes   # this section, spliced into bench/RESULTS.md
    python -m bench.changes          # the same, printed (RESULTS.md untouched); --repeats N, --rounds N

1. recent_changes, through the real registry (`build_registry` from a `[changes]`, `[kubernetes]` and
   `[[hosts]]` config, the tool's `run` inside a run scope, as the runtime calls it) over: 2 fake kube-apiservers
   (tests.support.fakes.kube, HTTPS on loopback, in a child process so the "cluster" is not this process's event loop),
   2 configured namespaces each, with Deployments and their ReplicaSet revisions, StatefulSets and their
   ControllerRevisions, ConfigMaps with managedFields and scale events; 4 hosts over 4 real OpenSSH servers
   on 127.0.0.1 (tests.support.sshserver), named in the run's task as an alert would; a bare git repository of 10,000
   commits (bench.changes_git.make_repo, ending now) with `paths = ["k8s/"]`; 1,000 change events in the
   SQLite store, spread over the last 24 hours. Each source alone is its public reader (git_changes,
   namespace_changes, host_changes, the store's changes_between) on the same clients, pool and store the
   tool's call uses. One repeat = every source alone once, the full call, and `gather` of the same sources
   (no timeline), in an order rotated each repeat; medians over `--repeats` after 2 warm-up repeats. Then the
   same again through bench/latency_proxy.py (a TCP proxy in its own process) for each of NETWORK_DELAYS_MS, so
   that a host's or a cluster's time is also its round trips, as on a real network, and not only this machine's
   2 CPUs, which the sshd's, the fake clusters and this process all share.
2. Acks: `opsloop run` as a child process (bench.product.running) with `[changes.webhook]` on a loopback port.
   A burst of mentions (each starts a run that answers at once, as section 1) with nothing else going on
   (idle), and the same burst while a child process floods `POST /changes` (batches of 20 events, 50
   connections at once, one connection per POST, from before the burst's first mention until every mention
   is acked and at least 2,000 events were stored), interleaved `--rounds` times. Ack latency: from asking
   the fake Slack to send the envelope to the moment it read the ack frame (as section 1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import functools
import itertools
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from bench import product
from bench.changes_git import COMMITS, make_repo
from bot.store import Store
from tests.support.fakes.kube import FakeKube, deployment, event, replicaset, statefulset
from tests.support.fakes.slack import mention_event
from tests.support.sshserver import SshServer, missing_reason
from tools.api import RunScope, run_scope
from tools.changes.events import event_change
from tools.changes.git import git_changes
from tools.changes.k8s import namespace_changes, namespaces
from tools.changes.model import Change
from tools.changes.packages import host_changes
from tools.changes.settings import ChangesConfig
from tools.changes.store import TABLES, StoredChange, changes_between, record_changes
from tools.config import build_registry
from tools.k8s.clusters import KubeClusters
from tools.reaches import parse_reaches
from tools.registry import Tool
from tools.remote.inventory import Inventory
from tools.remote.pool import SshPool

Row = Callable[..., None]  # Report.row(name, result, target, ok, miss="")
Section = Callable[[str, str], None]
med = statistics.median

CLUSTERS = ("prod-eu", "prod-us")
NAMESPACES = ("web", "api")
DEPLOYMENTS = 5  # per namespace, each with 3 ReplicaSet revisions (the last one in the window)
STATEFULSETS = 2  # per namespace, each with 2 ControllerRevisions
CONFIGMAPS = 10  # per namespace, each edited once in the window
HOSTS = 4
EVENTS = 1000  # stored change events
EVENTS_OVER = timedelta(hours=24)
WINDOW_MINUTES = 120
TARGET = 1.2  # the full call vs its slowest source alone
# Each way, through bench/latency_proxy.py: round trips of 4 ms (two zones of one region) and 20 ms (two regions).
NETWORK_DELAYS_MS = (2.0, 10.0)
TASK = "checkout errors on web-01, web-02, web-03 and web-04 since the deploy"

BURST = 50  # mentions per ack burst
FLOOD_EVENTS = 2000  # at least, per flooded burst
FLOOD_BATCH = 20  # events per POST
FLOOD_CONNECTIONS = 50
ACK_TARGET = 1.5  # flooded ack p99 vs idle ack p99
TOKEN = "bench-changes-token-0123456789"
TOKEN_ENV = "BENCH_CHANGES_TOKEN"  # passed through to the child (bench/product.py keeps non-OPSLOOP_ variables)


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank) of `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the fake clusters (a child process)


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _controller_revision(owner: dict[str, Any], revision: int, image: str, at: datetime) -> dict[str, Any]:
    """A StatefulSet's ControllerRevision at `revision`, its pod template running `image`, created at `at`."""
    om = owner["metadata"]
    template = copy.deepcopy(owner["spec"]["template"])
    template["spec"]["containers"][0]["image"] = image
    ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": om["name"], "uid": om["uid"]}
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "revision": revision,
        "metadata": {
            "name": f"{om['name']}-{revision}abc",
            "namespace": om["namespace"],
            "creationTimestamp": _stamp(at),
            "ownerReferences": [{**ref, "controller": True}],
        },
        "data": {"spec": {"template": {**template, "$patch": "replace"}}},
    }


def _configmap(name: str, namespace: str, created: datetime, edited: datetime) -> dict[str, Any]:
    """A ConfigMap created by helm long ago and edited with kubectl at `edited` (its managedFields)."""
    fields = [("helm", created), ("kubectl-edit", edited)]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "data": {"POOL_SIZE": "10"},
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": _stamp(created),
            "managedFields": [
                {"manager": m, "operation": "Update", "apiVersion": "v1", "time": _stamp(t), "fieldsType": "FieldsV1"}
                for m, t in fields
            ],
        },
    }


def seed_cluster(kube: FakeKube, cluster: int, now: datetime) -> None:
    """Each namespace: DEPLOYMENTS Deployments with revisions 1 (3 days ago), 2 (a day ago) and 3 (in the window)
    and a scale event each (plus a BackOff event the field selector leaves out), STATEFULSETS StatefulSets with
    2 ControllerRevisions (the second in the window), CONFIGMAPS ConfigMaps edited in the window."""
    for n, ns in enumerate(NAMESPACES):
        for d in range(DEPLOYMENTS):
            name = f"svc-{d}"
            minutes = 5 + 7 * d + 3 * n + cluster
            dep = kube.add(deployment(name, ns, image=f"{name}:1.{d + 2}", revision=3))
            for rs in kube.objects("ReplicaSet", ns):
                if rs["metadata"]["name"].startswith(f"{name}-"):
                    created = {"creationTimestamp": _stamp(now - timedelta(minutes=minutes))}
                    kube.touch("ReplicaSet", ns, rs["metadata"]["name"], {"metadata": created})
            kube.add(replicaset(dep, revision=1, image=f"{name}:1.{d}", age_s=3 * 86400))
            kube.add(replicaset(dep, revision=2, image=f"{name}:1.{d + 1}", age_s=86400))
            scaled = f"Scaled up replica set {name}-7d9f to 6"
            kube.add(event(dep, "ScalingReplicaSet", scaled, type="Normal", last_seen_ago_s=60 * (minutes - 2)))
            kube.add(event(dep, "BackOff", "Back-off restarting failed container", last_seen_ago_s=60))
        for s in range(STATEFULSETS):
            sts = kube.add(statefulset(f"db-{s}", ns, image="postgres:16.2"))
            kube.add(_controller_revision(sts, 1, "postgres:16.1", now - timedelta(days=1)))
            kube.add(_controller_revision(sts, 2, "postgres:16.2", now - timedelta(minutes=30 + s)))
        for c in range(CONFIGMAPS):
            kube.add(_configmap(f"cfg-{c}", ns, now - timedelta(days=5), now - timedelta(minutes=4 + 9 * c)))


async def serve_kube(out: Path) -> None:
    """The child's work: both clusters seeded, their kubeconfigs in `out`, serving until stdin closes."""
    now = datetime.now(UTC).replace(microsecond=0)
    async with FakeKube() as a, FakeKube() as b:
        for i, kube in enumerate((a, b)):
            seed_cluster(kube, i, now)
            kube.write_kubeconfig(out / f"{CLUSTERS[i]}.json")
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.read)


@contextlib.asynccontextmanager
async def stdin_child(*args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """`python -m ARGS`, serving until its stdin closes: closed on the way out, killed if still running 20 s later."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", *args, cwd=product.ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        yield proc
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def kube_child(out: Path) -> AsyncIterator[list[Path]]:
    """`python -m bench.changes --serve-kube out` running; the two kubeconfigs."""
    async with stdin_child("bench.changes", "--serve-kube", str(out)) as proc:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if line.strip() != b"ready":
            raise RuntimeError(f"the fake clusters did not start: {line!r}")
        yield [out / f"{name}.json" for name in CLUSTERS]


# --------------------------------------------------------------------------- recent_changes vs its sources


@dataclass
class Changes:
    """What part 1 measured: milliseconds per source alone, of the full call and of gather alone."""

    single: dict[str, list[float]] = field(default_factory=dict)
    found: dict[str, int] = field(default_factory=dict)  # changes each source answered in the window (last repeat)
    full: list[float] = field(default_factory=list)
    gathered: list[float] = field(default_factory=list)
    per_repeat: list[float] = field(default_factory=list)  # full / the slowest source in that same repeat
    full_own_cpu: list[float] = field(default_factory=list)  # ms of this process's CPU (every thread) per full call
    full_machine_cpu: list[float] = field(default_factory=list)  # ms of CPU the whole machine was busy per full call
    total: int = 0  # changes in the full call's timeline
    out_chars: int = 0
    hosts_skipped: str | None = None
    events_in_window: int = 0


async def _stored_events(store: Store, now: datetime) -> None:
    """EVENTS change events, one every EVENTS_OVER / EVENTS up to now, as a CI would have POSTed them."""
    step = EVENTS_OVER / EVENTS
    rows = [
        StoredChange(
            id=f"ci-{i:05d}",
            at=(now - i * step).timestamp(),
            source="github-actions",
            service=f"svc-{i % DEPLOYMENTS}",
            environment="prod",
            summary=f"deploy svc-{i % DEPLOYMENTS} build {EVENTS - i}",
            url=f"https://ci.example.com/runs/{EVENTS - i}",
            labels={"team": "payments"},
        )
        for i in range(EVENTS)
    ]
    for at in range(0, EVENTS, 100):
        await record_changes(store, rows[at : at + 100])


def _config(repo: Path, kubeconfigs: list[Path], servers: list[SshServer]) -> dict[str, Any]:
    clusters = [
        {"name": name, "kubeconfig": str(kc), "namespaces": list(NAMESPACES)}
        for name, kc in zip(CLUSTERS, kubeconfigs, strict=True)
    ]
    raw: dict[str, Any] = {
        "changes": {
            "window_minutes": WINDOW_MINUTES,
            "git": [{"name": "deploy-config", "path": str(repo), "branch": "main", "paths": ["k8s/"]}],
        },
        "kubernetes": {"clusters": clusters},
    }
    if servers:
        raw["hosts"] = [
            {
                "name": f"web-{i:02d}",
                "address": s.address,
                "port": s.port,
                "identity_file": str(s.client_key),
                "known_hosts": str(s.known_hosts),
            }
            for i, s in enumerate(servers, 1)
        ]
    return raw


Read = Callable[[datetime, datetime], Awaitable[Sequence[Change]]]


def single_sources(t: Tool, store: Store) -> dict[str, Read]:
    """Each source the tool reads, alone: its public reader on the clients, pool and store the tool's call uses."""
    assert t.ctx is not None
    config = t.ctx.require(ChangesConfig, "no [changes]")
    reads: dict[str, Read] = {f"git {repo.target}": functools.partial(git_changes, repo) for repo in config.repos}
    clusters = t.ctx.resource(KubeClusters)
    if clusters is not None:
        for name in clusters.names():
            client = clusters.get(name)
            for ns in namespaces(client):
                reads[f"kubernetes {name}/{ns}"] = functools.partial(namespace_changes, client, ns)
    pool, inventory = t.ctx.resource(SshPool), t.ctx.resource(Inventory)
    if pool is not None and inventory is not None:
        for host in inventory:
            reads[f"host {host.name}"] = functools.partial(host_changes, pool, host)

    async def stored(since: datetime, until: datetime) -> list[Change]:
        rows = await changes_between(store, since.timestamp(), until.timestamp())
        return [event_change(r) for r in rows]

    reads["webhook stored events"] = stored
    return reads


def machine_busy_ms() -> float:
    """CPU milliseconds every process on this machine has used since boot (/proc/stat's first line: all but idle
    and iowait), to 10 ms; 0 where there is no /proc."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]
    except OSError:
        return 0.0
    return (sum(ticks) - ticks[3] - ticks[4]) * 1000 / os.sysconf("SC_CLK_TCK")


async def _ms(work: Awaitable[object]) -> tuple[float, object]:
    began = time.perf_counter()
    result = await work
    return (time.perf_counter() - began) * 1000, result


def _proxy_targets(raw: dict[str, Any]) -> list[str]:
    """Every host's sshd and every cluster's API server in `raw`, as HOST:PORT (hosts first)."""
    servers = [
        json.loads(Path(c["kubeconfig"]).read_text())["clusters"][0]["cluster"]["server"]
        for c in raw["kubernetes"]["clusters"]
    ]
    return [f"127.0.0.1:{h['port']}" for h in raw.get("hosts", [])] + [srv.rsplit("/", 1)[-1] for srv in servers]


def _proxied(raw: dict[str, Any], ports: list[int], work: Path, tag: str) -> dict[str, Any]:
    """`raw` reaching each target of _proxy_targets through the proxy's port in `ports` (same order): the hosts'
    known_hosts and the clusters' kubeconfigs rewritten (files in `work`, named with `tag`)."""
    proxied = copy.deepcopy(raw)
    hosts = proxied.get("hosts", [])
    for i, h in enumerate(hosts):
        known = Path(h["known_hosts"]).read_text().replace(f"[127.0.0.1]:{h['port']}", f"[127.0.0.1]:{ports[i]}")
        h["known_hosts"] = str(work / f"known_hosts.{tag}.{i}")
        Path(h["known_hosts"]).write_text(known)
        h["port"] = ports[i]
    for j, c in enumerate(proxied["kubernetes"]["clusters"]):
        k = json.loads(Path(c["kubeconfig"]).read_text())
        server = k["clusters"][0]["cluster"]["server"]
        k["clusters"][0]["cluster"]["server"] = f"{server.rsplit(':', 1)[0]}:{ports[len(hosts) + j]}"
        c["kubeconfig"] = str(work / f"kubeconfig.{tag}.{j}.json")
        Path(c["kubeconfig"]).write_text(json.dumps(k))
    return proxied


@contextlib.asynccontextmanager
async def latency_proxy(raw: dict[str, Any], work: Path, delay_ms: float) -> AsyncIterator[dict[str, Any]]:
    """`raw` with every host and cluster reached through bench/latency_proxy.py (`delay_ms` each way) in a child
    process; the git repository and the store are local anyway."""
    targets = _proxy_targets(raw)
    async with stdin_child("bench.latency_proxy", str(delay_ms), *targets) as proc:
        assert proc.stdout is not None
        ports = []
        for _ in targets:
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().split()
            if line[:1] != ["listening"]:
                raise RuntimeError(f"the latency proxy did not start: {line!r}")
            ports.append(int(line[1]))
        yield _proxied(raw, ports, work, f"delay{delay_ms:g}")


async def measure_changes(repeats: int, delayed: dict[float, Changes] | None = None) -> Changes:
    """Part 1: the sources made, then `repeats` interleaved repeats after 2 warm-up ones; then, into `delayed`
    (delay in ms each way -> what it measured), the same through bench/latency_proxy.py to every host and
    cluster."""
    m = Changes(hosts_skipped=missing_reason())
    with tempfile.TemporaryDirectory(prefix="opsloop-bench-changes-") as tmp:
        work = Path(tmp)
        now = datetime.now(UTC).replace(microsecond=0)
        repo = work / "deploy-config.git"
        await asyncio.to_thread(make_repo, repo, now - timedelta(minutes=COMMITS))  # the last commit a minute ago
        servers = [] if m.hosts_skipped else [SshServer().start() for _ in range(HOSTS)]
        try:
            store = await Store(str(work / "opsloop.db"), tables=[TABLES]).open()
            try:
                await _stored_events(store, now)
                async with kube_child(work) as kubeconfigs:
                    raw = _config(repo, kubeconfigs, servers)
                    async with await build_registry({}, reaches=parse_reaches(raw), shared={Store: store}) as reg:
                        t = reg.get("recent_changes")
                        assert t is not None
                        await _repeats(m, t, store, repeats)
                    for delay_ms, into in (delayed or {}).items():
                        async with latency_proxy(raw, work, delay_ms) as proxied:
                            reaches = parse_reaches(proxied)
                            async with await build_registry({}, reaches=reaches, shared={Store: store}) as reg:
                                t = reg.get("recent_changes")
                                assert t is not None
                                await _repeats(into, t, store, repeats)
            finally:
                await store.close()
        finally:
            for s in servers:
                s.stop()
    return m


async def _repeats(m: Changes, t: Tool, store: Store, repeats: int) -> None:
    reads = single_sources(t, store)
    names = list(reads)
    m.single = {n: [] for n in names}

    def window() -> tuple[datetime, datetime]:
        until = datetime.now(UTC)
        return until - timedelta(minutes=WINDOW_MINUTES), until

    async def full() -> str:
        at = time.time()
        with run_scope(RunScope(run_id="run_bench", conversation="C0BENCH", started_at=at, anchor=at, task=TASK)):
            return str(await t.run({}))

    async def gathered() -> None:
        await asyncio.gather(*(reads[n](*window()) for n in names))

    items = [*names, "full", "gather"]
    for r in range(repeats + 2):
        k = r % len(items)
        alone: dict[str, float] = {}
        full_ms = 0.0
        for item in items[k:] + items[:k]:  # rotated: no source always runs right after the full call
            if item == "full":
                own, machine = time.process_time(), machine_busy_ms()
                full_ms, out = await _ms(full())
                if r >= 2:
                    m.full_own_cpu.append((time.process_time() - own) * 1000)
                    m.full_machine_cpu.append(machine_busy_ms() - machine)
                text = str(out)
                assert "could not read" not in text, text[-2000:]
                m.total, m.out_chars = int(text.split(" ", 1)[0]), len(text)
            elif item == "gather":
                ms, _ = await _ms(gathered())
                if r >= 2:
                    m.gathered.append(ms)
            else:
                ms, found = await _ms(reads[item](*window()))
                alone[item] = ms
                m.found[item] = len(found)  # type: ignore[arg-type]
        if r >= 2:  # the first two are the warm-up: connections made, caches filled
            m.full.append(full_ms)
            for n, ms in alone.items():
                m.single[n].append(ms)
            m.per_repeat.append(full_ms / max(alone.values()))
    m.events_in_window = m.found.get("webhook stored events", 0)


def _headline(m: Changes, row: Row, name: str, miss: str = "") -> tuple[dict[str, float], str, float, float]:
    """The summary row of one measure of part 1, and what it read: (median ms per source, the slowest source,
    the full call's median, full / slowest). `miss` is added to the ratio in a missed verdict."""
    medians = {n: med(v) for n, v in m.single.items()}
    slowest = max(medians, key=lambda n: medians[n])
    full = med(m.full)
    ratio = full / medians[slowest]
    row(
        name,
        f"{full:.0f} ms over {len(medians)} sources; slowest alone {slowest} {medians[slowest]:.0f} ms: {ratio:.2f}x",
        f"<= {TARGET}x the slowest source",
        ratio <= TARGET,
        miss=f"{ratio:.2f}x{miss}; see the Changes section",
    )
    return medians, slowest, full, ratio


def changes_rows(m: Changes, row: Row, section: Section, repeats: int) -> None:
    machine_floor = med(m.full_machine_cpu) / (os.cpu_count() or 1)
    slowest_ms = max(med(v) for v in m.single.values())
    floor_x = machine_floor / slowest_ms
    medians, slowest, full, ratio = _headline(
        m, row, "Changes: recent_changes, every source", f" (this machine's floor: {floor_x:.2f}x)"
    )
    gathered = med(m.gathered)
    own = med(m.full_own_cpu)
    cpu_rows = (
        "| the whole machine (this process, the sshd's and their shells, git, the fake clusters) | "
        f"{med(m.full_machine_cpu):.0f} | {machine_floor:.0f} ms on {os.cpu_count()} CPUs "
        f"({floor_x:.2f}x the slowest) |\n"
        "| this process alone (every source's client side, the timeline) | "
        f"{own:.1f} | {own:.1f} ms on one event loop ({own / medians[slowest]:.2f}x) |"
    )
    sources = len(medians)
    lines = [
        f"| {n} | {m.found.get(n, 0)} | {medians[n]:.1f} | {min(m.single[n]):.1f} | {max(m.single[n]):.1f} |"
        for n in sorted(medians, key=lambda n: -medians[n])
    ]
    lines += [
        f"| **gather of all {sources} sources** (no timeline) | | {gathered:.1f} | {min(m.gathered):.1f} | "
        f"{max(m.gathered):.1f} |",
        f"| **recent_changes** through the registry | {m.total} | {full:.1f} | {min(m.full):.1f} | {max(m.full):.1f} |",
    ]
    hosts = (
        f"**Hosts skipped: {m.hosts_skipped}**: the 4 host sources are not in this run."
        if m.hosts_skipped
        else f"The {HOSTS} hosts read this machine's own `/var/log/dpkg.log` (the sshd's run here; recent_changes\n"
        "reads the fixed path, so it is the real Debian log of this box: its last 256 KiB tailed, the lines older\n"
        "than the window's start less 15 h left out on the host, the rest parsed where in the window) and the boot\n"
        "time. How many of its lines are in the window depends on when this box last installed packages."
    )
    section(
        "Changes: recent_changes over every source (changes)",
        f"""
`recent_changes` through the real registry (built from `[changes]`, `[kubernetes]` and `[[hosts]]`; the tool's
`run` in a run scope whose task names the 4 hosts, as an alert's would) over {sources} sources: 1 bare git
repository of {COMMITS:,} commits, one a minute up to now (`paths = ["k8s/"]`); 2 fake kube-apiservers
(HTTPS on loopback, in their own process) with 2 configured namespaces each, every namespace holding
{DEPLOYMENTS} Deployments with 3 ReplicaSet revisions, {STATEFULSETS} StatefulSets with 2 ControllerRevisions,
{CONFIGMAPS} ConfigMaps and scale events; {HOSTS} hosts over real OpenSSH servers on 127.0.0.1; {EVENTS:,} change
events in the SQLite store over the last 24 hours. Each source alone is its public reader (git_changes,
namespace_changes, host_changes, the store's changes_between) on the same clients, SSH pool and store the tool
uses. One repeat = every source alone, the full call and `gather` of the same sources, in an order rotated each
repeat; medians over {repeats} repeats after 2 warm-up repeats.

{hosts} Stored events in the {WINDOW_MINUTES}-minute window: {m.events_in_window} of {EVENTS:,}. The full call's
answer: {m.total} changes, {m.out_chars:,} characters (the timeline is bounded at 12,000).

| source | changes in the window | median ms | min ms | max ms |
|---|---|---|---|---|
{chr(10).join(lines)}

Full call {full:.1f} ms vs the slowest source alone ({slowest}, {medians[slowest]:.1f} ms): **{ratio:.2f}x**
(target <= {TARGET}x); per repeat, full / that repeat's slowest source: median {med(m.per_repeat):.2f}x.
Sum of the sources alone: {sum(medians.values()):.0f} ms. `gather` of the same sources without the timeline:
{gathered:.1f} ms ({gathered / medians[slowest]:.2f}x the slowest), so building and bounding the timeline (sort,
then redact, reveal, escape the lines that fit) costs about {full - gathered:.1f} ms after the reads.

Everything shares this machine's {os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} when this ran): the
4 sshd's and their shells, `git log`, the fake clusters' process and this process (asyncssh's crypto, the
kubernetes client's JSON, the store's thread) all run at once in the full call, while a source alone has the
machine to itself. Where the CPU of one full call went (medians; /proc/stat counts in 10 ms ticks):

| | CPU ms per full call | the least wall time it allows |
|---|---|---|
{cpu_rows}

So on this machine no reading of these sources can come within {TARGET}x of the slowest one: one call keeps the
{os.cpu_count()} CPUs busy for {med(m.full_machine_cpu):.0f} ms in all (the hosts', clusters' and git's work and this
process's), so it cannot take less than {machine_floor:.0f} ms here, and it took {full / machine_floor:.2f}x that.
On real hosts and clusters their share runs on them; this process's own {own:.1f} ms (one event loop: the SSH and
HTTPS clients, parsing, the timeline) would still be {own / medians[slowest]:.2f}x this slowest source.
""",
    )


def delayed_rows(d: Changes, delay_ms: float, row: Row, section: Section, repeats: int) -> None:
    """Part 1 again, with `delay_ms` each way to every host and cluster (bench/latency_proxy.py)."""
    rtt = 2 * delay_ms
    medians, slowest, full, ratio = _headline(d, row, f"Changes: recent_changes, every source, {rtt:g} ms round trips")
    lines = [
        f"| {n} | {medians[n]:.1f} | {min(d.single[n]):.1f} | {max(d.single[n]):.1f} |"
        for n in sorted(medians, key=lambda n: -medians[n])
    ]
    gathered = med(d.gathered)
    lines += [
        f"| **gather of all {len(medians)} sources** (no timeline) | {gathered:.1f} | {min(d.gathered):.1f} | "
        f"{max(d.gathered):.1f} |",
        f"| **recent_changes** through the registry | {full:.1f} | {min(d.full):.1f} | {max(d.full):.1f} |",
    ]
    section(
        f"Changes: recent_changes with {rtt:g} ms round trips to the hosts and clusters (changes)",
        f"""
The same sources and repeats as above, but every host and cluster reached through a TCP proxy in its own process
(bench/latency_proxy.py) that holds each byte {delay_ms:g} ms in each direction, a {rtt:g} ms round trip: a
source's time is then also its round trips, as on a real network, not only this machine's CPU (the proxy's own
work is on the same 2 CPUs). The git repository and the stored events are local, as they are in production.

| source | median ms | min ms | max ms |
|---|---|---|---|
{chr(10).join(lines)}

Full call {full:.1f} ms vs the slowest source alone ({slowest}, {medians[slowest]:.1f} ms): **{ratio:.2f}x**
(target <= {TARGET}x); per repeat, full / that repeat's slowest source: median {med(d.per_repeat):.2f}x. This
process's CPU per full call: {med(d.full_own_cpu):.1f} ms; the whole machine's: {med(d.full_machine_cpu):.0f} ms.
""",
    )


# --------------------------------------------------------------------------- acks while POST /changes is flooded


def flood_batch(serial: int, count: int) -> list[dict[str, Any]]:
    """`count` valid change events, ids unique per process and batch."""
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        {
            "id": f"flood-{os.getpid()}-{serial}-{j}",
            "at": at,
            "source": "bench-ci",
            "service": f"svc-{j % DEPLOYMENTS}",
            "environment": "prod",
            "summary": f"deploy svc-{j % DEPLOYMENTS} build {serial}",
            "url": f"https://ci.example.com/runs/{serial}",
            "labels": {"team": "payments"},
        }
        for j in range(count)
    ]


async def flood(url: str, token: str, events: int, batch: int, connections: int) -> dict[str, Any]:
    """The flooding child's work: POST /changes from `connections` workers until stdin closes and `events` were
    stored; prints `flooding` once the first POST was answered 200, then returns its numbers."""
    stop = asyncio.Event()
    first = asyncio.Event()
    serial = itertools.count()
    statuses: Counter[int] = Counter()
    post_ms: list[float] = []
    done = {"events": 0, "last": 0.0}
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}

    async def watch_stdin() -> None:
        await asyncio.to_thread(sys.stdin.read)
        stop.set()

    async def worker(session: aiohttp.ClientSession) -> None:
        while not (stop.is_set() and done["events"] >= events):
            data = json.dumps(flood_batch(next(serial), batch)).encode()
            began = time.perf_counter()
            async with session.post(url, data=data, headers=headers) as r:
                await r.read()
                statuses[r.status] += 1
            post_ms.append((time.perf_counter() - began) * 1000)
            if r.status == 200:
                done["events"] += batch
                done["last"] = time.monotonic()
                first.set()

    watcher = asyncio.create_task(watch_stdin())
    began = time.monotonic()
    connector = aiohttp.TCPConnector(limit=connections, force_close=True)  # one connection per POST, as CI jobs
    async with aiohttp.ClientSession(connector=connector) as session:
        workers = [asyncio.create_task(worker(session)) for _ in range(connections)]
        await asyncio.wait([asyncio.create_task(first.wait()), *workers], return_when=asyncio.FIRST_COMPLETED)
        print("flooding", flush=True)
        await asyncio.gather(*workers)
    await watcher
    seconds = time.monotonic() - began
    return {
        "events": done["events"],
        "posts": len(post_ms),
        "statuses": dict(statuses),
        "post_p50_ms": med(post_ms),
        "post_p99_ms": pct(post_ms, 99),
        "seconds": seconds,
        "last_stored": done["last"],
    }


@contextlib.asynccontextmanager
async def flooding(port: int) -> AsyncIterator[dict[str, Any]]:
    """A `--flood` child POSTing to the app's /changes for as long as the block runs; its numbers afterwards."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.changes",
        "--flood",
        f"http://127.0.0.1:{port}/changes",
        cwd=product.ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stats: dict[str, Any] = {}
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if line.strip() != b"flooding":
            raise RuntimeError(f"the flood did not start: {line!r}")
        yield stats
    finally:
        proc.stdin.close()
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
        if out.strip():
            stats.update(json.loads(out.decode().strip().splitlines()[-1]))


@dataclass
class Burst:
    """One burst of mentions: ack ms and mention -> :eyes: ms each, when its last ack was read and its runs'
    answers were all posted (monotonic), and when it was sent."""

    acks: list[float]
    mentions: dict[str, float]  # mention ts -> when it was sent
    sent_at: float
    last_ack: float
    eyes: list[float] = field(default_factory=list)
    last_answer: float = 0.0


async def send_burst(p: product.Product, n: int) -> tuple[Burst, int]:
    """`n` mentions at once, each a run that answers at once; returns once every one is acked (the burst, and the
    answer count to wait for)."""
    p.model.script(*[product.incident(1) for _ in range(n)])
    answered = len(p._final_calls())
    sent: dict[str, tuple[str, float]] = {}  # envelope id -> (mention ts, sent at)
    acked = p.slack.acked_at  # envelope id -> when its ack frame was read (stamped by the stand-in)
    all_acked = asyncio.Event()

    def on_change() -> None:
        if len(sent) == n and all(e in acked for e in sent):
            all_acked.set()

    async def one(i: int) -> None:
        event = mention_event(
            product.CHANNEL, product.ALICE, f"host web-{i:03d} is out of disk", bot_user_id=p.slack.bot_user_id
        )
        at = time.monotonic()
        sent[await p.slack.send_event(event)] = (event["ts"], at)

    unwatch = p.slack.watch(on_change)
    began = time.monotonic()
    try:
        await asyncio.gather(*(one(i) for i in range(n)))
        on_change()  # the last acks may have come before the last send_event returned
        await asyncio.wait_for(all_acked.wait(), 60)
    finally:
        unwatch()
    acks = [(acked[e] - at) * 1000 for e, (_, at) in sent.items()]
    last_ack = max(acked[e] for e in sent)
    return Burst(acks=acks, mentions=dict(sent.values()), sent_at=began, last_ack=last_ack), answered + n


async def finish_burst(p: product.Product, burst: Burst, answers: int) -> Burst:
    """Once every run of `burst` answered: its :eyes: times and when its last answer was posted."""
    posted = await p.wait_answers(answers)
    eyes = {
        c.args.get("timestamp"): c.at
        for c in p.slack.calls
        if c.method == "reactions.add" and c.ok and c.args.get("name") == "eyes"
    }
    burst.eyes = [(eyes[ts] - at) * 1000 for ts, at in burst.mentions.items() if ts in eyes]
    burst.last_answer = max(posted.values())
    return burst


@dataclass
class Acks:
    idle: list[float] = field(default_factory=list)
    flooded: list[float] = field(default_factory=list)
    idle_eyes: list[float] = field(default_factory=list)
    flooded_eyes: list[float] = field(default_factory=list)
    idle_answers_s: list[float] = field(default_factory=list)  # burst sent -> its last answer posted
    flooded_answers_s: list[float] = field(default_factory=list)
    floods: list[dict[str, Any]] = field(default_factory=list)
    overlapped: int = 0  # flooded bursts whose flood was still storing events after the burst's last ack


async def measure_acks(rounds: int) -> Acks:
    port = _free_port()
    os.environ[TOKEN_ENV] = TOKEN
    config = f'\n[changes]\n\n[changes.webhook]\nlisten = "127.0.0.1:{port}"\ntoken_env = "{TOKEN_ENV}"\n'
    a = Acks()
    async with product.running(slack_config=config) as p:
        async with asyncio.timeout(60), aiohttp.ClientSession() as session:
            while True:  # the webhook listens once the bot is connected and its services started
                try:
                    async with session.post(
                        f"http://127.0.0.1:{port}/changes",
                        json=flood_batch(-1, 1),
                        headers={"Authorization": f"Bearer {TOKEN}"},
                    ) as r:
                        assert r.status == 200, f"POST /changes: HTTP {r.status}"
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.1)
        await finish_burst(p, *await send_burst(p, BURST))  # the warm-up: a fresh process is slower (section 16)
        for _ in range(rounds):
            idle = await finish_burst(p, *await send_burst(p, BURST))
            a.idle += idle.acks
            a.idle_eyes += idle.eyes
            a.idle_answers_s.append(idle.last_answer - idle.sent_at)
            async with flooding(port) as stats:  # the flood stops once the burst is acked (and 2,000 are stored)
                flooded, answers = await send_burst(p, BURST)
            flooded = await finish_burst(p, flooded, answers)
            a.flooded += flooded.acks
            a.flooded_eyes += flooded.eyes
            a.flooded_answers_s.append(flooded.last_answer - flooded.sent_at)
            a.floods.append(stats)
            a.overlapped += stats.get("last_stored", 0.0) > flooded.last_ack
    return a


def acks_rows(a: Acks, row: Row, section: Section, rounds: int) -> None:
    i50, i99, f50, f99 = med(a.idle), pct(a.idle, 99), med(a.flooded), pct(a.flooded, 99)
    ratio = f99 / i99
    events = sum(int(s.get("events", 0)) for s in a.floods)
    seconds = sum(float(s.get("seconds", 0.0)) for s in a.floods)
    posts = sum(int(s.get("posts", 0)) for s in a.floods)
    statuses: Counter[str] = Counter()
    for s in a.floods:
        statuses.update({str(k): int(v) for k, v in s.get("statuses", {}).items()})
    row(
        "Changes: acks while POST /changes is flooded",
        f"ack p50 {f50:.1f} / p99 {f99:.1f} ms flooded vs p50 {i50:.1f} / p99 {i99:.1f} ms idle ({ratio:.2f}x)",
        f"flooded ack p99 <= {ACK_TARGET}x idle p99",
        ratio <= ACK_TARGET,
        miss=f"{ratio:.2f}x; see the Changes section",
    )
    post50 = med([float(s["post_p50_ms"]) for s in a.floods])
    post99 = max(float(s["post_p99_ms"]) for s in a.floods)
    section(
        "Changes: Slack acks while POST /changes is flooded (changes)",
        f"""
`opsloop run` as a child process (bench/product.py) with `[changes.webhook]` on a loopback port. A burst of
{BURST} mentions at once (each starts a run that answers at once) with nothing else going on (idle), and the
same burst while a child process floods `POST /changes` ({FLOOD_CONNECTIONS} workers, one connection per POST,
{FLOOD_BATCH} events a POST, from before the burst's first mention until every mention is acked and at least
{FLOOD_EVENTS:,} events were stored), interleaved {rounds} times after a warm-up burst. Ack latency: from asking
the fake Slack to send the envelope to the moment it read the ack frame (as section 1).

| | mentions | ack p50 ms | ack p99 ms | ack max ms | mention to :eyes: p50 ms | p99 ms |
|---|---|---|---|---|---|---|
| idle | {len(a.idle)} | {i50:.1f} | {i99:.1f} | {max(a.idle):.1f} | {med(a.idle_eyes):.0f} | \
{pct(a.idle_eyes, 99):.0f} |
| `POST /changes` flooded | {len(a.flooded)} | {f50:.1f} | {f99:.1f} | {max(a.flooded):.1f} | \
{med(a.flooded_eyes):.0f} | {pct(a.flooded_eyes, 99):.0f} |

A burst's {BURST} runs, from its first mention to its last answer posted: idle median
{med(a.idle_answers_s):.2f} s, flooded median {med(a.flooded_answers_s):.2f} s (the flood stops once the burst is
acked and at least {FLOOD_EVENTS:,} events were stored, so the runs finish partly after it).

Flooded / idle ack p99: **{ratio:.2f}x** (target <= {ACK_TARGET}x), p50 {f50 / i50:.2f}x. The floods ({rounds}, one per
flooded burst, {FLOOD_CONNECTIONS} connections, {FLOOD_BATCH} events a POST) stored {events:,} events in {posts:,}
POSTs over {seconds:.1f} s ({events / seconds:,.0f} events/s; answers {dict(statuses)}; POST p50 {post50:.0f} ms,
worst p99 {post99:.0f} ms), and in {a.overlapped} of {rounds} flooded bursts the flood was still storing events after
the burst's last ack (it starts before the burst's first mention). The bench process (the fake Slack that times the
acks) does not flood: a child process does, so the flood's client work does not delay the ack timestamps.
The store's writer has three lanes (bot/store/writer.py): the ack's own write (urgent) first, then the runs'
writes, then the flood's (background): each waits only for the one transaction in progress. What is left of the
flood's cost is the webhook's handlers (JSON, checks) on the same event loop as Socket Mode, with the flooding
client on the same 2 CPUs.
""",
    )


# --------------------------------------------------------------------------- entry points


async def run_all(row: Row, section: Section, *, repeats: int, rounds: int) -> None:
    """Both parts: their summary rows and sections."""
    delayed = {delay_ms: Changes() for delay_ms in NETWORK_DELAYS_MS}
    changes_rows(await measure_changes(repeats, delayed), row, section, repeats)
    for delay_ms, d in delayed.items():
        delayed_rows(d, delay_ms, row, section, repeats)
    acks_rows(await measure_acks(rounds), row, section, rounds)


async def bench(report: Any, args: argparse.Namespace) -> None:
    """`python -m bench`'s Changes sections (`--only changes`)."""
    quick = bool(getattr(args, "quick", False))
    repeats = 3 if quick else int(getattr(args, "repeats", 11))
    await run_all(report.row, report.section, repeats=repeats, rounds=1 if quick else 3)


async def _print(repeats: int, rounds: int) -> None:
    rows: list[tuple[str, str, str, str]] = []
    sections: list[str] = []

    def row(name: str, result: str, target: str, ok: bool | None, miss: str = "") -> None:
        rows.append((name, result, target, "n/a" if ok is None else "met" if ok else f"missed: {miss}"))

    await run_all(
        row, lambda title, body: sections.append(f"## {title}\n\n{body.strip()}\n"), repeats=repeats, rounds=rounds
    )
    print("\n".join(sections))
    print("| benchmark | result | target | verdict |\n|---|---|---|---|")
    print("\n".join("| " + " | ".join(r) + " |" for r in rows))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.changes", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11, help="timed repeats of recent_changes (default 11)")
    parser.add_argument("--rounds", type=int, default=3, help="idle and flooded ack bursts each (default 3)")
    parser.add_argument("--serve-kube", type=Path, help=argparse.SUPPRESS)  # the fake clusters' child process
    parser.add_argument("--flood", help=argparse.SUPPRESS)  # the flooding child process: the /changes URL
    args = parser.parse_args(argv)
    if args.serve_kube is not None:
        asyncio.run(serve_kube(args.serve_kube))
    elif args.flood is not None:
        token = os.environ[TOKEN_ENV]
        stats = asyncio.run(flood(args.flood, token, FLOOD_EVENTS, FLOOD_BATCH, FLOOD_CONNECTIONS))
        print(json.dumps(stats), flush=True)
    else:
        asyncio.run(_print(args.repeats, args.rounds))


if __name__ == "__main__":
    main()
