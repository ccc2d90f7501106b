"""Pure Block Kit builders for every message opsloop posts, and the action_ids its buttons carry.

No I/O and no Slack imports: each builder takes plain values and returns `SlackMessage`s
whose blocks stay inside Slack's limits, so `chat.postMessage` never answers
`invalid_blocks`, `no_text` or `msg_too_long`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.core.redact import REDACTED, redact
from bot.core.types import Approval, FeedbackValue, RunResult
from bot.run.report import HandoffReport
from bot.run.report import handoff_report as report_of
from bot.run.summary import SECTION_TITLES, Evidence, HypothesisStatus, Summary
from handlers import messages as m
from handlers.mrkdwn import (
    FENCE,
    SECTION_TEXT_MAX,
    count_hidden,
    markdown_to_mrkdwn,
    outside_markup,
    reveal,
    split_mrkdwn,
)
from tools.api import Link

APPROVE = "opsloop.approve"
DENY = "opsloop.deny"
STOP = "opsloop.stop"
FEEDBACK = "opsloop.feedback"  # the feedback_buttons under an answer or a handoff report
INVESTIGATE = "opsloop.investigate"  # the message shortcut "Investigate with opsloop" (its callback_id)

# Slack's own limits on a message: a header, a button's text or value, or a block count past these is answered
# `invalid_blocks`; Slack cuts (or refuses) a message's text past MESSAGE_TEXT_MAX characters.
HEADER_MAX = 150
BUTTON_TEXT_MAX = 75
BUTTON_VALUE_MAX = 2000
MAX_BLOCKS = 50
MESSAGE_TEXT_MAX = 40000
# The text a message's blocks hold in all: Slack refuses more with `msg_blocks_too_long` although each block is
# within its own limit (reported near 12,000 characters, containers counted too); ours stays well under it.
BLOCKS_TEXT_MAX = 10_000
FIELD_TEXT_MAX = 2000
CONTEXT_TEXT_MAX = 3000
MAX_CONTEXT_ELEMENTS = 10
ID_MAX = 255
CONFIRM_TITLE_MAX = 100
CONFIRM_TEXT_MAX = 300
CONFIRM_BUTTON_MAX = 30

# Our own bounds, chosen for reading at a glance.
FALLBACK_MAX = 300
EXCERPT_MAX = 300
NAME_MAX = 100

_ELLIPSIS = "…"
_ESCAPED_LEN = {"&": 5, "<": 4, ">": 4}
_BROKEN_FENCE = "``\u200b`"  # zero-width space: shows as ``` but cannot close a code block
_FRAME = len("\n```\n") + len("\n```")  # what a code block adds around its body (`_code`)


@dataclass(frozen=True)
class SlackMessage:
    """One chat.postMessage/chat.update payload: notification text plus blocks."""

    text: str
    blocks: list[dict[str, Any]]


# ---------------------------------------------------------------------------
# Approval card
# ---------------------------------------------------------------------------


def approval_card(approval: Approval) -> SlackMessage:
    """The card for one confirm-gated call: buttons while pending, who decided once decided.

    The card shows the whole arguments, over several sections when they are long. When even
    that cannot show them all, Approve is not offered (only Deny, with a line saying why):
    nobody approves what they cannot read. Secrets are redacted before anything is laid out
    (a cut never leaves half a secret), and a card that hides one says so. Characters a reader
    could not see or that reorder text (bidi controls, zero-width characters) are written out
    as `⟨U+202E⟩`, with a warning line; the tool still receives the arguments as they are.
    """
    a = approval
    if not a.id or len(a.id) > BUTTON_VALUE_MAX:
        raise ValueError(f"approval_id must be 1..{BUTTON_VALUE_MAX} characters, got {len(a.id)}")
    state, category, pending = a.state, a.category, a.pending
    # counted before redaction: a secret spelled with invisible characters is hidden whole, its characters too
    hidden = count_hidden(a.tool) + count_hidden(_json(a.args)) + count_hidden(a.preview or "")
    tool, args_text = reveal(a.tool), reveal(redact(_json(a.args)))
    preview = reveal(redact(a.preview)) if a.preview is not None else None
    short_tool = _truncate(tool, NAME_MAX)
    head = [
        _header(m.approval_heading(state, short_tool), "approval_header"),
        section(m.approval_summary(tool=short_tool, category=category, requester=a.requester), "approval_summary"),
    ]
    tail: list[dict[str, Any]] = []
    if preview is not None:
        tail.append(_preview_section(preview))
    if hidden:
        tail.append(context([m.hidden_on_card(hidden)], "approval_hidden"))
    if REDACTED in args_text or (preview and REDACTED in preview):
        tail.append(context([m.REDACTED_ON_CARD], "approval_redacted"))
    if a.alert_note:
        tail.append(context([m.approval_alert_note(reveal(a.alert_note))], "approval_alert"))
    if pending:
        notes = []
        if a.required > 1:
            notes.append(m.approval_progress(a.approvals, a.required))
        if a.expires_at is not None:
            notes.append(m.approval_expires(a.expires_at))
        if notes:
            tail.append(context(notes, "approval_status"))
    else:
        line = m.approval_decided(
            state=state,
            cause=a.cause,
            decided_by=a.decided_by,
            approvals=a.approvals,
            reason=reveal(redact(a.reason)) if a.reason else a.reason,
            decided_at=a.decided_at,
        )
        tail.append(context([line], "approval_decision"))
    approve = _button(m.APPROVE_BUTTON, APPROVE, a.id, style="primary")
    if category == "destructive":
        approve["confirm"] = _confirm(*m.destructive_confirm(short_tool), style="danger")
    deny = _button(m.DENY_BUTTON, DENY, a.id, style="danger")
    room = MAX_BLOCKS - len(head) - len(tail) - (1 if pending else 0)
    budget = BLOCKS_TEXT_MAX - blocks_text([*head, *tail, *([approve, deny] if pending else [])])
    args_blocks, shown_in_full = _args_sections(args_text, room, budget)
    if pending:
        buttons = [approve, deny] if shown_in_full else [deny]
        tail.append({"type": "actions", "block_id": "approval_actions", "elements": buttons})
    return SlackMessage(
        text=m.approval_fallback(state=state, tool=short_tool, category=category), blocks=[*head, *args_blocks, *tail]
    )


def offers_approve(msg: SlackMessage) -> bool:
    """Whether a card carries the Approve button (it does not when it cannot show everything that would run)."""
    return bool(buttons(msg.blocks, APPROVE))


def buttons(blocks: object, action_id: str) -> list[dict[str, Any]]:
    """The elements with `action_id` in `blocks`: ours, or a message's as Slack returns it (any shape)."""
    return [
        el
        for block in (blocks if isinstance(blocks, list) else [])
        for el in (block.get("elements") or [] if isinstance(block, dict) else [])
        if isinstance(el, dict) and el.get("action_id") == action_id
    ]


