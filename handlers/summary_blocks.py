"""The living summary as Block Kit: three sections (What's going on, Likely cause, Next) for the status message.

A pure builder, no Slack imports. Every text the model wrote is redacted, escaped (`messages.escape`: no
`<!channel>`, `<@U…>` or `<http://evil|ok>` survives as markup), has its hidden characters revealed, and goes
in `verbatim` mrkdwn so Slack links nothing by itself. Each section stays within 3,000 characters whatever the
text: when escaping makes the items too long, each is cut to an equal share, with an ellipsis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.core.redact import redact
from bot.run.summary import SECTION_TITLES, Confidence, HypothesisStatus, Summary
from handlers import messages as m
from handlers.mrkdwn import SECTION_TEXT_MAX, reveal

BLOCK_IDS = ("summary_situation", "summary_cause", "summary_next")
NOT_KNOWN_YET = "Not known yet."
NOTHING_YET = "Nothing yet."
_ELLIPSIS = "…"
_STATUS = {
    HypothesisStatus.CONFIRMED: "*Confirmed*",
    HypothesisStatus.SUPPORTED: "*Supported*",
    HypothesisStatus.OPEN: "Open",
    HypothesisStatus.REFUTED: "~Refuted~",
}


def summary_blocks(summary: Summary) -> list[dict[str, Any]]:
    """Three section blocks, in the contract's order; hypotheses confirmed, supported, open, refuted."""
    going_on, cause, nxt = SECTION_TITLES
    causes = [(f"• {_STATUS[h.status]}, {_confidence(h.confidence)}: ", h.statement) for h in summary.ordered()]
    steps = [("• ", step) for step in summary.next_steps]
    return [
        _section(BLOCK_IDS[0], going_on, [("", summary.situation)], NOT_KNOWN_YET),
        _section(BLOCK_IDS[1], cause, causes, NOT_KNOWN_YET),
        _section(BLOCK_IDS[2], nxt, steps, NOTHING_YET),
    ]


def _confidence(c: Confidence) -> str:
    return f"{c} confidence"


def _show(text: str) -> str:
    """Model text as safe mrkdwn: redacted, escaped, hidden characters written out, on one line."""
    return reveal(m.escape(" ".join(redact(text).split())), prose=True)


def _section(block_id: str, title: str, items: Sequence[tuple[str, str]], empty: str) -> dict[str, Any]:
    head = f"*{title}*"
    items = [(prefix, raw) for prefix, raw in items if raw.strip()]
    if not items:
        return _block(block_id, f"{head}\n{empty}")
    lines = [prefix + _show(raw) for prefix, raw in items]
    if len(head) + sum(1 + len(line) for line in lines) > SECTION_TEXT_MAX:
        share = (SECTION_TEXT_MAX - len(head)) // len(items) - 1
        lines = [prefix + _cut(" ".join(redact(raw).split()), share - len(prefix)) for prefix, raw in items]
    return _block(block_id, "\n".join([head, *lines]))


def _cut(raw: str, budget: int) -> str:
    """The longest prefix of `raw` (already redacted) whose shown form, with an ellipsis, fits `budget`; the cut
    falls on `raw`, before escaping, so it never splits an `&amp;` or a revealed `⟨U+…⟩`."""
    shown = reveal(m.escape(raw), prose=True)
    if len(shown) <= budget:
        return shown
    lo, hi = 0, len(raw)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(reveal(m.escape(raw[:mid]), prose=True)) + len(_ELLIPSIS) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return reveal(m.escape(raw[:lo].rstrip()), prose=True) + _ELLIPSIS


def _block(block_id: str, text: str) -> dict[str, Any]:
    return {"type": "section", "block_id": block_id, "text": {"type": "mrkdwn", "text": text, "verbatim": True}}
