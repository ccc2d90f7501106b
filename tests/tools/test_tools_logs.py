"""Log tools on real files in a temp log directory."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import os
import time
from pathlib import Path

import psutil
import pytest

from tests.support.busy_log import grep_commands, host_commands, huge_log
from tools import PermissionDenied, Tool, ToolContext, ToolError
from tools.builtin import clean_logs, grep_log, tail_log
from tools.builtin.log_reads import LISTED_FILES, MAX_LINE_CHARS, compile_pattern, is_rotated

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


@pytest.mark.processes
async def test_tail_log_returns_the_last_lines(logs: Path) -> None:
    out = await bound(tail_log, logs).run({"path": str(logs / "app.log"), "lines": 3})
    assert out.splitlines()[1:] == ["line 998", "line 999", "line 1000"]
    assert out.splitlines()[0].startswith(f"{logs / 'app.log'} (last 3 lines, ")


@pytest.mark.processes
async def test_tail_log_accepts_a_path_relative_to_the_log_directory(logs: Path) -> None:
    out = await bound(tail_log, logs).run({"path": "app.log", "lines": 1})
    assert out.splitlines()[1:] == ["line 1000"]


@pytest.mark.processes
async def test_relative_path_is_looked_up_in_every_log_directory(logs: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "worker.log").write_text("only here\n")
    tool = tail_log.bind(ToolContext(log_dirs=(logs, other)))
    assert (await tool.run({"path": "worker.log"})).splitlines()[1:] == ["only here"]


@pytest.mark.processes
async def test_tail_log_reads_a_big_file_from_its_end(logs: Path) -> None:
    big = logs / "big.log"
    with big.open("w") as f:
        for i in range(200_000):
            f.write(f"request {i} took {i % 97} ms\n")
    out = await bound(tail_log, logs).run({"path": "big.log", "lines": 2})
    assert out.splitlines()[1:] == [f"request {i} took {i % 97} ms" for i in (199_998, 199_999)]


@pytest.mark.processes
async def test_tail_log_decompresses_gzip(logs: Path) -> None:
    with gzip.open(logs / "app.log.2.gz", "wt") as f:
        f.write("old 1\nold 2\nold 3\n")
    out = await bound(tail_log, logs).run({"path": "app.log.2.gz", "lines": 2})
    assert out.splitlines()[1:] == ["old 2", "old 3"]


@pytest.mark.parametrize("path", ["/etc/passwd", "../../../etc/passwd", "app.log/../../outside.log"])
@pytest.mark.processes
async def test_path_outside_the_log_directories_is_refused(logs: Path, path: str) -> None:
    with pytest.raises(ToolError, match="path is outside the allowed log directories"):
        await bound(tail_log, logs).run({"path": path})


@pytest.mark.processes
async def test_symlink_out_of_the_log_directory_is_refused(logs: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("password=hunter2\n")
    (logs / "innocent.log").symlink_to(secret)
    with pytest.raises(ToolError, match="path is outside the allowed log directories"):
        await bound(tail_log, logs).run({"path": "innocent.log"})
    out = await bound(grep_log, logs).run({"path": str(logs), "pattern": "password"})
    assert "hunter2" not in out


@pytest.mark.processes
async def test_missing_file_is_a_tool_error(logs: Path) -> None:
    with pytest.raises(ToolError, match=r"no such file: nope\.log"):
        await bound(tail_log, logs).run({"path": "nope.log"})


@pytest.mark.processes
async def test_grep_log_lists_matches_with_line_numbers(logs: Path) -> None:
    out = await bound(grep_log, logs).run({"path": "app.log", "pattern": r"^line 99\d$", "max_matches": 3})
    assert out.splitlines() == [
        f"10 matching lines for /^line 99\\d$/ in {logs / 'app.log'}, showing the first 3",
        "990: line 990",
        "991: line 991",
        "992: line 992",
    ]


@pytest.mark.processes
async def test_grep_log_searches_a_directory(logs: Path) -> None:
    (logs / "nginx").mkdir()
    (logs / "nginx" / "error.log").write_text("ok\nupstream timed out\n")
    with gzip.open(logs / "nginx" / "error.log.1.gz", "wt") as f:
        f.write("upstream timed out (yesterday)\n")
    out = await bound(grep_log, logs).run({"path": ".", "pattern": "(?i)UPSTREAM"})
    assert out.splitlines() == [
        f"2 matching lines for /(?i)UPSTREAM/ in 3 files under {logs}",
        "searched in path order: app.log (0), nginx/error.log (1), nginx/error.log.1.gz (1)",
        "nginx/error.log:2: upstream timed out",
        "nginx/error.log.1.gz:1: upstream timed out (yesterday)",
    ]


@pytest.mark.processes
async def test_grep_log_names_the_files_whose_matches_it_did_not_show(logs: Path) -> None:
    (logs / "nginx").mkdir()
    (logs / "nginx" / "error.log").write_text("upstream 1\nupstream 2\n")
    (logs / "nginx" / "error.log.1").write_text("upstream 0\n")
    out = await bound(grep_log, logs).run({"path": "nginx", "pattern": "upstream", "max_matches": 1})
    assert out.splitlines() == [
        f"3 matching lines for /upstream/ in 2 files under {logs / 'nginx'}, showing the first 1",
        "searched in path order: error.log (2), error.log.1 (1)",
        "error.log:1: upstream 1",
        "matching lines not shown (raise max_matches or name one file): error.log (1), error.log.1 (1)",
    ]


@pytest.mark.processes
async def test_grep_log_bad_regex_is_a_tool_error(logs: Path) -> None:
    with pytest.raises(ToolError, match="pattern: invalid regular expression"):
        await bound(grep_log, logs).run({"path": "app.log", "pattern": "("})


@pytest.mark.parametrize(
    ("name", "rotated"),
    [
        # rotated or compressed logs
        ("app.log.1", True),
        ("app.log.2.gz", True),
        ("app.log-20261130", True),
        ("app-2026-11-30.log.gz", True),
        ("access.log.bz2", True),
        ("error.log.old", True),
        ("app.log.2026-11-30", True),
        ("syslog.1", True),
        ("syslog.gz", True),
        ("messages-20261130", True),
        ("app.log-20261130-1764460800.xz", True),
        ("access_log.3", True),
        # live logs: never
        ("app.log", False),
        ("app-20240131.log", False),
        ("syslog", False),
        # archives, dumps and anything without a log-ish stem: never
        ("backup-2026-11-30.tar", False),
        ("backup-2026-11-30.tar.gz", False),
        ("db-2026.sql.gz", False),
        ("x.old", False),
        ("app.pid", False),
        ("service-12345678", False),
        ("core.1234", False),
        ("data.json.gz", False),
        ("report-20261130.csv", False),
    ],
)
def test_rotated_log_names(name: str, rotated: bool) -> None:
    assert is_rotated(name) is rotated


# -- bounded reads -------------------------------------------------------------------------------------


@pytest.mark.processes
async def test_tail_log_on_a_newline_free_file_shows_its_one_line_cut(logs: Path) -> None:
    sparse = logs / "sparse.log"
    with sparse.open("wb") as f:
        f.truncate(32 * 1024**2)  # a hole: no newline anywhere
        f.seek(0, os.SEEK_END)
        f.write(b"the end")
    out = await bound(tail_log, logs).run({"path": "sparse.log", "lines": 3})
    header, line = out.splitlines()
    assert header == f"{sparse} (last 1 lines, 32.0M)"
    assert line == "\x00" * MAX_LINE_CHARS + " …"  # the line is cut on the host, then for display


@pytest.mark.processes
async def test_tail_log_with_long_lines_returns_whole_lines(logs: Path) -> None:
    wide = logs / "wide.log"
    row = "x" * (2 * 1024**2)
    wide.write_text("".join(f"{i}{row}\n" for i in range(10)))
    out = await bound(tail_log, logs).run({"path": "wide.log", "lines": 2})
    assert [line[:2] for line in out.splitlines()[1:]] == ["8x", "9x"]


@pytest.mark.processes
async def test_grep_log_searches_an_overlong_line_whole_and_shows_its_start(logs: Path) -> None:
    (logs / "long.log").write_text("a" * (64 * 1024 + 10) + "needle\nshort needle\n")
    out = await bound(grep_log, logs).run({"path": "long.log", "pattern": "needle"})
    assert out.splitlines() == [
        f"2 matching lines for /needle/ in {logs / 'long.log'}",
        "1: " + "a" * MAX_LINE_CHARS + " …",
        "2: short needle",
    ]


@pytest.mark.processes
async def test_a_long_grep_stalls_neither_the_loop_nor_outlives_its_timeout(logs: Path) -> None:
    huge_log(logs / "huge.log")
    tool = dataclasses.replace(bound(grep_log, logs), timeout_s=30)
    call = asyncio.create_task(tool.run({"path": "huge.log.gz", "pattern": "needle"}))
    async with asyncio.timeout(30):
        while not (grepping := grep_commands()):  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    (command,) = grepping
    tree = [command, *command.children(recursive=True)]  # timeout, gzip and grep, in a process group of their own
    ticks = 0
    while ticks < 20:  # the event loop keeps turning while the grep runs
        await asyncio.sleep(0.005)
        ticks += 1
    assert not call.done() and grep_commands() == [command]  # the grep was running all along
    call.cancel()  # a Stop click, or the timeout: the command is killed with all it started, not abandoned
    with pytest.raises(asyncio.CancelledError):
        await call
    _, alive = psutil.wait_procs(tree, timeout=10)  # SIGKILLed: gone as soon as the kernel has delivered it
    assert alive == []
    assert host_commands() == []


@pytest.mark.processes
async def test_a_tool_timeout_kills_the_command_and_tells_the_model(logs: Path) -> None:
    huge_log(logs / "huge.log")
    tool = dataclasses.replace(bound(grep_log, logs), timeout_s=0.5)
    with pytest.raises(ToolError) as e:
        await tool.run({"path": "huge.log.gz", "pattern": "needle"})
    assert str(e.value) == "grep_log timed out after 0.5s (its process was killed)"
    assert host_commands() == []


@pytest.fixture
def rotated(logs: Path) -> Path:
    (logs / "app").mkdir()
    files = {
        "app.log.1": 100,
        "app.log.2.gz": 2_000,
        "app/worker.log-20240101": 300,
        "old.old": 40,
        "recent.log.1": 5_000,
        "app/live.log": 7_000,
    }
    for name, size in files.items():
        (logs / name).write_bytes(b"x" * size)
        age(logs / name, 1 if name.startswith("recent") else 30)
    age(logs / "app.log", 30)  # old but live: never deleted
    return logs


def listed(preview: str) -> list[str]:
    return [line.split()[0] for line in preview.splitlines()[1:]]


@pytest.mark.processes
async def test_clean_logs_dry_run_lists_every_file_with_its_tag_and_a_list_digest(rotated: Path) -> None:
    preview = await bound(clean_logs, rotated).dry_run({"path": str(rotated), "older_than_days": 7})
    assert preview is not None
    lines = preview.splitlines()
    head, digest = lines[0].rsplit(" ", 1)
    assert head == f"would delete 3 rotated log files older than 7 days under {rotated}, 2.3K (2400 bytes); list digest"
    assert len(digest) == 32
    assert listed(preview) == [
        str(rotated / "app.log.1"),
        str(rotated / "app.log.2.gz"),
        str(rotated / "app/worker.log-20240101"),
    ]
    assert all(len(line.rsplit("#", 1)[1]) == 16 for line in lines[1:])
    assert (rotated / "app.log.1").exists()  # a preview deletes nothing


@pytest.mark.processes
async def test_clean_logs_deletes_what_the_preview_listed_and_says_who(rotated: Path) -> None:
    tool = bound(clean_logs, rotated)
    await tool.dry_run({"path": str(rotated), "older_than_days": 7})  # what the approver saw, in this task
    out = await tool.run({"path": str(rotated), "older_than_days": 7}, confirmed_by="U024BE7LH")
    assert out.splitlines()[0] == (
        f"deleted 3 rotated log files older than 7 days under {rotated}, freed 2.3K (2400 bytes); approved by U024BE7LH"
    )
    remaining = sorted(str(p.relative_to(rotated)) for p in rotated.rglob("*") if p.is_file())  # noqa: ASYNC240
    assert remaining == ["app.log", "app/live.log", "old.old", "recent.log.1"]
    assert (
        await tool.dry_run({"path": str(rotated)})
    ) == f"would delete nothing: no rotated logs older than 7 days under {rotated}"


@pytest.mark.processes
async def test_clean_logs_never_runs_without_a_preview_for_the_same_call(rotated: Path) -> None:
    tool = bound(clean_logs, rotated)
    with pytest.raises(PermissionDenied, match="no preview was shown for this call"):
        await tool.run({"path": str(rotated)}, confirmed_by="U1")
    await tool.dry_run({"path": str(rotated), "older_than_days": 30})  # a preview of another call
    with pytest.raises(PermissionDenied, match="no preview was shown for this call"):
        await tool.run({"path": str(rotated), "older_than_days": 7}, confirmed_by="U1")
    assert (rotated / "app.log.1").exists()


@pytest.mark.processes
async def test_a_file_that_appears_after_the_preview_is_not_deleted(rotated: Path) -> None:
    tool = bound(clean_logs, rotated)
    preview = await tool.dry_run({"path": str(rotated)})
    (rotated / "late.log.1").write_bytes(b"y" * 10)  # matches too, but nobody approved it
    age(rotated / "late.log.1", 30)
    out = await tool.run({"path": str(rotated)}, confirmed_by="U1", approved_preview=preview)
    assert out.splitlines()[0].startswith("deleted 3 rotated log files")
    assert out.splitlines()[-2:] == [
        "not deleted, not in the approved preview (1 files, new or changed since it was made; call clean_logs "
        "again for a new preview and approval):",
        f"  {rotated / 'late.log.1'}  10B  30d old",
    ]
    assert (rotated / "late.log.1").exists() and not (rotated / "app.log.1").exists()


@pytest.mark.processes
async def test_a_listed_file_that_changed_after_the_preview_is_not_deleted(rotated: Path) -> None:
    tool = bound(clean_logs, rotated)
    preview = await tool.dry_run({"path": str(rotated)})
    with (rotated / "app.log.1").open("ab") as f:
        f.write(b"written after the preview")
    age(rotated / "app.log.1", 30)
    out = await tool.run({"path": str(rotated)}, confirmed_by="U1", approved_preview=preview)
    assert out.splitlines()[0].startswith("deleted 2 rotated log files")
    assert (rotated / "app.log.1").exists()
    assert out.splitlines()[-2:] == [
        "left alone: changed since the preview (1 files; call clean_logs again for a new preview and approval):",
        f"  {rotated / 'app.log.1'}  100B  30d old",
    ]  # as the preview showed it; not also listed as new


@pytest.mark.processes
async def test_files_beyond_the_named_ones_are_deleted_only_while_the_digest_holds(rotated: Path) -> None:
    many = rotated / "many"
    many.mkdir()
    for i in range(LISTED_FILES + 10):
        (many / f"w{i:03}.log.1").write_bytes(b"z")
        age(many / f"w{i:03}.log.1", 30)
    tool = bound(clean_logs, rotated)
    preview = await tool.dry_run({"path": str(many)})
    assert preview is not None and preview.splitlines()[-1] == "  … and 10 more, covered by the list digest"
    out = await tool.run({"path": str(many)}, confirmed_by="U1", approved_preview=preview)
    assert out.splitlines()[0].startswith(f"deleted {LISTED_FILES + 10} rotated log files")

    for i in range(LISTED_FILES + 10):
        (many / f"w{i:03}.log.1").write_bytes(b"z")
        age(many / f"w{i:03}.log.1", 30)
    preview = await tool.dry_run({"path": str(many)})
    (many / "zz.log.1").write_bytes(b"new")  # the list changed: only the files the preview named remain approved
    age(many / "zz.log.1", 30)
    out = await tool.run({"path": str(many)}, confirmed_by="U1", approved_preview=preview)
    assert out.splitlines()[0].startswith(f"deleted {LISTED_FILES} rotated log files")
    assert out.splitlines()[-13:-11] == [
        "left alone: the 10 files the approved preview covered only by its list digest, not by name (the list "
        "changed since the preview, so they cannot be told from new files; call clean_logs again for a new preview "
        "and approval)",
        "not deleted, not named in the approved preview (11 files: new, changed, or among the 10 it covered only by "
        "its list digest; call clean_logs again for a new preview and approval):",
    ]
    assert sorted(p.name for p in many.iterdir()) == [
        f"w{i:03}.log.1" for i in range(LISTED_FILES, LISTED_FILES + 10)
    ] + ["zz.log.1"]


@pytest.mark.processes
async def test_a_hostile_file_name_cannot_forge_a_preview_line(rotated: Path) -> None:
    tool = bound(clean_logs, rotated)
    hostile = rotated / "a\n  forged  1B  30d old  #0123456789abcdef\nx.log.1"
    hostile.write_bytes(b"h")
    age(hostile, 30)
    preview = await tool.dry_run({"path": str(rotated)})
    assert preview is not None and len(preview.splitlines()) == 5  # one line per file, the hostile one escaped
    assert f"{rotated}/a\\n  forged  1B  30d old  #0123456789abcdef\\nx.log.1  1B  30d old  #" in preview


async def test_clean_logs_needs_an_approver(rotated: Path) -> None:
    with pytest.raises(PermissionDenied):
        await bound(clean_logs, rotated).run({"path": str(rotated)})


@pytest.mark.processes
async def test_clean_logs_outside_the_log_directories_is_refused(rotated: Path, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="path is outside the allowed log directories"):
        await bound(clean_logs, rotated).dry_run({"path": str(tmp_path)})


@pytest.mark.processes
async def test_clean_logs_does_not_follow_symlinks(rotated: Path, tmp_path: Path) -> None:
    outside = tmp_path / "keep.log.1"
    outside.write_text("precious")
    age(outside, 30)
    (rotated / "link.log.1").symlink_to(outside)
    tool = bound(clean_logs, rotated)
    preview = await tool.dry_run({"path": str(rotated)})
    assert preview is not None and "link.log.1" not in preview
    await tool.run({"path": str(rotated)}, confirmed_by="U1")
    assert outside.read_text() == "precious"


# -- grep_log in linear time (RE2) ---------------------------------------------------------------------


@pytest.mark.processes
async def test_a_catastrophic_pattern_answers_within_a_short_timeout(logs: Path) -> None:
    # (a+)+$ backtracks 2**64 times per line for Python's re; here the tool's timeout is 2 s, which the
    # backtracking engine hits (it burned ~50 s), and the linear-time matcher answers well within it.
    (logs / "evil.log").write_text("a" * 64 + "b\n" + "aaaa\n" + "b" * 64 + "\n" + "a" * 64 + "\n")
    tool = dataclasses.replace(bound(grep_log, logs), timeout_s=2)
    out = await tool.run({"path": "evil.log", "pattern": "(a+)+$"})
    assert out.splitlines() == [f"2 matching lines for /(a+)+$/ in {logs / 'evil.log'}", "2: aaaa", f"4: {'a' * 64}"]
    assert host_commands() == []


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        (r"(a)\1", r"a backreference (\1)"),
        (r"(?P<x>a)(?P=x)", "a named backreference (?P=…)"),
        ("(?=x)", "a lookahead (?=…)"),
        ("a(?!x)", "a negative lookahead (?!…)"),
        ("(?<=x)a", "a lookbehind (?<=…)"),
        ("(?<!x)a", "a negative lookbehind (?<!…)"),
        ("a++", "a possessive quantifier (++)"),
        ("a{2,}+", "a possessive quantifier ({2,}+)"),
        ("(?>ab)", "an atomic group (?>…)"),
        ("(a)?(?(1)b|c)", "a conditional group (?(…)…|…)"),
        (r"end\Z", r"\Z (write \z or $ for the end of the line)"),
        ("(?x) a b", "the inline flag group (?x…) (RE2 has only the flags i, m, s and U)"),
        ("((a{100}){100}){100}", "a repetition count of more than 1000 in all ({100}; nested counts multiply)"),
    ],
)
@pytest.mark.processes
async def test_a_construct_the_linear_time_matcher_lacks_is_named(logs: Path, pattern: str, construct: str) -> None:
    with pytest.raises(ToolError) as e:
        await bound(grep_log, logs).run({"path": "app.log", "pattern": pattern})
    assert str(e.value) == (
        f"grep_log: the pattern uses {construct}, which this linear-time matcher does not support; rewrite it without"
    )


@pytest.mark.processes
async def test_a_pattern_beyond_the_matchers_memory_bound_is_refused(logs: Path) -> None:
    with pytest.raises(ToolError) as e:
        await bound(grep_log, logs).run({"path": "app.log", "pattern": r"(?:.{1000})" * 200})
    assert str(e.value) == (
        "grep_log: the pattern needs more than the 16.0M this linear-time matcher allows a "
        "pattern; simplify it (fewer or smaller counted repetitions)"
    )


@pytest.mark.processes
async def test_python_syntax_the_matcher_shares_keeps_its_meaning(logs: Path) -> None:
    (logs / "mixed.log").write_text("Error: disk FULL\nerror: disk full\nwarn\nok 42\n")
    tool = bound(grep_log, logs)
    out = await tool.run({"path": "mixed.log", "pattern": r"(?i)^error: disk full$"})  # $ before the newline
    assert out.splitlines()[1:] == ["1: Error: disk FULL", "2: error: disk full"]
    out = await tool.run({"path": "mixed.log", "pattern": r"(?P<word>ok) \d+$|^warn"})
    assert out.splitlines()[1:] == ["3: warn", "4: ok 42"]
    out = await tool.run({"path": "mixed.log", "pattern": r"FULL\z"})  # RE2's own end of text
    assert out.splitlines()[1:] == ["1: Error: disk FULL"]


@pytest.mark.processes
async def test_an_invalid_pattern_still_gets_pythons_message(logs: Path) -> None:
    with pytest.raises(ToolError) as e:
        await bound(grep_log, logs).run({"path": "app.log", "pattern": "a(b"})
    assert str(e.value) == ("pattern: invalid regular expression: missing ), unterminated subpattern at position 1")


def test_a_refused_pattern_prints_nothing_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ToolError, match="backreference"):
        compile_pattern(r"(a)\1")
    assert capfd.readouterr().err == ""  # RE2 logs compile errors to stderr unless told not to


# -- clean_logs: every approved file is deleted or reported ---------------------------------------------


@pytest.mark.processes
async def test_every_file_the_preview_listed_is_deleted_or_reported(rotated: Path, tmp_path: Path) -> None:
    tool = bound(clean_logs, rotated)
    preview = await tool.dry_run({"path": str(rotated)})
    assert preview is not None and listed(preview) == [
        str(rotated / "app.log.1"),
        str(rotated / "app.log.2.gz"),
        str(rotated / "app/worker.log-20240101"),
    ]
    outside = tmp_path / "precious.log.1"
    outside.write_text("keep me")
    age(outside, 30)
    (rotated / "app.log.1").unlink()
    (rotated / "app.log.1").symlink_to(outside)  # a listed file became a symlink out of the log directory
    (rotated / "app.log.2.gz").unlink()  # a listed file is gone
    worker = rotated / "app/worker.log-20240101"
    st = worker.stat()
    other = rotated / "app/other.tmp"  # another file (another inode), same size and mtime, put in its place
    other.write_bytes(b"y" * st.st_size)
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    other.rename(worker)
    (rotated / "late.log.1").write_bytes(b"n" * 10)  # a new file that matches too
    age(rotated / "late.log.1", 30)

    out = await tool.run({"path": str(rotated)}, confirmed_by="U1", approved_preview=preview)
    assert out.splitlines() == [
        f"deleted 0 rotated log files older than 7 days under {rotated}, freed 0B (0 bytes); approved by U1",
        "left alone: changed since the preview (2 files; call clean_logs again for a new preview and approval):",
        f"  {rotated / 'app.log.1'}  100B  30d old",
        f"  {rotated / 'app/worker.log-20240101'}  300B  30d old",
        "left alone: gone since the preview (1 files):",
        f"  {rotated / 'app.log.2.gz'}  2.0K  30d old",
        "not deleted, not in the approved preview (1 files, new or changed since it was made; call clean_logs again "
        "for a new preview and approval):",
        f"  {rotated / 'late.log.1'}  10B  30d old",
    ]
    assert outside.read_text() == "keep me" and (rotated / "app.log.1").is_symlink()
    assert worker.read_bytes() == b"y" * 300 and (rotated / "late.log.1").exists()


@pytest.mark.processes
async def test_a_listed_file_that_became_a_directory_or_recent_is_changed_not_gone(rotated: Path) -> None:
    tool = bound(clean_logs, rotated)
    preview = await tool.dry_run({"path": str(rotated)})
    (rotated / "app.log.1").unlink()
    (rotated / "app.log.1").mkdir()
    age(rotated / "app.log.2.gz", 0)  # touched: no longer older than 7 days, so the fresh scan skips it
    out = await tool.run({"path": str(rotated)}, confirmed_by="U1", approved_preview=preview)
    assert out.splitlines() == [
        f"deleted 1 rotated log files older than 7 days under {rotated}, freed 300B (300 bytes); approved by U1",
        f"  {rotated / 'app/worker.log-20240101'}  300B  30d old",
        "left alone: changed since the preview (2 files; call clean_logs again for a new preview and approval):",
        f"  {rotated / 'app.log.1'}  100B  30d old",
        f"  {rotated / 'app.log.2.gz'}  2.0K  30d old",
    ]
    assert (rotated / "app.log.2.gz").exists()


@pytest.mark.processes
async def test_a_file_renamed_since_the_preview_is_gone_and_its_new_name_not_approved(rotated: Path) -> None:
    tool = bound(clean_logs, rotated)
    preview = await tool.dry_run({"path": str(rotated)})
    (rotated / "app.log.1").rename(rotated / "app.log.9")
    out = await tool.run({"path": str(rotated)}, confirmed_by="U1", approved_preview=preview)
    assert out.splitlines()[0].startswith("deleted 2 rotated log files")
    assert out.splitlines()[3:] == [
        "left alone: gone since the preview (1 files):",
        f"  {rotated / 'app.log.1'}  100B  30d old",
        "not deleted, not in the approved preview (1 files, new or changed since it was made; call clean_logs again "
        "for a new preview and approval):",
        f"  {rotated / 'app.log.9'}  100B  30d old",
    ]
    assert (rotated / "app.log.9").exists()


@pytest.mark.processes
async def test_a_hostile_name_is_reported_as_the_preview_showed_it(rotated: Path) -> None:
    tool = bound(clean_logs, rotated)
    hostile = rotated / "b\n  forged  1B  30d old  #0123456789abcdef\nx.log.1"
    hostile.write_bytes(b"h")
    age(hostile, 30)
    preview = await tool.dry_run({"path": str(rotated)})
    hostile.unlink()
    out = await tool.run({"path": str(rotated)}, confirmed_by="U1", approved_preview=preview)
    assert out.splitlines()[0].startswith("deleted 3 rotated log files")
    assert out.splitlines()[-2:] == [
        "left alone: gone since the preview (1 files):",
        f"  {rotated}/b\\n  forged  1B  30d old  #0123456789abcdef\\nx.log.1  1B  30d old",
    ]
