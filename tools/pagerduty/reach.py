"""The PagerDuty reach (README, PagerDuty): `[pagerduty]` read, the acknowledge and resolve tools offered, the note
sender run beside the runs, its `opsloop check` (the token, each named service, each id `[alerts.pagerduty] routes`
names), and at each run's start the link between the run and the incident its alert names (the
`pagerduty_incident_id` label)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from bot.config.reader import Reader, read
from bot.store import Tables
from tools.api import AtEnd, Offer, RunScope, Service, some_names
from tools.pagerduty.settings import PagerDutyConfig, incident_of
from tools.pagerduty.store import TABLES, final_noted, link_run
from tools.reach import Reach, secret

if TYPE_CHECKING:
    from tools.pagerduty.client import PagerDuty


async def _route_line(client: PagerDuty, route: str) -> str:
    """What a route's id is in PagerDuty: a service (GET /services/{id}), else an escalation policy (GET
    /escalation_policies/{id}), else a problem."""
    from tools.pagerduty.client import PagerDutyError

    where = f"pagerduty: alerts.pagerduty.routes {route}"
    try:
        return f"{where}: service {await client.service(route)}: ok"
    except PagerDutyError as e:
        if e.status != 404:
            return f"{where}: {e}"
    try:
        return f"{where}: escalation policy {await client.escalation_policy(route)}: ok"
    except PagerDutyError as e:
        return f"{where}: no service or escalation policy has this id" if e.status == 404 else f"{where}: {e}"


class PagerDutyReach(Reach):
    name: str = "pagerduty"
    sections: tuple[str, ...] = ("pagerduty",)
    hint: str = "[pagerduty]"
    modules: tuple[str, ...] = ("tools.pagerduty.tools",)
    tables: Tables = TABLES

    def parse(self, config: Reader, env: Mapping[str, str]) -> PagerDutyConfig | None:
        """The `[pagerduty]` table, every problem recorded on `config`, with the secrets its variables name and the
        ids `[alerts.pagerduty] routes` names (that alert source reads the table and says its problems); None when
        absent."""
        if not config.has("pagerduty"):
            return None
        alerts = config.table.get("alerts")
        source = alerts.get("pagerduty") if isinstance(alerts, Mapping) else None
        routes = source.get("routes") if isinstance(source, Mapping) else None
        ids = tuple(str(k) for k in routes if k != "*") if isinstance(routes, Mapping) else ()
        found = read(PagerDutyConfig, config.at("pagerduty"), token=None, routing_key=None, routes=ids)
        if found is None:
            return None
        token, key = secret(env, found.token_env), secret(env, found.events_routing_key_env)
        return dataclasses.replace(found, token=token, routing_key=key)

    def environment(self, config: PagerDutyConfig) -> list[str]:
        line = "PagerDuty: a paged run's incident gets opsloop's notes; pagerduty_acknowledge and pagerduty_resolve"
        return [line + (f"; services {some_names(list(config.services))}" if config.services else "")]

    async def check(self, config: PagerDutyConfig) -> tuple[list[str], list[str]]:
        """One line for the token (GET /users/me), one per named service (GET /services/{id}), one per id the PagerDuty
        alert source routes by (a service, or an escalation policy), one for the change events' routing key; the
        problems found."""
        from tools.pagerduty.client import PagerDuty, PagerDutyError

        if config.token is None:
            problem = f"pagerduty: {config.token_env} is not set: no notes, no acknowledge or resolve"
            return [problem], [problem]
        client = PagerDuty(config, attempts=1)
        lines: list[str] = []
        problems: list[str] = []
        try:
            lines.append(f"pagerduty: token ok ({await client.me()}) at {config.base_url}")
        except PagerDutyError as e:
            if e.status == 400:  # an account-level token has no user: /users/me is a 400 for it, and it still works
                lines.append(f"pagerduty: account token at {config.base_url} (no user of its own)")
            else:
                lines.append(f"pagerduty: token: {e}")
                problems.append(f"pagerduty: token: {e}")
        for service in config.services:
            try:
                lines.append(f"pagerduty.services {service}: {await client.service(service)}: ok")
            except PagerDutyError as e:
                lines.append(f"pagerduty.services {service}: {e}")
                problems.append(f"pagerduty.services {service}: {e}")
        for route in config.routes:
            line = await _route_line(client, route)
            lines.append(line)
            if not line.endswith(": ok"):
                problems.append(line)
        lines.append(
            "pagerduty: change events on, by routing key"
            if config.routing_key
            else f"pagerduty: change events off ({config.events_routing_key_env} is not set)"
        )
        if not config.notes_from:
            lines.append("pagerduty: notes_from is not set: an account-level token can't write notes without it")
        return lines, problems

    def services(self, config: PagerDutyConfig, resources: Mapping[type, object]) -> list[Service]:
        """The note sender, when the app shares its store (not in `opsloop check` or replay)."""
        from bot.store import Store
        from tools.pagerduty.sender import NoteSender

        store = resources.get(Store)
        return [NoteSender(store, config)] if isinstance(store, Store) and config.token is not None else []

    async def offer(self, config: PagerDutyConfig, resources: Mapping[type, object], scope: RunScope) -> Offer | None:
        """A paged run is linked to its incident at its start (so its summary's note finds it) and says so."""
        from bot.store import Store

        store, found = resources.get(Store), incident_of(scope.labels)
        if not isinstance(store, Store) or found is None:
            return None
        await link_run(store, scope.run_id, *found)
        return Offer(
            source="pagerduty", thread_line=(f"PagerDuty incident {found[0]}: opsloop's findings go to its notes",)
        )

    def at_end(self, config: PagerDutyConfig) -> AtEnd:
        """The answer or handoff report becomes a note, in the run's ending transaction."""
        return lambda ledger, run_id, facts: final_noted(ledger, run_id, facts.labels, incident_of(facts.labels))


REACH = PagerDutyReach()
