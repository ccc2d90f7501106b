"""Schema generation: signature + docstring -> the input_schema the model sees."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any, Literal, Optional

import pytest

from tools import Category, ToolContext, tool
from tools.schema import parse_docstring


class Level(enum.Enum):
    INFO = "info"
    ERROR = "error"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


def f_str(host: str) -> str:
    """Check a host."""
    return host


def f_scalars(name: str, count: int, ratio: float, verbose: bool) -> str:
    """Scalars."""
    return ""


def f_defaults(path: str, lines: int = 100, follow: bool = False, ratio: float = 0.5) -> str:
    """Defaults."""
    return ""


def f_literal(sort_by: Literal["cpu", "memory"] = "cpu") -> str:
    """Literal."""
    return ""


def f_int_literal(level: Literal[1, 2, 3]) -> str:
    """Int literal."""
    return ""


def f_enum(level: Level, priority: Priority = Priority.LOW) -> str:
    """Enums."""
    return ""


def f_list(hosts: list[str], ports: list[int] | None = None) -> str:
    """Lists."""
    return ""


def f_optional(expect_status: int | None = None, unit: Optional[str] = None, tag: str | None = None) -> str:  # noqa: UP045
    """Optionals."""
    return ""


def f_optional_literal(mode: Literal["a", "b"] | None = None) -> str:
    """Optional literal."""
    return ""


def f_hidden(unit: str, *, confirmed_by: str, ctx: ToolContext) -> str:
    """Hidden."""
    return ""


def f_args_doc(path: str, lines: int = 10) -> str:
    """Tail a log file.

    Reads from the end, so big files are cheap.

    Args:
        path: the log file, absolute or
            relative to the log directory.
        lines (int): how many lines.

    Returns:
        the text.
    """
    return ""


SCHEMAS: list[tuple[Any, dict[str, Any]]] = [
    (
        f_str,
        {
            "type": "object",
            "properties": {"host": {"type": "string"}},
            "required": ["host"],
            "additionalProperties": False,
        },
    ),
    (
        f_scalars,
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "count": {"type": "integer"},
                "ratio": {"type": "number"},
                "verbose": {"type": "boolean"},
            },
            "required": ["name", "count", "ratio", "verbose"],
            "additionalProperties": False,
        },
    ),
    (
        f_defaults,
        {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "lines": {"type": "integer", "default": 100},
                "follow": {"type": "boolean", "default": False},
                "ratio": {"type": "number", "default": 0.5},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
    (
        f_literal,
        {
            "type": "object",
            "properties": {"sort_by": {"type": "string", "enum": ["cpu", "memory"], "default": "cpu"}},
            "additionalProperties": False,
        },
    ),
    (
        f_int_literal,
        {
            "type": "object",
            "properties": {"level": {"type": "integer", "enum": [1, 2, 3]}},
            "required": ["level"],
            "additionalProperties": False,
        },
    ),
    (
        f_enum,
        {
            "type": "object",
            "properties": {
                "level": {"type": "string", "enum": ["info", "error"]},
                "priority": {"type": "integer", "enum": [1, 2], "default": 1},
            },
            "required": ["level"],
            "additionalProperties": False,
        },
    ),
    (
        f_list,
        {
            "type": "object",
            "properties": {
                "hosts": {"type": "array", "items": {"type": "string"}},
                "ports": {"type": ["array", "null"], "items": {"type": "integer"}, "default": None},
            },
            "required": ["hosts"],
            "additionalProperties": False,
        },
    ),
    (
        f_optional,
        {
            "type": "object",
            "properties": {
                "expect_status": {"type": ["integer", "null"], "default": None},
                "unit": {"type": ["string", "null"], "default": None},
                "tag": {"type": ["string", "null"], "default": None},
            },
            "additionalProperties": False,
        },
    ),
    (
        f_optional_literal,
        {
            "type": "object",
            "properties": {"mode": {"type": ["string", "null"], "enum": ["a", "b", None], "default": None}},
            "additionalProperties": False,
        },
    ),
    (
        f_hidden,
        {
            "type": "object",
            "properties": {"unit": {"type": "string"}},
            "required": ["unit"],
            "additionalProperties": False,
        },
    ),
    (
        f_args_doc,
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "the log file, absolute or relative to the log directory."},
                "lines": {"type": "integer", "default": 10, "description": "how many lines."},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
]


@pytest.mark.parametrize(("fn", "expected"), SCHEMAS, ids=[fn.__name__ for fn, _ in SCHEMAS])
def test_schema_from_signature(fn: Any, expected: dict[str, Any]) -> None:
    category = Category.MUTATING if fn is f_hidden else Category.READ_ONLY
    assert tool(category=category)(fn).input_schema == expected


def test_description_is_the_whole_docstring_each_paragraph_joined() -> None:
    def f(x: str) -> str:
        """Tail a log
        file quickly.

        Public addresses
        only.
        """
        return x

    assert tool(category=Category.READ_ONLY)(f).description == "Tail a log file quickly.\n\nPublic addresses only."


def test_api_schema_has_name_description_and_input_schema() -> None:
    assert tool(category=Category.READ_ONLY, name="check_host")(f_str).api_schema() == {
        "name": "check_host",
        "description": "Check a host.",
        "input_schema": {
            "type": "object",
            "properties": {"host": {"type": "string"}},
            "required": ["host"],
            "additionalProperties": False,
        },
    }


def test_parse_docstring_reads_args_section_and_keeps_every_other_section() -> None:
    assert parse_docstring(f_args_doc.__doc__) == (
        "Tail a log file.\n\nReads from the end, so big files are cheap.\n\nReturns: the text.",
        {"path": "the log file, absolute or relative to the log directory.", "lines": "how many lines."},
    )


def _dict_param(options: dict) -> str:
    """Dict."""
    return ""


def _any_param(x: Any) -> str:
    """Any."""
    return ""


def _bare_list(xs: list) -> str:
    """Bare list."""
    return ""


def _unannotated(x) -> str:
    """No annotation."""
    return ""


def _var_kwargs(**kwargs: str) -> str:
    """Kwargs."""
    return ""


def _path_default(directory: str = Path("/var/log")) -> str:  # type: ignore[assignment]
    """Non-JSON default."""
    return ""


@pytest.mark.parametrize(
    ("fn", "param"),
    [
        (_dict_param, "options"),
        (_any_param, "x"),
        (_bare_list, "xs"),
        (_unannotated, "x"),
        (_var_kwargs, "kwargs"),
        (_path_default, "directory"),
    ],
)
def test_unsupported_parameter_is_a_type_error_naming_it(fn: Any, param: str) -> None:
    with pytest.raises(TypeError, match=f"parameter '{param}'"):
        tool(category=Category.READ_ONLY)(fn)


def test_tool_without_docstring_is_rejected() -> None:
    def silent(x: str) -> str:
        return x

    with pytest.raises(TypeError, match="docstring"):
        tool(category=Category.READ_ONLY)(silent)


def test_confirmed_by_must_be_keyword_only() -> None:
    def restart(unit: str, confirmed_by: str) -> str:
        """Restart."""
        return unit

    with pytest.raises(TypeError, match="keyword-only"):
        tool(category=Category.MUTATING)(restart)


def test_read_only_tool_cannot_take_confirmed_by() -> None:
    def peek(unit: str, *, confirmed_by: str) -> str:
        """Peek."""
        return unit

    with pytest.raises(TypeError, match="read-only"):
        tool(category=Category.READ_ONLY)(peek)


def test_parallel_is_only_for_read_only_tools() -> None:
    def change(x: str) -> str:
        """Change."""
        return x

    with pytest.raises(ValueError, match="parallel"):
        tool(category=Category.MUTATING, parallel=True)(change)


def test_bad_tool_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="must match"):
        tool(category=Category.READ_ONLY, name="check disk")(f_str)
