"""A case: one folder, `case.yaml` plus the files it names (evals/README.md documents every key).

Read with `yaml.safe_load` only, and checked key by key: a problem names its case and its path in the file
(`CaseError`), so a typo in a case is one clear line, never a case that silently checks nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from bot.config.reader import Reader, read
from bot.config.settings import ApprovalSettings
from bot.core.errors import OpsloopError
from bot.run.guards import canonical

CASE_FILE = "case.yaml"
SCRIPTS = ("golden", "bad")
WHEN = ("called", "ran")  # a forbidden call: proposed at all, or approved and run


class CaseError(OpsloopError):
    """A case that cannot be read: the case, where in it, and what is wrong."""


@dataclass(frozen=True, kw_only=True)
class Match:
    """Which calls of `tool`: `args` equal exactly (null values left out on both sides), and each `match` value
    a regular expression the argument's text must match whole. Neither: every call of the tool."""

    tool: str
    args: dict[str, Any] | None = None
    match: dict[str, str] = field(default_factory=dict)

    def matches(self, tool: str, args: Mapping[str, Any]) -> bool:
        if tool != self.tool:
            return False
        given = {k: v for k, v in args.items() if v is not None}
        if self.args is not None and canonical(given) != canonical(
            {k: v for k, v in self.args.items() if v is not None}
        ):
            return False
        return all(
            k in given and re.fullmatch(p, given[k] if isinstance(given[k], str) else canonical(given[k]), re.S)
            for k, p in self.match.items()
        )

    def describe(self) -> str:
        parts = [f"{k}={canonical(v)}" for k, v in sorted((self.args or {}).items()) if v is not None]
        parts += [f"{k}~/{p}/" for k, p in sorted(self.match.items())]
        return f"{self.tool}({', '.join(parts)})"


@dataclass(frozen=True, kw_only=True)
class Fixture(Match):
    """A tool's answer to the calls it matches: `result` (text), or an error result when `error`; `preview`: a
    destructive tool's dry-run text."""

    result: str = ""
    error: bool = False
    preview: str | None = None


@dataclass(frozen=True, kw_only=True)
class Decision(Match):
    """A person's decision on the changes it matches: approved by `by`, or denied by `by` for `reason`."""

    by: str
    approve: bool
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class Forbidden(Match):
    when: str = "called"


