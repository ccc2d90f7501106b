"""Formatting helpers for the texts in `handlers.messages` (pure; Slack mrkdwn conventions).

Kept apart so the text modules (`messages`, `messages_surfaces`) share them without a cycle;
`handlers.messages` re-exports every name here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

# ---------------------------------------------------------------------------
# Formatting helpers (pure; Slack mrkdwn conventions)
# ---------------------------------------------------------------------------

_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,40}$")
_GROUP_ID = re.compile(r"^S[A-Z0-9]{2,40}$")


def escape(text: str) -> str:
    """Escape the three characters Slack mrkdwn treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def mention(user_id: str | None) -> str:
    """A `<@U…>` mention for a Slack user id; anything else is shown as escaped text."""
    if not user_id:
        return "someone"
    if _USER_ID.match(user_id):
        return f"<@{user_id}>"
    return escape(user_id)


def approver(entity: str) -> str:
    """A user (`U…`) or user group (`S…`) from the approvers config, as a mention."""
    if _GROUP_ID.match(entity):
        return f"<!subteam^{entity}>"
    return mention(entity)


def code(text: str) -> str:
    """Inline code for a short identifier such as a tool name (backticks cannot be escaped)."""
    return "`" + escape(text.replace("`", "'")) + "`"


def slack_date(epoch: float) -> str:
    """A date Slack shows in the reader's own time zone, with a UTC fallback."""
    seconds = int(epoch)
    fallback = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{seconds}^{{date_short_pretty}} at {{time}}|{fallback}>"


def join_or(items: Sequence[str]) -> str:
    """'a', 'a or b', 'a, b or c'."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]


def human_duration(seconds: float) -> str:
    """'42s', '4m 12s', '1h 3m' — wall time an SRE reads at a glance."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def usd(amount: float) -> str:
    """'$0.04'; sub-cent amounts keep enough digits not to read as free."""
    if amount == 0 or abs(amount) >= 0.01:
        return f"${amount:,.2f}"
    return f"${amount:.4f}"


def with_attachments(text: str, file_names: Sequence[str]) -> str:
    """A message as the model reads it: its text, then the names of the files attached to it."""
    if not file_names:
        return text
    return f"{text} [attached: {', '.join(file_names)}]".strip()
