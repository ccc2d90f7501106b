"""One reader for the JSON bodies the webhooks take from outside (Alertmanager now, `POST /changes` next): bounded
in size by the caller and in nesting here, so a hostile body is a clear 400, never a RecursionError (a 500 and a
traceback) or a parser left to recurse as deep as the attacker likes."""

from __future__ import annotations

import json
import re
from typing import Any

from bot.core.errors import OpsloopError

MAX_DEPTH = 64  # objects and arrays inside one another; real payloads nest 4 or 5 deep
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # NUL, and a surrogate (JSON pairs the valid ones: any left is lone)

# A JSON string (escapes included), or a bracket that opens or closes a level: brackets inside strings don't count.
_TOKENS = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[\[\]{}]', re.DOTALL)


class BadJson(OpsloopError):
    """A body that is not JSON, or nests deeper than MAX_DEPTH: the sender's mistake (400), nothing stored."""


def read_json(body: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in `body`; BadJson (saying why) when it is not JSON or nests deeper than `max_depth`.

    The depth is checked in one linear pass before json parses (json's decoder recurses per level)."""
    depth = 0
    for token in _TOKENS.finditer(body):
        c = token.group()
        if c in (b"[", b"{"):
            depth += 1
            if depth > max_depth:
                raise BadJson(f"body nests deeper than {max_depth} levels")
        elif c in (b"]", b"}"):
            depth -= 1
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadJson("body is not JSON") from None


def unstorable(text: str) -> str | None:
    """Why `text` can't be stored as it is (a NUL, which Postgres refuses; a lone surrogate, which SQLite and
    Postgres refuse), or None. A body holding one is the sender's error (400), never a store failure (503) that
    the sender would retry forever."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\0":
        return "contains a NUL character"
    return f"contains a lone UTF-16 surrogate (U+{ord(found.group()):04X}), which is not valid Unicode"


def first_unstorable(value: Any, where: str = "") -> str | None:
    """`where: why` for the first string in `value` (keys included) that can't be stored, or None."""
    if isinstance(value, str):
        why = unstorable(value)
        return f"{where or 'body'}: {why}" if why else None
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{where}.{key}" if where else str(key)
            found = first_unstorable(key, f"{inner} (the key)") or first_unstorable(item, inner)
            if found:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            if found := first_unstorable(item, f"{where}[{i}]"):
                return found
    return None
