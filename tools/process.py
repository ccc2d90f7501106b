"""Child processes opsloop starts (runbook commands, tool workers): the environment they get, and how they die."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")  # what most programs need, and nothing secret
BOT_SECRETS = frozenset(
    {"SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"}
)


def child_env(names: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment of a child process: BASE_ENV and `names`, from ours when set; never a BOT_SECRETS name."""
    env = {k: os.environ[k] for k in (*BASE_ENV, *names) if k in os.environ and k not in BOT_SECRETS}
    env.setdefault("PATH", os.defpath)
    return env


async def kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL a child started with start_new_session=True and everything it started, then reap it
    (shielded: a timeout or Stop that cancelled us must not leave a zombie or a running grandchild)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await asyncio.shield(proc.wait())
