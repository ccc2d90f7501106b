"""Runbooks: loading from `dirs` with its refusals, reload on change, matching, and the texts offered."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.core.redact import REDACTED
from tools.api import BadCall
from tools.registry import Tool, ToolContext
from tools.runbooks.library import (
    MAX_BYTES,
    Match,
    Problem,
    RunbookLibrary,
    backticked_tools,
    count_steps,
)
from tools.runbooks.match import best, find
from tools.runbooks.offer import BLOCK_START, find_text, offer_block, read_text, thread_line
from tools.runbooks.tools import read_runbook

DISK_FULL = """\
---
title: Disk full on a web host
match:
  alertname: [DiskFull, NodeFilesystemAlmostOutOfSpace]
  labels: {team: web}
  keywords: ["disk full", "no space left"]
---
1. `check_disk` on the host; note which filesystem is full.
2. `list_big_files` under /var/log; rotated logs (`*.gz`, `*.1`) can go.
3. `clean_logs` for the rotated nginx logs (a card).
4. If /var is still over 90%, hand off: the data volume needs resizing.
"""


def runbook(title: str, match: str, body: str = "1. look\n") -> str:
    return f"---\ntitle: {title}\nmatch:\n{match}\n---\n{body}"


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def load(*dirs: Path):
    return RunbookLibrary(dirs).current()


def problems(*dirs: Path) -> list[str]:
    return [str(p) for p in load(*dirs).problems]


# --- loading -----------------------------------------------------------------------------------------------------


def test_a_good_runbook_loads_with_its_match_and_steps(tmp_path: Path) -> None:
    path = write(tmp_path / "disk-full.md", DISK_FULL)
    books = load(tmp_path)
    assert books.problems == ()
    [rb] = books.runbooks
    assert (rb.name, rb.path, rb.title, rb.steps) == ("disk-full", path, "Disk full on a web host", 4)
    assert rb.match == Match(
        alertnames=("DiskFull", "NodeFilesystemAlmostOutOfSpace"),
        labels=(("team", "web"),),
        keywords=("disk full", "no space left"),
    )
    assert rb.body.startswith("1. `check_disk`") and rb.body.endswith("needs resizing.")


def test_runbooks_are_found_in_subdirectories_and_in_every_dir(tmp_path: Path) -> None:
    write(tmp_path / "a" / "web" / "disk.md", runbook("Disk", "  keywords: [disk]"))
    write(tmp_path / "b" / "dns.md", runbook("DNS", "  keywords: [dns]"))
    write(tmp_path / "a" / "notes.txt", "not a runbook")
    assert [rb.name for rb in load(tmp_path / "a", tmp_path / "b").runbooks] == ["disk", "dns"]


def test_alertname_may_be_one_string(tmp_path: Path) -> None:
    write(tmp_path / "x.md", runbook("X", "  alertname: DiskFull"))
    assert load(tmp_path).runbooks[0].match.alertnames == ("DiskFull",)


def test_bad_yaml_is_one_line_naming_the_file_and_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.md", "---\ntitle: [unclosed\nmatch: {keywords: [x]}\n---\n1. x\n")
    [line] = problems(tmp_path)
    assert line.startswith(f"{path}: bad front matter: ")
    assert "(line " in line and "\n" not in line


@pytest.mark.parametrize(
    ("front", "why"),
    [
        ("title: T\nmatch: {keywords: [x]}\nowner: sre", "unknown key 'owner' (allowed: title, match)"),
        (
            "title: T\nmatch: {keywords: [x], severity: page}",
            "unknown key 'match.severity' (allowed: alertname, labels, keywords)",
        ),
        ("title: T", "match is missing: give at least one of alertname, labels, keywords"),
        ("title: T\nmatch: {}", "match has none of alertname, labels, keywords"),
        ("match: {keywords: [x]}", "title is missing"),
        ("title: 42\nmatch: {keywords: [x]}", "title must be a non-empty string"),
        ("title: T\nmatch: {labels: {}}", "match.labels must be a non-empty mapping of label names to strings"),
        ("title: T\nmatch: {labels: {code: 500}}", "match.labels.code must be a string, not a number (quote it)"),
        ("title: T\nmatch: {keywords: ['']}", "match.keywords[0] must be a non-empty string"),
        ("title: T\nmatch: {keywords: disk}", "match.keywords must be a non-empty list of strings"),
        ("title: T\nmatch: {alertname: []}", "match.alertname must be a non-empty string or a list of them"),
        ("- a list", "front matter must be a mapping with title and match"),
    ],
)
def test_each_broken_front_matter_is_refused_with_its_reason(tmp_path: Path, front: str, why: str) -> None:
    path = write(tmp_path / "broken.md", f"---\n{front}\n---\n1. x\n")
    assert problems(tmp_path) == [f"{path}: {why}"]
    assert load(tmp_path).runbooks == ()


def test_every_problem_of_one_file_is_on_its_line(tmp_path: Path) -> None:
    path = write(tmp_path / "two.md", "---\nowner: sre\nmatch: {keywords: [x]}\n---\n")
    assert problems(tmp_path) == [f"{path}: unknown key 'owner' (allowed: title, match); title is missing"]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("just markdown\n", "no front matter: the first line must be ---"),
        ("---\ntitle: T\nmatch: {keywords: [x]}\n", "front matter is not closed: no second --- line"),
    ],
)
def test_a_file_without_front_matter_is_refused(tmp_path: Path, text: str, why: str) -> None:
    path = write(tmp_path / "x.md", text)
    assert problems(tmp_path) == [f"{path}: {why}"]


def test_python_yaml_tags_are_refused_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    write(
        tmp_path / "rb" / "evil.md",
        f"---\ntitle: !!python/object/apply:os.system ['touch {marker}']\nmatch: {{keywords: [x]}}\n---\n",
    )
    write(tmp_path / "rb" / "obj.md", "---\ntitle: !!python/object:builtins.object {}\nmatch: {keywords: [x]}\n---\n")
    lines = problems(tmp_path / "rb")
    assert len(lines) == 2
    assert all("bad front matter: could not determine a constructor for the tag" in line for line in lines)
    assert not marker.exists()


def test_good_runbooks_load_next_to_broken_ones(tmp_path: Path) -> None:
    write(tmp_path / "a.md", "---\ntitle: [\n---\n")
    write(tmp_path / "b.md", DISK_FULL)
    write(tmp_path / "c.md", b"\xff\xfe not utf-8")
    books = load(tmp_path)
    assert [rb.name for rb in books.runbooks] == ["b"]
    assert [p.path.name for p in books.problems] == ["a.md", "c.md"]


def test_a_file_over_64_kib_is_refused_and_64_kib_loads(tmp_path: Path) -> None:
    head = "---\ntitle: Big\nmatch: {keywords: [x]}\n---\n"
    write(tmp_path / "exact.md", head + "x" * (MAX_BYTES - len(head)))
    big = write(tmp_path / "over.md", head + "x" * (MAX_BYTES - len(head) + 1))
    books = load(tmp_path)
    assert [rb.name for rb in books.runbooks] == ["exact"]
    assert [str(p) for p in books.problems] == [f"{big}: over 64 KiB ({MAX_BYTES + 1} bytes)"]


def test_non_utf8_is_refused_naming_the_byte(tmp_path: Path) -> None:
    path = write(tmp_path / "latin1.md", "---\ntitle: Café\nmatch: {keywords: [x]}\n---\n".encode("latin-1"))
    assert problems(tmp_path) == [f"{path}: not UTF-8 (byte 0xe9 at offset 14)"]


def test_a_utf8_bom_and_crlf_lines_are_fine(tmp_path: Path) -> None:
    write(tmp_path / "win.md", ("\ufeff" + DISK_FULL.replace("\n", "\r\n")).encode())
    assert load(tmp_path).runbooks[0].steps == 4


def test_a_symlink_leading_outside_dirs_is_refused(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside" / "secret.md", DISK_FULL)
    link = tmp_path / "rb" / "disk.md"
    link.parent.mkdir()
    link.symlink_to(outside)
    assert problems(tmp_path / "rb") == [f"{link}: leads outside dirs (to {outside})"]


def test_a_dotdot_symlink_leading_outside_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "outside.md", DISK_FULL)
    link = tmp_path / "rb" / "x.md"
    link.parent.mkdir()
    link.symlink_to(Path("..") / "outside.md")
    assert problems(tmp_path / "rb") == [f"{link}: leads outside dirs (to {tmp_path / 'outside.md'})"]


def test_a_symlinked_directory_leading_outside_is_refused_and_not_read(tmp_path: Path) -> None:
    write(tmp_path / "outside" / "disk.md", DISK_FULL)
    (tmp_path / "rb").mkdir()
    (tmp_path / "rb" / "more").symlink_to(tmp_path / "outside", target_is_directory=True)
    books = load(tmp_path / "rb")
    assert books.runbooks == ()
    assert [str(p) for p in books.problems] == [
        f"{tmp_path / 'rb' / 'more'}: a symlinked directory that leads outside dirs"
    ]


def test_a_symlink_within_dirs_loads(tmp_path: Path) -> None:
    write(tmp_path / "a" / "disk-full.md", DISK_FULL)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "alias.md").symlink_to(tmp_path / "a" / "disk-full.md")
    assert [rb.name for rb in load(tmp_path / "a", tmp_path / "b").runbooks] == ["alias", "disk-full"]


def reader(*dirs: Path) -> Tool:
    """read_runbook over the runbooks under `dirs`, as the reach opens them."""
    return read_runbook.bind(ToolContext(resources={RunbookLibrary: RunbookLibrary(dirs)}))


async def test_read_runbook_never_opens_a_path(tmp_path: Path) -> None:
    write(tmp_path / "outside.md", DISK_FULL)
    write(tmp_path / "rb" / "disk-full.md", DISK_FULL)
    for name in ("../outside", str(tmp_path / "outside"), "disk-full.md"):
        with pytest.raises(BadCall, match="no runbook named"):
            await reader(tmp_path / "rb").run({"name": name})


def test_a_fifo_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.md")
    assert problems(tmp_path) == [f"{tmp_path / 'pipe.md'}: not a regular file"]


def test_a_missing_directory_is_a_problem(tmp_path: Path) -> None:
    assert problems(tmp_path / "nope") == [
        f"{tmp_path / 'nope'}: runbook directory cannot be read: No such file or directory"
    ]


def test_two_files_with_one_name_keep_the_first(tmp_path: Path) -> None:
    write(tmp_path / "a" / "disk.md", runbook("First", "  keywords: [disk]"))
    second = write(tmp_path / "b" / "disk.md", runbook("Second", "  keywords: [disk]"))
    books = load(tmp_path / "a", tmp_path / "b")
    assert [rb.title for rb in books.runbooks] == ["First"]
    assert [str(p) for p in books.problems] == [
        f"{second}: a runbook named 'disk' is already loaded from {tmp_path / 'a' / 'disk.md'}"
    ]


def test_problem_reads_as_one_line() -> None:
    assert str(Problem(Path("/x/y.md"), "too big")) == "/x/y.md: too big"


# --- re-reading --------------------------------------------------------------------------------------------------


def bump(path: Path, text: str) -> None:
    """Rewrite `path` with a later mtime (a filesystem's clock may not tick between two writes)."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def test_nothing_changed_reads_no_file_and_returns_the_same_snapshot(tmp_path: Path) -> None:
    for i in range(5):
        write(tmp_path / f"r{i}.md", runbook(f"R{i}", "  keywords: [x]"))
    library = RunbookLibrary([tmp_path])
    first = library.current()
    assert library.reads == 5
    assert library.current() is first
    assert library.reads == 5


def test_a_changed_file_is_reread_alone(tmp_path: Path) -> None:
    for i in range(3):
        write(tmp_path / f"r{i}.md", runbook(f"R{i}", "  keywords: [x]"))
    library = RunbookLibrary([tmp_path])
    library.current()
    bump(tmp_path / "r1.md", runbook("R9", "  keywords: [x]"))  # same size, new mtime
    assert [rb.title for rb in library.current().runbooks] == ["R0", "R9", "R2"]
    assert library.reads == 4


def test_a_new_file_and_a_removed_file_are_seen(tmp_path: Path) -> None:
    write(tmp_path / "a.md", runbook("A", "  keywords: [x]"))
    write(tmp_path / "b.md", runbook("B", "  keywords: [x]"))
    library = RunbookLibrary([tmp_path])
    assert [rb.name for rb in library.current().runbooks] == ["a", "b"]
    write(tmp_path / "c.md", runbook("C", "  keywords: [x]"))
    assert [rb.name for rb in library.current().runbooks] == ["a", "b", "c"]
    assert library.reads == 3
    (tmp_path / "a.md").unlink()
    assert [rb.name for rb in library.current().runbooks] == ["b", "c"]
    assert library.reads == 3


def test_a_fixed_file_loads_and_its_problem_goes(tmp_path: Path) -> None:
    path = write(tmp_path / "a.md", "---\ntitle: [\n---\n")
    library = RunbookLibrary([tmp_path])
    assert len(library.current().problems) == 1
    bump(path, DISK_FULL)
    books = library.current()
    assert (books.problems, [rb.name for rb in books.runbooks]) == ((), ["a"])


# --- steps and tool names ----------------------------------------------------------------------------------------


def test_steps_are_top_level_numbered_items_outside_fences() -> None:
    body = (
        "Intro.\n\n1. one\n   1. a sub-item\n2) two\n\n```sh\n3. not a step\n```\n"
        "    4. indented code\n10. ten\n- bullet\n1.5 not an item\n"
    )
    assert count_steps(body) == 3


def test_backticked_tool_names_are_found_outside_fences(tmp_path: Path) -> None:
    write(tmp_path / "disk-full.md", DISK_FULL + "\n```\n`not_seen`\n```\nthen `restart_service()` and `df -h`\n")
    assert backticked_tools(load(tmp_path).runbooks[0]) == {
        "check_disk",
        "list_big_files",
        "clean_logs",
        "restart_service",
    }


# --- matching ----------------------------------------------------------------------------------------------------


@pytest.fixture
def books(tmp_path: Path):
    write(tmp_path / "disk-full.md", DISK_FULL)
    write(tmp_path / "dns.md", runbook("DNS fails", "  alertname: [DNSDown]\n  keywords: [nxdomain]"))
    write(tmp_path / "payments.md", runbook("Payments", "  labels: {team: payments, env: prod}"))
    return load(tmp_path)


def test_an_alert_matches_by_name(books) -> None:
    found = best(books, alertname="DiskFull", labels={"team": "db"})
    assert found is not None
    assert (found.runbook.name, found.reasons) == ("disk-full", ("alertname DiskFull",))


def test_an_alert_matches_by_labels_all_of_them(books) -> None:
    found = best(books, alertname="HighLatency", labels={"team": "payments", "env": "prod", "pod": "api-1"})
    assert found is not None
    assert (found.runbook.name, found.reasons) == ("payments", ("labels env=prod, team=payments",))
    assert best(books, alertname="HighLatency", labels={"team": "payments", "env": "staging"}) is None


def test_the_alertname_label_names_the_alert(books) -> None:
    found = best(books, labels={"alertname": "DNSDown"})
    assert found is not None and found.runbook.name == "dns"


def test_a_mention_matches_by_keyword_case_insensitively(books) -> None:
    found = best(books, text="web-03 says No Space Left on device, help")
    assert found is not None
    assert (found.runbook.name, found.reasons) == ("disk-full", ("keyword 'no space left'",))


def test_a_non_matching_runbook_is_never_offered(books) -> None:
    assert best(books, text="the checkout page is slow", alertname="HighLatency", labels={"team": "web2"}) is None
    assert find(books, query="", alertname=None, labels=None) == []


def test_the_most_keys_that_hold_win(books) -> None:
    found = find(books, query="disk full again", alertname="DNSDown", labels={"team": "web"})
    assert [(f.runbook.name, f.reasons) for f in found] == [
        ("disk-full", ("labels team=web", "keyword 'disk full'")),
        ("dns", ("alertname DNSDown",)),
    ]


def test_a_tie_goes_to_the_first_file_by_name(tmp_path: Path) -> None:
    for name in ("c-disk", "a-disk", "b-disk"):
        write(tmp_path / f"{name}.md", runbook(name, "  keywords: [disk]"))
    found = best(load(tmp_path), text="disk")
    assert found is not None and found.runbook.name == "a-disk"


# --- what the model and the thread get ---------------------------------------------------------------------------


def test_the_offer_is_marked_as_data_and_names_approval(books) -> None:
    found = best(books, alertname="DiskFull", labels={"team": "web"})
    assert found is not None
    block = offer_block(found)
    assert block.startswith(
        f"{BLOCK_START} disk-full: 'Disk full on a web host', 4 steps; matched by "
        "alertname DiskFull, labels team=web]\n"
    )
    assert "not instructions" in block and "goes through approval" in block
    assert "3. `clean_logs` for the rotated nginx logs (a card)." in block
    assert thread_line(found.runbook) == "Following runbook: Disk full on a web host (4 steps)"


def test_a_one_step_runbook_says_step(tmp_path: Path) -> None:
    write(tmp_path / "x.md", runbook("X", "  keywords: [x]"))
    assert thread_line(load(tmp_path).runbooks[0]) == "Following runbook: X (1 step)"


async def test_what_the_tools_return_is_redacted(tmp_path: Path) -> None:
    token = "xoxb-1234567890-1234567890123-abcdefghijklmnopqrstuvwx"
    write(tmp_path / "leak.md", runbook(f"Use {token}", "  keywords: [leak]", f"1. curl -H 'Bearer {token}'\n"))
    books = load(tmp_path)
    found = find(books, query="a leak")
    texts = [
        find_text(found),
        await reader(tmp_path).run({"name": "leak"}),
        read_text(books.runbooks[0]),
        offer_block(found[0]),
        thread_line(books.runbooks[0]),
    ]
    assert all(token not in t and REDACTED in t for t in texts)


def test_find_text_lists_name_title_and_reason(books) -> None:
    assert find_text(find(books, query="nxdomain for api.internal")) == (
        "- dns: DNS fails (1 step) — matched by keyword 'nxdomain'\nread_runbook(name) returns one runbook's steps."
    )
    assert find_text([]).startswith("No runbook matches.")


def test_the_loader_is_a_safe_one() -> None:
    """libyaml's parser when present, but only SafeConstructor: never Full/Unsafe, which build Python objects."""
    import yaml

    from tools.runbooks.library import SAFE_LOADER

    assert issubclass(SAFE_LOADER, yaml.constructor.SafeConstructor)
    assert not issubclass(SAFE_LOADER, yaml.constructor.FullConstructor)