def _args_sections(text: str, room: int, budget: int) -> tuple[list[dict[str, Any]], bool]:
    """The arguments as code sections, in at most `room` blocks holding at most `budget` characters of text:
    (blocks, every character shown).

    One section when they fit; otherwise numbered parts, cut at a line break when that
    costs little. When the parts need more than `room` blocks or `budget` characters, the
    last block says how much is missing instead.
    """
    raw = text.replace(FENCE, _BROKEN_FENCE)
    whole = _escape_fit(raw, SECTION_TEXT_MAX - len(m.arguments_heading()) - _FRAME)[1] == len(raw)
    parts = (
        [(raw, False)]
        if whole
        else _code_parts(raw, SECTION_TEXT_MAX - len(m.arguments_heading(MAX_BLOCKS, MAX_BLOCKS, True)) - _FRAME)
    )
    blocks = [
        section(
            _code(m.arguments_heading(i, len(parts), same_line), m.escape(chunk)),
            "approval_args" + (f"_{i}" if i > 1 else ""),
        )
        for i, (chunk, same_line) in enumerate(parts, start=1)
    ]
    if len(blocks) <= room and blocks_text(blocks) <= budget:
        return blocks, True
    note = len(m.arguments_too_long(len(text), len(text)))  # the longest the last block's note can be
    shown_parts, used = 0, note
    for block in blocks[: max(0, room - 1)]:
        used += blocks_text([block])
        if used > budget:
            break
        shown_parts += 1
    shown = sum(len(chunk) - chunk.count("\u200b") for chunk, _ in parts[:shown_parts])
    return [*blocks[:shown_parts], section(m.arguments_too_long(shown, len(text)), "approval_args_missing")], False


