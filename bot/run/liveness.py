"""Who holds a claim (a run's lease, an outbox item, an alert group), and which lease owners are dead processes on
this host, read from /proc and kill(0): their runs need not wait for the lease to lapse. An owner id is
host:pid:pid-namespace:random; the namespace tells two containers sharing a hostname apart, so a pid is only ever
checked for liveness where it means the same process."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterable


def owner_id() -> str:
    """This process as a lease owner: host:pid:pid-namespace:random."""
    return f"{socket.gethostname()}:{os.getpid()}:{_pid_namespace()}:{secrets.token_hex(3)}"


def dead_owners(owners: Iterable[str], *, me: str) -> list[str]:
    """Lease holders that were processes on this host and are gone (SIGKILL, OOM). Another host's process can't be
    checked; its lease lapses instead."""
    here = (socket.gethostname(), _pid_namespace())
    dead = []
    for owner in owners:
        host, pid, namespace, *_ = [*owner.split(":"), "", "", ""]
        if (host, namespace) == here and owner != me and pid.isdigit() and not _alive(int(pid)):
            dead.append(owner)
    return dead


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "?"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True
