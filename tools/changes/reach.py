"""The changes reach (docs/context.md, What changed): `[changes]`, `[[changes.git]]` and `[changes.webhook]` read, the
`recent_changes` tool offered, and its `opsloop check` (each repository read, the webhook's token set).

Its config is plain data: the window, the retention, the repositories, the webhook's address and token (the
token from the environment, hidden in a repr). `open` hands the tool the config itself (`ChangesConfig`); the
tool finds the clusters, the SSH pool and the store the other reaches and the app opened.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from bot.config.reader import Reader, read
from bot.store import Tables
from tools.api import Service, some_names
from tools.changes.settings import HASH_KEY_ENV, ChangesConfig
from tools.changes.store import TABLES
from tools.reach import Reach, secret


class ChangesReach(Reach):
    name: str = "changes"
    sections: tuple[str, ...] = ("changes",)
    hint: str = "[changes]"
    modules: tuple[str, ...] = ("tools.changes.tool", "tools.changes.detail")
    tables: Tables = TABLES  # the change events POSTed to /changes
    check_stops_run: bool = True  # its check reads only local files: a problem stops `opsloop run` too

    def parse(self, config: Reader, env: Mapping[str, str]) -> ChangesConfig | None:
        """[changes], with the secrets its variables hold (never in the config, hidden in a repr)."""
        if not config.has("changes"):
            return None
        found = read(ChangesConfig, config.at("changes"), hash_key=secret(env, HASH_KEY_ENV))
        if found is not None and found.webhook is not None:  # a token from the environment: set once, as it is read
            object.__setattr__(found.webhook, "token", secret(env, found.webhook.token_env))
        return found

    def environment(self, config: ChangesConfig) -> list[str]:
        """What recent_changes reads and its default window, so a model widens it on purpose."""
        sources = []
        if config.repos:
            sources.append(f"git repositories {some_names([r.name for r in config.repos])}")
        if config.webhook is not None:
            sources.append("change events posted by CI/CD")
        sources.append("Kubernetes rollouts, host package upgrades and boots (of the clusters and hosts named here)")
        return [
            f"Change sources (recent_changes; default window {config.window_minutes} minutes back from the run's "
            f"start, or the alert's): {'; '.join(sources)}"
        ]

    async def check(self, config: ChangesConfig) -> tuple[list[str], list[str]]:
        """One line per repository (its branch read now: ok, or why not) and the webhook's; the problems found."""
        from tools.changes.git import git_changes

        lines: list[str] = []
        problems: list[str] = []
        now = datetime.now(UTC)
        for repo in config.repos:
            try:
                await git_changes(repo, now - timedelta(minutes=1), now, max_commits=1)
            except Exception as e:
                lines.append(f"changes.git {repo.name}: {repo.path} ({repo.branch}): {e}")
                problems.append(f"changes.git {repo.name}: {e}")
            else:
                lines.append(f"changes.git {repo.name}: {repo.path} ({repo.branch}): ok")
        wh = config.webhook
        if wh is not None:
            lines.append(f"changes.webhook: POST /changes on {wh.host}:{wh.port}")
            if wh.token is None:
                problems.append(f"changes.webhook: {wh.token_env} is not set: every POST /changes would be refused")
        return lines, problems

    def listens(self, config: ChangesConfig) -> list[tuple[str, str, int]]:
        """The addresses it serves (what `opsloop check` test-binds): (name, host, port)."""
        wh = config.webhook
        return [] if wh is None else [("changes.webhook", wh.host, wh.port)]

    def services(self, config: ChangesConfig, resources: Mapping[type, object]) -> list[Service]:
        """`POST /changes` (with its retention sweep) when [changes.webhook] is set and the app shares its store."""
        from bot.store import Store
        from tools.changes.webhook import ChangeWebhook

        store = resources.get(Store)
        return [ChangeWebhook(store, config)] if isinstance(store, Store) and config.webhook is not None else []


REACH = ChangesReach()
