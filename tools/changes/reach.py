"""The changes reach (docs/context.md, What changed): `[changes]`, `[[changes.git]]` and `[changes.webhook]` read, the
`recent_changes` tool offered, and its `opsloop check` (each repository read, the webhook's token set).

Its config is plain data: the window, the retention, the repositories, the webhook's address and token (the
token from the environment, hidden in a repr). `open` hands the tool the config itself (`ChangesConfig`); the
tool finds the clusters, the SSH pool and the store the other reaches and the app opened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.config.reader import Reader
from bot.store import Tables
from tools.api import Service, some_names
from tools.changes.git import GitRepo
from tools.changes.settings import (
    DEFAULT_LISTEN,
    DEFAULT_TOKEN_ENV,
    HASH_KEY_ENV,
    RETENTION_DAYS,
    WINDOW_MINUTES,
    ChangesConfig,
    ChangesWebhook,
    HiddenToken,
)
from tools.changes.store import TABLES

_KEYS = ("window_minutes", "retention_days", "git", "webhook")
_GIT_KEYS = ("name", "path", "branch", "paths")
_WEBHOOK_KEYS = ("listen", "token_env")


def parse_listen(r: Reader, key: str, default: tuple[str, int]) -> tuple[str, int]:
    """`"host:port"` (port 0: any free port, for tests); a problem and the default when it is not one."""
    text = r.str(key)
    if text is None:
        return default
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        r.problem(f'expected "host:port", got {text!r}', key)
        return default
    return host.strip("[]") or default[0], int(port)


def _repo(r: Reader, names: set[str]) -> GitRepo | None:
    r.only(_GIT_KEYS)
    if not all([r.require("name"), r.require("path")]):
        return None
    name, path = r.str("name"), r.path("path")
    branch = r.str("branch", "main")
    paths = r.str_list("paths", [])
    if name is None or path is None or branch is None:
        return None
    if name in names:
        r.problem(f"duplicate repository name {name!r}", "name")
        return None
    names.add(name)
    try:
        return GitRepo(name=name, path=path, branch=branch, paths=tuple(paths))
    except ValueError as e:
        r.problem(str(e))
        return None


def read_changes(config: Reader, env: Mapping[str, str]) -> ChangesConfig | None:
    """The `[changes]` table, every problem recorded on `config`; None when absent."""
    if not config.has("changes"):
        return None
    t = config.at("changes")
    if not t.is_table():
        return None
    t.only(_KEYS)
    window = t.int("window_minutes", WINDOW_MINUTES, low=1, high=7 * 24 * 60)
    retention = t.int("retention_days", RETENTION_DAYS, low=0)
    names: set[str] = set()
    repos = tuple(repo for entry in t.items("git", header="changes.git") if (repo := _repo(entry, names)))
    webhook = None
    if t.has("webhook"):
        w = t.at("webhook")
        w.only(_WEBHOOK_KEYS)
        host, port = parse_listen(w, "listen", DEFAULT_LISTEN)
        token_env = w.env_name("token_env", DEFAULT_TOKEN_ENV)
        token = env.get(token_env, "").strip()
        webhook = ChangesWebhook(host=host, port=port, token_env=token_env, token=HiddenToken(token) if token else None)
    hash_key = env.get(HASH_KEY_ENV, "").strip()
    return ChangesConfig(
        window_minutes=window,
        retention_days=retention,
        repos=repos,
        webhook=webhook,
        hash_key=HiddenToken(hash_key) if hash_key else None,
    )


async def check_changes(config: ChangesConfig) -> tuple[list[str], list[str]]:
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


class ChangesReach:
    name: str = "changes"
    sections: tuple[str, ...] = ("changes",)
    hint: str = "[changes]"
    modules: tuple[str, ...] = ("tools.changes.tool", "tools.changes.detail")
    tables: Tables = TABLES  # the change events POSTed to /changes
    check_stops_run: bool = True  # its check reads only local files: a problem stops `opsloop run` too

    def parse(self, config: Reader, env: Mapping[str, str]) -> ChangesConfig | None:
        return read_changes(config, env)

    def open(self, config: ChangesConfig) -> Mapping[type, object]:
        return {ChangesConfig: config}

    async def aclose(self, resources: Mapping[type, object]) -> None:
        return None

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
        return await check_changes(config)

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

    def bind_tools(self, config: ChangesConfig, tools: Sequence[Any]) -> list[Any]:
        return list(tools)


REACH = ChangesReach()
