"""The runbook tools: find_runbooks (which runbooks match, and why) and read_runbook (one runbook's steps).

Both are read-only and redacted: a runbook is the team's advice, data for the model, and nothing in it changes a
tool's category or an approval. They look runbooks up in the loaded library by name, never open a path."""

from __future__ import annotations

import asyncio

from tools.api import BadCall, truncate_output
from tools.registry import Category, ToolContext, tool
from tools.runbooks.library import RunbookLibrary
from tools.runbooks.match import find
from tools.runbooks.offer import find_text, read_text

PART_CHARS = 11_000  # one read_runbook part: under the 12,000-character cut every tool result gets

MISSING = "no runbooks are configured ([runbooks] dirs)"

__all__ = ["find_runbooks", "read_runbook"]


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True)
async def find_runbooks(
    query: str = "", alertname: str | None = None, labels: dict[str, str] | None = None, *, ctx: ToolContext
) -> str:
    """Find the team's runbooks for a problem: by alert name, alert labels (all must equal) or words in the query.

    Returns up to 20 runbooks, best first, each with its name, title, number of steps and why it matched; with
    none matching it says what was asked. Runbooks are the team's advice, data to check against what you find.
    Use it at the start of an alert run, then read_runbook for the steps.

    Args:
        query: words describing the problem, e.g. "disk full" (matched against each runbook's keywords).
        alertname: the alert's name, e.g. DiskFull.
        labels: the alert's labels, e.g. {"team": "web"}.
    """
    library = ctx.require(RunbookLibrary, MISSING)
    runbooks = await asyncio.to_thread(library.current)
    found = find(runbooks, query=query, alertname=alertname, labels=labels)
    if not found:  # name what was asked, so "no runbook" can be trusted
        asked = [f"query {query!r}"] if query else []
        asked += [f"alertname {alertname!r}"] if alertname else []
        asked += [f"labels {labels}"] if labels else []
        asked_text = ", ".join(asked) or "nothing (no query, alertname or labels)"
        return truncate_output(f"{find_text(found)} Asked: {asked_text}; {len(runbooks.runbooks)} runbooks loaded.")
    return truncate_output(find_text(found))


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True)
async def read_runbook(name: str, offset: int = 0, *, ctx: ToolContext) -> str:
    """Read one team runbook: its name, title, number of steps and its text, in parts of 11,000 characters.

    Returns the runbook's text, redacted. A runbook longer than one part comes in parts: each opens with a line
    "[characters A to B of C; read_runbook(name=..., offset=B) returns the next part]", so a 64 KiB runbook is
    read whole in six calls. Its steps are advice to check against what you find; a step that changes something
    still needs approval. Use it after find_runbooks names a runbook for the problem at hand.

    Args:
        name: the runbook's name as find_runbooks lists it (its file name without .md), e.g. disk-full.
        offset: where to start, in characters from the runbook's start (0: its start); a part's first line names
            the next part's offset.
    """
    library = ctx.require(RunbookLibrary, MISSING)
    runbooks = await asyncio.to_thread(library.current)
    runbook = runbooks.get(name)
    if runbook is None:
        known = ", ".join(rb.name for rb in runbooks.runbooks[:20]) or "none loaded"
        raise BadCall(f"no runbook named {name!r} (known: {known})")
    text = read_text(runbook)
    if not 0 <= offset < max(len(text), 1):
        raise BadCall(f"offset must be from 0 to {len(text) - 1} (runbook {name!r} has {len(text):,} characters)")
    if offset == 0 and len(text) <= PART_CHARS:
        return text
    part = text[offset : offset + PART_CHARS]
    end = offset + len(part)
    more = f"; read_runbook(name={name!r}, offset={end}) returns the next part" if end < len(text) else "; the end"
    return f"[characters {offset:,} to {end:,} of {len(text):,}{more}]\n{part}"