def _code_parts(raw: str, budget: int) -> list[tuple[str, bool]]:
    """`raw` in chunks whose escaped form fits `budget`, each ending on a whole line when that costs little:
    (chunk, continues a line)."""
    parts: list[tuple[str, bool]] = []
    pos, same_line = 0, False
    while pos < len(raw):
        _, used = _escape_fit(raw[pos : pos + budget], budget)
        end = pos + used
        if end >= len(raw):
            parts.append((raw[pos:], same_line))
            break
        line_end = raw.rfind("\n", pos, end)
        if line_end > pos + used * 4 // 5:
            parts.append((raw[pos:line_end], same_line))
            pos, same_line = line_end + 1, False
        else:
            parts.append((raw[pos:end], same_line))
            pos, same_line = end, True
    return parts


# ---------------------------------------------------------------------------
# Status message
# ---------------------------------------------------------------------------

TASK_STATES = ("pending", "in_progress", "complete", "error")
TASKS_SHOWN = 15  # the newest tasks a status message shows; older ones are counted in one line
TASK_TITLE_MAX = 150
TASK_OUTPUT_MAX = 200
_MENTION = re.compile(r"<@([UW][A-Z0-9]{2,40})>")


@dataclass(frozen=True)
class Task:
    """One task in the status message's list: a tool call or an approval wait. `task_plan` redacts, reveals and
    bounds title and output when it lays them out; a tool result comes in already cut by `task_output` (redacted
    whole before the cut, so the cut never leaves part of a secret); applying it again changes nothing."""

    task_id: str
    title: str
    status: str  # one of TASK_STATES
    output: str = ""


def task_output(text: str) -> str:
    """A tool result (or any text) as a task's one-line output: redacted whole first, hidden characters
    written out, whitespace collapsed, bounded."""
    return m.one_line(reveal(redact(text)), TASK_OUTPUT_MAX)


def _rich_line(text: str) -> dict[str, Any]:
    """One line as a rich_text object (what a task card's output takes), user mentions as user elements."""
    elements: list[dict[str, Any]] = []
    pos = 0
    for match in _MENTION.finditer(text):
        if match.start() > pos:
            elements.append({"type": "text", "text": text[pos : match.start()]})
        elements.append({"type": "user", "user_id": match.group(1)})
        pos = match.end()
    if pos < len(text) or not elements:
        elements.append({"type": "text", "text": text[pos:] or "-"})
    return {"type": "rich_text", "elements": [{"type": "rich_text_section", "elements": elements}]}


def task_plan(tasks: Sequence[Task], newest: int = TASKS_SHOWN) -> list[dict[str, Any]]:
    """The live task list: a plan block of the `newest` task cards, and a line counting older ones."""
    shown = list(tasks)[-newest:]
    cards = []
    for t in shown:
        if t.status not in TASK_STATES:
            raise ValueError(f"unknown task status {t.status!r}")
        card: dict[str, Any] = {
            "type": "task_card",
            "task_id": _truncate(t.task_id, ID_MAX) or "-",
            "title": _truncate(reveal(redact(t.title)), TASK_TITLE_MAX) or "-",
            "status": t.status,
        }
        if t.output:
            card["output"] = _rich_line(task_output(t.output))
        cards.append(card)
    out: list[dict[str, Any]] = [{"type": "plan", "block_id": "status_tasks", "title": m.TASKS_TITLE, "tasks": cards}]
    if len(tasks) > len(shown):
        out.append(context([m.tasks_earlier(len(tasks) - len(shown))], "status_tasks_earlier"))
    return out


