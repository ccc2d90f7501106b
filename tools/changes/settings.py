"""What the changes reach reads from `[changes]` (tools/changes/reach.py parses it): plain, picklable data, shared by
the tool (recent_changes finds it in its context) and the `/changes` webhook without either importing the reach."""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.config.reader import host_and_port, listen_address, setting
from tools.changes.git import GitRepo
from tools.reach import Hidden, unique_names

HASH_KEY_ENV = "OPSLOOP_CHANGES_HASH_KEY"  # the secret ConfigMap values are hashed with (tools/changes/k8s.py)


@dataclass(frozen=True)
class ChangesWebhook:
    """`[changes.webhook]`: where `POST /changes` listens, and the bearer token it takes (None: unset)."""

    listen: str = setting("0.0.0.0:9096", '"host:port"; port 0: any free port', check=listen_address)
    token_env: str = setting("OPSLOOP_CHANGES_TOKEN", "the variable holding the bearer token", kind="env_name")
    token: Hidden | None = field(default=None, init=False)  # from `token_env`, set by the reach: never in the config

    @property
    def host(self) -> str:
        return host_and_port(self.listen, "0.0.0.0")[0]

    @property
    def port(self) -> int:
        return host_and_port(self.listen, "0.0.0.0")[1]


@dataclass(frozen=True)
class ChangesConfig:
    """[changes]: what the changes reach read; also the resource recent_changes finds in its context."""

    window_minutes: int = setting(120, "recent_changes' default window, back from the run's start", low=1, high=10080)
    retention_days: int = setting(30, "how long POSTed change events are kept", unit="days", low=0)
    repos: tuple[GitRepo, ...] = setting((), "[[changes.git]]", key="git", check=unique_names("repository"))
    webhook: ChangesWebhook | None = setting(None, "[changes.webhook]: None, no POST /changes")
    hash_key: Hidden | None = None  # from HASH_KEY_ENV; None: a random key per process
