"""A runbook's front matter is bounded before anything is built from it: an alias bomb, a deep nest, too many
values or a value PyYAML can't build is that one file's problem, on one short line; a problem names a bad
value's kind, never the value; the good runbooks beside it still load."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import pytest
import yaml

from tools.runbooks import library
from tools.runbooks.library import MAX_DEPTH, MAX_NODES, RunbookLibrary

GOOD = "---\ntitle: Disk full\nmatch: {keywords: [disk full]}\n---\n1. look\n"


def alias_bomb(width: int = 26, levels: int = 5) -> str:
    """Under 0.5 KiB of front matter whose last label stands for width**levels strings (11.8 million)."""
    lines, prev = [], ""
    for name in "abcdefgh"[:levels]:
        items = [f"*{prev}" if prev else "x"] * width
        lines.append(f"    {name}: &{name} [{','.join(items)}]")
        prev = name
    return "---\ntitle: T\nmatch:\n  labels:\n" + "\n".join(lines) + "\n---\n1. x\n"


def nested(depth: int) -> str:
    return f"---\ntitle: T\nmatch:\n  labels: {{team: {'[' * depth}{']' * depth}}}\n---\n1. x\n"


def books(tmp_path: Path, **files: str) -> list[str]:
    """The problem lines of a directory holding `files` and GOOD (which must still load)."""
    for name, text in {**files, "good": GOOD}.items():
        (tmp_path / f"{name}.md").write_text(text)
    loaded = RunbookLibrary([tmp_path]).current()
    assert [rb.name for rb in loaded.runbooks] == ["good"]
    return [str(p) for p in loaded.problems]


def test_an_alias_bomb_is_refused_without_being_expanded(tmp_path: Path) -> None:
    bomb = alias_bomb()
    assert len(bomb.encode()) < 512
    tracemalloc.start()
    try:
        (line,) = books(tmp_path, bomb=bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert line == (
        f"{tmp_path / 'bomb.md'}: bad front matter: anchors and aliases (&name, *name) are not allowed (line 5)"
    )
    assert peak < 5 * 2**20  # before: about 120 MiB, and a problem line of 63 million characters


def test_an_alias_of_a_plain_value_is_refused_too(tmp_path: Path) -> None:
    text = "---\ntitle: &t Disk\nmatch: {keywords: [*t]}\n---\n1. x\n"
    assert books(tmp_path, alias=text) == [
        f"{tmp_path / 'alias.md'}: bad front matter: anchors and aliases (&name, *name) are not allowed (line 2)"
    ]


@pytest.mark.parametrize("depth", [MAX_DEPTH, 500, 990])
def test_deep_nesting_is_one_problem_line(tmp_path: Path, depth: int) -> None:
    assert books(tmp_path, deep=nested(depth)) == [
        f"{tmp_path / 'deep.md'}: bad front matter: nested deeper than {MAX_DEPTH} levels (line 4)"
    ]


def test_nesting_up_to_the_bound_is_read_and_its_value_named_by_kind(tmp_path: Path) -> None:
    # match (2), labels (3), then MAX_DEPTH - 3 lists: the deepest the front matter may nest
    assert books(tmp_path, ok=nested(MAX_DEPTH - 3)) == [
        f"{tmp_path / 'ok.md'}: match.labels.team must be a string, not a list (quote it)"
    ]


def test_too_many_values_is_one_problem_line(tmp_path: Path) -> None:
    many = "---\ntitle: T\nmatch: {keywords: [" + ",".join(["k"] * MAX_NODES) + "]}\n---\n1. x\n"
    assert books(tmp_path, many=many) == [
        f"{tmp_path / 'many.md'}: bad front matter: more than {MAX_NODES} keys and values (line 3)"
    ]


@pytest.mark.parametrize(
    ("front", "why"),
    [
        ("title: 2026-02-30\nmatch: {keywords: [x]}", "bad front matter: ValueError: day is out of range for month"),
        (
            "title: T\nmatch: {keywords: [!!int " + "9" * 5000 + "]}",
            "bad front matter: ValueError: Exceeds the limit (4300 digits) for integer string conversion",
        ),
    ],
)
def test_a_value_pyyaml_cannot_build_is_that_files_problem(tmp_path: Path, front: str, why: str) -> None:
    (line,) = books(tmp_path, bad=f"---\n{front}\n---\n1. x\n")
    assert line.startswith(f"{tmp_path / 'bad.md'}: {why}") and len(line) < 400


def test_pure_python_pyyaml_deep_nesting_is_that_files_problem(tmp_path: Path, monkeypatch) -> None:
    """Without libyaml, PyYAML's composer recurses per level: a RecursionError is the file's problem too."""
    monkeypatch.setattr(library, "SAFE_LOADER", yaml.SafeLoader)
    # Python's default limit, whatever an earlier test in this worker (hypothesis raises it) left it at.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        (line,) = books(tmp_path, deep=nested(1100))
    finally:
        sys.setrecursionlimit(limit)
    assert line == f"{tmp_path / 'deep.md'}: bad front matter: nested deeper than {MAX_DEPTH} levels"


@pytest.mark.parametrize(
    ("match", "why"),
    [
        ("{labels: {team: {a: 1}}}", "match.labels.team must be a string, not a mapping (quote it)"),
        ("{labels: {team: yes}}", "match.labels.team must be a string, not true/false (quote it)"),
        ("{labels: {team: 2026-12-01}}", "match.labels.team must be a string, not a date (quote it)"),
        (
            "{labels: {team: null, 7: x}}",
            "match.labels.team must be a string, not null (quote it); "
            "match.labels: a key must be a non-empty string, not a number",
        ),
        ("{keywords: [x], 1.5: y}", "unknown key 'match.<a number>' (allowed: alertname, labels, keywords)"),
        (
            "{keywords: [x], ? " + "k" * 5000 + " : y}",
            "unknown key 'match.<a string of 5000 characters>' (allowed: alertname, labels, keywords)",
        ),
        ('{labels: {"a\\nb": [x]}}', "match.labels.<a string of 3 characters> must be a string, not a list (quote it)"),
    ],
)
def test_a_problem_names_the_kind_of_a_bad_value_never_the_value(tmp_path: Path, match: str, why: str) -> None:
    assert books(tmp_path, bad=f"---\ntitle: T\nmatch: {match}\n---\n1. x\n") == [f"{tmp_path / 'bad.md'}: {why}"]
