"""`python -m bench --only NAME` splices its sections into RESULTS.md: the rest of the file stays, and so does the
history written under a refreshed section (HISTORY), which a re-run used to drop."""

from __future__ import annotations

from bench.__main__ import HISTORY, Report, splice, with_history

OLD = f"""# opsloop benchmark results

Produced by `make bench` on 2026-12-01 02:50 UTC

| benchmark | result | target | verdict |
|---|---|---|---|
| 15. Warm peers | 1.9x | <= 1.4x | missed |
| 16. Acks | 40 ms | < 50 | met |

## 15. Warm peers in one process (peers)

old table

{HISTORY}

before -> after, by hand

## 16. Ack latency (acks)

kept as it was
"""


def test_a_refreshed_section_keeps_its_history_and_the_others_stay() -> None:
    report = Report()
    report.summary.append(("15. Warm peers", "1.6x", "<= 1.4x", "missed"))
    report.section("15. Warm peers in one process (peers)", "new table")
    text = splice(OLD, report, "Section 15 refreshed today.", ("15.",), "Section 15 ")
    assert "old table" not in text and "new table" in text
    assert text.index("new table") < text.index(HISTORY) < text.index("before -> after, by hand")
    assert "| 15. Warm peers | 1.6x |" in text and "| 15. Warm peers | 1.9x |" not in text
    assert "## 16. Ack latency (acks)\n\nkept as it was" in text and "Section 15 refreshed today." in text


def test_a_section_without_history_is_left_as_produced() -> None:
    fresh = ["## 16. Ack latency (acks)\n\nnew\n", "## Memory (memory)\n\nnew\n"]
    assert with_history(fresh, OLD) == fresh


def test_refreshing_again_and_again_adds_no_blank_lines_and_keeps_the_sections_in_place() -> None:
    """Each refresh used to leave the blank line of the note it replaced (17 blank lines after a day of
    `--only` runs), and moved the refreshed section to the end."""
    report = Report()
    report.summary.append(("15. Warm peers", "1.6x", "<= 1.4x", "missed"))
    report.section("15. Warm peers in one process (peers)", "new table")
    text = OLD
    for _ in range(5):
        text = splice(text, report, "Section 15 refreshed today.", ("15.",), "Section 15 ")
    assert "\n\n\n" not in text and text.count("Section 15 refreshed today.") == 1
    assert text.index("## 15. Warm peers") < text.index("## 16. Ack latency")
