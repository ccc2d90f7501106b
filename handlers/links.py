"""Links to Slack messages, built without a chat.getPermalink call (Slack resolves them in the reader's workspace)."""

from __future__ import annotations


def permalink(channel: str, ts: str, thread_ts: str | None = None) -> str:
    """A link to a message Slack resolves in the reader's workspace (no chat.getPermalink call per line)."""
    link = f"https://slack.com/archives/{channel}/p{ts.replace('.', '')}"
    return f"{link}?thread_ts={thread_ts}&cid={channel}" if thread_ts and thread_ts != ts else link
