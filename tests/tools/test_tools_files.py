"""check_disk's inodes, list_top_processes' own commands and units, disk_usage and read_file on this machine, with
temp directories configured as the allowed ones (tests/tools/remote/test_files_ssh.py runs them over SSH)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import ToolError
from tools.api import ToolContext
from tools.builtin import check_disk, disk_usage, list_top_processes, read_file
from tools.builtin.host import nearest_to_full, parse_df, unit_of

pytestmark = pytest.mark.processes  # every tool call runs its commands in a local sh
ROOT = os.geteuid() == 0
PRIVATE_KEY = (
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n"
)
LOGROTATE = "/var/log/nginx/*.log {\n\tdaily\n\trotate 14\n\tcompress\n\tmissingok\n}\n"

# Real `df -P -T -k` and `df -P -i` output of this test machine, with a 1 MiB tmpfs (16 inodes, all used) at /mnt/t
# and a 40 GiB /var at 61% of its space and every inode used.
DF_SPACE = """Filesystem     Type  1024-blocks     Used Available Capacity Mounted on
/dev/root      ext4    264091588 26088628  80213288      25% /
/dev/vdb       ext4     41922560 24235912  15493620      61% /var
tmpfs          tmpfs        1024        4      1020       1% /mnt/t
proc           proc            0        0         0        - /proc
"""
DF_INODES = """Filesystem       Inodes  IUsed    IFree IUse% Mounted on
/dev/root      16777216 507221 16269995    4% /
/dev/vdb        2621440 2621440        0  100% /var
tmpfs                16     16        0  100% /mnt/t
proc              56321    120    56201    1% /proc
"""


def test_parse_df_joins_inodes_to_space_and_names_the_mount_nearest_to_full_by_inodes() -> None:
    mounts = parse_df(DF_SPACE, DF_INODES)
    assert [(m.mount, m.space_pct, m.inode_pct) for m in mounts] == [("/", 24.5, 3.0), ("/var", 61.0, 100.0)]
    assert (
        nearest_to_full(mounts) == "nearest to full: /var: 61.0% of space, 100.0% of inodes: nearest to full by inodes"
    )


def test_a_filesystem_without_inode_counts_shows_dashes_and_space_decides() -> None:
    mounts = parse_df(DF_SPACE, "")
    assert [m.inode_pct for m in mounts] == [None, None]
    assert nearest_to_full(mounts) == "nearest to full: /var: 61.0% of space, no inode count: nearest to full by space"


@contextlib.contextmanager
def small_ext4(where: Path, inodes: int) -> Iterator[Path]:
    """A real 4 MiB ext4 filesystem with `inodes` inodes, loop-mounted at `where` (needs root)."""
    image = where.with_suffix(".img")
    with image.open("wb") as f:
        f.truncate(4 * 1024 * 1024)
    subprocess.run(["mkfs.ext4", "-q", "-N", str(inodes), "-F", str(image)], check=True)
    where.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def fill_inodes(where: Path) -> None:
    for i in range(1000):
        try:
            (where / f"f{i}").touch()
        except OSError:
            return
    raise AssertionError("the filesystem never ran out of inodes")


needs_root = pytest.mark.skipif(not ROOT, reason="a loop mount and a cgroup need root")


@needs_root
async def test_check_disk_names_a_mount_out_of_inodes_with_space_left(tmp_path: Path) -> None:
    with small_ext4(tmp_path / "full", 16) as mnt:
        fill_inodes(mnt)
        out = await check_disk.run({})
    row = next(line.split() for line in out.splitlines() if line.startswith(f"{mnt} "))
    assert row[1] == "ext4" and row[-3:] == ["16", "16", "100.0%"] and float(row[5].rstrip("%")) < 90
    assert f"WARNING {mnt} has used 100.0% of its inodes (new files fail when none are left)" in out
    assert out.splitlines()[-1].startswith(f"nearest to full: {mnt}: ")
    assert out.splitlines()[-1].endswith(", 100.0% of inodes: nearest to full by inodes")


async def test_list_top_processes_leaves_out_its_own_commands() -> None:
    out = await list_top_processes.run({"sort_by": "memory", "limit": 100})
    assert re.fullmatch(r"this tool's own \d+ sampling processes are left out", out.splitlines()[-1])
    assert not [line for line in out.splitlines() if "cut -b 1-400" in line or "[0-9]*/stat" in line]


@pytest.fixture
def burning_unit() -> Iterator[str]:
    """A cgroup named like a systemd unit whose only long-lived process is a shell starting short CPU-bound ones."""
    unit = f"opsloop-burn-{os.getpid()}.service"
    cgroup = Path("/sys/fs/cgroup/unified") if Path("/sys/fs/cgroup/unified").is_dir() else Path("/sys/fs/cgroup")
    group = cgroup / unit
    group.mkdir()
    burn = "while :; do sh -c 'i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done'; done"
    proc = subprocess.Popen(["sh", "-c", burn], start_new_session=True)
    (group / "cgroup.procs").write_text(str(proc.pid))
    try:
        yield unit
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for _ in range(1000):  # its last child may still be exiting
            with contextlib.suppress(OSError):
                group.rmdir()
                break


@needs_root
async def test_list_top_processes_by_unit_names_the_unit_whose_short_lived_children_burn_cpu(burning_unit: str) -> None:
    out = await list_top_processes.run({"group_by": "unit", "limit": 3})
    lines = out.splitlines()
    assert lines[0].startswith("top ") and " units on " in lines[0]
    assert lines[1].split() == ["unit", "processes", "cpu%", "rss", "busiest", "command"]
    mine = next(line.split() for line in lines[2:] if line.startswith(burning_unit))
    assert float(mine[2]) > 5, out


def test_unit_of_takes_the_innermost_unit() -> None:
    assert [unit_of(c) for c in ("/system.slice/nginx.service", "/user.slice/user-0.slice/session-3.scope", "/")] == [
        "nginx.service",
        "session-3.scope",
        "-",
    ]


# -- disk_usage --------------------------------------------------------------------------------------------


def var_with_cores(root: Path) -> Path:
    var = root / "var"
    (var / "tmp" / "cores").mkdir(parents=True)
    (var / "log").mkdir()
    (var / "log" / "syslog").write_bytes(b"x" * 200_000)
    old = time.time() - 30 * 86_400
    os.utime(var / "log" / "syslog", (old, old))
    os.utime(var / "log", (old, old))
    for i in range(3):
        (var / "tmp" / "cores" / f"core.{i}").write_bytes(os.urandom(1_000_000))
    (var / "home").mkdir()
    (var / "home" / "secret-name").write_bytes(b"x" * 5_000_000)
    return var


async def test_disk_usage_finds_core_dumps_newest_first_and_hides_denied_dirs(tmp_path: Path) -> None:
    var = var_with_cores(tmp_path)
    ctx = ToolContext(usage_dirs=(str(tmp_path),), denied_paths=(str(var / "home"),))
    out = await disk_usage.bind(ctx).run({"path": str(var), "depth": 2})
    lines = out.splitlines()
    assert lines[0].startswith(f"disk usage under {var} on ") and ", one filesystem, to depth 2: " in lines[0]
    paths = [line.split()[-1] for line in lines[3:] if line.split()[-1].startswith("/")]
    assert paths.index(str(var / "tmp" / "cores")) < paths.index(str(var / "log"))  # newest growth first
    assert "secret-name" not in out and str(var / "home") not in paths
    assert "2 entries under denied paths (home and secret directories) not shown" in out


async def test_disk_usage_refuses_a_path_outside_its_dirs_and_a_denied_one(tmp_path: Path) -> None:
    ctx = ToolContext(usage_dirs=(str(tmp_path),))
    with pytest.raises(ToolError, match="outside the directories disk_usage may read"):
        await disk_usage.bind(ctx).run({"path": "/usr"})
    with pytest.raises(ToolError, match="is refused: disk_usage never reads /root"):
        await disk_usage.run({"path": "/root"})


# -- read_file ---------------------------------------------------------------------------------------------


@pytest.fixture
def etc(tmp_path: Path) -> Path:
    d = tmp_path / "etc"
    (d / "logrotate.d").mkdir(parents=True)
    (d / "logrotate.d" / "nginx").write_text(LOGROTATE)
    (d / "ssl").mkdir()
    (d / "ssl" / "server.pem").write_text(PRIVATE_KEY)
    (d / "ssl" / "server.key").write_text("not even a key\n")
    (d / "token").write_text("xoxb-1234567890-abcdefghijkl\n")
    (d / "blob").write_bytes(b"\x7fELF\0\0\1")
    (d / "out").symlink_to(tmp_path / "outside")
    (tmp_path / "outside").write_text("outside\n")
    return d


async def test_read_file_reads_a_logrotate_config_numbered(etc: Path) -> None:
    out = await read_file.bind(ToolContext(read_dirs=(str(etc),))).run({"path": str(etc / "logrotate.d" / "nginx")})
    assert out.splitlines() == [
        f"{etc}/logrotate.d/nginx on {os.uname().nodename}: {len(LOGROTATE)} bytes, 6 lines; lines 1-6 shown",
        *(f"{i + 1}: {line}" for i, line in enumerate(LOGROTATE.splitlines())),
    ]


async def test_read_file_says_what_it_cut_and_where_to_read_on(etc: Path) -> None:
    out = await read_file.bind(ToolContext(read_dirs=(str(etc),))).run(
        {"path": str(etc / "logrotate.d" / "nginx"), "start_line": 2, "lines": 2}
    )
    assert out.splitlines()[0].endswith(
        "lines 2-3 shown, 3 more lines not shown (2 lines asked; read on with start_line=4)"
    )


@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        ("ssl/server.pem", "is refused: it holds a private key"),
        ("ssl/server.key", "is refused: read_file never reads *.key"),
        ("token", "is refused: it is nothing but a secret"),
        ("blob", "is a binary file"),
        ("out", "is outside the directories read_file may read"),
        ("logrotate.d/../../outside", "is outside the directories read_file may read"),
    ],
)
async def test_read_file_refuses(etc: Path, name: str, refusal: str) -> None:
    with pytest.raises(ToolError, match=re.escape(refusal)):
        await read_file.bind(ToolContext(read_dirs=(str(etc),))).run({"path": f"{etc}/{name}"})


async def test_read_file_refuses_etc_shadow_even_when_etc_is_allowed() -> None:
    with pytest.raises(ToolError, match=re.escape("/etc/shadow is refused: read_file never reads /etc/shadow")):
        await read_file.run({"path": "/etc/shadow"})
