"""[[alerts.slack]]: which integration's messages in which channel are alerts (docs/alerts.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.config.reader import Reader
from handlers.alerts.source import RUNS_PER_10_MIN, read_route


@dataclass(frozen=True, kw_only=True)
class SlackAlertConfig:
    """One [[alerts.slack]] entry: alert messages an integration posts in a channel start runs."""

    channel: str  # the channel id (C…) or #name (required)
    senders: tuple[str, ...]  # bot_id (B…) or app_id (A…) of the integration (required)
    match: str = ""  # RE2 over the message text (attachments and blocks included); empty: every message
    ignore: str = ""  # RE2; a match starts nothing; empty: nothing is ignored
    max_runs_per_10_min: int = RUNS_PER_10_MIN

    @classmethod
    def read(cls, r: Reader) -> SlackAlertConfig:
        channel, limit = read_route(r, ("channel", "senders", "match", "ignore", "max_runs_per_10_min"))
        senders = r.str_list("senders", [])
        if not senders:
            r.problem("required (the bot_id B… or app_id A… that posts the alerts)", "senders")
        for who in senders:
            if who[:1] not in ("B", "A"):
                r.problem(f"{who!r} is neither a bot_id (B…) nor an app_id (A…)", "senders")
        patterns = {key: r.str(key, "", empty_ok=True) for key in ("match", "ignore")}
        for key, pattern in patterns.items():
            try:
                alert_regex(pattern)
            except ValueError as e:
                r.problem(
                    f"invalid regular expression {pattern!r} (RE2 syntax, no backreferences or lookaround): {e}", key
                )
        return cls(channel=channel, senders=tuple(senders), max_runs_per_10_min=limit, **patterns)


def alert_regex(pattern: str) -> Any:
    """`pattern` compiled by RE2 (linear-time matching); raises ValueError naming the problem."""
    import re2

    options = re2.Options()
    options.log_errors = False  # RE2's own C++ log (absl's "WARNING: All log messages before…") is not our line
    try:
        return re2.compile(pattern, options)
    except re2.error as e:
        arg = e.args[0] if e.args else ""
        raise ValueError(arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)) from None
    except UnicodeError:
        raise ValueError("not valid Unicode") from None