def status_message(
    *,
    state: str,
    step: int,
    activity: str,
    tokens: int,
    cost_usd: float,
    run_id: str,
    max_iterations: int | None = None,
    tasks: Sequence[Task] = (),
    summary: Summary | None = None,
) -> SlackMessage:
    """The one status line a run keeps updating, with a Stop button until it finishes, under it the run's living
    summary (its three sections, when it has one; kept after the run ends) and the live task list (a plan of task
    cards) when `tasks` has any."""
    if not run_id or len(run_id) > BUTTON_VALUE_MAX:
        raise ValueError(f"run_id must be 1..{BUTTON_VALUE_MAX} characters, got {len(run_id)}")
    line = m.status_line(
        state=state,
        step=step,
        max_iterations=max_iterations,
        activity=m.one_line(reveal(redact(activity), prose=True), EXCERPT_MAX),
        tokens=tokens,
        cost_usd=cost_usd,
    )
    newest = TASKS_SHOWN
    while True:  # fewer task cards while the whole would hold more text than Slack takes in one message
        blocks: list[dict[str, Any]] = [
            section(line, "status"),
            *(summary_blocks(summary) if summary is not None else []),
            *(task_plan(tasks, newest) if tasks else []),
            context([m.status_context(_truncate(run_id, NAME_MAX))], "status_run"),
        ]
        if newest == 1 or blocks_text(blocks) <= BLOCKS_TEXT_MAX - 500:  # the Stop button and its dialog
            break
        newest -= 1
    if state != "finished":
        stop = _button(m.STOP_BUTTON, STOP, run_id, style="danger")
        stop["confirm"] = _confirm(*m.STOP_CONFIRM, style="danger")
        blocks.append({"type": "actions", "block_id": "status_actions", "elements": [stop]})
    return SlackMessage(text=_fit(line, FALLBACK_MAX), blocks=blocks)


# ---------------------------------------------------------------------------
# The living summary
# ---------------------------------------------------------------------------

BLOCK_IDS = ("summary_situation", "summary_cause", "summary_next")
NOT_KNOWN_YET = "Not known yet."
NOTHING_YET = "Nothing yet."
_STATUS = {
    HypothesisStatus.CONFIRMED: "*Confirmed*",
    HypothesisStatus.SUPPORTED: "*Supported*",
    HypothesisStatus.OPEN: "Open",
    HypothesisStatus.REFUTED: "~Refuted~",
}


EVIDENCE_SHOWN = 3  # per hypothesis; the exports show them all
EVIDENCE_LINE_MAX = 100


def summary_blocks(summary: Summary) -> list[dict[str, Any]]:
    """The living summary's three sections (What's going on, Likely cause, Next), in the contract's order;
    hypotheses confirmed, supported, open, refuted, each in its own section (the first under the title) with its
    evidence as a context line under it: the handle, the tool and the quote, cut when long. Every text the model
    wrote is redacted, escaped, has its hidden characters revealed, and goes in `verbatim` mrkdwn. Each section
    stays within 3,000 characters whatever the text, and the hypotheses with their evidence within 3,000 in all
    (so a status message keeps room for its tasks): when escaping makes the items too long, each is cut to an
    equal share, with an ellipsis."""
    going_on, cause, nxt = SECTION_TITLES
    steps = [("• ", step) for step in summary.next_steps]
    ordered = summary.ordered()
    evidence = {i: _evidence_context(h.evidence, f"summary_evidence_{i}") for i, h in enumerate(ordered) if h.evidence}
    share = (SECTION_TEXT_MAX - len(cause) - 3 - blocks_text(list(evidence.values()))) // max(len(ordered), 1)
    causes: list[dict[str, Any]] = []
    for i, h in enumerate(ordered):
        item = [(f"• {_STATUS[h.status]}, {h.confidence} confidence: ", h.statement)]
        block_id = BLOCK_IDS[1] if i == 0 else f"{BLOCK_IDS[1]}_{i}"
        title, budget = (cause, share + len(cause) + 3) if i == 0 else ("", share)
        causes += [
            _summary_section(block_id, title, item, NOT_KNOWN_YET, budget),
            *([evidence[i]] if h.evidence else []),
        ]
    return [
        _summary_section(BLOCK_IDS[0], going_on, [("", summary.situation)], NOT_KNOWN_YET),
        *(causes or [_summary_section(BLOCK_IDS[1], cause, [], NOT_KNOWN_YET)]),
        _summary_section(BLOCK_IDS[2], nxt, steps, NOTHING_YET),
    ]


