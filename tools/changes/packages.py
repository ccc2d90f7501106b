"""Package changes and the last boot of an inventory host, read over SSH with one fixed command.

The command (`SCRIPT`, run as `sh -c SCRIPT sh DPKG_LOG APT_LOG BYTES MARK LOW` through SshPool.run, every
argument quoted) prints the host's UTC offset (`date +%z`), its boot time (`btime` in /proc/stat, read by the
shell itself, else `uptime -s`), then the last BYTES bytes of dpkg.log, or of apt's history.log when there is
no dpkg.log (`tail -c`; the other section says `unread`), each section opened by a line holding MARK, a random
token per call, so no log line can forge a section. When the log is longer than BYTES, its section's line
says `present cut` and the start of the tail's first whole line (dpkg.log), or of its first `Start-Date:`
(history.log), at most 40 bytes: the oldest stamp the tail holds. A window starting at or before it may have
lost lines, and the answer is then a `Cut` saying so, not a silently short list. LOW (`remote_low`)
is the window's start less the widest UTC offset, as dpkg.log stamp text: whatever the host's offset, a line
stamped before it is older than the window, so the host leaves those lines of the dpkg.log tail out, and
dpkg's status and configure lines (7 of 8 lines; only install, upgrade, remove and purge are changes) with them
(awk, in the C locale; a line not starting with a digit is kept, and without awk the whole tail is sent). The exact
window is still applied here, in the offset the host printed.

dpkg.log and history.log are in the host's local time with no zone; they are read with the host's
current offset (a DST change inside the window shifts the older lines by an hour). dpkg.log, when the host
has one, is the source (one line per package, to the second); history.log is read only when it has none.
A cut at the start of a tail is a partial line or block: it does not parse and is skipped.

Given the window, the parsers skip what is outside it before parsing it: a dpkg.log line whose stamp text is
outside the window's ends written in the host's offset (a fixed offset, so the text's order is the times'
order), a history.log block whose Start-Date is outside it. A busy host's tail holds days of lines and a
window is two hours: only the lines that can be answered are parsed into Changes.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from tools.api import ToolError
from tools.changes.model import Change, Cut, utc_minute

if TYPE_CHECKING:
    from tools.remote.inventory import Host
    from tools.remote.pool import SshPool

DPKG_LOG = "/var/log/dpkg.log"
APT_HISTORY = "/var/log/apt/history.log"
TAIL_BYTES = 256 * 1024  # of each log: days of a busy host's package changes
TIMEOUT_S = 20.0
_ACTIONS = frozenset({"install", "upgrade", "remove", "purge"})
_STAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}")
_STAMP_CHARS = 19  # `YYYY-MM-DD HH:MM:SS`
_DPKG_LINE = re.compile(rf"({_STAMP.pattern}) (\S+) (\S+) (\S+) (\S+)")
_APT_ENTRY = re.compile(r"([^\s,()]+) \(([^()]*)\)")
_APT_ACTIONS = {
    "Install": "install",
    "Upgrade": "upgrade",
    "Downgrade": "upgrade",
    "Remove": "remove",
    "Purge": "purge",
    "Reinstall": "reinstall",
}
_OFFSET = re.compile(r"([+-])(\d\d)(\d\d)")

SCRIPT = r"""
mark=$4
present() {  # $1 a log, $2 the sed program printing the tail's first stamp line, when the log is longer than $3
  n=$(wc -c < "$1" 2>/dev/null | tr -dc 0-9)
  if [ "${n:-0}" -gt "$3" ]; then
    f=$(tail -c "$(($3 + 1))" -- "$1" | sed -n "$2")
    printf '%s present cut %.40s\n' "$mark" "$f"
  else
    echo "$mark present"
  fi
}
date +%z
b=
if [ -r /proc/stat ]; then while read -r k v _; do if [ "$k" = btime ]; then b=$v; break; fi; done < /proc/stat; fi
if [ -n "$b" ]; then echo "btime $b"; else echo "booted $(uptime -s 2>/dev/null)"; fi
if [ -r "$1" ]; then
  present "$1" '2{p;q;}' "$3"
  if [ -n "$5" ] && command -v awk >/dev/null 2>&1; then
    tail -c "$3" -- "$1" | LC_ALL=C awk -v low="$5" '!/^[0-9]/ || (substr($0, 1, 19) >= low &&
      ($3 == "install" || $3 == "upgrade" || $3 == "remove" || $3 == "purge"))'
  else
    tail -c "$3" -- "$1"
  fi
  echo
  echo "$mark unread"
else
  echo "$mark missing"
  if [ -r "$2" ]; then
    present "$2" '1d;/^Start-Date: /{s///p;q;}' "$3"
    tail -c "$3" -- "$2"
    echo
  else
    echo "$mark missing"
  fi
fi
"""
WIDEST_OFFSET = timedelta(hours=15)  # parse_offset takes up to ±14:59


@dataclass(frozen=True)
class HostReport:
    """What the command printed, split: the host's offset, its boot time, and the two logs (None: missing);
    whether the log that was read is longer than its tail, and the tail's oldest stamp (None: none readable)."""

    offset: timezone
    booted: datetime | None
    dpkg: str | None
    apt: str | None
    cut: bool = False
    tail_from: datetime | None = None


