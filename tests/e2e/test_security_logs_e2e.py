"""End to end, hostile, through the real app and the fakes: grep_log can't be made to burn a core with a
backtracking pattern, and clean_logs accounts for every file its approved preview listed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from bot.run.summary import handle_number
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import ALICE, BOB, bot_env, result_text, text_of, tool_results

DAY = 86_400


def config(logs: Path, extra: str = "") -> str:
    return f'[tools]\nmodules = ["tools.builtin"]\n[tools.logs]\ndirs = [{json.dumps(str(logs))}]\n{extra}'


def old_file(path: Path, data: bytes, days: float = 30) -> Path:
    path.write_bytes(data)
    t = time.time() - days * DAY
    os.utime(path, (t, t))
    return path


@pytest.mark.processes
async def test_a_backtracking_pattern_is_answered_within_a_short_timeout_and_unsupported_ones_are_named(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    logs = tmp_path / "log"
    logs.mkdir()
    # Python's re backtracks 2**64 times on the first line (about 50 s for this file); the timeout is 10 s: far
    # under that, and room for a worker process to start on a loaded CI box (2 s timed out under xdist there).
    (logs / "api.log").write_text("a" * 64 + "b\naaaa\nbbbb\n" + "a" * 64 + "\n")
    calls = {
        "toolu_evil": {"path": "api.log", "pattern": "(a+)+$"},
        "toolu_backref": {"path": "api.log", "pattern": r"(a)\1"},
        "toolu_lookahead": {"path": "api.log", "pattern": "a(?=b)"},
    }
    fake_anthropic.script(
        reply(text("Searching the log."), *(tool_use("grep_log", args, id=i) for i, args in calls.items())),
        reply(text("Two lines end in a run of a's.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config(logs, "[tools.timeouts]\ngrep_log = 10\n")) as env:
        channel, ts = await env.mention("api-7 logs look odd, search them", user=ALICE)
        final = await env.wait_final(channel, ts, timeout=60)
        try:
            requests = await env.requests(2, timeout=10)
        except AssertionError as e:  # seen twice under a loaded xdist run: say which message ended the thread
            raise AssertionError(f"{e}; the thread ended with: {final.text[:800]!r}") from None

        results = {r["tool_use_id"]: r for r in tool_results(requests[1])}
        assert not results["toolu_evil"].get("is_error")
        assert result_text(results["toolu_evil"]).splitlines() == [
            "#1 grep_log api.log",  # its handle, then the tool's output
            f"2 matching lines for /(a+)+$/ in {logs / 'api.log'}",
            "2: aaaa",
            f"4: {'a' * 64}",
        ]
        assert results["toolu_backref"]["is_error"] is True
        assert result_text(results["toolu_backref"]) == (
            "#2 grep_log api.log\n"
            r"grep_log: the pattern uses a backreference (\1), which this linear-time matcher does not support; "
            "rewrite it without"
        )
        assert results["toolu_lookahead"]["is_error"] is True
        assert result_text(results["toolu_lookahead"]) == (
            "#3 grep_log api.log\n"
            "grep_log: the pattern uses a lookahead (?=…), which this linear-time matcher does not support; "
            "rewrite it without"
        )
        fake_anthropic.assert_complete()


@pytest.mark.processes
async def test_clean_logs_reports_every_approved_file_it_did_not_delete_and_deletes_nothing_else(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    logs = tmp_path / "log"
    logs.mkdir()
    kept = old_file(logs / "app.log.1", b"x" * 1_000)  # stays as it was: deleted
    linked = old_file(logs / "app.log.2", b"x" * 2_000)  # becomes a symlink out of the log directory
    removed = old_file(logs / "app.log.3", b"x" * 3_000)  # is removed
    swapped = old_file(logs / "app.log.4", b"x" * 4_000)  # another file (inode) with the same size and mtime
    grown = old_file(logs / "app.log.5", b"x" * 5_000)  # written to
    secret = tmp_path / "secret.log.1"
    secret.write_text("not a log of this directory")
    args = {"path": str(logs), "older_than_days": 7}
    fake_anthropic.script(
        reply(text("Cleaning old rotated logs."), tool_use("clean_logs", args)),
        reply(text("Deleted app.log.1; the rest changed after the preview.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config(logs)) as env:
        channel, ts = await env.mention("disk is filling up with logs, clean them", user=ALICE)
        card = await env.card(channel, ts, timeout=30)
        shown = text_of(card)
        assert f"would delete 5 rotated log files older than 7 days under {logs}" in shown
        assert all(str(p) in shown for p in (kept, linked, removed, swapped, grown))

        # Between the preview and the click:
        linked.unlink()
        linked.symlink_to(secret)
        removed.unlink()
        st = swapped.stat()
        other = logs / "swap.tmp"
        other.write_bytes(b"y" * st.st_size)
        os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
        other.rename(swapped)
        mtime_ns = grown.stat().st_mtime_ns
        with grown.open("ab") as f:
            f.write(b"more")
        os.utime(grown, ns=(mtime_ns, mtime_ns))
        late = old_file(logs / "app.log.6", b"n" * 600)  # matches too, but nobody approved it

        await env.approve(card, BOB)
        await env.wait_final(channel, ts, timeout=30)

        (result,) = tool_results((await env.requests(2))[1])
        assert not result.get("is_error")
        handle, _, out = result_text(result).partition("\n")
        assert handle.startswith("#1 clean_logs ") and handle_number(handle) == 1, handle
        assert out.splitlines() == [
            f"deleted 1 rotated log files older than 7 days under {logs}, freed 1000B (1000 bytes); approved by {BOB}",
            f"  {kept}  1000B  30d old",
            "left alone: changed since the preview (3 files; call clean_logs again for a new preview and approval):",
            f"  {linked}  2.0K  30d old",
            f"  {swapped}  3.9K  30d old",
            f"  {grown}  4.9K  30d old",
            "left alone: gone since the preview (1 files):",
            f"  {removed}  2.9K  30d old",
            "not deleted, not in the approved preview (1 files, new or changed since it was made; call clean_logs "
            "again for a new preview and approval):",
            f"  {late}  600B  30d old",
        ]
        assert not kept.exists()
        assert linked.is_symlink() and secret.read_text() == "not a log of this directory"
        assert swapped.read_bytes() == b"y" * 4_000 and grown.exists() and late.exists()
        fake_anthropic.assert_complete()