def _evidence_context(evidence: Sequence[Evidence], block_id: str) -> dict[str, Any]:
    """One hypothesis's evidence, one element each (the first `EVIDENCE_SHOWN`, then how many more)."""
    lines = [_cut(" ".join(redact(e.text()).split()), EVIDENCE_LINE_MAX) for e in evidence[:EVIDENCE_SHOWN]]
    if len(evidence) > EVIDENCE_SHOWN:
        lines.append(f"and {len(evidence) - EVIDENCE_SHOWN} more")
    return context(lines, block_id)


def _summary_section(
    block_id: str, title: str, items: Sequence[tuple[str, str]], empty: str, budget: int = SECTION_TEXT_MAX
) -> dict[str, Any]:
    """At most `budget` characters of text. `title` empty: a section continuing the one above (a hypothesis
    after the first)."""
    head = f"*{title}*" if title else ""
    items = [(prefix, " ".join(redact(raw).split())) for prefix, raw in items if raw.strip()]
    if not items:
        return {"type": "section", "block_id": block_id, "text": _text(f"{head}\n{empty}")}
    lines = [prefix + _cut(raw, budget) for prefix, raw in items]
    if len(head) + sum(1 + len(line) for line in lines) > budget:
        share = (budget - len(head)) // len(items) - 1
        lines = [prefix + _cut(raw, share - len(prefix)) for prefix, raw in items]
    return {"type": "section", "block_id": block_id, "text": _text("\n".join([head, *lines] if head else lines))}


def _cut(raw: str, budget: int) -> str:
    """`raw` (already redacted) shown as safe mrkdwn (escaped, hidden characters written out), or its longest prefix
    whose shown form, with an ellipsis, fits `budget`; the cut falls on `raw`, before escaping, so it never splits an
    `&amp;` or a revealed `⟨U+…⟩`."""
    shown = reveal(m.escape(raw), prose=True)
    if len(shown) <= budget:
        return shown
    lo, hi = 0, len(raw)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(reveal(m.escape(raw[:mid]), prose=True)) + len(_ELLIPSIS) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return reveal(m.escape(raw[:lo].rstrip()), prose=True) + _ELLIPSIS


# ---------------------------------------------------------------------------
# Long text: the final answer
# ---------------------------------------------------------------------------


def text_messages(text: str, *, summary: Summary | None = None) -> list[SlackMessage]:
    """Markdown-ish model text as mrkdwn sections, split over as many messages as it needs; a final answer starts
    from the run's last living summary (its three sections first, redacted and escaped as in the status message)."""
    body = markdown_to_mrkdwn(redact(text)) or m.EMPTY_ANSWER
    sections = [
        *(summary_blocks(summary) if summary is not None else []),
        *(section(chunk) for chunk in split_mrkdwn(body)),
    ]
    return _pack(sections, header=None, first_text=_fit(body, FALLBACK_MAX), what="Answer")


OFFER_BLOCK = "offer"  # the block_id of a run-start line: what tells it from the run's answer


