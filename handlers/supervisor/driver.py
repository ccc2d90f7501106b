"""What a run's status line and loading status use of the Slack side (typed here, so status.py and loading.py never
import thread.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bot.config.settings import Settings
    from bot.store import Store
    from handlers.names import SlackNames
    from handlers.outbox import Cards
    from handlers.slack_out import SlackOut


class Driver(Protocol):
    """What a run's status line and loading status use of the Slack side (handlers.supervisor.thread.Slack)."""

    settings: Settings
    store: Store
    cards: Cards
    plan_blocks: bool  # False once Slack refused a plan block: every status message is one line from then on
    names: SlackNames
    loading_refresh_seconds: float  # the loading status's timings (LoadingStatus)
    loading_show_after_seconds: float
    loading_min_interval_seconds: float

    @property
    def out(self) -> SlackOut: ...
