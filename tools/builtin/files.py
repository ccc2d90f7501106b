"""read_file, and the path rules it shares with disk_usage: which directories of a host may be read or listed,
and the deny-list that always wins over them.

A path is resolved on the host itself (`realpath`: every symlink and `..` followed) together with the allowed
directories and the deny-list, and only the resolved path is checked and used, so no link leads out. The
commands are fixed scripts run through tools.builtin.reach.run; the model's values reach them only as quoted "$@"
arguments.
"""

from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath

from bot.core.redact import REDACTED, redact
from tools.api import BadCall
from tools.builtin import reach
from tools.registry import Category, ToolContext, ToolError, tool
from tools.remote.inventory import Host

_TIMEOUT_S = 20.0
# Refused by read_file and disk_usage, with everything under them, whatever the configured directories say.
DENIED_PATHS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssl/private",
    "/etc/letsencrypt",
    "/etc/opsloop",
    "/root",
    "/home",
    "/proc",
    "/sys",
    "/dev",
    "/run/secrets",
    "/var/lib/secrets",
)
# File names read_file refuses: keys and keystores (a *.pem is refused when it holds a private key).
DENIED_NAMES = ("*.key", "ssh_host_*_key", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "*.p12", "*.pfx", "*.jks")
MAX_LINES = 2_000
MAX_BYTES = 10_000  # of text shown, under the tools' output limit

# For each argument: its type (d directory, f regular file, o other, - missing; symlinks followed) and its
# resolved path, each ending in \0.
_RESOLVE_SCRIPT = (
    'for p do if [ -d "$p" ]; then t=d; elif [ -f "$p" ]; then t=f; elif [ -e "$p" ]; then t=o; else t=-; fi; '
    "printf '%s\\0' \"$t\"; realpath -m -z -- \"$p\" 2>/dev/null || printf '\\0'; done"
)
# $1 the file, $2 the first line, $3 how many lines, $4 how many bytes: its size, the NUL bytes in its first 8 KiB,
# its lines holding a private key's marker, its line count, then the lines asked for; \0 between.
_READ_SCRIPT = (
    "f=$1; stat -L -c %s -- \"$f\" || exit 1; printf '\\0'; head -c 8192 -- \"$f\" | tr -d -c '\\000' | wc -c; "
    "printf '\\0'; grep -c -e 'PRIVATE KEY-----' -- \"$f\"; printf '\\0'; wc -l < \"$f\"; printf '\\0'; "
    'tail -n +"$2" -- "$f" | head -n "$3" | head -c "$4"'
)


def _under(path: PurePosixPath, roots: list[PurePosixPath]) -> PurePosixPath | None:
    return next((r for r in roots if path.is_relative_to(r)), None)


def denied_by(path: PurePosixPath, denied: list[PurePosixPath]) -> str | None:
    """The deny rule `path` falls under (a denied directory or file, or a denied name), or None."""
    if (rule := _under(path, denied)) is not None:
        return str(rule)
    return next((n for n in DENIED_NAMES if fnmatch.fnmatchcase(path.name, n)), None)


async def resolve(host: Host | None, ctx: ToolContext, paths: list[str]) -> list[tuple[str, PurePosixPath]]:
    """(type, resolved path) for each of `paths`, as the host sees them."""
    result = await reach.run(ctx, host, ["sh", "-c", _RESOLVE_SCRIPT, "sh", *paths], timeout_s=_TIMEOUT_S)
    parts = result.stdout.split("\0")
    if result.exit_status != 0 or len(parts) != 2 * len(paths) + 1 or not all(parts[1:-1:2]):
        raise reach.failed(host, "realpath", result)
    return [(parts[2 * i], PurePosixPath(parts[2 * i + 1])) for i in range(len(paths))]


async def confine(
    host: Host | None, ctx: ToolContext, path: str, roots: list[str], what: str
) -> tuple[PurePosixPath, str, list[PurePosixPath]]:
    """`path` resolved on the host, inside one of `roots` (resolved there too) and under no deny rule; with its type
    (d, f, o, -) and the resolved deny-list (for what a listing under it may show). ToolError otherwise."""
    if not path.startswith("/"):
        raise BadCall(f"path: must be an absolute path, got {path!r}")
    deny = [*DENIED_PATHS, *ctx.denied_paths]
    found = await resolve(host, ctx, [path, *roots, *deny])
    (kind, resolved), resolved_roots = found[0], [r for k, r in found[1 : len(roots) + 1] if k == "d"]
    denied = [*(PurePosixPath(d) for d in deny), *(r for _, r in found[len(roots) + 1 :])]
    for candidate in (PurePosixPath(path), resolved):
        if (rule := denied_by(candidate, denied)) is not None:
            raise ToolError(f"{reach.host_name(host)}: {path} is refused: {what} never reads {rule} (the deny-list)")
    if _under(resolved, resolved_roots) is None:
        raise ToolError(
            f"{reach.host_name(host)}: {path} is outside the directories {what} may read ({', '.join(roots) or 'none'})"
        )
    return resolved, kind, denied