def offer_line(parts: Sequence[str | Link]) -> SlackMessage | None:
    """A reach's run-start line (`Similar past incidents:` and a link per incident, `Following runbook: …`): its
    text redacted, escaped and its hidden characters shown, the notification text as much as the blocks; a link
    only to an http(s) URL (else its label alone), never a mention, so nobody named in it is notified. None when
    it would show nothing (Slack refuses an empty section)."""
    shown: list[str] = []
    plain: list[str] = []
    for part in parts:
        label = part.label if isinstance(part, Link) else part
        text = reveal(m.escape(redact(label)), prose=True)
        plain.append(text)
        url = part.url if isinstance(part, Link) else ""
        if url and text.strip() and re.fullmatch(r"https?://[^\s<>|]+", url):
            shown.append(f"<{m.escape(url)}|{text}>")
        else:
            shown.append(text)
    if not "".join(plain).strip():
        return None
    return SlackMessage(text=_fit("".join(plain), FALLBACK_MAX), blocks=[section("".join(shown), OFFER_BLOCK)])


def with_feedback(msgs: list[SlackMessage], run_id: str) -> list[SlackMessage]:
    """`msgs` with the feedback buttons under the last one (in a part of its own when that one is full).

    Each button's value names the run and the way it points ("positive:run_…"): a click needs no state held by
    the process that posted it, so it counts after a restart too."""
    labels = {FeedbackValue.POSITIVE: m.FEEDBACK_POSITIVE, FeedbackValue.NEGATIVE: m.FEEDBACK_NEGATIVE}
    pair = {
        f"{way}_button": {"text": _plain(label, BUTTON_TEXT_MAX), "value": f"{way}:{run_id}"}
        for way, label in labels.items()
    }
    element = {"type": "feedback_buttons", "action_id": FEEDBACK, **pair}
    block = {"type": "context_actions", "block_id": "feedback", "elements": [element]}
    if not msgs:
        return msgs
    last = msgs[-1]
    if len(last.blocks) < MAX_BLOCKS and blocks_text([*last.blocks, block]) <= BLOCKS_TEXT_MAX:
        return [*msgs[:-1], SlackMessage(text=last.text, blocks=[*last.blocks, block])]
    return [*msgs, SlackMessage(text=m.FEEDBACK_PROMPT, blocks=[block])]


def feedback_of(value: str) -> tuple[FeedbackValue, str] | None:
    """(which way, run id) from a feedback button's value; None for anything else."""
    way, _, run_id = value.partition(":")
    if way not in {v.value for v in FeedbackValue} or not run_id.startswith("run"):
        return None
    return FeedbackValue(way), run_id


# ---------------------------------------------------------------------------
# Handoff report
# ---------------------------------------------------------------------------


def stopped_run_report(
    result: RunResult, history: Sequence[dict[str, Any]], *, max_iterations: int | None, summary: Summary | None
) -> list[SlackMessage]:
    """The handoff report of a run that stopped without its answer, as Slack and the terminal both show it."""
    return handoff_report(report_of(result, history), max_iterations=max_iterations, summary=summary)


