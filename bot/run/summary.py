"""The living summary (docs/context.md): what the run currently believes, checked by opsloop before it is shown.

The model sends `update_summary` with a situation, up to five hypotheses and up to five next steps. opsloop,
not the model, decides whether it stands. Each piece of evidence is a call's handle (`#7`, the first line of
every tool result: `handle`) and a short quote that must appear in that call's result: compared after
redaction and as the model was shown it, with whitespace runs collapsed and case ignored (`quoted_in`). `high`
confidence, `confirmed` and `refuted` need at least one such piece from a successful call (one that ran and
returned a result that is not an error; denied, expired or refused calls and `update_summary` calls are not
evidence). A refused update names each problem, and the summary stays as it was. "We don't know yet" (no
hypotheses, or only open ones) is a valid summary.

Pure: no Slack, no model client, no store. An accepted summary's text is redacted.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from bot.core.redact import redact
from bot.run.prompts import quoted_markers
from tools.api import SUMMARY_TOOL

TOOL_NAME = SUMMARY_TOOL

SITUATION_MAX = 300
STATEMENT_MAX = 200
STEP_MAX = 150
HYPOTHESES_MAX = 5
STEPS_MAX = 5
EVIDENCE_MAX = 10  # the contract is silent; ten calls back any one claim
ID_MAX = 40
QUOTE_MIN = 4  # shorter quotes ("ok", "0") are found nearly anywhere and prove nothing
QUOTE_MAX = 300
HANDLE_MAIN_MAX = 40  # a handle's main argument, cut
_HANDLE = re.compile(r"#(\d+)(?=\s|$)")

_E = TypeVar("_E", bound=enum.StrEnum)

SECTION_TITLES = ("What's going on", "Likely cause", "Next")


class HypothesisStatus(enum.StrEnum):
    OPEN = "open"
    SUPPORTED = "supported"
    REFUTED = "refuted"
    CONFIRMED = "confirmed"


class Confidence(enum.StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


# How hypotheses are shown: what is known first, what was ruled out last.
DISPLAY_ORDER = (
    HypothesisStatus.CONFIRMED,
    HypothesisStatus.SUPPORTED,
    HypothesisStatus.OPEN,
    HypothesisStatus.REFUTED,
)
_NEEDS_EVIDENCE = (HypothesisStatus.CONFIRMED, HypothesisStatus.REFUTED)


class CallStatus(enum.StrEnum):
    """What became of one tool call of the run, as far as evidence goes."""

    SUCCEEDED = "succeeded"  # ran and returned a result that is not an error
    FAILED = "failed"  # ran (or its outcome is unknown) and the result is an error
    NOT_RUN = "not_run"  # denied, expired, superseded, or refused before it ran (unknown tool, bad arguments)
    PENDING = "pending"  # not finished yet (a call in the same turn as this update, or awaiting approval)


def handle(number: int, tool: str, main: object = None) -> str:
    """A call's handle, the first line of its result: its number in the run, the tool, its main argument."""
    shown = " ".join(str(main).split()) if main is not None and not isinstance(main, (dict, list)) else ""
    shown = shown if len(shown) <= HANDLE_MAIN_MAX else shown[: HANDLE_MAIN_MAX - 1] + "…"
    return redact(" ".join(p for p in (f"#{number}", tool, shown) if p))


def handle_number(text: str) -> int | None:
    """The call number a handle or a result's first line starts with (`#7 check_disk web-03` -> 7)."""
    found = _HANDLE.match(text.strip())
    return int(found.group(1)) if found else None


def without_handle(content: str) -> str:
    """A stored result as the tool returned it: without the handle line the run put first."""
    return content.partition("\n")[2] if handle_number(content) is not None else content


def quoted_in(quote: str, body: str) -> bool:
    """`quote` appears in `body` as the model was shown it: both redacted and with people's markers quoted
    (`prompts.quoted_markers`, which leaves an already quoted marker as it is), whitespace runs collapsed, case
    ignored."""

    def norm(text: str) -> str:
        return " ".join(quoted_markers(redact(text)).split()).casefold()

    return norm(quote) in norm(body)


