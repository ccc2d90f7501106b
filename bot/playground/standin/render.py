"""Slack messages as people read them: Block Kit and mrkdwn turned into plain parts.

Shared by `opsloop demo` (a terminal transcript) and `opsloop sandbox` (a web page):
both show what opsloop posted without a Slack client. Pure functions, no I/O.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.playground.standin.slack import Message
from handlers.mrkdwn import plain as mrkdwn_plain

EMOJI = {
    "eyes": "👀",
    "white_check_mark": "✅",
    "hourglass_flowing_sand": "⏳",
    "hourglass": "⌛",
    "raised_hand": "✋",
    "warning": "⚠️",
    "rotating_light": "🚨",
    "no_entry_sign": "🚫",
    "octagonal_sign": "🛑",
    "leftwards_arrow_with_hook": "↩️",
}


class Kind(enum.StrEnum):
    """What a message is to the reader of the thread."""

    PERSON = "person"
    STATUS = "status"
    CARD = "card"
    NOTE = "note"  # a run-start line (`Following runbook: …`): said before the answer, never it
    ANSWER = "answer"


class PartKind(enum.StrEnum):
    HEADER = "header"
    TEXT = "text"
    CODE = "code"
    CONTEXT = "context"
    BUTTONS = "buttons"
    TASKS = "tasks"  # a plan block's task cards


TASK_ICONS = {"pending": "○", "in_progress": "◐", "complete": "✓", "error": "✕"}


@dataclass(frozen=True, kw_only=True)
class Button:
    text: str
    action_id: str
    style: str | None = None
    confirm: tuple[str, str, str, str] | None = None  # title, text, confirm, deny
    value: str | None = None  # a feedback button's value ("positive:run_…")


@dataclass(frozen=True, kw_only=True)
class TaskView:
    """One task card of a plan: its title, status (pending | in_progress | complete | error) and output."""

    task_id: str
    title: str
    status: str
    output: str = ""


@dataclass(frozen=True, kw_only=True)
class Part:
    kind: PartKind
    text: str = ""
    buttons: tuple[Button, ...] = ()
    tasks: tuple[TaskView, ...] = ()


@dataclass(frozen=True, kw_only=True)
class MessageView:
    """One message, ready to print or to send to the sandbox page."""

    ts: str
    thread_ts: str | None
    author: str  # "@alice", "opsloop"
    kind: Kind
    parts: tuple[Part, ...]
    state: str = ""  # a card's approval state, a status message's run state
    edited: bool = False
    reactions: tuple[str, ...] = field(default=())
    stream: str = ""  # a streamed answer's state: "streaming" | "stopped" | "expired" ("" when not streamed)

    def text(self) -> str:
        """Every readable line, buttons excluded (what a test or a search looks at)."""
        return "\n".join(p.text for p in self.parts if p.kind != PartKind.BUTTONS)

    def to_json(self) -> dict[str, Any]:
        """As the sandbox page reads it (enums are strings, tuples lists once in JSON)."""
        return dataclasses.asdict(self)


def blocks_parts(blocks: list[dict[str, Any]], names: Mapping[str, str]) -> list[Part]:
    """Any surface's blocks (a message's, a Home tab's) as parts."""
    return [p for b in blocks for p in _block_parts(b, names)]


def plain(mrkdwn: str, names: Mapping[str, str], *, bare_ids: bool = True) -> str:
    """mrkdwn -> what a person reads: mentions by name, dates by their fallback, emoji, no markup."""
    return mrkdwn_plain(mrkdwn, names, emoji=EMOJI, bare_ids=bare_ids)


def _split_code(text: str) -> list[Part]:
    """Text and ``` fenced code as separate parts."""
    parts: list[Part] = []
    for i, raw in enumerate(text.split("```")):
        chunk = raw.strip("\n")
        if chunk.strip():
            parts.append(Part(kind=PartKind.CODE if i % 2 else PartKind.TEXT, text=chunk))
    return parts


def _button(el: dict[str, Any], names: Mapping[str, str]) -> Button:
    confirm = el.get("confirm")
    dialog = None
    if isinstance(confirm, dict):
        dialog = tuple(
            plain(str((confirm.get(k) or {}).get("text", "")), names) for k in ("title", "text", "confirm", "deny")
        )
    return Button(
        text=str((el.get("text") or {}).get("text", "")),
        action_id=str(el.get("action_id", "")),
        style=el.get("style"),
        confirm=dialog,  # type: ignore[arg-type]
    )


def rich_text(obj: Any, names: Mapping[str, str]) -> str:
    """A rich_text object's words: text as written, users as @name, links as their text."""
    out: list[str] = []
    for section in (obj or {}).get("elements") or [] if isinstance(obj, dict) else []:
        for el in section.get("elements") or [] if isinstance(section, dict) else []:
            if not isinstance(el, dict):
                continue
            if el.get("type") == "user":
                out.append("@" + names.get(str(el.get("user_id")), str(el.get("user_id"))))
            elif el.get("type") == "usergroup":
                out.append("@" + str(el.get("usergroup_id")))
            else:
                out.append(str(el.get("text") or el.get("url") or ""))
    return "".join(out)


