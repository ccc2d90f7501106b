"""The progress bar on a terminal: `opsloop eval` in a subprocess on a pseudo-terminal (stdout and stderr), as a
person runs it. The bar is redrawn in place, never wider than the terminal (a wrapped line can't be redrawn), and
its line is ended before the table, or before the one-line error when the run is interrupted."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
from pathlib import Path

EVALS = Path(__file__).resolve().parents[2] / "evals"
CASES = ("cert-chain-missing-intermediate", "postgres-connections-exhausted", "node-diskpressure-evictions")
COLUMNS = 60
CLEAR_LINE = "\x1b[K"
WAIT = 120.0  # seconds without output before the test gives up (a bound, not a pause)


class Terminal:
    """`opsloop eval ARGS` with a pseudo-terminal COLUMNS wide as its stdin, stdout and stderr."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, COLUMNS, 0, 0))
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "OPSLOOP_CONFIG")}
        env["PYTHONPATH"] = str(EVALS.parent)
        code = "import sys; from bot.app.cli import main; sys.exit(main())"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, "eval", *args], cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave
        )
        os.close(slave)
        self.seen = b""

    def read_until(self, wanted: str | None) -> str:
        """What the terminal got, until `wanted` shows (None: until the program ends)."""
        while wanted is None or wanted.encode() not in self.seen:
            ready, _, _ = select.select([self.master], [], [], WAIT)
            assert ready, f"no output for {WAIT} s; so far: {self.seen.decode(errors='replace')}"
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the program ended and closed the terminal
                chunk = b""
            if not chunk:
                break
            self.seen += chunk
        return self.seen.decode().replace("\r\n", "\n")

    def close(self) -> tuple[int, str]:
        """The exit status and everything the terminal got."""
        out = self.read_until(None)
        os.close(self.master)
        return self.proc.wait(timeout=WAIT), out


def _cases(tmp_path: Path) -> Path:
    for name in CASES:
        shutil.copytree(EVALS / name, tmp_path / "evals" / name)
    return tmp_path


def _bars(out: str) -> list[str]:
    """Each drawing of the bar, as the terminal shows it."""
    return [seg.replace(CLEAR_LINE, "") for line in out.split("\n") for seg in line.split("\r") if " failed · " in seg]


def test_the_bar_is_redrawn_within_the_terminal_and_its_line_ends_before_the_table(tmp_path: Path) -> None:
    term = Terminal(_cases(tmp_path), "evals", "--script", "golden", "--concurrency", "1")
    status, out = term.close()
    assert status == 0, out
    bars = _bars(out)
    assert [b.split("] ")[1].split(" · ")[0] for b in bars] == ["1/3", "2/3", "3/3"]
    assert all(len(b) < COLUMNS for b in bars), bars  # never wrapped: each redraw overwrites the last
    assert out.count("\r[") == 3 and "[1/3]" not in out  # redrawn in place, not a line per run
    last = out.index("3/3")
    assert out[last:].split("\n", 1)[1].startswith("case ")  # the table starts on a line of its own
    assert "3/3 runs passed every check" in out


def test_an_interrupted_run_ends_the_bar_line_before_its_one_line_error(tmp_path: Path) -> None:
    # twenty runs one at a time: seconds of work left after the first, so Ctrl-C comes while the next one runs
    term = Terminal(_cases(tmp_path), f"evals/{CASES[0]}", "--script", "golden", "--concurrency", "1", "--repeat", "20")
    term.read_until("1/20")
    term.proc.send_signal(signal.SIGINT)
    status, out = term.close()
    assert status == 130, out
    tail = out[out.rindex("\r[") :]
    assert tail.endswith("\nopsloop: eval: interrupted; no table or file written\n"), tail
    assert "Traceback" not in out and "runs passed every check" not in out
