"""Pure Block Kit builders for every message opsloop posts, and the action_ids its buttons carry.

No I/O and no Slack imports: each builder takes plain values and returns `SlackMessage`s
whose blocks stay inside Slack's limits, so `chat.postMessage` never answers
`invalid_blocks`, `no_text` or `msg_too_long`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from handlers import messages as m

APPROVE = "opsloop.approve"
DENY = "opsloop.deny"
STOP = "opsloop.stop"

# Slack's limits (see LIBRARIES.md): exceeding any of them gets `invalid_blocks`.
SECTION_TEXT_MAX = 3000
HEADER_MAX = 150
BUTTON_TEXT_MAX = 75
BUTTON_VALUE_MAX = 2000
MAX_BLOCKS = 50
MESSAGE_TEXT_MAX = 40000
FIELD_TEXT_MAX = 2000
MAX_FIELDS = 10
CONTEXT_TEXT_MAX = 3000
MAX_CONTEXT_ELEMENTS = 10
MAX_ACTION_ELEMENTS = 25
ID_MAX = 255
CONFIRM_TITLE_MAX = 100
CONFIRM_TEXT_MAX = 300
CONFIRM_BUTTON_MAX = 30

# Our own bounds, chosen for reading at a glance.
FALLBACK_MAX = 300
EXCERPT_MAX = 300
NAME_MAX = 100

APPROVAL_STATES = ("pending", "approved", "denied", "expired", "superseded")
RUN_STATES = ("running", "waiting_approval", "finished")

_ELLIPSIS = "…"
_ESCAPED_LEN = {"&": 5, "<": 4, ">": 4}
_FENCE = "```"
_REOPEN = "```\n"
_RECLOSE = "\n```"
_BROKEN_FENCE = "``\u200b`"  # zero-width space: shows as ``` but cannot close a code block


@dataclass(frozen=True)
class SlackMessage:
    """One chat.postMessage/chat.update payload: notification text plus blocks."""

    text: str
    blocks: list[dict[str, Any]]


# ---------------------------------------------------------------------------
# Approval card
# ---------------------------------------------------------------------------


def approval_card(
    *,
    approval_id: str,
    tool: str,
    category: str,
    args: dict[str, Any],
    preview: str | None,
    requester: str | None,
    state: str,
    required: int = 1,
    approvals: Sequence[str] = (),
    decided_by: str | None = None,
    reason: str | None = None,
    expires_at: float | None = None,
    decided_at: float | None = None,
) -> SlackMessage:
    """The card for one confirm-gated call: buttons while pending, who decided once decided."""
    if not approval_id or len(approval_id) > BUTTON_VALUE_MAX:
        raise ValueError(f"approval_id must be 1..{BUTTON_VALUE_MAX} characters, got {len(approval_id)}")
    if state not in APPROVAL_STATES:
        raise ValueError(f"unknown approval state {state!r}")
    short_tool = _truncate(tool, NAME_MAX)
    blocks: list[dict[str, Any]] = [
        _header(m.approval_heading(state, short_tool), "approval_header"),
        _section(m.approval_summary(tool=short_tool, category=category, requester=requester), "approval_summary"),
        _code_section(
            m.ARGUMENTS_HEADING, _json(args), lambda shown, total, cut: m.arguments_cut(shown, total), "approval_args"
        ),
    ]
    if preview is not None:
        if preview.strip():
            blocks.append(
                _code_section(
                    m.PREVIEW_HEADING, preview, lambda shown, total, cut: m.preview_cut(cut, total), "approval_preview"
                )
            )
        else:
            blocks.append(_section(f"{m.PREVIEW_HEADING}\n{m.EMPTY_PREVIEW}", "approval_preview"))
    if state == "pending":
        notes = []
        if required > 1:
            notes.append(m.approval_progress(approvals, required))
        if expires_at is not None:
            notes.append(m.approval_expires(expires_at))
        if notes:
            blocks.append(_context(notes, "approval_status"))
        approve = _button(m.APPROVE_BUTTON, APPROVE, approval_id, style="primary")
        if category == "destructive":
            approve["confirm"] = _confirm(*m.destructive_confirm(short_tool), style="danger")
        blocks.append(
            {
                "type": "actions",
                "block_id": "approval_actions",
                "elements": [approve, _button(m.DENY_BUTTON, DENY, approval_id, style="danger")],
            }
        )
    else:
        line = m.approval_decided(
            state=state, decided_by=decided_by, approvals=approvals, reason=reason, decided_at=decided_at
        )
        blocks.append(_context([line], "approval_decision"))
    return SlackMessage(text=m.approval_fallback(state=state, tool=short_tool, category=category), blocks=blocks)


# ---------------------------------------------------------------------------
# Status message
# ---------------------------------------------------------------------------


def status_message(
    *,
    state: str,
    step: int,
    activity: str,
    tokens: int,
    cost_usd: float,
    run_id: str,
    max_iterations: int | None = None,
) -> SlackMessage:
    """The one status line a run keeps updating, with a Stop button until it finishes."""
    if not run_id or len(run_id) > BUTTON_VALUE_MAX:
        raise ValueError(f"run_id must be 1..{BUTTON_VALUE_MAX} characters, got {len(run_id)}")
    if state not in RUN_STATES:
        raise ValueError(f"unknown run state {state!r}")
    line = m.status_line(
        state=state,
        step=step,
        max_iterations=max_iterations,
        activity=_one_line(activity, EXCERPT_MAX),
        tokens=tokens,
        cost_usd=cost_usd,
    )
    blocks: list[dict[str, Any]] = [
        _section(line, "status"),
        _context([m.status_context(_truncate(run_id, NAME_MAX))], "status_run"),
    ]
    if state != "finished":
        stop = _button(m.STOP_BUTTON, STOP, run_id, style="danger")
        stop["confirm"] = _confirm(*m.STOP_CONFIRM, style="danger")
        blocks.append({"type": "actions", "block_id": "status_actions", "elements": [stop]})
    return SlackMessage(text=_fit(line, FALLBACK_MAX), blocks=blocks)


# ---------------------------------------------------------------------------
# Long text: the final answer
# ---------------------------------------------------------------------------


def text_messages(text: str, *, title: str | None = None) -> list[SlackMessage]:
    """Markdown-ish model text as mrkdwn sections, split over as many messages as it needs."""
    body = markdown_to_mrkdwn(text) or m.EMPTY_ANSWER
    sections = [_section(chunk) for chunk in split_mrkdwn(body)]
    header = _header(title, "title") if title and title.strip() else None
    first = m.escape(_truncate(title, FALLBACK_MAX)) if header and title else _fit(body, FALLBACK_MAX)
    what = m.escape(_truncate(title, NAME_MAX)) if title else "Answer"
    return _pack(sections, header=header, first_text=first, what=what)


# ---------------------------------------------------------------------------
# Handoff report
# ---------------------------------------------------------------------------


def handoff_report(
    *,
    stop_reason: str,
    stop_words: str,
    iterations: int,
    max_iterations: int | None,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int,
    cache_write_tokens: int,
    cost_usd: float,
    wall_seconds: float,
    tools: Sequence[tuple[str, int, str]],
    last_reasoning: str | None,
    pending: Sequence[str],
    stopped_by: str | None = None,
) -> list[SlackMessage]:
    """What an on-call engineer needs to take over a stopped run, readable at a glance."""
    fields = [
        f"{m.REPORT_ITERATIONS}\n{iterations}/{max_iterations}"
        if max_iterations
        else f"{m.REPORT_ITERATIONS}\n{iterations}",
        f"{m.REPORT_TOKENS}\n"
        + m.report_tokens(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read=cache_read_tokens,
            cache_write=cache_write_tokens,
        ),
        f"{m.REPORT_COST}\n{m.usd(cost_usd)}",
        f"{m.REPORT_WALL}\n{m.human_duration(wall_seconds)}",
    ]
    tool_lines = [
        m.report_tool_line(_truncate(name, NAME_MAX), times, _one_line(excerpt or "", EXCERPT_MAX))
        for name, times, excerpt in tools
    ]
    pending_lines = [f"• {m.escape(_one_line(item, 500))}" for item in pending if item.strip()]
    findings = markdown_to_mrkdwn(last_reasoning or "")

    sections: list[dict[str, Any]] = []
    for part in (
        m.report_reason(_truncate(stop_reason, NAME_MAX), stop_words),
        None,  # the fields section goes here
        m.TOOLS_HEADING + "\n" + ("\n".join(tool_lines) if tool_lines else m.NO_TOOLS),
        m.FINDINGS_HEADING + "\n" + (findings or m.NO_FINDINGS),
        m.PENDING_HEADING + "\n" + ("\n".join(pending_lines) if pending_lines else m.NOTHING_PENDING),
    ):
        if part is None:
            sections.append({"type": "section", "fields": [_text(_fit(f, FIELD_TEXT_MAX)) for f in fields]})
        else:
            sections.extend(_section(chunk) for chunk in split_mrkdwn(part))
    if stopped_by:
        sections.append(_context([m.stopped_by(stopped_by)]))
    header = _header(m.report_header(_truncate(stop_reason, NAME_MAX)), "report_header")
    first = _fit(m.report_fallback(_truncate(stop_reason, NAME_MAX), stop_words), FALLBACK_MAX)
    return _pack(sections, header=header, first_text=first, what="Handoff report")


# ---------------------------------------------------------------------------
# Markdown -> mrkdwn, and the splitter
# ---------------------------------------------------------------------------

_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
_BULLET = re.compile(r"^(\s*)[*+-]\s+(?=\S)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_LINK = re.compile(r"\[([^\]\n|]+)\]\((https?://[^\s)|]+)\)")
_INLINE_CODE = re.compile(r"(`[^`\n]+`)")
_LANG = re.compile(r"^[\w+#.-]*$")


def markdown_to_mrkdwn(markdown: str) -> str:
    """Escape, then translate the Markdown a model writes into Slack mrkdwn; code fences go on their own lines."""
    out: list[str] = []
    in_fence = False
    for line in m.escape(markdown.replace("\r\n", "\n")).split("\n"):
        stripped = line.strip()
        if _is_fence(line, in_fence):
            rest = stripped[len(_FENCE) :]
            out.append(_FENCE)
            if not in_fence and not _LANG.match(rest):
                out.append(rest)  # Slack style "```code" on the opening line
            elif in_fence and rest.strip():
                out.append(_inline(rest))
            in_fence = not in_fence
        elif in_fence:
            out.append(line)
        else:
            out.append(_inline(line))
    if in_fence:
        out.append(_FENCE)
    return "\n".join(out).strip()


def split_mrkdwn(text: str, limit: int = SECTION_TEXT_MAX) -> list[str]:
    """Non-empty chunks of at most `limit` characters, cut at a paragraph, line or word.

    A cut inside a code fence closes the fence and the next chunk re-opens it.
    """
    if limit < 40:
        raise ValueError("limit too small to split into readable chunks")
    chunks: list[str] = []
    rest = text.strip()
    in_fence = False  # fence state as Slack will see it: each chunk starts a new line
    while rest:
        prefix = _REOPEN if in_fence else ""
        last = prefix + rest + (_RECLOSE if _fence_state_after(rest, in_fence) else "")
        if len(last) <= limit:
            _append_chunk(chunks, last)
            break
        end, start = _cut_point(rest, limit - len(prefix) - len(_RECLOSE))
        fenced = _fence_state_after(rest[:end], in_fence)
        if fenced:
            end, start, fenced = _keep_fences_whole(rest, end, start, in_fence, limit - len(prefix))
        _append_chunk(chunks, prefix + rest[:end].rstrip() + (_RECLOSE if fenced else ""))
        rest = rest[start:] if fenced else rest[start:].lstrip("\n")
        in_fence = fenced
    return chunks


def _inline(line: str) -> str:
    heading = _HEADING.match(line)
    if heading and heading.group(1):
        return "*" + heading.group(1).replace("**", "") + "*"
    line = _BULLET.sub(r"\1• ", line)
    parts = _INLINE_CODE.split(line)
    for i in range(0, len(parts), 2):  # even parts are outside `inline code`
        part = _BOLD.sub(r"*\1*", parts[i])
        part = _STRIKE.sub(r"~\1~", part)
        parts[i] = _LINK.sub(r"<\2|\1>", part)
    return "".join(parts)


def _is_fence(line: str, in_fence: bool) -> bool:
    stripped = line.strip()
    if not stripped.startswith(_FENCE):
        return False
    # "```code```" on one line is a code span, not a fence.
    return in_fence or not (len(stripped) > 2 * len(_FENCE) and stripped.endswith(_FENCE))


def _fence_state_after(text: str, in_fence: bool) -> bool:
    for line in text.split("\n"):
        if _is_fence(line, in_fence):
            in_fence = not in_fence
    return in_fence


def _keep_fences_whole(rest: str, end: int, start: int, in_fence: bool, room: int) -> tuple[int, int, bool]:
    """Move a cut that would leave an empty code block: carry a closing fence back or an opening one forward.

    Returns (end, start, still inside a fence at the cut).
    """
    line_end = rest.find("\n", start)
    line_end = len(rest) if line_end == -1 else line_end
    at_line_break = "\n" in rest[end:start]
    if at_line_break and _is_fence(rest[start:line_end], True) and line_end <= room:
        return line_end, min(line_end + 1, len(rest)), False
    line_start = rest.rfind("\n", 0, end) + 1
    if (
        line_start > 0
        and _is_fence(rest[line_start:end], False)
        and not _fence_state_after(rest[: line_start - 1], in_fence)
    ):
        return line_start - 1, line_start, False
    return end, start, True


def _cut_point(text: str, budget: int) -> tuple[int, int]:
    """(end of this chunk, start of the next): the last paragraph, line or word break that fits."""
    window = text[: budget + 1]
    for sep, floor in (("\n\n", budget // 2), ("\n", budget // 4), (" ", budget // 4), ("\n", 1), (" ", 1)):
        pos = window.rfind(sep)
        if pos >= floor:
            end = _outside_markup(text, pos)
            if end > 0:
                start = end + len(sep) if end == pos else end
                return end, start
    end = _outside_markup(text, budget)
    if end <= 0:
        end = budget
    return end, end


def _outside_markup(text: str, pos: int) -> int:
    """Move a cut back so it does not fall inside an `&amp;` entity or a `<…>` link/mention we built."""
    amp = text.rfind("&", max(0, pos - 4), pos)
    if amp != -1 and ";" not in text[amp:pos]:
        pos = amp
    lt = text.rfind("<", 0, pos)
    if lt != -1 and ">" not in text[lt:pos]:
        pos = lt
    return pos


def _append_chunk(chunks: list[str], chunk: str) -> None:
    if chunk.replace(_FENCE, "").strip():
        chunks.append(chunk)


# ---------------------------------------------------------------------------
# Block helpers
# ---------------------------------------------------------------------------


def _text(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text}


def _plain(text: str, limit: int) -> dict[str, Any]:
    return {"type": "plain_text", "text": _truncate(text, limit) or "-", "emoji": True}


def _header(text: str, block_id: str) -> dict[str, Any]:
    return {"type": "header", "block_id": block_id, "text": _plain(text, HEADER_MAX)}


def _section(text: str, block_id: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "section", "text": _text(_fit(text, SECTION_TEXT_MAX))}
    if block_id:
        block["block_id"] = block_id
    return block


def _context(lines: Sequence[str], block_id: str | None = None) -> dict[str, Any]:
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


def _code_section(heading: str, text: str, note: Callable[[int, int, int], str], block_id: str) -> dict[str, Any]:
    """A heading and a code block, cut to fit one section with a note saying how much was cut."""
    raw = text.replace(_FENCE, _BROKEN_FENCE)  # a fence inside would end the block early
    frame = len(heading) + len("\n```\n") + len("\n```")
    body, used = _escape_fit(raw, SECTION_TEXT_MAX - frame)
    if used == len(raw):
        return _section(f"{heading}\n```\n{body}\n```", block_id)
    total = len(text)
    # The note for the worst case bounds the note we will actually write.
    room = SECTION_TEXT_MAX - frame - len(note(total, total, total)) - len("\n") - len(_ELLIPSIS)
    body, used = _escape_fit(raw, room)
    line_end = raw.rfind("\n", 0, used)
    if line_end > used * 4 // 5:  # end on a whole line when that costs little
        used = line_end
        body = m.escape(raw[:used])
    shown = used - raw[:used].count("\u200b")  # in characters of `text`, before the fences were broken
    return _section(f"{heading}\n```\n{body}{_ELLIPSIS}\n```\n{note(shown, total, total - shown)}", block_id)


def _pack(
    blocks: list[dict[str, Any]], *, header: dict[str, Any] | None, first_text: str, what: str
) -> list[SlackMessage]:
    """Spread blocks over messages of at most MAX_BLOCKS, with unique block_ids in each."""
    first_room = MAX_BLOCKS - (1 if header else 0)
    groups = [blocks[:first_room]]
    groups += [blocks[i : i + MAX_BLOCKS] for i in range(first_room, len(blocks), MAX_BLOCKS)]
    out = []
    for n, group in enumerate(groups, start=1):
        group = [dict(b) for b in group]
        for i, block in enumerate(group):
            block.setdefault("block_id", f"{block['type']}_{i}")
        if n == 1 and header:
            group.insert(0, header)
        text = first_text if n == 1 else m.continued(n, len(groups), what)
        out.append(SlackMessage(text=_truncate(text, MESSAGE_TEXT_MAX) or "-", blocks=group))
    return out


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
    end = _outside_markup(text, limit - 1)
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


def _one_line(text: str, limit: int) -> str:
    """Whitespace collapsed and cut to `limit` characters: for excerpts inside a line."""
    return _truncate(" ".join(text.split()), limit)


def _json(args: dict[str, Any]) -> str:
    try:
        return json.dumps(args, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(args)
