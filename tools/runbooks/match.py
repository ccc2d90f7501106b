"""Which runbooks match a run, and why (docs/context.md, Runbooks).

A runbook matches when at least one of its `match` keys holds: the alert's name is in `alertname`; all of
`labels` equal the alert's labels; a `keywords` entry occurs in the task's text (case-insensitive). The best
match has the most keys that hold, then comes first by file name. A runbook whose keys all fail is never
offered, whatever else it says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tools.runbooks.library import Runbook, Runbooks


@dataclass(frozen=True)
class Found:
    """A matching runbook and the reasons it matched, one per `match` key that holds."""

    runbook: Runbook
    reasons: tuple[str, ...]


def reasons(runbook: Runbook, *, alertname: str | None, labels: Mapping[str, str], folded_text: str) -> tuple[str, ...]:
    """The `match` keys of `runbook` that hold, each as a reason ("alertname DiskFull", "labels team=web",
    "keyword 'disk full'"); `folded_text` is the task's text already casefolded."""
    rule = runbook.match
    out: list[str] = []
    if alertname and alertname in rule.alertnames:
        out.append(f"alertname {alertname}")
    if rule.labels and all(labels.get(k) == v for k, v in rule.labels):
        out.append("labels " + ", ".join(f"{k}={v}" for k, v in rule.labels))
    if folded_text:
        for keyword, folded in zip(rule.keywords, rule.folded_keywords, strict=True):
            if folded in folded_text:
                out.append(f"keyword {keyword!r}")
                break
    return tuple(out)


def find(
    runbooks: Runbooks | Iterable[Runbook],
    *,
    query: str = "",
    alertname: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[Found]:
    """Every matching runbook, best first: the most keys that hold, then the first file by name.

    An alert's name may come in `labels["alertname"]` (as Alertmanager sends it) when `alertname` is not given.
    """
    items = runbooks.runbooks if isinstance(runbooks, Runbooks) else tuple(runbooks)
    labels = dict(labels or {})
    name = alertname or labels.get("alertname")
    folded = query.casefold()
    found = []
    for runbook in items:
        why = reasons(runbook, alertname=name, labels=labels, folded_text=folded)
        if why:
            found.append(Found(runbook=runbook, reasons=why))
    # sorted() is stable and the runbooks come ordered by file name, so ties keep that order.
    return sorted(found, key=lambda f: -len(f.reasons))


def best(
    runbooks: Runbooks | Iterable[Runbook],
    *,
    text: str = "",
    alertname: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Found | None:
    """The runbook to offer at run start (the most keys that hold, then the first file by name), or None."""
    found = find(runbooks, query=text, alertname=alertname, labels=labels)
    return found[0] if found else None
