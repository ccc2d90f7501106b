"""Child processes opsloop starts (runbook commands, tool workers, host commands): the environment they get, and
how they die."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import signal

import psutil

BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")  # what most programs need, and nothing secret
BOT_SECRETS = frozenset(
    {"SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"}
)


# Children killed by a cancellation in this task: a tool that times out says its process was killed, whether it ran
# in a worker (tools/worker.py) or ran a command (tools/commands.py, tools/builtin/reach.py).
_KILLED: contextvars.ContextVar[int] = contextvars.ContextVar("opsloop_processes_killed", default=0)


def processes_killed() -> int:
    """How many child processes a cancellation (a timeout, Stop) killed in this task so far."""
    return _KILLED.get()


def child_env(names: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment of a child process: BASE_ENV and `names`, from ours when set; never a BOT_SECRETS name."""
    env = {k: os.environ[k] for k in (*BASE_ENV, *names) if k in os.environ and k not in BOT_SECRETS}
    env.setdefault("PATH", os.defpath)
    return env


async def kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL a child started with start_new_session=True and everything it started, then reap it
    (shielded: a timeout or Stop that cancelled us must not leave a zombie or a running grandchild).

    A descendant in a process group of its own (GNU `timeout` makes one for its command) is killed with its group."""
    groups = {proc.pid}
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                groups.add(os.getpgid(child.pid))
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await asyncio.shield(proc.wait())
    _KILLED.set(_KILLED.get() + 1)


async def communicate(argv: list[str], stdin: bytes | None = None) -> tuple[int | None, bytes, bytes]:
    """Run argv (no shell, child_env()) in its own process group with `stdin` (None: none), to its end: its exit
    code, stdout and stderr. If the caller is cancelled (a timeout, Stop) the group is killed and reaped first."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
        start_new_session=True,
    )
    try:
        out, err = await proc.communicate(stdin)
    except BaseException:
        await kill_group(proc)
        raise
    return proc.returncode, out, err
