"""Real systemd journal files for the tests, written from fixture entries by Debian's `systemd-journal-remote`.

`entry(...)` builds one entry's fields as journald would store them (MESSAGE, PRIORITY, SYSLOG_IDENTIFIER,
_SYSTEMD_UNIT, _PID, _COMM, _TRANSPORT, _BOOT_ID, _HOSTNAME, __REALTIME_TIMESTAMP, __MONOTONIC_TIMESTAMP);
`kernel(...)` one kernel message (_TRANSPORT=kernel, SYSLOG_IDENTIFIER=kernel, facility 0, no unit).
`write_journal(directory, entries)` serialises them in the journal export format and pipes that to
`systemd-journal-remote -o DIR/fixture.journal -`, so `journalctl --directory=DIR` reads them as any journal.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

JOURNAL_REMOTE_CANDIDATES = ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote")
BOOT = "6f1c9b0e2a4d4c7e9b3a51d2e8f04a17"  # a boot ID: 128 bits in hex, as journald writes it
EARLIER_BOOT = "0d8e3f6a1b2c4d5e8f9a0b1c2d3e4f50"
HOSTNAME = "web-03"


def find_journal_remote() -> str | None:
    """The systemd-journal-remote binary (Debian keeps it off PATH, in /lib/systemd), or None."""
    found = shutil.which("systemd-journal-remote")
    return found or next((c for c in JOURNAL_REMOTE_CANDIDATES if os.access(c, os.X_OK)), None)


def missing_reason() -> str | None:
    """Why the journal tests cannot run here (for pytest.skip), or None when they can."""
    if find_journal_remote() is None:
        return "systemd-journal-remote not installed (apt-get install systemd-journal-remote)"
    if shutil.which("journalctl") is None:
        return "journalctl not installed (apt-get install systemd)"
    return None


def entry(
    message: str,
    *,
    at: float,
    unit: str | None = None,
    identifier: str | None = None,
    priority: int = 6,
    pid: int = 4242,
    transport: str = "journal",
    boot: str = BOOT,
) -> dict[str, str]:
    """One entry a service logged at epoch `at`: its identifier defaults to the unit's name."""
    ident = identifier or (unit or "app").removesuffix(".service")
    fields = {
        "__REALTIME_TIMESTAMP": str(int(at * 1_000_000)),
        "__MONOTONIC_TIMESTAMP": str(int(at * 1_000_000) % 10**12),
        "_BOOT_ID": boot,
        "_HOSTNAME": HOSTNAME,
        "_TRANSPORT": transport,
        "PRIORITY": str(priority),
        "SYSLOG_FACILITY": "3",
        "SYSLOG_IDENTIFIER": ident,
        "_PID": str(pid),
        "_COMM": ident[:15],
        "MESSAGE": message,
    }
    if unit is not None:
        fields["_SYSTEMD_UNIT"] = unit
    return fields


def kernel(message: str, *, at: float, priority: int = 3, boot: str = BOOT) -> dict[str, str]:
    """One kernel message at epoch `at`, as journald stores what it read from /dev/kmsg."""
    fields = entry(message, at=at, identifier="kernel", priority=priority, transport="kernel", boot=boot)
    del fields["_PID"], fields["_COMM"]
    fields["SYSLOG_FACILITY"] = "0"
    return fields


def export(entries: Iterable[Mapping[str, str]]) -> bytes:
    """The entries in the journal export format: NAME=value lines, a value holding a newline in the binary-safe
    form (name, newline, 64-bit little-endian length, the value, newline), an empty line after each entry."""
    out = bytearray()
    for fields in entries:
        for name, value in fields.items():
            data = value.encode()
            if b"\n" in data:
                out += name.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
            else:
                out += name.encode() + b"=" + data + b"\n"
        out += b"\n"
    return bytes(out)


def write_journal(directory: Path, entries: Iterable[Mapping[str, str]]) -> Path:
    """Real journal files in `directory` holding `entries` (in time order): `directory` is returned, for
    journalctl --directory."""
    binary = find_journal_remote()
    assert binary is not None, missing_reason()
    directory.mkdir(parents=True, exist_ok=True)
    ordered = sorted(entries, key=lambda f: int(f["__REALTIME_TIMESTAMP"]))
    done = subprocess.run(
        [binary, "-o", str(directory / "fixture.journal"), "-"],
        input=export(ordered),
        capture_output=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"systemd-journal-remote failed ({done.returncode}): {done.stderr.decode()}")
    return directory
