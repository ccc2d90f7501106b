"""The command line sent to a host: a fixed program and quoted arguments, killed by `timeout`, bounded by `head`.

SSH sends one string that the remote login shell parses, so every argument goes through shlex.quote and
the whole POSIX script goes to `sh -c` (a login shell may be zsh, whose MULTIOS would duplicate the
redirections below into the pipes). The script, with P the program and its quoted arguments:

    exec 3>&1
    s=$( { { { timeout --signal=KILL T P 3>&- 4>&- 5>&-; echo $? >&5; } 2>&1 1>&4 | head -c E >&2; }
           4>&1 | head -c N >&3; } 5>&1 )
    exit "${s:-255}"

P's stdout goes through `head -c N` to the channel's stdout, its stderr through `head -c E` to the channel's
stderr, and its exit status through fd 5 into `s`: the exit status survives the pipes without bash's
pipefail. N is max_bytes + 1, so one byte more than the caller keeps says "truncated" (P then dies of
SIGPIPE, 141). On timeout, `timeout` SIGKILLs P's whole process group (and itself): status 137, nothing
left running on the host.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

STDERR_MAX_BYTES = 16_000
KILLED_BY_TIMEOUT = 137  # 128 + SIGKILL: what the script exits with when `timeout` fired


@dataclass(frozen=True)
class Result:
    """One command run through remote_command: its exit status and output (stdout cut at max_bytes: `truncated`)."""

    exit_status: int
    stdout: str
    stderr: str
    truncated: bool = False

    @classmethod
    def of(cls, exit_status: int, out: bytes, err: bytes, max_bytes: int) -> Result:
        """The command's raw output decoded (invalid UTF-8 replaced), stdout cut at max_bytes."""
        decoded = out[:max_bytes].decode("utf-8", errors="replace")
        return cls(exit_status, decoded, err.decode("utf-8", errors="replace"), truncated=len(out) > max_bytes)


def remote_command(
    argv: Sequence[str], *, timeout_s: float, max_bytes: int, stderr_max_bytes: int = STDERR_MAX_BYTES
) -> str:
    """The string to send over SSH for `argv` (program first), bounded in time and output on the host."""
    if not argv:
        raise ValueError("remote_command: argv is empty")
    if any(not isinstance(a, str) or "\0" in a for a in argv):
        raise ValueError("remote_command: every argument must be a string without NUL bytes")
    if not timeout_s > 0 or max_bytes < 0:
        raise ValueError("remote_command: timeout_s must be positive and max_bytes not negative")
    program = " ".join(shlex.quote(a) for a in argv)
    seconds = f"{max(timeout_s, 0.1):.1f}"  # GNU timeout takes fractions; one decimal is plenty
    script = (
        "exec 3>&1; "
        f"s=$( {{ {{ {{ timeout --signal=KILL {seconds} {program} 3>&- 4>&- 5>&-; echo $? >&5; }} "
        f"2>&1 1>&4 | head -c {int(stderr_max_bytes)} >&2; }} 4>&1 | head -c {int(max_bytes) + 1} >&3; }} 5>&1 ); "
        'exit "${s:-255}"'
    )
    return f"sh -c {shlex.quote(script)}"
