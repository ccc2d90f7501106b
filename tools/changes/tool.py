"""`recent_changes`: every configured change source read at once, merged into one timeline (docs/context.md).

The window counts back `since_minutes` from the run's anchor (the alert's start for an alert run, else the
run's start; now outside a run) and runs up to now. Sources: each `[[changes.git]]` repository, each configured
cluster and namespace (the Kubernetes reach's clients), the hosts asked for (`host`, or inventory hosts the
task or the alert's labels name) over the SSH reach's pool, and the change events the webhook stored. One
source failing is one line; the others still answer.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from bot.store import Store
from tools.api import current_run
from tools.changes.events import event_change
from tools.changes.gather import Source, gather
from tools.changes.git import git_changes
from tools.changes.model import Change, Cut, SourceFailure, timeline, utc_minute
from tools.changes.settings import ChangesConfig
from tools.changes.store import changes_between
from tools.registry import Category, ToolContext, ToolError, tool

MAX_SINCE_MINUTES = 7 * 24 * 60
HOSTS_FROM_TASK = 4  # inventory hosts read because the task names them (a `host` argument is always read)
STORED_MAX = 2000  # stored events read per call (newest first); a timeline shows far fewer
NAMED_SOURCES = 12  # the covered line names up to this many sources
if TYPE_CHECKING:
    from tools.changes.k8s import KeyMemory

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _stored(store: Store, service: str | None, limit: int = STORED_MAX) -> Source:
    async def read(since: datetime, until: datetime) -> Sequence[Change] | Cut:
        rows = await changes_between(store, since.timestamp(), until.timestamp(), service=service, limit=limit + 1)
        changes = [event_change(r) for r in rows[:limit]]
        if len(rows) > limit:
            return Cut(changes, f"more than {limit} events in the window, the newest {limit} are listed")
        return changes

    return Source("webhook", "stored events", read)


def _named_hosts(names: Sequence[str], texts: Sequence[str]) -> list[str]:
    """The inventory names that appear as words in `texts` (`web-03`, `web-03:9100`, `web-03.example.com`)."""
    known = set(names)
    found: list[str] = []
    for text in texts:
        for word in _WORD.findall(text):
            for candidate in (word, word.split(":")[0], word.split(".")[0]):
                if candidate in known and candidate not in found:
                    found.append(candidate)
    return found[:HOSTS_FROM_TASK]


def _host_sources(ctx: ToolContext, host: str | None) -> tuple[list[Source], list[SourceFailure]]:
    from tools.remote.inventory import Inventory

    inventory = ctx.resource(Inventory)
    names = inventory.names if inventory is not None else ()
    if host:
        wanted = [host.strip()]
    else:
        run = current_run()
        wanted = _named_hosts(names, [run.task, *run.labels.values()]) if run is not None else []
    sources: list[Source] = []
    failures: list[SourceFailure] = []
    for name in wanted:
        found = inventory.get(name) if inventory is not None else None
        if found is None:
            failures.append(SourceFailure("host", name, "not in the inventory ([[hosts]])"))
            continue
        from tools.changes.packages import host_changes
        from tools.remote.pool import SshPool

        pool = ctx.resource(SshPool)
        if pool is None:
            failures.append(SourceFailure("host", name, "no SSH pool is configured"))
            continue
        sources.append(Source("host", name, functools.partial(host_changes, pool, found)))
    return sources, failures


def key_memory(ctx: ToolContext) -> KeyMemory | None:
    """Where ConfigMap key snapshots are kept (the store), hashed under the install's key; None without a store."""
    from tools.changes.k8s import KeyMemory

    store = ctx.resource(Store)
    if store is None:
        return None
    config = ctx.resource(ChangesConfig)
    key = config.hash_key if config is not None else None
    return KeyMemory(store, key.encode()) if key else KeyMemory(store)


def _kube_sources(ctx: ToolContext, cluster: str | None, namespace: str | None) -> list[Source]:
    from tools.k8s.clusters import KubeClusters

    clusters = ctx.resource(KubeClusters)
    if clusters is None:
        if cluster or namespace:
            raise ToolError("no Kubernetes cluster is configured ([[kubernetes.clusters]])")
        return []
    from tools.changes.k8s import namespace_changes, namespaces

    clients = [clusters.get(cluster)] if cluster else [clusters.get(name) for name in clusters.names()]
    memory = key_memory(ctx)
    return [
        Source("kubernetes", f"{client.name}/{ns}", functools.partial(namespace_changes, client, ns, memory=memory))
        for client in clients
        for ns in namespaces(client, namespace)
    ]


