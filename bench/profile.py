"""Where `opsloop run` spends its time per loop iteration, from a cProfile of the real process.

cProfile sees the main thread only: the SQLite writer thread's own work is not in
it (the loop's waits for it are idle time in the selector). `store_latency()` times
the store's calls directly so the store's share can be stated anyway.
"""

from __future__ import annotations

import pstats
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent) + "/"  # files are named from the repository's root

AREAS: list[tuple[str, tuple[str, ...]]] = [
    ("idle: waiting in the selector", ("selectors.py", "<method 'poll' of 'select.epoll'", "<method 'select'")),
    (
        "startup: imports",
        (
            "<frozen importlib",
            "importlib",
            "<built-in method builtins.exec",
            "<built-in method _imp",
            "<built-in method marshal",
            "<built-in method builtins.compile",
            "<built-in method posix.",
            "<frozen posixpath>",
            "<built-in method io.open_code",
            "<built-in method builtins.__build_class__",
            "inspect.py",
            "typing.py",
        ),
    ),
    ("store: bot/store/ + sqlite (main thread)", ("bot/store/", "sqlite_utils", "sqlite3")),
    ("trace/logging: structlog + logging", ("structlog", "/logging/", "bot/core/log.py")),
    (
        "redaction: bot/core/redact.py + re",
        (
            "bot/core/redact.py",
            "/re/",
            "<method 'sub' of 're.Pattern",
            "<method 'search' of 're.Pattern",
            "<method 'finditer' of 're.Pattern",
        ),
    ),
    ("JSON: json module", ("/json/", "<built-in method _json", "<method 'encode' of '_json")),
    ("Slack: slack_sdk/bolt + handlers/", ("slack_sdk", "slack_bolt", "handlers/")),
    (
        "HTTP client: aiohttp/httpx/h11/anyio",
        ("aiohttp", "httpx", "h11", "anyio", "httpcore", "yarl", "multidict", "_socket.socket", "ssl"),
    ),
    ("Anthropic SDK + pydantic", ("anthropic/", "pydantic")),
    ("builtins (isinstance, getattr, ...) called from everywhere", ("<built-in method builtins.",)),
    ("runtime: bot/ (loop, model adapter, history, guards)", ("bot/",)),
    ("tools/", ("tools/",)),
    ("asyncio machinery", ("asyncio",)),
]


def area_of(key: tuple[str, int, str]) -> str:
    filename, _, name = key
    where = f"{filename}:{name}" if filename != "~" else name
    return next((label for label, marks in AREAS if any(m in where for m in marks)), "other")


def steady(path: Path, baseline: Path | None) -> dict[tuple[str, int, str], tuple[float, float, float, float]]:
    """{function: (primitive calls, calls, self s, cumulative s)} of the profile at `path`, less a `baseline` profile
    of the same start-up and warm-up alone: what is left is the timed incidents' (start-up work that is not an
    import, such as pydantic building the SDK's models, no longer reads as a share of each iteration)."""
    raw = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    base = pstats.Stats(str(baseline)).stats if baseline is not None else {}  # type: ignore[attr-defined]
    out = {}
    for key, (cc, nc, tt, ct, _) in raw.items():
        bcc, bnc, btt, bct, _ = base.get(key, (0, 0, 0.0, 0.0, None))
        out[key] = (cc - bcc, nc - bnc, max(0.0, tt - btt), max(0.0, ct - bct))
    return out


def summarize(path: Path, iterations: int, runs: int, *, baseline: Path | None = None) -> str:
    raw = steady(path, baseline)
    by_area: dict[str, float] = {}
    for key, (_, _, tottime, _) in raw.items():
        by_area[area_of(key)] = by_area.get(area_of(key), 0.0) + tottime
    busy = {k: v for k, v in by_area.items() if not k.startswith(("idle", "startup"))}
    total = sum(busy.values())
    rows = sorted(busy.items(), key=lambda kv: -kv[1])
    lines = ["| area (self time) | ms per iteration | share of busy time |", "|---|---|---|"]
    lines += [f"| {k} | {v / iterations * 1000:.3f} | {v / total:.0%} |" for k, v in rows]
    lines.append(f"| **busy total (main thread)** | **{total / iterations * 1000:.3f}** | 100% |")
    # Called at least once per incident: start-up (config, the pricing table's first import of the SDK's types)
    # runs once and would top a cumulative table it has no place in.
    ours = [
        (k, v) for k, v in raw.items() if any(p in k[0] for p in ("/bot/", "/handlers/", "/tools/")) and v[1] >= runs
    ]
    top = sorted(ours, key=lambda kv: -kv[1][3])[:25]
    fn = ["| function (cumulative, main thread) | calls per iteration | ms per iteration |", "|---|---|---|"]
    for (filename, line, name), (_, nc, _, ct) in top:
        short = filename.removeprefix(ROOT)
        fn.append(f"| `{short}:{line} {name}` | {nc / iterations:.1f} | {ct / iterations * 1000:.3f} |")
    hot = sorted(raw.items(), key=lambda kv: -kv[1][2])
    hot = [(k, v) for k, v in hot if area_of(k) not in ("idle: waiting in the selector", "startup: imports")][:20]
    tt = ["| function (self time) | area | calls per iteration | ms per iteration |", "|---|---|---|---|"]
    for key, (_, nc, tottime, _) in hot:
        filename, line, name = key
        short = filename.rsplit("site-packages/", 1)[-1].removeprefix(ROOT)
        tt.append(
            f"| `{short}:{line} {name}` | {area_of(key).split(':')[0]} | {nc / iterations:.1f} | "
            f"{tottime / iterations * 1000:.3f} |"
        )
    return (
        f"`opsloop run` under `python -m cProfile`, {runs} incidents of {iterations // runs} requests "
        f"({iterations} iterations) after a warm-up run, less a profile of the start-up and warm-up alone. Imports "
        "and selector waits are left out of the busy total. "
        "Self time on the main thread, grouped by where the code lives (cProfile adds its own "
        "overhead to every Python call, so read the shares, not the absolute numbers):\n\n"
        + "\n".join(lines)
        + "\n\nopsloop's own functions by cumulative time:\n\n"
        + "\n".join(fn)
        + "\n\nHottest functions by self time:\n\n"
        + "\n".join(tt)
        + "\n"
    )
