"""What the changes reach reads from `[changes]` (tools/changes/reach.py parses it): plain, picklable data, shared by
the tool (recent_changes finds it in its context) and the `/changes` webhook without either importing the reach."""

from __future__ import annotations

from dataclasses import dataclass

from tools.changes.git import GitRepo

WINDOW_MINUTES = 120
RETENTION_DAYS = 30
DEFAULT_LISTEN = ("0.0.0.0", 9096)
DEFAULT_TOKEN_ENV = "OPSLOOP_CHANGES_TOKEN"
HASH_KEY_ENV = "OPSLOOP_CHANGES_HASH_KEY"  # the secret ConfigMap values are hashed with (tools/changes/k8s.py)


class HiddenToken(str):
    """A token that never shows itself in a repr (as bot.config.settings.Secret, which this layer cannot import)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Secret('***')"


@dataclass(frozen=True)
class ChangesWebhook:
    """`[changes.webhook]`: where `POST /changes` listens, and the bearer token it takes (None: unset)."""

    host: str = DEFAULT_LISTEN[0]
    port: int = DEFAULT_LISTEN[1]
    token_env: str = DEFAULT_TOKEN_ENV
    token: str | None = None


@dataclass(frozen=True)
class ChangesConfig:
    """What the changes reach read; also the resource recent_changes finds in its context."""

    window_minutes: int = WINDOW_MINUTES
    retention_days: int = RETENTION_DAYS
    repos: tuple[GitRepo, ...] = ()
    webhook: ChangesWebhook | None = None
    hash_key: str | None = None  # from HASH_KEY_ENV; None: a random key per process
