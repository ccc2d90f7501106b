"""What every table group shares: placeholders, NUL-safe parameters, ids, and rows decoded into records."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import secrets
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from bot.core.types import ACTIVE_STATUSES, Run, Usage

ACTIVE_STATES: tuple[str, ...] = tuple(s.value for s in ACTIVE_STATUSES)
# Everything written is redacted here, at the boundary, except what must round-trip byte-exact to the
# Messages API: the run's fixed system prompt and tool schemas, and the message history (the runtime
# redacts what *enters* the history; assistant turns are stored exactly as the API returned them).
_EXACT_RUN_FIELDS = frozenset({"system", "tools"})


def _marks(values: Sequence[Any]) -> str:
    """SQL placeholders for an IN list; a never-matching NULL when it is empty."""
    return ", ".join("?" for _ in values) or "NULL"


def _no_nul(params: list[Any]) -> list[Any]:
    """NUL characters (a log padded by a crash, binary output) as U+FFFD, on both backends alike: Postgres text
    refuses them, and a tool's output must never fail the write that records it. JSON columns escape them."""
    return [p.replace("\x00", "\ufffd") if isinstance(p, str) and "\x00" in p else p for p in params]


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


R = TypeVar("R")


def _decode(cls: type[R], row: Mapping[str, Any], **given: Any) -> R:
    """A record of `cls` (a dataclass of bot.core.types) from its row: each field from the column of its name,
    JSON columns (lists, dicts, tuples) parsed, enums and flags made from their values. NULL (and an empty JSON
    column) is the field's default, or None where the field may be None, or its type's zero ("", 0, {}).
    `given`: fields made by the caller."""
    values = dict(given)
    for name, convert, fallback in _columns(typing.cast("type", cls)):
        if name in values or name not in row:
            continue
        raw = row[name]
        if raw is None or (raw == "" and convert is not str):
            if fallback is not _DEFAULT:
                values[name] = fallback
        else:
            values[name] = convert(raw)
    return cls(**values)


_DEFAULT = object()  # a field left to its declared default


@functools.cache
def _columns(cls: type) -> list[tuple[str, Callable[[Any], Any], Any]]:
    """Each field's name, how its stored value becomes the field, and what NULL becomes."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        optional = type(None) in typing.get_args(hint)
        base = next((a for a in typing.get_args(hint) if a is not type(None)), hint) if optional else hint
        origin = typing.get_origin(base) or base
        convert: Callable[[Any], Any] = (
            json.loads
            if origin in (list, dict)
            else (lambda v: tuple(json.loads(v)))
            if origin is tuple
            else origin
            if origin is bool or (isinstance(origin, type) and issubclass(origin, enum.Enum))
            else str
            if origin is str
            else lambda v: v
        )
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        zero = origin() if origin in (str, int, float, bool, dict, list, tuple) and not optional else None
        out.append((f.name, convert, _DEFAULT if has_default else zero))
    return out


def _decode_run(row: Mapping[str, Any]) -> Run:
    usage = Usage(
        **{k: row[k] or 0 for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")}
    )
    return _decode(Run, row, usage=usage, title=row.get("title") or None)