def parse_offset(text: str) -> timezone:
    """`+0100`, `-0530` (what `date +%z` prints) as a timezone; ValueError otherwise."""
    m = _OFFSET.fullmatch(text.strip())
    if not m or int(m[3]) >= 60 or int(m[2]) > 14:
        raise ValueError(f"not a UTC offset: {text.strip()[:40]!r}")
    delta = timedelta(hours=int(m[2]), minutes=int(m[3]))
    return timezone(-delta if m[1] == "-" else delta)


def _local(stamp: str, tz: timezone) -> datetime | None:
    """`YYYY-MM-DD HH:MM:SS` read in `tz`, in UTC; None when it is not such a stamp or no such time.
    (fromisoformat once the shape is checked: strptime is many times slower, and a tailed log is thousands of
    lines.)"""
    if not _STAMP.fullmatch(stamp):
        return None
    try:
        return datetime.fromisoformat(stamp).replace(tzinfo=tz).astimezone(UTC)
    except ValueError:
        return None


def stamp_bounds(since: datetime, until: datetime, tz: timezone) -> tuple[str, str]:
    """The window's ends as dpkg.log stamps in `tz` (`YYYY-MM-DD HH:MM:SS`): a stamp read in `tz` is in
    [since, until] exactly when its text is in [low, high]. Stamps are to the second: `since` rounds up to
    the next second, `until` down."""
    low, high = since.astimezone(tz).replace(tzinfo=None), until.astimezone(tz).replace(tzinfo=None)
    if low.microsecond:
        low = low.replace(microsecond=0) + timedelta(seconds=1)
    return low.isoformat(" ", "seconds"), high.replace(microsecond=0).isoformat(" ", "seconds")


def _package(name: str) -> str:
    return name.split(":", 1)[0]


def _what(action: str, package: str, old: str | None, new: str | None) -> str:
    if action == "upgrade" or (action == "install" and old):
        return f"{package} {old} → {new}"
    if action == "install":
        return f"{package} installed {new}"
    if action == "reinstall":
        return f"{package} reinstalled {new}"
    return f"{package} {'removed' if action == 'remove' else 'purged'}" + (f" (was {old})" if old else "")


def _none(version: str) -> str | None:
    return None if version in ("<none>", "") else version


def parse_dpkg_log(
    text: str, tz: timezone, host: str, since: datetime | None = None, until: datetime | None = None
) -> list[Change]:
    """dpkg.log's install/upgrade/remove/purge lines as Changes; status lines and anything malformed skipped.
    Given `since` and `until`, a line whose stamp is outside them is skipped by its text, before any parsing."""
    changes = []
    bounds = stamp_bounds(since, until, tz) if since is not None and until is not None else None
    for line in text.splitlines():
        if bounds is not None and not bounds[0] <= line.lstrip()[:_STAMP_CHARS] <= bounds[1]:
            continue
        m = _DPKG_LINE.fullmatch(line.strip())
        if not m or m[2] not in _ACTIONS:
            continue
        at = _local(m[1], tz)
        if at is None:
            continue
        old, new = _none(m[4]), _none(m[5])
        changes.append(
            Change(at=at, source="host", target=host, what=_what(m[2], _package(m[3]), old, new), ref="dpkg.log")
        )
    return changes


def parse_apt_history(
    text: str, tz: timezone, host: str, since: datetime | None = None, until: datetime | None = None
) -> list[Change]:
    """history.log's blocks (`Start-Date:`, `Commandline:`, `Install:`/`Upgrade:`/`Remove:`…) as Changes, at
    each block's start; a block without a readable Start-Date (cut by the tail, malformed) is skipped, and so,
    given `since` and `until`, is a block that started outside them (its entries are never parsed)."""
    changes: list[Change] = []
    at: datetime | None = None
    command = ""
    for raw in text.splitlines():
        key, sep, value = raw.partition(": ")
        if not sep:
            if not raw.strip():
                at, command = None, ""  # blocks are separated by a blank line
            continue
        value = value.strip()
        if key == "Start-Date":
            at, command = _local(" ".join(value.split()), tz), ""  # two spaces between date and time
            if at is not None and since is not None and until is not None and not since <= at <= until:
                at = None
        elif key == "Commandline":
            command = value
        elif key in _APT_ACTIONS and at is not None:
            action = _APT_ACTIONS[key]
            for name, versions in _APT_ENTRY.findall(value):
                parts = [v.strip() for v in versions.split(",")]
                if action == "upgrade":
                    if len(parts) != 2:
                        continue
                    old, new = parts
                elif action in ("install", "reinstall"):
                    old, new = None, parts[0]
                else:
                    old, new = parts[0], None
                changes.append(
                    Change(
                        at=at,
                        source="host",
                        target=host,
                        what=_what(action, _package(name), old, new),
                        ref=f"apt: {command}" if command else "apt history.log",
                    )
                )
    return changes