def _read_text(name: str, path: PurePosixPath, size: int, total: int, start: int, text: str, limit: int) -> str:
    lines = text.split("\n")
    if lines and lines[-1] == "" and text.endswith("\n"):
        lines.pop()
    cut_bytes = len(text.encode()) >= MAX_BYTES and start + len(lines) - 1 < total
    if cut_bytes and len(lines) > 1:
        lines.pop()  # the last line may be cut part-way
    last = start + len(lines) - 1
    head = f"{path} on {name}: {size} bytes, {total} lines"
    if not lines:
        return f"{head}; no lines from line {start} (the file has {total})"
    notes = [f"lines {start}-{last} shown"]
    if last < total:
        why = f"cut at {MAX_BYTES} bytes" if cut_bytes else f"{limit} lines asked"
        notes.append(f"{total - last} more lines not shown ({why}; read on with start_line={last + 1})")
    return "\n".join([f"{head}; {', '.join(notes)}", *(f"{start + i}: {line}" for i, line in enumerate(lines))])


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=30, idempotent=True)
async def read_file(
    path: str, host: str | None = None, start_line: int = 1, lines: int = 200, *, ctx: ToolContext
) -> str:
    """One text file on one host, under the configured directories (default /etc), numbered, bounded and redacted.

    Returns a header with the file's size in bytes, its line count and which lines are shown, then the lines as
    "NUMBER: text"; at most `lines` lines and 10,000 bytes, and the header says what was cut and where to read
    on. The path is resolved on the host first (symlinks and ".." followed) and must stay inside the allowed
    directories. Refused whatever the configuration says: /etc/shadow, /etc/gshadow, /etc/ssl/private, home
    directories, *.key files, SSH host and identity keys, any file holding a private key, binary files, and a file
    that is nothing but a secret. Use it to read a configuration file a change may have replaced, e.g.
    /etc/logrotate.d/nginx after a package upgrade.

    Args:
        path: the file, an absolute path on the host.
        host: the host: an inventory name (see list_hosts) or "self" (the machine opsloop runs on). Required when
            [[hosts]] are configured; without them it defaults to "self".
        start_line: the first line to show, from 1.
        lines: how many lines to show, 1 to 2000.
    """
    found = reach.target(host, ctx)
    if not 1 <= lines <= MAX_LINES:
        raise BadCall(f"lines: must be between 1 and {MAX_LINES}, got {lines}")
    if start_line < 1:
        raise BadCall(f"start_line: must be 1 or more, got {start_line}")
    read_dirs = found.read_dirs if found is not None and found.read_dirs is not None else ctx.read_dirs
    file, kind, _ = await confine(found, ctx, path, list(read_dirs), "read_file")
    if kind == "-":
        raise BadCall(f"{reach.host_name(found)}: no such file: {path}")
    if kind != "f":
        raise BadCall(f"{reach.host_name(found)}: not a regular file: {path}")
    argv = ["sh", "-c", _READ_SCRIPT, "sh", str(file), str(start_line), str(lines), str(MAX_BYTES)]
    result = await reach.run(ctx, found, argv, timeout_s=_TIMEOUT_S, max_bytes=MAX_BYTES + 1024)
    parts = result.stdout.split("\0", 4)
    if len(parts) != 5 or not all(p.strip().isdigit() for p in parts[:4]):
        raise reach.failed(found, f"reading {file}", result)
    size, nuls, keys, total = (int(p) for p in parts[:4])
    name = reach.host_name(found)
    if nuls:
        raise ToolError(f"{name}: {file} is a binary file; read_file reads text only")
    if keys:
        raise ToolError(f"{name}: {file} is refused: it holds a private key")
    text = parts[4]
    if text.strip() and not redact(text).replace(REDACTED, "").strip():
        raise ToolError(f"{name}: {file} is refused: it is nothing but a secret")
    return _read_text(name, file, size, total, start_line, text, lines)
