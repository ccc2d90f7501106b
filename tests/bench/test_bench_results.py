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