def _pagerduty_sources(ctx: ToolContext) -> list[Source]:
    """PagerDuty's change events on the run's incident's service and the services [pagerduty] names (all of the
    account's when neither names one), when the PagerDuty reach is configured with a token."""
    from tools.pagerduty.client import PagerDuty
    from tools.pagerduty.settings import PagerDutyConfig, incident_of

    config = ctx.resource(PagerDutyConfig)
    if config is None or config.token is None:
        return []
    run = current_run()
    paged = incident_of(run.labels) if run is not None else None
    services = {*config.services, *([paged[1]] if paged and paged[1] else [])}

    async def read(since: datetime, until: datetime) -> Sequence[Change] | Cut:
        found, more = await PagerDuty(config).change_events(since, until)
        changes = [
            Change(at=e.at, source="pagerduty", target=", ".join(e.services) or "account", what=e.summary, ref=e.id)
            for e in found
            if not services or services.intersection(e.services)
        ]
        return Cut(changes, "more change events than one read lists; the newest are missing") if more else changes

    return [Source("pagerduty", ", ".join(sorted(services)) or "every service", read)]


def _matches_service(change: Change, service: str) -> bool:
    if change.source != "kubernetes":
        return True
    name = change.target.rsplit("/", 1)[-1]
    return name == service or name.startswith(f"{service}-")


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=60, idempotent=True)
async def recent_changes(
    since_minutes: int | None = None,
    service: str | None = None,
    host: str | None = None,
    cluster: str | None = None,
    namespace: str | None = None,
    *,
    ctx: ToolContext,
) -> str:
    """What changed recently, read from every configured change source at once: Kubernetes rollouts (with the
    revision number, for k8s_rollout_undo), ConfigMap changes (the data keys added, removed and changed, never
    a value) and scale changes, host package upgrades and reboots, commits in the configured git repositories,
    change events from CI/CD, and PagerDuty's change events on the paged service.

    Returns a first line (how many changes, now, the start), a line naming the window and every source read,
    then one change per line, newest first, with its time relative to the run's start (an alert run: the
    alert's start), its target and its reference last (a commit, a ReplicaSet): change_diff takes the two for the
    detail; a source that could not be read is one line saying why. The window counts back
    since_minutes (at most 10,080, one week) from the start up to now. Use it first in an investigation; a
    problem that built up over days (a filling disk) needs since_minutes of days, not the default.

    Args:
        since_minutes: how far back from the start to look (default: the configured window).
        service: only this service's Kubernetes objects and change events (git commits are always listed).
        host: an inventory host whose package changes and boot to read (default: hosts the task names).
        cluster: only this configured cluster.
        namespace: only this configured namespace.
    """
    config = ctx.require(ChangesConfig, "no [changes] section is configured")
    minutes = config.window_minutes if since_minutes is None else since_minutes
    if not 1 <= minutes <= MAX_SINCE_MINUTES:
        raise ToolError(f"since_minutes must be from 1 to {MAX_SINCE_MINUTES}, got {minutes}")
    now = datetime.now(UTC)
    run = current_run()
    anchor = datetime.fromtimestamp(run.anchor, UTC) if run is not None else now
    since, until = min(anchor, now) - timedelta(minutes=minutes), now
    service = service.strip() if service else None
    sources = [Source("git", repo.target, functools.partial(git_changes, repo)) for repo in config.repos]
    sources += _kube_sources(ctx, cluster, namespace)
    hosts, failures = _host_sources(ctx, host)
    sources += hosts
    if (store := ctx.resource(Store)) is not None:
        sources.append(_stored(store, service))
    sources += _pagerduty_sources(ctx)
    changes, failed = await gather(sources, since, until)
    if service:
        changes = [c for c in changes if _matches_service(c, service)]
    covered = _covered(minutes, since, until, sources, service)
    return timeline(changes, [*failures, *failed], anchor=anchor, now=now, covered=covered)


def _covered(minutes: int, since: datetime, until: datetime, sources: Sequence[Source], service: str | None) -> str:
    """What a timeline looked at, so an empty one can be trusted: the window and every source read (bounded)."""
    names = [f"{s.source} {s.target}" for s in sources]
    more = len(names) - NAMED_SOURCES
    read = ", ".join(names[:NAMED_SOURCES]) + (f", … and {more} more" if more > 0 else "") if names else "none"
    only = f"; only service {service!r}" if service else ""
    return (
        f"window: {utc_minute(since)} to {utc_minute(until)} ({minutes} min before the start, up to now){only}; "
        f"sources read: {read}"
    )