def handoff_report(
    report: HandoffReport, *, max_iterations: int | None, summary: Summary | None = None
) -> list[SlackMessage]:
    """What an on-call engineer needs to take over a stopped run, readable at a glance: first what it believed
    and why (its last living summary, when it has one), then its conclusion (the wrap-up turn a budget's stop
    gives it), which stands in for its last findings."""
    result, u, conclusion = report.result, report.result.usage, report.conclusion
    stop_words = reveal(redact(f"{report.stop_words}. {result.stop_detail}".strip()), prose=True)
    reason = _truncate(result.stop_reason.value, NAME_MAX)
    steps = f"{result.iterations}/{max_iterations}" if max_iterations else f"{result.iterations}"
    tokens = m.report_tokens(
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        cache_read=u.cache_read_tokens,
        cache_write=u.cache_write_tokens,
    )
    fields = [(m.REPORT_ITERATIONS, steps), (m.REPORT_TOKENS, tokens), (m.REPORT_COST, m.usd(result.cost_usd))]
    fields.append((m.REPORT_WALL, m.human_duration(result.wall_seconds)))
    tool_lines = [
        m.report_tool_line(
            _truncate(reveal(t.name), NAME_MAX),
            t.calls,
            m.one_line(reveal(redact(t.last_result), prose=True), EXCERPT_MAX),
        )
        for t in report.tools
    ]
    shown = [reveal(redact(item), prose=True) for item in report.pending]
    pending_lines = [f"• {m.escape(m.one_line(item, 500))}" for item in shown if item.strip()]
    # links shown as their URLs, hidden characters revealed
    findings = markdown_to_mrkdwn(redact(conclusion or report.last_reasoning or ""))
    findings_heading = m.CONCLUSION_HEADING if conclusion else m.FINDINGS_HEADING

    def sections(text: str) -> list[dict[str, Any]]:
        return [section(chunk) for chunk in split_mrkdwn(text)]

    blocks = [
        *sections(m.report_reason(reason, stop_words)),
        *(summary_blocks(summary) if summary is not None else []),  # what it believed, right under the reason
        {"type": "section", "fields": [_text(_fit(f"{name}\n{value}", FIELD_TEXT_MAX)) for name, value in fields]},
        *sections(m.TOOLS_HEADING + "\n" + ("\n".join(tool_lines) if tool_lines else m.NO_TOOLS)),
        *sections(findings_heading + "\n" + (findings or m.NO_FINDINGS)),
        *sections(m.PENDING_HEADING + "\n" + ("\n".join(pending_lines) if pending_lines else m.NOTHING_PENDING)),
        *([context([m.stopped_by(result.stopped_by)])] if result.stopped_by else []),
    ]
    header = _header(m.report_header(reason), "report_header")
    first = _fit(m.report_fallback(reason, stop_words), FALLBACK_MAX)
    return _pack(blocks, header=header, first_text=first, what="Handoff report")


# ---------------------------------------------------------------------------
# Block helpers
# ---------------------------------------------------------------------------


def _text(text: str) -> dict[str, Any]:
    """mrkdwn, verbatim: Slack parses only the markup we wrote (links, <@U…>, <!date…>), never a plain `@channel`,
    `#channel` or bare URL in text a model or a tool wrote."""
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def _plain(text: str, limit: int) -> dict[str, Any]:
    return {"type": "plain_text", "text": _truncate(text, limit) or "-", "emoji": True}


def _header(text: str, block_id: str) -> dict[str, Any]:
    return {"type": "header", "block_id": block_id, "text": _plain(text, HEADER_MAX)}


def section(text: str, block_id: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "section", "text": _text(_fit(text, SECTION_TEXT_MAX))}
    if block_id:
        block["block_id"] = block_id
    return block


def context(lines: Sequence[str], block_id: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "context",
        "elements": [_text(_fit(line, CONTEXT_TEXT_MAX)) for line in lines[:MAX_CONTEXT_ELEMENTS]],
    }
    if block_id:
        block["block_id"] = block_id
    return block


def _button(label: str, action_id: str, value: str, *, style: str) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action_id,
        "text": _plain(label, BUTTON_TEXT_MAX),
        "value": value,
        "style": style,
    }


def _confirm(title: str, text: str, confirm: str, deny: str, *, style: str) -> dict[str, Any]:
    return {
        "title": _plain(title, CONFIRM_TITLE_MAX),
        "text": _plain(text, CONFIRM_TEXT_MAX),
        "confirm": _plain(confirm, CONFIRM_BUTTON_MAX),
        "deny": _plain(deny, CONFIRM_BUTTON_MAX),
        "style": style,
    }