@dataclass(frozen=True, kw_only=True)
class Reply:
    """A person's thread reply, reaching the run after the model's `after_step`-th step."""

    after_step: int
    user: str
    text: str


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One scripted model reply: optional text, then tool calls (none: the final answer)."""

    text: str = ""
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()


@dataclass(frozen=True, kw_only=True)
class Expect:
    root_cause: tuple[str, ...] = ()
    tempting: tuple[str, ...] = ()
    evidence: tuple[Match, ...] = ()
    forbidden: tuple[Forbidden, ...] = ()
    unknown_ok: bool = False
    max_steps: int = 20
    max_dollars: float = 1.0


@dataclass(frozen=True, kw_only=True)
class Case:
    name: str
    folder: Path
    title: str
    now: float  # epoch seconds: the run's "now" and start
    requester: str  # "" for an alert
    channel: str
    task: str  # the run's first message, as a mention or an alert makes it
    alertname: str | None
    alert_start: float | None
    config: dict[str, Any]
    approvals: ApprovalSettings  # config.approvals: the policy the people's clicks go through
    offers: tuple[str, ...]
    fixtures: tuple[Fixture, ...]
    decisions: tuple[Decision, ...]
    replies: tuple[Reply, ...]
    expect: Expect
    scripts: dict[str, tuple[Turn, ...]]
    raw: dict[str, Any]  # the file as read: what names the hallucination check knows come from


class _Reader:
    def __init__(self, case: str) -> None:
        self.case = case

    def fail(self, where: str, what: str) -> CaseError:
        return CaseError(f"{self.case}: {where}: {what}")

    def table(self, value: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"must be a mapping, got {type(value).__name__}")
        if unknown := sorted(set(value) - set(keys)):
            raise self.fail(where, f"unknown key(s) {', '.join(map(str, unknown))} (known: {', '.join(keys)})")
        return value

    def items(self, value: Any, where: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(where, f"must be a list, got {type(value).__name__}")
        return value

    def text(self, value: Any, where: str, *, required: bool = True) -> str:
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value.strip()):
            raise self.fail(where, "must be a non-empty string")
        return value

    def entries(self, value: Any, where: str, keys: tuple[str, ...]) -> Iterator[tuple[str, dict[str, Any]]]:
        """Each item of the list `value` (None: none), a mapping of `keys`, with where it is."""
        for i, item in enumerate(self.items(value, where)):
            yield f"{where}[{i}]", self.table(item, f"{where}[{i}]", keys)

    def regex(self, value: Any, where: str) -> str:
        try:
            re.compile(self.text(value, where))
        except re.error as e:
            raise self.fail(where, f"not a regular expression: {e}") from None
        return str(value)

    def patterns(self, value: Any, where: str) -> tuple[str, ...]:
        return tuple(self.regex(p, f"{where}[{i}]") for i, p in enumerate(self.items(value, where)))

    def match(self, item: dict[str, Any], where: str) -> dict[str, Any]:
        tool = self.text(item.get("tool"), f"{where}.tool")
        args = item.get("args")
        if args is not None and not isinstance(args, dict):
            raise self.fail(f"{where}.args", "must be a mapping of argument values")
        match = item.get("match") or {}
        if not isinstance(match, dict):
            raise self.fail(f"{where}.match", "must be a mapping of argument -> regular expression")
        for k, p in match.items():
            self.regex(p, f"{where}.match.{k}")
        return {"tool": tool, "args": args, "match": dict(match)}


MATCH_KEYS = ("tool", "args", "match")


def load(folder: str | Path) -> Case:
    """The case in `folder` (its case.yaml and the files it names); CaseError naming the first problem."""
    folder = Path(folder)
    name = folder.name
    r = _Reader(name)
    try:
        raw = yaml.safe_load((folder / CASE_FILE).read_text(encoding="utf-8"))
    except OSError as e:
        raise r.fail(CASE_FILE, e.strerror or str(e)) from None
    except yaml.YAMLError as e:
        raise r.fail(CASE_FILE, f"not YAML: {e}") from None
    top = r.table(
        raw,
        CASE_FILE,
        ("title", "now", "trigger", "config", "offers", "fixtures", "people", "expect", "golden", "bad"),
    )

    def file_text(rel: Any, where: str) -> str:
        path = folder / r.text(rel, where)
        if not path.resolve().is_relative_to(folder.resolve()):
            raise r.fail(where, "must be a file inside the case's folder")
        try:
            return path.read_text(encoding="utf-8")
        except OSError as e:
            raise r.fail(where, f"{rel}: {e.strerror or e}") from None

    now = _time(r, top.get("now"), "now")
    trigger = r.table(top.get("trigger"), "trigger", ("mention", "alert"))
    if len(trigger) != 1:
        raise r.fail("trigger", "give exactly one of mention, alert")
    alertname = alert_start = None
    if "mention" in trigger:
        m = r.table(trigger["mention"], "trigger.mention", ("user", "channel", "text"))
        requester, channel = r.text(m.get("user"), "trigger.mention.user"), str(m.get("channel") or "C0INCIDENT")
        task = f"[incident request from <@{requester}> in <#{channel}>] {r.text(m.get('text'), 'trigger.mention.text')}"
    else:
        from handlers.alerts.alertmanager.payload import alert
        from handlers.alerts.alertmanager.payload import task as alert_task
        from handlers.alerts.desk import AlertDesk

        payload = trigger["alert"]
        channel, requester = "C0ALERTS", ""
        try:
            found = alert(payload)
            task = AlertDesk.prompt(f"from Alertmanager in <#{channel}>", alert_task(payload))
        except (KeyError, TypeError, IndexError, AttributeError) as e:
            raise r.fail("trigger.alert", f"not an Alertmanager webhook payload: missing or bad {e}") from None
        alertname, alert_start = found.name or None, found.started_at

    config = top.get("config") or {}
    r.table(config, "config", tuple(config) if isinstance(config, dict) else ())
    read_approvals = Reader(config.get("approvals") or {})  # read as opsloop reads [approvals]
    approvals = read(ApprovalSettings, read_approvals)
    if approvals is None or read_approvals.problems:
        raise r.fail("config.approvals", "; ".join(read_approvals.problems) or "must be a mapping")
    fixtures = []
    for where, f in r.entries(
        top.get("fixtures"), "fixtures", (*MATCH_KEYS, "result", "result_file", "error", "preview")
    ):
        if ("result" in f) == ("result_file" in f):
            raise r.fail(where, "give exactly one of result, result_file")
        result = r.text(f["result"], f"{where}.result") if "result" in f else file_text(f["result_file"], where)
        fixtures.append(
            Fixture(**r.match(f, where), result=result, error=bool(f.get("error")), preview=f.get("preview"))
        )

    people = r.table(top.get("people") or {}, "people", ("approve", "deny", "replies"))
    decisions = []
    for key, approve in (("approve", True), ("deny", False)):
        for where, d in r.entries(people.get(key), f"people.{key}", (*MATCH_KEYS, "by", "reason")):
            decisions.append(
                Decision(
                    **r.match(d, where),
                    by=r.text(d.get("by"), f"{where}.by"),
                    approve=approve,
                    reason=r.text(d.get("reason"), f"{where}.reason", required=False),
                )
            )
    replies = []
    for where, d in r.entries(people.get("replies"), "people.replies", ("after_step", "user", "text")):
        if not isinstance(d.get("after_step"), int) or d["after_step"] < 1:
            raise r.fail(f"{where}.after_step", "must be a step number, 1 or more")
        replies.append(
            Reply(
                after_step=d["after_step"],
                user=r.text(d.get("user"), f"{where}.user"),
                text=r.text(d.get("text"), f"{where}.text"),
            )
        )

    ex = r.table(
        top.get("expect"), "expect", ("root_cause", "tempting", "evidence", "forbidden", "unknown_ok", "limits")
    )
    limits = r.table(ex.get("limits") or {}, "expect.limits", ("steps", "dollars"))
    forbidden = []
    for where, d in r.entries(ex.get("forbidden"), "expect.forbidden", (*MATCH_KEYS, "when")):
        when = d.get("when", "called")
        if when not in WHEN:
            raise r.fail(f"{where}.when", f"must be one of {', '.join(WHEN)}")
        forbidden.append(Forbidden(**r.match(d, where), when=when))
    expect = Expect(
        root_cause=r.patterns(ex.get("root_cause"), "expect.root_cause"),
        tempting=r.patterns(ex.get("tempting"), "expect.tempting"),
        evidence=tuple(
            Match(**r.match(m, where)) for where, m in r.entries(ex.get("evidence"), "expect.evidence", MATCH_KEYS)
        ),
        forbidden=tuple(forbidden),
        unknown_ok=bool(ex.get("unknown_ok", False)),
        max_steps=int(limits.get("steps", 20)),
        max_dollars=float(limits.get("dollars", 1.0)),
    )
    if not expect.root_cause and not expect.unknown_ok:
        raise r.fail("expect", "give root_cause patterns, or unknown_ok: true")

    scripts = {}
    for which in SCRIPTS:
        body = top.get(which)
        if body is None and (folder / f"{which}.yaml").is_file():
            try:
                body = yaml.safe_load(file_text(f"{which}.yaml", which))
            except yaml.YAMLError as err:
                raise r.fail(f"{which}.yaml", f"not YAML: {err}") from None
        if body is not None:
            scripts[which] = _script(r, body, which)
    offers = tuple(r.text(o, f"offers[{i}]") for i, o in enumerate(r.items(top.get("offers"), "offers")))
    return Case(
        name=name,
        folder=folder,
        title=r.text(top.get("title"), "title"),
        now=now,
        requester=requester,
        channel=channel,
        task=task,
        alertname=alertname,
        alert_start=alert_start,
        config=dict(config),
        approvals=approvals,
        offers=offers,
        fixtures=tuple(fixtures),
        decisions=tuple(decisions),
        replies=tuple(replies),
        expect=expect,
        scripts=scripts,
        raw=raw,
    )


def _time(r: _Reader, value: Any, where: str) -> float:
    if isinstance(value, datetime):  # YAML reads an unquoted timestamp itself
        when = value
    else:
        try:
            when = datetime.fromisoformat(r.text(value, where).replace("Z", "+00:00"))
        except ValueError:
            raise r.fail(where, f"not an RFC 3339 time: {value!r}") from None
    if when.tzinfo is None:
        raise r.fail(where, "needs a time zone (end it with Z for UTC)")
    return when.timestamp()


def _script(r: _Reader, body: Any, which: str) -> tuple[Turn, ...]:
    turns = []
    for where, t in r.entries(body, which, ("text", "calls")):
        calls = []
        for at, c in r.entries(t.get("calls"), f"{where}.calls", ("tool", "args")):
            args = c.get("args") or {}
            if not isinstance(args, dict):
                raise r.fail(f"{at}.args", "must be a mapping")
            calls.append((r.text(c.get("tool"), f"{at}.tool"), args))
        if not calls and not t.get("text"):
            raise r.fail(where, "a turn needs text or calls")
        turns.append(Turn(text=r.text(t.get("text"), f"{where}.text", required=False), calls=tuple(calls)))
    if not turns:
        raise r.fail(which, "a script needs at least one turn")
    return tuple(turns)


def cases(paths: list[str | Path]) -> list[Path]:
    """The case folders in `paths`: each path a case folder (it has case.yaml) or a folder of them."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / CASE_FILE).is_file():
            out.append(p)
        elif p.is_dir():
            out.extend(sorted(d for d in p.iterdir() if (d / CASE_FILE).is_file()))
        else:
            raise CaseError(f"{p}: no such folder")
    return out
