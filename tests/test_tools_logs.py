"""Log tools on real files in a temp log directory."""

from __future__ import annotations

import gzip
import os
import time
from pathlib import Path

import pytest

from tools import PermissionDenied, Tool, ToolContext, ToolError
from tools.builtin import clean_logs, grep_log, tail_log
from tools.builtin.logs import is_rotated

DAY = 86_400


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    d = tmp_path / "log"
    d.mkdir()
    (d / "app.log").write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    return d


def bound(t: Tool, logs: Path) -> Tool:
    return t.bind(ToolContext(log_dirs=(logs,)))


def age(path: Path, days: float) -> None:
    t = time.time() - days * DAY
    os.utime(path, (t, t))


async def test_tail_log_returns_the_last_lines(logs: Path) -> None:
    out = await bound(tail_log, logs).run({"path": str(logs / "app.log"), "lines": 3})
    assert out.splitlines()[1:] == ["line 998", "line 999", "line 1000"]
    assert out.splitlines()[0].startswith(f"{logs / 'app.log'} (last 3 lines, ")


async def test_tail_log_accepts_a_path_relative_to_the_log_directory(logs: Path) -> None:
    out = await bound(tail_log, logs).run({"path": "app.log", "lines": 1})
    assert out.splitlines()[1:] == ["line 1000"]


async def test_relative_path_is_looked_up_in_every_log_directory(logs: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "worker.log").write_text("only here\n")
    tool = tail_log.bind(ToolContext(log_dirs=(logs, other)))
    assert (await tool.run({"path": "worker.log"})).splitlines()[1:] == ["only here"]


async def test_tail_log_reads_a_big_file_from_its_end(logs: Path) -> None:
    big = logs / "big.log"
    with big.open("w") as f:
        for i in range(200_000):
            f.write(f"request {i} took {i % 97} ms\n")
    out = await bound(tail_log, logs).run({"path": "big.log", "lines": 2})
    assert out.splitlines()[1:] == [f"request {i} took {i % 97} ms" for i in (199_998, 199_999)]


async def test_tail_log_decompresses_gzip(logs: Path) -> None:
    with gzip.open(logs / "app.log.2.gz", "wt") as f:
        f.write("old 1\nold 2\nold 3\n")
    out = await bound(tail_log, logs).run({"path": "app.log.2.gz", "lines": 2})
    assert out.splitlines()[1:] == ["old 2", "old 3"]


@pytest.mark.parametrize("path", ["/etc/passwd", "../../../etc/passwd", "app.log/../../outside.log"])
async def test_path_outside_the_log_directories_is_refused(logs: Path, path: str) -> None:
    with pytest.raises(ToolError, match="path is outside the allowed log directories"):
        await bound(tail_log, logs).run({"path": path})