@dataclass(frozen=True)
class CallOutcome:
    """One tool call of this run: which tool, what became of it, and its result's text (its handle first)."""

    tool: str
    status: CallStatus
    content: str = ""

    @property
    def handle(self) -> str:
        return self.content.partition("\n")[0] if handle_number(self.content) is not None else ""

    @property
    def body(self) -> str:
        """The result without its handle line: what a quote must come from."""
        return without_handle(self.content)

    @property
    def is_evidence(self) -> bool:
        return self.status is CallStatus.SUCCEEDED and self.tool != TOOL_NAME


@dataclass(frozen=True)
class Evidence:
    """A call's handle (`#7 check_disk web-03`, as its result starts) and a quote checked to be in its result.
    A summary stored before quotes existed has a tool_use id as its handle and no quote."""

    handle: str
    quote: str = ""

    def to_json(self) -> dict[str, str]:
        return {"handle": self.handle, "quote": self.quote}

    @classmethod
    def from_json(cls, data: str | Mapping[str, str]) -> Evidence:
        return cls(handle=data) if isinstance(data, str) else cls(handle=data["handle"], quote=data.get("quote", ""))

    def text(self) -> str:
        """One line: the handle and the quote in full."""
        return f'{self.handle}: "{self.quote}"' if self.quote else self.handle


@dataclass(frozen=True)
class Hypothesis:
    id: str
    statement: str
    status: HypothesisStatus
    confidence: Confidence
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True)
class Summary:
    """An accepted summary: redacted text, hypotheses as the model sent them (see `ordered` for display)."""

    situation: str
    hypotheses: tuple[Hypothesis, ...] = ()
    next_steps: tuple[str, ...] = ()

    def ordered(self) -> tuple[Hypothesis, ...]:
        """Confirmed, supported, open, refuted; the model's order within each."""
        return tuple(sorted(self.hypotheses, key=lambda h: DISPLAY_ORDER.index(h.status)))

    def to_json(self) -> dict[str, Any]:
        """The summary as the tool's input shape (what the store keeps and an export shows)."""
        return {
            "situation": self.situation,
            "hypotheses": [
                {
                    "id": h.id,
                    "statement": h.statement,
                    "status": str(h.status),
                    "confidence": str(h.confidence),
                    "evidence": [e.to_json() for e in h.evidence],
                }
                for h in self.hypotheses
            ],
            "next_steps": list(self.next_steps),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Summary:
        """A stored summary back (it was validated when it was accepted)."""
        return cls(
            situation=data["situation"],
            hypotheses=tuple(
                Hypothesis(
                    id=h["id"],
                    statement=h["statement"],
                    status=HypothesisStatus(h["status"]),
                    confidence=Confidence(h["confidence"]),
                    evidence=tuple(Evidence.from_json(e) for e in h.get("evidence", ())),
                )
                for h in data.get("hypotheses", ())
            ),
            next_steps=tuple(data.get("next_steps", ())),
        )


INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "situation": {
            "type": "string",
            "maxLength": SITUATION_MAX,
            "description": "What is going on, in one or two sentences: symptoms and what is ruled out.",
        },
        "hypotheses": {
            "type": "array",
            "maxItems": HYPOTHESES_MAX,
            "description": "Candidate causes. Empty, or only open ones, when you don't know yet.",
            "items": {
                "type": "object",
                "properties": {
                    "id": {
                        "type": "string",
                        "maxLength": ID_MAX,
                        "description": 'A short stable name, kept across updates (e.g. "pool").',
                    },
                    "statement": {"type": "string", "maxLength": STATEMENT_MAX},
                    "status": {"type": "string", "enum": [str(s) for s in HypothesisStatus]},
                    "confidence": {"type": "string", "enum": [str(c) for c in Confidence]},
                    "evidence": {
                        "type": "array",
                        "maxItems": EVIDENCE_MAX,
                        "description": "What backs it: a call's handle (the first line of its result, e.g. "
                        '"#7") and a short quote copied from that result. high confidence, confirmed and refuted '
                        "need at least one, from a call that succeeded.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "handle": {"type": "string", "maxLength": ID_MAX, "description": 'e.g. "#7"'},
                                "quote": {"type": "string", "minLength": QUOTE_MIN, "maxLength": QUOTE_MAX},
                            },
                            "required": ["handle", "quote"],
                            "additionalProperties": False,
                        },
                    },
                },
                "required": ["id", "statement", "status", "confidence"],
                "additionalProperties": False,
            },
        },
        "next_steps": {"type": "array", "maxItems": STEPS_MAX, "items": {"type": "string", "maxLength": STEP_MAX}},
    },
    "required": ["situation"],
    "additionalProperties": False,
}

