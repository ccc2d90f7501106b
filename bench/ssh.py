"""Issue 19's benchmark: what a host tool's SSH round costs, first call vs reused connection, and 4 hosts at once.

    python -m bench --only ssh   # just this (section 11), spliced into the existing RESULTS.md

Four throwaway OpenSSH servers on 127.0.0.1 (tests.support.sshserver.SshServer) stand in for four hosts; the
commands go through the real `SshPool.run` (quoted, `timeout`-wrapped, `head`-bounded), `df -P` being what
check_disk will run remotely.

- first call: a fresh pool each time, so TCP + key exchange + public-key auth + one session;
- later calls: the same pool's connection, one session each;
- bare: asyncssh's own `conn.run("df -P")` on that connection, without opsloop's wrapper, for the overhead;
- 4 hosts in one turn: `df -P` on the 4 hosts at once (warm connections) vs the slowest of the 4 alone.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable

from tests.support.sshserver import SshServer, missing_reason
from tools.remote.inventory import Host, Inventory, SshSettings
from tools.remote.pool import SshPool

med = statistics.median
Row = Callable[..., None]  # Report.row(name, result, target, ok, miss="")
ARGV = ("df", "-P")
HOSTS = 4
TARGET = 1.2  # 4 hosts in one turn vs the slowest single call


def _inventory(servers: list[SshServer]) -> Inventory:
    hosts = tuple(
        Host(name=f"web-{i:02d}", address=s.address, port=s.port, identity_file=s.client_key, known_hosts=s.known_hosts)
        for i, s in enumerate(servers, 1)
    )
    return Inventory(SshSettings(), hosts)


async def _ms(work: Awaitable[object]) -> float:
    started = time.perf_counter()
    await work
    return (time.perf_counter() - started) * 1000


async def measure(servers: list[SshServer], repeats: int) -> dict[str, list[float]]:
    inventory = _inventory(servers)
    hosts = list(inventory)
    out: dict[str, list[float]] = {
        "first": [],
        "later": [],
        "bare": [],
        "single_max": [],
        "together": [],
        "one_host_4": [],
        "client_cpu": [],
    }
    for _ in range(repeats):
        pool = SshPool(inventory)
        try:
            out["first"].append(await _ms(pool.run(hosts[0], ARGV, timeout_s=10)))
        finally:
            await pool.close()
    pool = SshPool(inventory)
    try:
        for h in hosts:  # warm every connection
            await pool.run(h, ARGV, timeout_s=10)
        conn = pool._links[hosts[0].name].conn
        assert conn is not None
        for _ in range(repeats):
            out["later"].append(await _ms(pool.run(hosts[0], ARGV, timeout_s=10)))
            out["bare"].append(await _ms(conn.run("df -P", check=True)))
            singles = [await _ms(pool.run(h, ARGV, timeout_s=10)) for h in hosts]
            out["single_max"].append(max(singles))
            cpu = time.process_time()
            out["together"].append(await _ms(asyncio.gather(*(pool.run(h, ARGV, timeout_s=10) for h in hosts))))
            out["client_cpu"].append((time.process_time() - cpu) * 1000 / HOSTS)
            out["one_host_4"].append(
                await _ms(asyncio.gather(*(pool.run(hosts[0], ARGV, timeout_s=10) for _ in range(HOSTS))))
            )
        assert all(pool.connections_made(h) == 1 for h in hosts)  # every later call reused its connection
    finally:
        await pool.close()
    return out


async def run_all(row: Row, section: Callable[[str, str], None], *, repeats: int) -> None:
    """Section 11 (it says so and skips when OpenSSH is not installed)."""
    if (reason := missing_reason()) is not None:
        row("11. Hosts over SSH", f"skipped: {reason}", "", None)
        return
    servers = [SshServer().start() for _ in range(HOSTS)]
    try:
        m = await measure(servers, repeats)
    finally:
        for s in servers:
            s.stop()
    first, later, bare = med(m["first"]), med(m["later"]), med(m["bare"])
    ratios = [t / s for t, s in zip(m["together"], m["single_max"], strict=True)]
    ratio = med(ratios)
    one_host = med([t / s for t, s in zip(m["one_host_4"], m["single_max"], strict=True)])
    row(
        "11. Hosts over SSH",
        f"first call {first:.0f} ms, later calls {later:.0f} ms (reused connection); "
        f"df -P on 4 hosts at once {ratio:.2f}x the slowest single call",
        f"<= {TARGET}",
        ratio <= TARGET,
        miss="see section 11",
    )
    lines = [
        ["first call (TCP, key exchange, auth, one session)", f"{first:.1f}", f"{min(m['first']):.1f}"],
        ["later call (reused connection, one session)", f"{later:.1f}", f"{min(m['later']):.1f}"],
        ["bare asyncssh `conn.run('df -P')` on that connection", f"{bare:.1f}", f"{min(m['bare']):.1f}"],
        ["slowest of the 4 hosts, one at a time", f"{med(m['single_max']):.1f}", f"{min(m['single_max']):.1f}"],
        ["the 4 hosts at once", f"{med(m['together']):.1f}", f"{min(m['together']):.1f}"],
        [
            "4 calls on one host at once (4 sessions, one connection)",
            f"{med(m['one_host_4']):.1f}",
            f"{min(m['one_host_4']):.1f}",
        ],
    ]
    body = "\n".join(["| what | median ms | min ms |", "|---|---|---|", *(f"| {a} | {b} | {c} |" for a, b, c in lines)])
    section(
        "11. Hosts over SSH: first call, reused connection, 4 hosts in one turn",
        f"""
`df -P` (what check_disk runs on a remote host) through the real `SshPool.run` against {HOSTS} throwaway
OpenSSH servers on 127.0.0.1 (`tests.support.sshserver`), each logging in the user the bench runs as with an ed25519
key; {repeats} repeats, medians. The first call makes a fresh pool each time; the later ones reuse its
connection (one connection per host for the whole run: checked).

{body}

4 hosts at once: {ratio:.2f}x the slowest single call (target <= {TARGET}); 4 sessions on one host:
{one_host:.2f}x. opsloop's wrapper (`sh -c`, `timeout`, two `head`s, the exit status through a pipe) costs
{later - bare:+.1f} ms over asyncssh's bare `conn.run` (about 8 short processes on the host). opsloop's own
CPU (this process: asyncssh's crypto and the pool) is {med(m["client_cpu"]):.1f} ms per call when the 4 run at
once. The {HOSTS} "hosts" are sshd's on this same machine, so their sessions, shells and `df` compete with the
client and with each other for its {os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} when this
ran): on separate hosts only the client's share overlaps, and this ratio is an upper bound. The test
servers give sessions an empty HOME, so no rc file of the bench user's runs in them (root's `.bashrc` here
runs `pyenv init`, 100+ ms a session, which would be the host's cost, not opsloop's).
""",
    )