def parse_report(text: str, mark: str) -> HostReport:
    """The command's output; ValueError when its first lines are not an offset and a boot time."""
    head, *sections = text.split(f"{mark} ")
    lines = head.splitlines()
    if len(lines) < 2:
        raise ValueError("the host printed no offset and boot time")
    offset = parse_offset(lines[0])
    booted: datetime | None = None
    word, _, value = lines[1].partition(" ")
    if word == "btime" and value.strip().isdigit():
        booted = datetime.fromtimestamp(int(value), UTC)
    elif word == "booted":
        booted = _local(value.strip(), offset)
    logs: list[str | None] = []
    cut, tail_from = False, None
    for section in sections[:2]:
        state, _, body = section.partition("\n")
        word, cut_at, first = state.partition(" cut ")
        present = word.strip() == "present"
        logs.append(body if present else None)
        if present and cut_at:  # only one log is present: dpkg.log, else history.log
            cut, tail_from = True, _local(" ".join(first.split())[:_STAMP_CHARS], offset)
    logs += [None] * (2 - len(logs))
    return HostReport(offset=offset, booted=booted, dpkg=logs[0], apt=logs[1], cut=cut, tail_from=tail_from)


def report_changes(report: HostReport, host: str, since: datetime, until: datetime) -> list[Change]:
    """The package changes and the boot in [since, until]: dpkg.log when the host has one, else history.log."""
    if report.dpkg is not None:
        found = parse_dpkg_log(report.dpkg, report.offset, host, since, until)
    elif report.apt is not None:
        found = parse_apt_history(report.apt, report.offset, host, since, until)
    else:
        found = []
    if report.booted is not None:
        found.append(Change(at=report.booted, source="host", target=host, what="booted", ref="boot time"))
    return in_window(found, since, until)


def in_window(changes: Iterable[Change], since: datetime, until: datetime) -> list[Change]:
    return [c for c in changes if since <= c.at <= until]


def remote_low(since: datetime) -> str:
    """The stamp text before which no dpkg.log line can be in a window starting at `since`, in any offset."""
    return (since.astimezone(UTC) - WIDEST_OFFSET).replace(tzinfo=None).isoformat(" ", "seconds")


def host_argv(
    *,
    dpkg_log: str = DPKG_LOG,
    apt_history: str = APT_HISTORY,
    tail_bytes: int = TAIL_BYTES,
    mark: str,
    since: datetime | None = None,
) -> list[str]:
    """The fixed command: `sh -c SCRIPT sh …`, whose values arrive as quoted positional arguments. Given
    `since`, the host leaves out the dpkg.log lines stamped before `remote_low(since)`."""
    for path in (dpkg_log, apt_history):
        if not path.startswith("/"):
            raise ValueError(f"log path {path!r} must be absolute")
    low = remote_low(since) if since is not None else ""
    return ["sh", "-c", SCRIPT, "sh", dpkg_log, apt_history, str(int(tail_bytes)), mark, low]


async def host_changes(
    pool: SshPool,
    host: Host,
    since: datetime,
    until: datetime,
    *,
    dpkg_log: str = DPKG_LOG,
    apt_history: str = APT_HISTORY,
    tail_bytes: int = TAIL_BYTES,
    timeout_s: float = TIMEOUT_S,
) -> list[Change] | Cut:
    """`host`'s package changes and boot in [since, until], over `pool`, newest first; a Cut when the log is
    longer than `tail_bytes` and the window starts at or before the tail's oldest stamp; ToolError (SshError)
    when it fails."""
    mark = f"=opsloop-{secrets.token_hex(8)}"
    argv = host_argv(dpkg_log=dpkg_log, apt_history=apt_history, tail_bytes=tail_bytes, mark=mark, since=since)
    result = await pool.run(host, argv, timeout_s=timeout_s, max_bytes=2 * tail_bytes + 4096)
    if result.exit_status != 0:
        detail = " ".join((result.stderr or result.stdout).strip().splitlines()[:2])
        raise ToolError(
            f"reading the package logs failed (exit {result.exit_status})" + (f": {detail[:300]}" if detail else "")
        )
    try:
        report = parse_report(result.stdout, mark)
    except ValueError as e:
        raise ToolError(f"unexpected answer reading the package logs: {e}") from None
    if report.dpkg is None and report.apt is None:
        raise ToolError(f"no package log on the host ({dpkg_log}, {apt_history})")
    changes = sorted(report_changes(report, host.name, since, until), key=lambda c: c.at, reverse=True)
    # a line cut off is stamped at or before the tail's first: in the window unless that is before `since`
    if not report.cut or (report.tail_from is not None and report.tail_from < since):
        return changes
    log = PurePosixPath(dpkg_log if report.dpkg is not None else apt_history).name
    size = f"{tail_bytes // 1024} KiB" if tail_bytes % 1024 == 0 else f"{tail_bytes} bytes"
    start = f"from {utc_minute(report.tail_from)}" if report.tail_from else "starting with no dated line"
    return Cut(
        changes, f"only the last {size} of {log} were read, {start}; earlier changes in the window are not shown"
    )
