"""Block Kit validation as Slack does it: ``block_errors(blocks)`` is the list of Slack's ``invalid_blocks`` error
strings (``must be ... [json-pointer:/blocks/0/...]``), empty when the blocks are valid."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ALLOWED_BLOCK_TYPES = frozenset(
    {"section", "header", "divider", "context", "actions", "rich_text", "image", "context_actions", "markdown"}
    | {"plan", "task_card"}  # the work-object blocks of AI apps
)
_RICH_TEXT_PARTS = ("rich_text_section", "rich_text_list", "rich_text_preformatted", "rich_text_quote")
_RICH_TEXT_INLINE = ("link", "emoji", "channel", "usergroup", "date", "broadcast", "color", "rich_text_section")
# Slack refuses a message whose blocks hold more text than this in all (`msg_blocks_too_long`), though each
# block is within its own limit; reported near 12,000 characters. The stand-in counts every `text` string.
BLOCKS_TEXT_MAX = 12_000
TASK_STATUSES = ("pending", "in_progress", "complete", "error")
# Slack documents no limit for a plan's or a task card's title; the stand-in holds them to a block_id's 255.
TASK_TITLE_MAX = 255
_TEXT_TYPES = ("plain_text", "mrkdwn")


def _check_text_object(obj: Any, ptr: str, errors: list[str], *, max_len: int, plain_only: bool = False) -> None:
    if not isinstance(obj, dict):
        errors.append(f"must be an object [json-pointer:{ptr}]")
        return
    allowed = ("plain_text",) if plain_only else _TEXT_TYPES
    if obj.get("type") not in allowed:
        errors.append(f"must be a valid enum value [json-pointer:{ptr}/type]")
    text = obj.get("text")
    if not isinstance(text, str):
        errors.append(f"missing required field: text [json-pointer:{ptr}]")
    elif not text:
        errors.append(f"must be more than 0 characters [json-pointer:{ptr}/text]")
    elif len(text) > max_len:
        errors.append(f"must be less than {max_len + 1} characters [json-pointer:{ptr}/text]")
    if "verbatim" in obj and (obj.get("type") != "mrkdwn" or not isinstance(obj["verbatim"], bool)):
        errors.append(f"verbatim is only usable on a mrkdwn text object, as a boolean [json-pointer:{ptr}/verbatim]")


def _check_unique_id(obj: dict[str, Any], key: str, ptr: str, seen: dict[str, str], errors: list[str]) -> None:
    """block_id / action_id / task_id: at most 255 characters and unique within the message (a plan's tasks)."""
    value = obj.get(key)
    if value is None:
        return
    if not isinstance(value, str) or len(value) > 255:
        errors.append(f"must be less than 256 characters [json-pointer:{ptr}/{key}]")
    elif value in seen:
        errors.append(f"duplicate {key} {value!r} [json-pointer:{ptr}/{key}]")
    else:
        seen[value] = ptr


def _check_element(el: Any, ptr: str, errors: list[str], action_ids: dict[str, str]) -> None:
    """An interactive element (button or any other with an action_id)."""
    if not isinstance(el, dict):
        errors.append(f"must be an object [json-pointer:{ptr}]")
        return
    _check_unique_id(el, "action_id", ptr, action_ids, errors)
    if el.get("type") == "button":
        _check_text_object(el.get("text"), f"{ptr}/text", errors, max_len=75, plain_only=True)
        value = el.get("value")
        if value is not None and (not isinstance(value, str) or len(value) > 2000):
            errors.append(f"must be less than 2001 characters [json-pointer:{ptr}/value]")
        url = el.get("url")
        if url is not None and len(str(url)) > 3000:
            errors.append(f"must be less than 3001 characters [json-pointer:{ptr}/url]")
        style = el.get("style")
        if style is not None and style not in ("primary", "danger"):
            errors.append(f"must be a valid enum value [json-pointer:{ptr}/style]")


def _check_context_action(el: Any, ptr: str, errors: list[str], action_ids: dict[str, str]) -> None:
    """An element of a context_actions block: feedback_buttons (two buttons with text and value) or icon_button."""
    if not isinstance(el, dict) or el.get("type") not in ("feedback_buttons", "icon_button"):
        errors.append(f"must be a valid enum value [json-pointer:{ptr}/type]")
        return
    _check_unique_id(el, "action_id", ptr, action_ids, errors)
    if el["type"] == "icon_button":
        return
    for side in ("positive_button", "negative_button"):
        button = el.get(side)
        if not isinstance(button, dict):
            errors.append(f"missing required field: {side} [json-pointer:{ptr}]")
            continue
        _check_text_object(button.get("text"), f"{ptr}/{side}/text", errors, max_len=75, plain_only=True)
        value = button.get("value")
        if not isinstance(value, str) or not value or len(value) > 2000:
            errors.append(f"must be between 1 and 2000 characters [json-pointer:{ptr}/{side}/value]")


def _check_context_element(el: Any, ptr: str, errors: list[str], action_ids: dict[str, str]) -> None:
    """An element of a context block: a text object or an image."""
    if isinstance(el, dict) and el.get("type") in _TEXT_TYPES:
        _check_text_object(el, ptr, errors, max_len=3000)
    elif not (isinstance(el, dict) and el.get("type") == "image"):
        errors.append(f"must be a valid enum value [json-pointer:{ptr}/type]")


# The blocks that hold a list of elements: type -> (the most it may hold, the check of each element).
_ELEMENT_LISTS: dict[str, tuple[int, Callable[[Any, str, list[str], dict[str, str]], None]]] = {
    "context": (10, _check_context_element),
    "actions": (25, _check_element),
    "context_actions": (5, _check_context_action),
}


def _check_title(block: dict[str, Any], ptr: str, errors: list[str]) -> None:
    title = block.get("title")
    if not isinstance(title, str):
        errors.append(f"missing required field: title [json-pointer:{ptr}]")
    elif not title.strip():
        errors.append(f"must be more than 0 characters [json-pointer:{ptr}/title]")
    elif len(title) > TASK_TITLE_MAX:
        errors.append(f"must be less than {TASK_TITLE_MAX + 1} characters [json-pointer:{ptr}/title]")


def _check_rich_text(obj: Any, ptr: str, errors: list[str]) -> None:
    """A single rich_text object (a task card's details or output): rich_text_section elements of text/user."""
    if not isinstance(obj, dict) or obj.get("type") != "rich_text":
        errors.append(f"must be a rich_text object [json-pointer:{ptr}]")
        return
    elements = obj.get("elements")
    if not isinstance(elements, list) or not elements:
        errors.append(f"must provide at least 1 item [json-pointer:{ptr}/elements]")
        return
    for j, section in enumerate(elements):
        sp = f"{ptr}/elements/{j}"
        if not isinstance(section, dict) or section.get("type") not in _RICH_TEXT_PARTS:
            errors.append(f"must be a valid enum value [json-pointer:{sp}/type]")
            continue
        for k, el in enumerate(section.get("elements") or []):
            ep = f"{sp}/elements/{k}"
            etype = el.get("type") if isinstance(el, dict) else None
            if etype == "text":
                if not isinstance(el.get("text"), str) or not el["text"]:
                    errors.append(f"must be more than 0 characters [json-pointer:{ep}/text]")
            elif etype == "user":
                if not isinstance(el.get("user_id"), str) or not el["user_id"]:
                    errors.append(f"missing required field: user_id [json-pointer:{ep}]")
            elif etype not in _RICH_TEXT_INLINE:
                errors.append(f"must be a valid enum value [json-pointer:{ep}/type]")


def _check_task_card(block: Any, ptr: str, errors: list[str], task_ids: dict[str, str]) -> None:
    """A task_card, alone or in a plan: task_id, title and a known status required; details/output rich_text."""
    if not isinstance(block, dict) or block.get("type") != "task_card":
        errors.append(f"must be a task_card [json-pointer:{ptr}/type]")
        return
    task_id = block.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        errors.append(f"missing required field: task_id [json-pointer:{ptr}]")
    else:
        _check_unique_id(block, "task_id", ptr, task_ids, errors)
    _check_title(block, ptr, errors)
    status = block.get("status")
    if status is None:
        errors.append(f"missing required field: status [json-pointer:{ptr}]")
    elif status not in TASK_STATUSES:
        errors.append(f"must be a valid enum value [json-pointer:{ptr}/status]")
    for key in ("details", "output"):
        if block.get(key) is not None:
            _check_rich_text(block[key], f"{ptr}/{key}", errors)
    sources = block.get("sources")
    if sources is not None:
        if not isinstance(sources, list):
            errors.append(f"must be an array [json-pointer:{ptr}/sources]")
        else:
            for j, src in enumerate(sources):
                if not isinstance(src, dict) or src.get("type") != "url" or not src.get("url") or not src.get("text"):
                    errors.append(f"must be a url source with url and text [json-pointer:{ptr}/sources/{j}]")


def block_errors(blocks: Any) -> list[str]:
    """Slack-style ``invalid_blocks`` error strings for ``blocks`` (empty when valid).

    Each string names the problem and ends with ``[json-pointer:/blocks/...]``, as
    Slack's do. The wording follows Slack's where known; tests should match on the
    pointer and the key words, not the whole sentence.
    """
    errors: list[str] = []
    if not isinstance(blocks, list):
        return ["must be an array [json-pointer:/blocks]"]
    if len(blocks) > 50:
        errors.append("no more than 50 items allowed [json-pointer:/blocks]")
    block_ids: dict[str, str] = {}
    action_ids: dict[str, str] = {}
    for i, block in enumerate(blocks):
        ptr = f"/blocks/{i}"
        if not isinstance(block, dict):
            errors.append(f"must be an object [json-pointer:{ptr}]")
            continue
        btype = block.get("type")
        if btype is None:
            errors.append(f"missing required field: type [json-pointer:{ptr}]")
            continue
        if btype not in ALLOWED_BLOCK_TYPES:
            errors.append(f"unsupported type: {btype} [json-pointer:{ptr}/type]")
            continue
        _check_unique_id(block, "block_id", ptr, block_ids, errors)

        if btype == "section":
            text, fields = block.get("text"), block.get("fields")
            if text is None and not fields:
                errors.append(f"must define either `text` or `fields` [json-pointer:{ptr}]")
            if text is not None:
                _check_text_object(text, f"{ptr}/text", errors, max_len=3000)
            if fields is not None:
                if not isinstance(fields, list):
                    errors.append(f"must be an array [json-pointer:{ptr}/fields]")
                else:
                    if len(fields) > 10:
                        errors.append(f"no more than 10 items allowed [json-pointer:{ptr}/fields]")
                    for j, f in enumerate(fields):
                        _check_text_object(f, f"{ptr}/fields/{j}", errors, max_len=2000)
            if block.get("accessory") is not None:
                _check_element(block["accessory"], f"{ptr}/accessory", errors, action_ids)
        elif btype == "header":
            _check_text_object(block.get("text"), f"{ptr}/text", errors, max_len=150, plain_only=True)
        elif btype in _ELEMENT_LISTS:
            most, check = _ELEMENT_LISTS[btype]
            elements = block.get("elements")
            if not isinstance(elements, list) or not elements:
                errors.append(f"must provide at least 1 item [json-pointer:{ptr}/elements]")
                continue
            if len(elements) > most:
                errors.append(f"no more than {most} items allowed [json-pointer:{ptr}/elements]")
            for j, el in enumerate(elements):
                check(el, f"{ptr}/elements/{j}", errors, action_ids)
        elif btype == "markdown":
            text = block.get("text")
            if not isinstance(text, str) or not text:
                errors.append(f"missing required field: text [json-pointer:{ptr}]")
            elif len(text) > 12_000:
                errors.append(f"must be less than 12001 characters [json-pointer:{ptr}/text]")
        elif btype == "plan":
            _check_title(block, ptr, errors)
            tasks = block.get("tasks")
            if tasks is not None:
                if not isinstance(tasks, list):
                    errors.append(f"must be an array [json-pointer:{ptr}/tasks]")
                else:
                    seen_tasks: dict[str, str] = {}
                    for j, task in enumerate(tasks):
                        _check_task_card(task, f"{ptr}/tasks/{j}", errors, seen_tasks)
        elif btype == "task_card":
            _check_task_card(block, ptr, errors, {})
        elif btype == "image":
            for key in ("image_url", "alt_text"):
                if not block.get(key) and not (key == "image_url" and block.get("slack_file")):
                    errors.append(f"missing required field: {key} [json-pointer:{ptr}]")
    return errors


def blocks_text_length(blocks: Any) -> int:
    """The characters of text `blocks` hold in all (every `text` string in them), for `msg_blocks_too_long`."""
    if isinstance(blocks, dict):
        return sum(len(v) if k == "text" and isinstance(v, str) else blocks_text_length(v) for k, v in blocks.items())
    if isinstance(blocks, list):
        return sum(blocks_text_length(v) for v in blocks)
    return 0
