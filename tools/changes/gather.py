"""Every change source read at once: one coroutine per source, each with its own timeout, so the answer takes
as long as the slowest source and a source that fails (an error, a timeout) is one SourceFailure while the
others still answer. A source whose answer is cut (a `Cut`) gives its changes and one SourceFailure with `cut`
saying what is missing, so a timeline never ends early without saying so.

A Kubernetes 403 (PermissionDenied) is a failure line here too: elsewhere it stops the run, but one
namespace that forbids listing events should not hide what every other source saw. Changes a source
returns outside [since, until] are dropped, so every source means the same window.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from tools.api import PermissionDenied, ToolError, exception_text
from tools.changes.model import Change, Cut, SourceFailure

TIMEOUT_S = 20.0
Read = Callable[[datetime, datetime], Awaitable[Sequence[Change] | Cut]]


@dataclass(frozen=True)
class Source:
    """One thing to read: `read(since, until)` answers its changes (a Cut when not all of them) or raises;
    `source` and `target` name it."""

    source: str  # "kubernetes", "host", "git", "webhook"
    target: str  # "prod-eu/web", "web-03", "deploy-config (main)", "stored events"
    read: Read
    timeout_s: float = TIMEOUT_S


async def _one(source: Source, since: datetime, until: datetime) -> Sequence[Change] | Cut | SourceFailure:
    try:
        return await asyncio.wait_for(source.read(since, until), source.timeout_s)
    except TimeoutError:
        return SourceFailure(source.source, source.target, f"no answer within {source.timeout_s:g}s")
    except (ToolError, PermissionDenied) as e:
        return SourceFailure(source.source, source.target, str(e) or type(e).__name__)
    except Exception as e:  # a bug in one reader must not hide the others; it is named, not swallowed
        return SourceFailure(source.source, source.target, exception_text(e))


async def gather(
    sources: Sequence[Source], since: datetime, until: datetime
) -> tuple[list[Change], list[SourceFailure]]:
    """All sources concurrently: (every change in [since, until], one SourceFailure per source that failed or
    was cut)."""
    if since.tzinfo is None or until.tzinfo is None:
        raise ValueError("the window's ends must carry a time zone")
    answers = await asyncio.gather(*(_one(s, since, until) for s in sources))
    changes: list[Change] = []
    failures: list[SourceFailure] = []
    for source, answer in zip(sources, answers, strict=True):
        if isinstance(answer, SourceFailure):
            failures.append(answer)
            continue
        if isinstance(answer, Cut):
            failures.append(SourceFailure(source.source, source.target, answer.why, cut=True))
        found = answer.changes if isinstance(answer, Cut) else answer
        changes += [c for c in found if since <= c.at <= until]
    return changes, failures