def _task(card: dict[str, Any], names: Mapping[str, str]) -> TaskView:
    return TaskView(
        task_id=str(card.get("task_id", "")),
        title=str(card.get("title", "")),
        status=str(card.get("status", "pending")),
        output=rich_text(card.get("output"), names),
    )


def _feedback(el: dict[str, Any]) -> tuple[Button, ...]:
    return tuple(
        Button(
            text=str((el.get(side) or {}).get("text", {}).get("text", "")) or icon,
            action_id=str(el.get("action_id", "")),
            style=side.split("_")[0],
            value=str((el.get(side) or {}).get("value", "")),
        )
        for side, icon in (("positive_button", "👍"), ("negative_button", "👎"))
    )


def _block_parts(block: dict[str, Any], names: Mapping[str, str]) -> list[Part]:
    btype = block.get("type")
    if btype in ("plan", "task_card"):
        cards = block.get("tasks") or [] if btype == "plan" else [block]
        tasks = tuple(_task(c, names) for c in cards if isinstance(c, dict))
        lines = [f"{TASK_ICONS.get(t.status, '·')} {t.title}" + (f" — {t.output}" if t.output else "") for t in tasks]
        title = str(block.get("title") or "") if btype == "plan" else ""
        return [Part(kind=PartKind.TASKS, text="\n".join([title, *lines] if title else lines), tasks=tasks)]
    if btype == "context_actions":
        buttons = tuple(
            b
            for e in block.get("elements") or []
            if isinstance(e, dict) and e.get("type") == "feedback_buttons"
            for b in _feedback(e)
        )
        return [Part(kind=PartKind.BUTTONS, buttons=buttons)] if buttons else []
    if btype == "markdown":
        return _split_code(str(block.get("text") or ""))
    if btype == "header":
        return [Part(kind=PartKind.HEADER, text=plain(block["text"]["text"], names))]
    if btype == "section":
        parts = _split_code(plain(block["text"]["text"], names)) if block.get("text") else []
        fields = [plain(f.get("text", ""), names).replace("\n", ": ", 1) for f in block.get("fields") or []]
        if fields:
            parts.append(Part(kind=PartKind.TEXT, text="\n".join(fields)))
        return parts
    if btype == "context":
        texts = [plain(e.get("text", ""), names) for e in block.get("elements") or [] if e.get("text")]
        return [Part(kind=PartKind.CONTEXT, text=" · ".join(texts))]
    if btype == "actions":
        buttons = tuple(_button(e, names) for e in block.get("elements") or [] if e.get("type") == "button")
        return [Part(kind=PartKind.BUTTONS, buttons=buttons)] if buttons else []
    return []


def _block_ids(msg: Message) -> list[str]:
    return [b.get("block_id", "") for b in msg.blocks or []]


def kind_of(msg: Message, bot_user_id: str) -> Kind:
    if msg.user != bot_user_id:
        return Kind.PERSON
    ids = _block_ids(msg)
    if "status" in ids:
        return Kind.STATUS
    if "approval_header" in ids:
        return Kind.CARD
    if "offer" in ids:  # handlers.blocks.OFFER_BLOCK
        return Kind.NOTE
    return Kind.ANSWER


def _card_title(msg: Message) -> str:
    header = next((b for b in msg.blocks or [] if b.get("block_id") == "approval_header"), None)
    return str((header or {}).get("text", {}).get("text", ""))


def card_state(msg: Message) -> str:
    """pending | approved | denied | expired | superseded, from the card's buttons and header."""
    if "approval_actions" in _block_ids(msg):
        return "pending"
    title = _card_title(msg).lower()
    return next((s for s in ("approved", "denied", "expired", "superseded") if title.startswith(s)), "decided")


def card_tool(msg: Message) -> str:
    """The tool a card asks about (from its header, 'Approval needed: clean_logs')."""
    return _card_title(msg).rsplit(": ", 1)[-1].strip()


def view(msg: Message, *, names: Mapping[str, str], bot_user_id: str, reactions: tuple[str, ...] = ()) -> MessageView:
    """A stored message as a MessageView (names: user id -> display name, the bot included)."""
    kind = kind_of(msg, bot_user_id)
    said = _split_code(plain(msg.text, names, bare_ids=False)) or [Part(kind=PartKind.TEXT)]
    stream = str((msg.stream or {}).get("state") or "")  # "streaming" | "stopped" | "expired"; "": never streamed
    if stream and msg.edited is None:  # a streamed answer: its text as it grows, then what stopStream added
        parts = said + blocks_parts(msg.blocks or [], names)
    else:
        parts = said if kind == Kind.PERSON or not msg.blocks else blocks_parts(msg.blocks, names)
    state = ""
    if kind == Kind.CARD:
        state = card_state(msg)
    elif kind == Kind.STATUS:
        state = "running" if "status_actions" in _block_ids(msg) else "finished"
    author = names.get(msg.user or "", msg.user or msg.bot_id or "?")
    return MessageView(
        ts=msg.ts,
        thread_ts=msg.thread_ts,
        author=author if kind != Kind.PERSON else "@" + author,
        kind=kind,
        parts=tuple(parts),
        state=state,
        edited=msg.edited is not None,
        reactions=reactions,
        stream=stream,
    )
