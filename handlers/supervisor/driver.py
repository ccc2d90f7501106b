"""What a run's Slack side uses of the Supervisor driving it (typed here, so the run's side never imports it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bot.config.settings import Settings
    from bot.store import Store
    from handlers.approvals import ApprovalDesk
    from handlers.names import SlackNames
    from handlers.outbox import Cards, Outbox
    from handlers.slack_out import SlackOut
    from tools.registry import ToolRegistry


class Driver(Protocol):
    """What a run's Slack side uses of the Supervisor driving it (typed here, so the run's side never imports it)."""

    settings: Settings
    store: Store
    outbox: Outbox
    cards: Cards
    approval_desk: ApprovalDesk
    plan_blocks: bool  # False once Slack refused a plan block: every status message is one line from then on
    stream_answers: bool
    tools: ToolRegistry
    loading_refresh_seconds: float
    loading_show_after_seconds: float
    loading_min_interval_seconds: float
    names: SlackNames

    @property
    def out(self) -> SlackOut: ...

    def first_store_outage(self, run_id: str) -> bool: ...
