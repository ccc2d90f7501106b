"""JSON schema from a function's signature and docstring, and argument coercion back to Python types."""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

_NONE = type(None)
_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True)
class Parameter:
    """One schema parameter: its name, resolved annotation and whether the caller may omit it."""

    name: str
    annotation: Any
    required: bool
    default: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class FunctionSchema:
    """What a signature says to the model (description, input_schema) and to the caller (parameters)."""

    description: str
    input_schema: dict[str, Any]
    parameters: tuple[Parameter, ...]
    hidden: tuple[str, ...]  # parameters supplied by the runtime, never by the model


_ARGS_HEADINGS = ("Args:", "Arguments:", "Parameters:")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Return (the whole docstring but its `Args:` section, each paragraph joined into one line, paragraphs apart
    by a blank line; {parameter: description} from the `Args:` section). Every other section (`Returns:`, …) stays
    in the description: the model reads all of it."""
    lines = inspect.cleandoc(doc or "").splitlines()
    paragraphs: list[list[str]] = [[]]
    args: dict[str, str] = {}
    in_args = False
    current: str | None = None
    entry_indent = 0
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if indent == 0 and stripped:
            in_args, current = stripped in _ARGS_HEADINGS, None
            if in_args:
                paragraphs.append([])
                continue
        if not in_args:
            if stripped:
                paragraphs[-1].append(stripped)
            elif paragraphs[-1]:
                paragraphs.append([])
            continue
        if not stripped:
            continue
        m = re.fullmatch(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)", stripped)
        if m and (current is None or indent <= entry_indent):
            current, entry_indent = m.group(1), indent
            args[current] = m.group(2).strip()
        elif current is not None:  # a continuation line of the current entry
            args[current] = f"{args[current]} {stripped}".strip()
    return "\n\n".join(" ".join(p) for p in paragraphs if p), args


def _is_optional(annotation: Any) -> tuple[bool, Any]:
    """(True, X) for `X | None` / Optional[X]; (False, annotation) otherwise."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not _NONE]
        if len(args) < len(typing.get_args(annotation)):
            inner = args[0] if len(args) == 1 else typing.Union[tuple(args)]  # noqa: UP007
            return True, inner
    return False, annotation


def _enum_type(values: list[Any]) -> dict[str, Any]:
    kinds = {_SCALARS.get(type(v)) for v in values}
    if len(kinds) == 1 and None not in kinds:
        return {"type": kinds.pop(), "enum": values}
    return {"enum": values}


def type_schema(annotation: Any, *, where: str) -> dict[str, Any]:
    """JSON schema for one annotation; TypeError naming `where` for anything unsupported."""
    if typing.get_origin(annotation) is typing.Annotated:
        return type_schema(typing.get_args(annotation)[0], where=where)
    optional, inner = _is_optional(annotation)
    if optional:
        schema = type_schema(inner, where=where)
        if isinstance(schema.get("type"), str):
            schema["type"] = [schema["type"], "null"]
            if "enum" in schema:
                schema["enum"] = [*schema["enum"], None]
            return schema
        return {"anyOf": [schema, {"type": "null"}]}
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return _enum_type(list(typing.get_args(annotation)))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum_type([member.value for member in annotation])
    if annotation is list:
        raise TypeError(f"{where}: a list needs an item type, e.g. list[str]")
    if origin is list:
        (item,) = typing.get_args(annotation)
        return {"type": "array", "items": type_schema(item, where=where)}
    if origin is dict:  # an object of named values: {"team": "web"}
        key, value = typing.get_args(annotation) or (None, None)
        if key is not str:
            raise TypeError(f"{where}: a dict needs str keys, e.g. dict[str, str]")
        return {"type": "object", "additionalProperties": type_schema(value, where=where)}
    raise TypeError(
        f"{where}: unsupported annotation {annotation!r} (use str, int, float, bool, "
        "Literal[...], an Enum, list[X], dict[str, X] or X | None)"
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def function_schema(
    fn: Callable[..., Any],
    *,
    hide: Callable[[str, Any], bool] = lambda name, annotation: False,
    tool_name: str | None = None,
) -> FunctionSchema:
    """Build the model-facing schema of `fn`; parameters for which `hide(name, annotation)` is true are left out."""
    where_fn = tool_name or getattr(fn, "__name__", repr(fn))
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as e:  # an annotation that names something undefined
        raise TypeError(f"{where_fn}: cannot resolve type hints: {e}") from e
    description, arg_docs = parse_docstring(fn.__doc__)
    properties: dict[str, Any] = {}
    required: list[str] = []
    params: list[Parameter] = []
    hidden: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        where = f"{where_fn}: parameter {p.name!r}"
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{where}: *args and **kwargs cannot be described to the model")
        if p.name not in hints:
            raise TypeError(f"{where}: missing type annotation")
        annotation = hints[p.name]
        if hide(p.name, annotation):
            hidden.append(p.name)
            continue
        schema = type_schema(annotation, where=where)
        optional, _ = _is_optional(annotation)
        if p.default is not p.empty:
            schema["default"] = _json_default(p.default)
            try:
                json.dumps(schema["default"])
            except (TypeError, ValueError):
                raise TypeError(f"{where}: default {p.default!r} is not a JSON value") from None
        if arg_docs.get(p.name):
            schema["description"] = arg_docs[p.name]
        is_required = p.default is p.empty and not optional
        if is_required:
            required.append(p.name)
        properties[p.name] = schema
        params.append(Parameter(p.name, annotation, is_required, p.default))
    input_schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        input_schema["required"] = required
    input_schema["additionalProperties"] = False
    return FunctionSchema(description, input_schema, tuple(params), tuple(hidden))


def coerce(annotation: Any, value: Any) -> Any:
    """Turn a JSON value that passed validation into the annotated Python type (Enum members, lists)."""
    if value is None:
        return None
    if typing.get_origin(annotation) is typing.Annotated:
        return coerce(typing.get_args(annotation)[0], value)
    optional, inner = _is_optional(annotation)
    if optional:
        return coerce(inner, value)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return annotation(value)
    if annotation is float and isinstance(value, int):
        return float(value)
    if typing.get_origin(annotation) is list and isinstance(value, list):
        (item,) = typing.get_args(annotation)
        return [coerce(item, v) for v in value]
    return value


def call_arguments(parameters: tuple[Parameter, ...], args: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for the function: coerced values, None for omitted optional parameters without default."""
    kwargs: dict[str, Any] = {}
    for p in parameters:
        if p.name in args:
            kwargs[p.name] = coerce(p.annotation, args[p.name])
        elif p.default is inspect.Parameter.empty and not p.required:
            kwargs[p.name] = None
    return kwargs