async def test_symlink_out_of_the_log_directory_is_refused(logs: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("password=hunter2\n")
    (logs / "innocent.log").symlink_to(secret)
    with pytest.raises(ToolError, match="path is outside the allowed log directories"):
        await bound(tail_log, logs).run({"path": "innocent.log"})
    out = await bound(grep_log, logs).run({"path": str(logs), "pattern": "password"})
    assert "hunter2" not in out


async def test_missing_file_is_a_tool_error(logs: Path) -> None:
    with pytest.raises(ToolError, match=r"no such file: nope\.log"):
        await bound(tail_log, logs).run({"path": "nope.log"})


async def test_grep_log_lists_matches_with_line_numbers(logs: Path) -> None:
    out = await bound(grep_log, logs).run({"path": "app.log", "pattern": r"^line 99\d$", "max_matches": 3})
    assert out.splitlines() == [
        f"10 matching lines for /^line 99\\d$/ in {logs / 'app.log'}, showing the first 3",
        "990: line 990",
        "991: line 991",
        "992: line 992",
    ]


async def test_grep_log_searches_a_directory(logs: Path) -> None:
    (logs / "nginx").mkdir()
    (logs / "nginx" / "error.log").write_text("ok\nupstream timed out\n")
    with gzip.open(logs / "nginx" / "error.log.1.gz", "wt") as f:
        f.write("upstream timed out (yesterday)\n")
    out = await bound(grep_log, logs).run({"path": ".", "pattern": "(?i)UPSTREAM"})
    assert out.splitlines() == [
        f"2 matching lines for /(?i)UPSTREAM/ in 3 files under {logs}",
        "nginx/error.log:2: upstream timed out",
        "nginx/error.log.1.gz:1: upstream timed out (yesterday)",
    ]


async def test_grep_log_bad_regex_is_a_tool_error(logs: Path) -> None:
    with pytest.raises(ToolError, match="pattern: invalid regular expression"):
        await bound(grep_log, logs).run({"path": "app.log", "pattern": "("})


@pytest.mark.parametrize(
    ("name", "rotated"),
    [("app.log", False), ("app.log.1", True), ("app.log.2.gz", True), ("syslog.gz", True), ("x.old", True),
     ("app.log-20240131", True), ("app-20240131.log", False), ("app.pid", False), ("access.log.bz2", True),
     ("service-12345678", False)],
)
def test_rotated_log_names(name: str, rotated: bool) -> None:
    assert is_rotated(name) is rotated


@pytest.fixture
def rotated(logs: Path) -> Path:
    (logs / "app").mkdir()
    files = {"app.log.1": 100, "app.log.2.gz": 2_000, "app/worker.log-20240101": 300, "old.old": 40,
             "recent.log.1": 5_000, "app/live.log": 7_000}
    for name, size in files.items():
        (logs / name).write_bytes(b"x" * size)
        age(logs / name, 1 if name.startswith("recent") else 30)
    age(logs / "app.log", 30)  # old but live: never deleted
    return logs


async def test_clean_logs_dry_run_lists_files_and_total_bytes(rotated: Path) -> None:
    preview = await bound(clean_logs, rotated).dry_run({"path": str(rotated), "older_than_days": 7})
    assert preview is not None
    lines = preview.splitlines()
    assert lines[0] == f"would delete 4 rotated log files older than 7 days under {rotated}, 2.4K (2440 bytes)"
    assert [line.split()[0] for line in lines[1:]] == [
        str(rotated / "app.log.1"), str(rotated / "app.log.2.gz"), str(rotated / "app/worker.log-20240101"),
        str(rotated / "old.old")]
    assert (rotated / "app.log.1").exists()  # a preview deletes nothing


async def test_clean_logs_deletes_what_the_preview_listed_and_says_who(rotated: Path) -> None:
    tool = bound(clean_logs, rotated)
    out = await tool.run({"path": str(rotated), "older_than_days": 7}, confirmed_by="U024BE7LH")
    assert out.splitlines()[0] == (
        f"deleted 4 rotated log files older than 7 days under {rotated}, freed 2.4K (2440 bytes); "
        "approved by U024BE7LH")
    remaining = sorted(str(p.relative_to(rotated)) for p in rotated.rglob("*") if p.is_file())  # noqa: ASYNC240
    assert remaining == ["app.log", "app/live.log", "recent.log.1"]
    assert (await tool.dry_run({"path": str(rotated)})) == \
        f"would delete nothing: no rotated logs older than 7 days under {rotated}"


async def test_clean_logs_needs_an_approver(rotated: Path) -> None:
    with pytest.raises(PermissionDenied):
        await bound(clean_logs, rotated).run({"path": str(rotated)})


async def test_clean_logs_outside_the_log_directories_is_refused(rotated: Path, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="path is outside the allowed log directories"):
        await bound(clean_logs, rotated).dry_run({"path": str(tmp_path)})


async def test_clean_logs_does_not_follow_symlinks(rotated: Path, tmp_path: Path) -> None:
    outside = tmp_path / "keep.log.1"
    outside.write_text("precious")
    age(outside, 30)
    (rotated / "link.log.1").symlink_to(outside)
    await bound(clean_logs, rotated).run({"path": str(rotated)}, confirmed_by="U1")
    assert outside.read_text() == "precious"