DESCRIPTION = (
    "Keep the thread's summary of this investigation current: what is going on, the likely cause with "
    "honest confidence, and what comes next. Call it after each significant finding. Back each hypothesis "
    "with evidence: a call's handle (the first line of its result, e.g. #7) and a short quote copied from that "
    "result; opsloop checks the quote is there. high confidence, confirmed and refuted need such evidence "
    "from a call that succeeded. The evidence is shown to people under each hypothesis. Returns that the "
    "summary was updated in the thread, or, when refused, every problem with the input, each naming its field."
)


def validate(raw: object, *, calls: Mapping[str, CallOutcome]) -> Summary | list[str]:
    """The accepted summary (its text redacted), or every problem with `raw`, each naming its field.

    `calls` holds this run's tool calls by tool_use id, the current update_summary call included, each with its
    result's text (its handle first).
    """
    if not isinstance(raw, Mapping):
        return ["the input must be an object with situation, hypotheses and next_steps"]
    problems = _unknown(raw, "", ("situation", "hypotheses", "next_steps"))
    situation = _text(raw.get("situation"), "situation", SITUATION_MAX, problems)
    hypotheses = _hypotheses(raw.get("hypotheses", []), calls, problems)
    steps = _list(raw.get("next_steps", []), "next_steps", STEPS_MAX, problems)
    next_steps = tuple(_text(s, f"next_steps[{i}]", STEP_MAX, problems) for i, s in enumerate(steps))
    if problems:
        return problems
    return Summary(situation=redact(situation), hypotheses=hypotheses, next_steps=tuple(map(redact, next_steps)))


def refusal(problems: Sequence[str]) -> str:
    """The tool error for a refused update: every problem, and that the summary is unchanged."""
    return "update_summary refused, the summary is unchanged:\n" + "\n".join(f"- {p}" for p in problems)


def render_text(summary: Summary) -> str:
    """The summary as plain text (`opsloop show`, the handoff report), redacted, hypotheses in display order."""
    going_on, cause, nxt = SECTION_TITLES
    lines = [f"{going_on}: {summary.situation or '-'}", f"{cause}:"]
    ordered = summary.ordered()
    for h in ordered:
        lines.append(f"  - {h.status}, {h.confidence} confidence: {h.statement} [{h.id}]")
        lines += [f"      evidence {e.text()}" for e in h.evidence]
    if not ordered:
        lines.append("  not known yet")
    lines.append(f"{nxt}:")
    lines += [f"  - {step}" for step in summary.next_steps] or ["  -"]
    return redact("\n".join(lines))


# ---------------------------------------------------------------------------------------------------------------


def _hypotheses(raw: object, calls: Mapping[str, CallOutcome], problems: list[str]) -> tuple[Hypothesis, ...]:
    out: list[Hypothesis] = []
    seen: set[str] = set()
    for i, item in enumerate(_list(raw, "hypotheses", HYPOTHESES_MAX, problems)):
        where = f"hypotheses[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: must be an object with id, statement, status, confidence, evidence")
            continue
        before = len(problems)
        problems += _unknown(item, f"{where}.", ("id", "statement", "status", "confidence", "evidence"))
        hid = _text(item.get("id"), f"{where}.id", ID_MAX, problems)
        if hid in seen:
            problems.append(f"{where}.id: {hid!r} is used by an earlier hypothesis")
        seen.add(hid)
        statement = _text(item.get("statement"), f"{where}.statement", STATEMENT_MAX, problems)
        status = _choice(item.get("status"), f"{where}.status", HypothesisStatus, problems)
        confidence = _choice(item.get("confidence"), f"{where}.confidence", Confidence, problems)
        evidence = _evidence(item.get("evidence", []), where, calls, problems)
        if status is None or confidence is None or len(problems) > before:
            continue
        _check_backing(where, status, confidence, evidence, problems)
        out.append(
            Hypothesis(
                id=hid,
                statement=redact(statement),
                status=status,
                confidence=confidence,
                evidence=tuple(e for e, _ in evidence),
            )
        )
    return tuple(out)


