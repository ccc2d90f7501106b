"""Issue 20's benchmark: what an in-process Kubernetes client saves per investigation step.

    python -m bench.k8s [--repeats 15]

1. Per read: the opsloop tool (kubernetes_asyncio, one ApiClient kept open) against the fake kube-apiserver
   (tests/support/fakes/kube.py, HTTPS on loopback), next to `kubectl` run as a subprocess for the same read (what a
   runbook command would do), medians of `--repeats` runs after a warm-up (kubectl's discovery cache warm).
2. Four reads in one turn: run together (as the runtime runs parallel-safe reads) vs the slowest of them
   alone, with the fake answering every request after 200 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.support.fakes.kube import FakeKube
from tests.support.fakes.kube_scenes import NS, crashloop
from tools.config import build_registry
from tools.reaches import parse_reaches
from tools.registry import ToolRegistry

POD = "api-7d9f-x2k4q"
READS: list[tuple[str, str, dict[str, Any], list[str]]] = [
    ("get pods -o wide", "k8s_get", {"kind": "pods", "namespace": NS}, ["get", "pods", "-n", NS, "-o", "wide"]),
    (
        "describe deploy",
        "k8s_describe",
        {"kind": "deployment", "name": "api", "namespace": NS},
        ["describe", "deploy", "api", "-n", NS],
    ),
    (
        "logs --previous --tail 50",
        "k8s_logs",
        {"pod": POD, "previous": True, "tail_lines": 50, "namespace": NS},
        ["logs", POD, "-n", NS, "--previous", "--tail", "50"],
    ),
    (
        "rollout history",
        "k8s_rollout_history",
        {"name": "api", "namespace": NS},
        ["rollout", "history", "deploy/api", "-n", NS],
    ),
]


async def timed(fn: Callable[[], Awaitable[Any]], repeats: int) -> float:
    """Median milliseconds of `repeats` calls, after one warm-up."""
    await fn()
    samples = []
    for _ in range(repeats):
        began = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - began) * 1000)
    return statistics.median(samples)


def kubectl(kubeconfig: Path, cache: Path, argv: list[str]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "--cache-dir",
            str(cache),
            *argv,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(argv)}: {err.decode()[:300]}")

    return run


def tool_call(reg: ToolRegistry, name: str, args: dict[str, Any]) -> Callable[[], Awaitable[str]]:
    t = reg.get(name)
    assert t is not None
    return lambda: t.run(args)


async def run(repeats: int) -> str:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeKube() as kube:
            crashloop(kube)
            kc = kube.write_kubeconfig(Path(tmp) / "kubeconfig")
            kubernetes = {"clusters": [{"name": "bench", "kubeconfig": str(kc), "namespaces": [NS]}]}
            async with await build_registry(
                {"modules": ["tools.k8s"]}, reaches=parse_reaches({"kubernetes": kubernetes})
            ) as reg:
                for label, name, args, argv in READS:
                    ours = await timed(tool_call(reg, name, args), repeats)
                    theirs = await timed(kubectl(kc, Path(tmp) / "cache", argv), repeats)
                    rows.append(f"| {label} | {ours:.1f} ms | {theirs:.1f} ms | {theirs / ours:.0f}x |")
                kube.delay_s = 0.2
                calls = [tool_call(reg, name, args) for _, name, args, _ in READS]
                alone = [await timed(c, max(3, repeats // 3)) for c in calls]

                async def together() -> None:
                    await asyncio.gather(*(c() for c in calls))

                kube.max_in_flight = 0
                both = await timed(together, max(3, repeats // 3))
                overlap = kube.max_in_flight
    slowest = max(alone)
    return "\n".join(
        [
            "| read | opsloop tool (in-process client) | kubectl subprocess | kubectl / tool |",
            "| --- | --- | --- | --- |",
            *rows,
            "",
            f"4 reads in one turn, fake answering each request after 200 ms: together {both:.0f} ms vs the slowest "
            f"alone {slowest:.0f} ms ({both / slowest:.2f}x; sum alone {sum(alone):.0f} ms; "
            f"{overlap} requests in flight at once)",
        ]
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.k8s", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    print(asyncio.run(run(parser.parse_args().repeats)))
