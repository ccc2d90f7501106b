"""`opsloop check` with `[runbooks] dirs`: each runbook listed with what it matches, each broken file one problem
line naming it and why (the check fails), a backticked tool name no registry has a warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app.check import check
from bot.app.settings import load_settings
from bot.core.errors import ConfigError
from tests.bot.app.test_check import env_for
from tests.support.fakes.anthropic import reply, text

GOOD = """\
---
title: Disk full on a web host
match:
  alertname: [DiskFull, NodeFilesystemAlmostOutOfSpace]
  labels: {team: web}
  keywords: ["disk full"]
---
1. `check_disk` on the host.
2. `clean_logs` for the rotated logs, then `fix_everything`.
"""
BROKEN = {
    "bad-yaml.md": ("---\ntitle: [unclosed\nmatch: {keywords: [x]}\n---\n1. x\n", "bad front matter"),
    "unknown-key.md": ("---\ntitle: T\nowner: me\nmatch: {keywords: [x]}\n---\n1. x\n", "unknown key 'owner'"),
    "no-match.md": ("---\ntitle: T\n---\n1. x\n", "match is missing"),
    "too-big.md": ("---\ntitle: T\nmatch: {keywords: [x]}\n---\n" + "x" * (64 * 1024), "over 64 KiB"),
}


async def test_check_lists_runbooks_and_names_each_broken_file(
    fake_slack, fake_anthropic, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "runbooks"
    d.mkdir()
    (d / "disk-full.md").write_text(GOOD)
    for name, (body, _) in BROKEN.items():
        (d / name).write_text(body)
    (tmp_path / "elsewhere.md").write_text(GOOD)
    (d / "outside.md").symlink_to(tmp_path / "elsewhere.md")
    config = tmp_path / "opsloop.toml"
    config.write_text('[approvals]\napprovers = ["U1"]\n[runbooks]\ndirs = ["runbooks"]\n')
    fake_anthropic.script(reply(text("pong")), reply(text("pong")))
    assert await check(load_settings(config, env=env_for(fake_slack, fake_anthropic))) == 2
    captured = capsys.readouterr()
    out, err = captured.out.splitlines(), captured.err.splitlines()
    assert f"runbooks: 1 loaded from {d}" in out
    assert (
        "  disk-full: Disk full on a web host (2 steps) matches alertname DiskFull | "
        "NodeFilesystemAlmostOutOfSpace; labels team=web; keywords 'disk full'"
    ) in out
    assert "find_runbooks" in captured.out and "read_runbook" in captured.out  # in the tool table
    problems = [line for line in err if line.startswith("opsloop: error: runbooks: ")]
    assert len(problems) == len(BROKEN) + 1, err
    for name, (_, why) in BROKEN.items():
        (line,) = [p for p in problems if f"{d / name}:" in p]
        assert why in line
    (line,) = [p for p in problems if f"{d / 'outside.md'}:" in p]
    assert "leads outside dirs" in line
    assert f"opsloop: warning: runbooks: {d / 'disk-full.md'}: names tool(s) no registry has: fix_everything" in err


async def test_check_passes_with_good_runbooks_only(
    fake_slack, fake_anthropic, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "runbooks"
    d.mkdir()
    (d / "disk-full.md").write_text(GOOD.replace(", then `fix_everything`", ""))
    config = tmp_path / "opsloop.toml"
    config.write_text('[approvals]\napprovers = ["U1"]\n[runbooks]\ndirs = ["runbooks"]\n')
    fake_anthropic.script(reply(text("pong")), reply(text("pong")))
    assert await check(load_settings(config, env=env_for(fake_slack, fake_anthropic))) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("section", "why"),
    [
        ("[runbooks]\n", "runbooks: missing required key 'dirs'"),
        ('[runbooks]\ndirs = "rb"\n', "runbooks.dirs: expected a list of strings, got a string"),
        ("[runbooks]\ndirs = []\n", "runbooks.dirs: must list at least one directory"),
        ('[runbooks]\ndirs = ["rb"]\nx = 1\n', "runbooks.x: unknown key (known: dirs)"),
    ],
)
def test_a_bad_runbooks_section_is_a_config_problem_with_its_path(tmp_path: Path, section: str, why: str) -> None:
    config = tmp_path / "opsloop.toml"
    config.write_text(section)
    with pytest.raises(ConfigError) as e:
        load_settings(config, env={})
    assert any(why in p for p in e.value.problems), e.value.problems