def _evidence(
    raw: object, where: str, calls: Mapping[str, CallOutcome], problems: list[str]
) -> tuple[tuple[Evidence, CallOutcome], ...]:
    """Each piece resolved to its call (by the handle's number) and its quote found in that call's result."""
    by_number = {n: c for c in calls.values() if (n := handle_number(c.handle)) is not None}
    out: list[tuple[Evidence, CallOutcome]] = []
    for j, item in enumerate(_list(raw, f"{where}.evidence", EVIDENCE_MAX, problems)):
        at = f"{where}.evidence[{j}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("handle"), str):
            problems.append(f'{at}: must be an object {{"handle": "#7", "quote": "..."}}: a handle and a quote')
            continue
        quote = _text(item.get("quote"), f"{at}.quote", QUOTE_MAX, problems)
        number = handle_number(item["handle"])
        call = by_number.get(number) if number is not None else None
        if call is None:
            problems.append(
                f"{at}.handle: {_shown(item['handle'])} is not a call of this run (cite the handle on the first "
                'line of a tool result, e.g. "#7")'
            )
        elif quote and len(quote.strip()) < QUOTE_MIN:
            problems.append(f"{at}.quote: too short, at least {QUOTE_MIN} characters")
        elif quote and not quoted_in(quote, call.body):
            problems.append(
                f"{at}.quote: {_shown(quote)} is not in the result of {call.handle}; copy the words from that "
                "result exactly (whitespace and case may differ)"
            )
        elif quote:
            evidence = Evidence(handle=call.handle, quote=redact(" ".join(quote.split())))
            if evidence not in (e for e, _ in out):
                out.append((evidence, call))
    return tuple(out)


def _check_backing(
    where: str,
    status: HypothesisStatus,
    confidence: Confidence,
    evidence: tuple[tuple[Evidence, CallOutcome], ...],
    problems: list[str],
) -> None:
    """`high` confidence, `confirmed` and `refuted` need quoted evidence from a successful call; say why each
    piece given is not."""
    claims = ([f"confidence {confidence}"] if confidence is Confidence.HIGH else []) + (
        [f"status {status}"] if status in _NEEDS_EVIDENCE else []
    )
    if not claims or any(call.is_evidence for _, call in evidence):
        return
    why = "; ".join(f"{e.handle} {_not_evidence(call)}" for e, call in evidence) or "no evidence given"
    problems.append(
        f"{where}: {' and '.join(claims)} needs at least one quoted piece of evidence from a successful call of "
        f"this run ({why})"
    )


def _not_evidence(call: CallOutcome) -> str:
    return {
        CallStatus.FAILED: "returned an error",
        CallStatus.NOT_RUN: "did not run: denied, expired or refused",
        CallStatus.PENDING: "has not finished",
    }.get(call.status, "is not evidence")


def _unknown(raw: Mapping[str, Any], where: str, allowed: tuple[str, ...]) -> list[str]:
    return [f"{where}{k}: unknown field (allowed: {', '.join(allowed)})" for k in raw if k not in allowed]


def _text(value: object, where: str, limit: int, problems: list[str]) -> str:
    if value is None:
        problems.append(f"{where}: required")
        return ""
    if not isinstance(value, str):
        problems.append(f"{where}: must be a string")
        return ""
    if not value.strip():
        problems.append(f"{where}: empty")
    elif len(value) > limit:
        problems.append(f"{where}: {len(value)} characters, at most {limit}")
    return value


def _list(value: object, where: str, limit: int, problems: list[str]) -> list[Any]:
    if not isinstance(value, list):
        problems.append(f"{where}: must be a list")
        return []
    if len(value) > limit:
        problems.append(f"{where}: {len(value)} given, at most {limit}")
    return value


def _choice(value: object, where: str, kind: type[_E], problems: list[str]) -> _E | None:
    if value is None:
        problems.append(f"{where}: required")
        return None
    if isinstance(value, str) and value in kind._value2member_map_:
        return kind(value)
    problems.append(f"{where}: {_shown(value)} is not one of {', '.join(kind)}")
    return None


def _shown(value: object) -> str:
    """A value the model sent, bounded and redacted, for a problem line."""
    text = value if isinstance(value, str) else repr(value)
    return redact(text if len(text) <= 80 else text[:79] + "…")