def _preview_section(text: str) -> dict[str, Any]:
    """The dry run's output under its heading in a code block, cut to fit one section with a note saying how much
    was cut; a line saying it printed nothing when it printed nothing."""
    heading, block_id = m.PREVIEW_HEADING, "approval_preview"
    if not text.strip():
        return section(f"{heading}\n{m.EMPTY_PREVIEW}", block_id)
    raw = text.replace(FENCE, _BROKEN_FENCE)  # a fence inside would end the block early
    body, used = _escape_fit(raw, SECTION_TEXT_MAX - len(heading) - _FRAME)
    if used == len(raw):
        return section(_code(heading, body), block_id)
    total = len(text)
    # The note for the worst case bounds the note we will actually write.
    room = SECTION_TEXT_MAX - len(heading) - _FRAME - len(m.preview_cut(total, total)) - len("\n") - len(_ELLIPSIS)
    chunk = _code_parts(raw, room)[0][0]
    shown = len(chunk) - chunk.count("\u200b")  # in characters of `text`, before the fences were broken
    return section(_code(heading, m.escape(chunk) + _ELLIPSIS) + f"\n{m.preview_cut(total - shown, total)}", block_id)


def _code(heading: str, body: str) -> str:
    return f"{heading}\n```\n{body}\n```"


def _pack(
    blocks: list[dict[str, Any]], *, header: dict[str, Any] | None, first_text: str, what: str
) -> list[SlackMessage]:
    """Spread blocks over messages of at most MAX_BLOCKS blocks and BLOCKS_TEXT_MAX characters of text, with
    unique block_ids in each."""
    groups: list[list[dict[str, Any]]] = [[]]
    room, size = MAX_BLOCKS - (1 if header else 0), blocks_text([header] if header else [])
    for block in blocks:
        n = blocks_text([block])
        if groups[-1] and (len(groups[-1]) >= room or size + n > BLOCKS_TEXT_MAX):
            groups.append([])
            room, size = MAX_BLOCKS, 0
        groups[-1].append(block)
        size += n
    out = []
    for n, grouped in enumerate(groups, start=1):
        group = [dict(b) for b in grouped]
        for i, block in enumerate(group):
            block.setdefault("block_id", f"{block['type']}_{i}")
        if n == 1 and header:
            group.insert(0, header)
        text = first_text if n == 1 else m.continued(n, len(groups), what)
        out.append(SlackMessage(text=_truncate(text, MESSAGE_TEXT_MAX) or "-", blocks=group))
    return out


def blocks_text(blocks: Sequence[dict[str, Any]]) -> int:
    """The characters of text `blocks` hold in all: every `text` string in them, as Slack's total is counted."""

    def count(obj: Any) -> int:
        if isinstance(obj, dict):
            return sum(len(v) if k == "text" and isinstance(v, str) else count(v) for k, v in obj.items())
        if isinstance(obj, list):
            return sum(count(v) for v in obj)
        return 0

    return count(list(blocks))


# ---------------------------------------------------------------------------
# Text helpers
# ---------------------------------------------------------------------------


def _truncate(text: str, limit: int) -> str:
    """Plain text (not mrkdwn) cut to `limit` characters with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + _ELLIPSIS


def _fit(text: str, limit: int) -> str:
    """mrkdwn cut to `limit` characters without breaking an entity, mention or link."""
    if len(text) <= limit:
        return text
    end = outside_markup(text, limit - 1)
    space = text.rfind(" ", 0, end)
    if space > end * 3 // 4:
        end = space
    return text[:end].rstrip() + _ELLIPSIS


def _escape_fit(raw: str, budget: int) -> tuple[str, int]:
    """The longest prefix of `raw` whose escaped form fits `budget`: (escaped, raw chars used)."""
    size = 0
    for i, ch in enumerate(raw):
        size += _ESCAPED_LEN.get(ch, 1)
        if size > budget:
            return m.escape(raw[:i]), i
    return m.escape(raw), len(raw)


def _json(args: dict[str, Any]) -> str:
    try:
        return json.dumps(args, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(args)
