"""The incident-memory reach: `[memory] enabled, retention_days`, its tool, its offer at a run's start, the record
it writes as a run ends and its retention sweep."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.config.reader import Reader, setting
from bot.store import Tables
from tools.api import AtEnd, Offer, RunFacts, RunScope, Service
from tools.memory.store import TABLES, record_incident
from tools.reach import Reach


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """[memory]: incident records, kept `retention_days`."""

    enabled: bool = setting(True, "false: nothing is recorded, offered or listed")
    retention_days: float = setting(365.0, "0: keep forever", unit="days", low=0.0)


class MemoryReach(Reach):
    name: str = "memory"
    sections: tuple[str, ...] = ("memory",)
    hint: str = "[memory] enabled = true"
    modules: tuple[str, ...] = ("tools.memory",)
    settings = MemoryConfig
    tables: Tables = TABLES  # incidents, their facets and word counts
    check_stops_run: bool = True  # its check reads only local files: a problem stops `opsloop run` too

    def parse(self, config: Reader, env: Mapping[str, str]) -> MemoryConfig | None:
        """None (nothing recorded, offered or listed) when [memory] is absent or `enabled = false`."""
        found = super().parse(config, env)
        return found if found is not None and found.enabled else None

    async def check(self, config: MemoryConfig) -> tuple[list[str], list[str]]:
        keep = "forever" if config.retention_days <= 0 else f"{config.retention_days:g} days"
        return [f"memory: incident records kept {keep}"], []

    def services(self, config: MemoryConfig, resources: Mapping[type, object]) -> list[Service]:
        """The retention sweep, when the app shares its store (not in `opsloop check` or replay)."""
        from bot.store import Store
        from tools.memory.sweep import MemorySweep

        store = resources.get(Store)
        return [MemorySweep(store, config.retention_days)] if isinstance(store, Store) else []

    def at_end(self, config: MemoryConfig) -> AtEnd:
        """Every run that ends becomes an incident record, in its ending transaction (docs/context.md)."""

        def remember(ledger: Any, run_id: str, facts: RunFacts) -> None:
            record_incident(ledger, run_id, kind=facts.kind, permalink=facts.permalink, labels=facts.labels)

        return remember

    async def offer(self, config: MemoryConfig, resources: Mapping[type, object], scope: RunScope) -> Offer | None:
        from tools.memory.offer import offer_for

        return await offer_for(resources, scope)


REACH = MemoryReach()
