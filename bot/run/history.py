"""Pure functions over the Messages-API history the runtime keeps."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Sequence
from typing import Any

from bot.core.types import ToolCall

Block = dict[str, Any]


def tool_calls(content: Sequence[Block]) -> list[ToolCall]:
    return [
        ToolCall(id=b["id"], name=b["name"], args=dict(b.get("input") or {}))
        for b in content
        if b.get("type") == "tool_use"
    ]


def final_text(content: Sequence[Block]) -> str:
    return "\n\n".join(b["text"].strip() for b in content if b.get("type") == "text" and b["text"].strip())


def only_thinking(content: Sequence[Block]) -> bool:
    """No answer and no call: nothing but thinking (or nothing at all)."""
    return not tool_calls(content) and not final_text(content)


def reasoning(content: Sequence[Block]) -> str:
    """What the model said it was doing: the (summarized) thinking text of a turn, found by block type.
    Current models put text written between tool calls into thinking blocks."""
    return "\n\n".join(
        b["thinking"].strip() for b in content if b.get("type") == "thinking" and (b.get("thinking") or "").strip()
    )


def without_thinking(history: Sequence[Block]) -> list[Block]:
    """The turns with their thinking blocks removed: what stays valid under the API's prefix check
    once earlier turns were summarised (a kept thinking block would be bound to the old prefix)."""
    out = []
    for message in history:
        content = message["content"]
        if message["role"] == "assistant" and isinstance(content, list):
            content = [b for b in content if b.get("type") not in ("thinking", "redacted_thinking")]
        out.append({**message, "content": content})
    return out


def closing_results(calls: Sequence[ToolCall], results: dict[str, tuple[str, bool]], missing: str) -> list[Block]:
    """The user turn answering every call in order; calls without a result get `missing`."""
    blocks = []
    for call in calls:
        content, is_error = results.get(call.id, (missing, True))
        block: Block = {"type": "tool_result", "tool_use_id": call.id, "content": content or "(no output)"}
        if is_error:
            block["is_error"] = True
        blocks.append(block)
    return blocks


def continue_history(previous: list[Block], task: str) -> list[Block]:
    """History for a new run in a thread that already had one: the old turns, then the new task."""
    block = {"type": "text", "text": task}
    if previous and previous[-1]["role"] == "assistant" and (calls := tool_calls(previous[-1]["content"])):
        # The earlier run died between a call and its result: answer it so the history stays valid.
        results = closing_results(calls, {}, "No result: that run ended before this call finished.")
        return [*previous, {"role": "user", "content": [*results, block]}]
    if previous and previous[-1]["role"] == "user":  # ended on tool results: merge to keep roles alternating
        return [*previous[:-1], {"role": "user", "content": [*previous[-1]["content"], block]}]
    return [*previous, {"role": "user", "content": [block]}]


THINKING_BLOCKS = ("thinking", "redacted_thinking")


def keep_complete_calls(content: list[Block], stop_reason: str | None) -> list[Block]:
    """A reply cut off by max_tokens may end in a tool_use with half its input: drop it. Whitespace-only text
    blocks go too (the API refuses them back); any thinking after one is bound to it, so it goes as well."""
    if stop_reason == "max_tokens" and content and content[-1].get("type") == "tool_use":
        content = content[:-1]
    out: list[Block] = []
    edited = False
    for b in content:
        if b.get("type") == "text" and not b.get("text", "").strip():
            edited = True
        elif not (edited and b.get("type") in THINKING_BLOCKS):
            out.append(b)
    return out


_NAME_KEYS = ("name", "tool", "tool_name")
_ARG_KEYS = ("input", "arguments", "args", "parameters")


def recover_json_tool_calls(content: list[Block], *, known: Iterable[Any]) -> list[Block]:
    """Turn a tool call the model wrote as JSON text into a real tool_use block.

    Only when the reply has no tool_use at all, and only for a name in the registry.
    """
    if any(b.get("type") == "tool_use" for b in content):
        return content
    names = {t.name for t in known}
    out: list[Block] = []
    found = 0
    for block in content:
        if block.get("type") != "text":
            if not (found and block.get("type") in THINKING_BLOCKS):  # bound to the text rewritten before it
                out.append(block)
            continue
        text, calls = _extract_calls(block["text"], names)
        if text.strip():
            out.append({"type": "text", "text": text.strip()})
        for name, args in calls:
            found += 1
            # Unique per call: a reused id would answer a second call with the first one's result.
            out.append(
                {"type": "tool_use", "id": f"toolu_recovered_{secrets.token_hex(8)}", "name": name, "input": args}
            )
    return out if found else content


def _extract_calls(text: str, names: set[str]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    decoder = json.JSONDecoder()
    calls: list[tuple[str, dict[str, Any]]] = []
    kept: list[str] = []
    i = 0
    while (start := text.find("{", i)) != -1:
        try:
            obj, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            kept.append(text[i : start + 1])
            i = start + 1
            continue
        fields = obj if isinstance(obj, dict) else {}
        name = next((fields[k] for k in _NAME_KEYS if isinstance(fields.get(k), str)), None)
        args: dict[str, Any] = next((fields[k] for k in _ARG_KEYS if isinstance(fields.get(k), dict)), {})
        if name in names:
            calls.append((name, args))
            kept.append(text[i:start])
        else:
            kept.append(text[i:end])
        i = end
    kept.append(text[i:])
    cleaned = "".join(kept)
    if calls:  # drop the code fences that held the JSON
        cleaned = cleaned.replace("```json", "").replace("```", "")
    return cleaned, calls


def split_for_condensing(history: Sequence[Block], keep: int = 4) -> int | None:
    """Index where the kept tail starts: an assistant turn, so roles still alternate and every
    tool_use in the tail keeps its tool_result. None when there is nothing older to condense."""
    for i in range(max(1, len(history) - keep), len(history)):
        if history[i]["role"] == "assistant" and i >= 2:
            return i
    for i in range(len(history) - 1, 1, -1):
        if history[i]["role"] == "assistant":
            return i
    return None


FIRST_LINE_MAX = 500  # a result's first line (its handle) kept whole up to this


def first_line(text: str) -> str:
    """A result's first line as condensation keeps it: verbatim, bounded (a one-line blob is not a handle)."""
    return text if len(text) <= FIRST_LINE_MAX else text[:FIRST_LINE_MAX] + " …"


def result_text(content: Any) -> str:
    """A tool_result's content as text: a string as it is, a list of blocks by their text."""
    if isinstance(content, list):
        return "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
    return str(content or "")


def transcript(history: Sequence[Block], per_block: int = 2000) -> str:
    """A plain-text rendering of turns for the condensation request; a result's first line is never cut."""
    lines = []
    for message in history:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for b in content:
            kind = b.get("type")
            if kind == "text":
                body = b["text"]
            elif kind == "tool_use":
                body = f"called {b['name']}({json.dumps(b.get('input') or {})})"
            elif kind == "tool_result":
                head, _, rest = result_text(b.get("content")).partition("\n")  # its first line: never cut
                lines.append(f"{message['role']}: result{' (error)' if b.get('is_error') else ''}: {first_line(head)}")
                if not rest:
                    continue
                body = rest
            else:
                continue
            if len(body) > per_block:
                body = body[:per_block] + f" … [{len(body) - per_block} chars cut]"
            lines.append(f"{message['role']}: {body}")
    return "\n".join(lines)
