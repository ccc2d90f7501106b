"""The one config reader: typed accessors over a parsed TOML table that record every problem with its path
(`kubernetes.clusters[1].namespaces[0]: expected a string, got an integer`) and return a default instead of
raising; `raise_if_problems()` at the end raises one ConfigError listing them all.

A section's config is a dataclass whose fields are declared with `setting(default, doc, unit=..., low=...,
check=...)`: `read(cls, reader)` reads each field by its type and its checks, so the class is its documentation.

Imports only bot.core.errors, so every layer (bot/, tools/, a reach's folder) reads its section with it.
"""

from __future__ import annotations

import builtins
import dataclasses
import enum
import math
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from bot.core.errors import ConfigError

ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_URL_RE = re.compile(r"https?://[^/\s]+")
_MISSING: Any = object()
T = TypeVar("T")


def kind(value: Any) -> str:
    """What a TOML value is, as a problem says it: `a table`, `an integer`, ..."""
    names = {dict: "a table", list: "a list", str: "a string", bool: "a boolean", int: "an integer", float: "a float"}
    return names.get(type(value), type(value).__name__)


class Reader:
    """One table (or value) of the config at `path`; children share the problem list and the base directory."""

    def __init__(
        self,
        value: Any,
        path: str = "",
        *,
        base_dir: Path | None = None,
        problems: list[str] | None = None,
        key: str | int | None = None,
    ) -> None:
        self.value = value
        self.key = key  # what this value is under in its parent: a table key, or an array index
        self.location = path  # `kubernetes.clusters[1]`; "" for the whole file
        self.base_dir = base_dir or Path.cwd()
        self.problems: list[str] = [] if problems is None else problems

    # -- where, and what went wrong ----------------------------------------------------------------

    def where(self, key: str | int | None = None) -> str:
        if key is None:
            return self.location
        if isinstance(key, int):
            return f"{self.location}[{key}]"
        return f"{self.location}.{key}" if self.location else key

    def problem(self, text: str, key: str | int | None = None) -> None:
        """Record `where: text`."""
        where = self.where(key)
        self.problems.append(f"{where}: {text}" if where else text)

    def raise_if_problems(self, error: type[ConfigError] = ConfigError) -> None:
        if self.problems:
            raise error(list(self.problems))

    def child(self, value: Any, key: str | int) -> Reader:
        return Reader(value, self.where(key), base_dir=self.base_dir, problems=self.problems, key=key)

    # -- tables --------------------------------------------------------------------------------------

    @property
    def table(self) -> Mapping[str, Any]:
        """This value as a table ({} when it is not one: is_table() said so)."""
        return self.value if isinstance(self.value, Mapping) else {}

    def is_table(self, what: str = "") -> bool:
        """True for a table; else record `expected a table` (with `what`, e.g. ` ([[hosts]])`)."""
        if isinstance(self.value, Mapping):
            return True
        self.problem(f"expected a table{what}, got {kind(self.value)}")
        return False

    def has(self, key: str) -> bool:
        return key in self.table

    def only(self, keys: Sequence[str]) -> None:
        """Every key not in `keys` is a problem naming the known ones."""
        for key in self.table:
            if key not in keys:
                self.problem(f"unknown key (known: {', '.join(keys)})", key)

    def require(self, key: str, why: str = "") -> bool:
        if key in self.table:
            return True
        self.problem(f"missing required key {key!r}{why}")
        return False

    def at(self, key: str) -> Reader:
        """The table under `key` ({} when absent; a problem when it is something else)."""
        r = self.child(self.table.get(key, {}), key)
        r.is_table()
        return r

    def items(self, key: str, *, header: str | None = None) -> Iterator[Reader]:
        """Each table of the array of tables under `key` ([[header]]); a non-table entry is a problem."""
        value = self.table.get(key, [])
        if not isinstance(value, list):
            self.problem(f"expected a list of tables ([[{header or self.where(key)}]]), got {kind(value)}", key)
            return
        outer = self.child(value, key)
        for i, entry in enumerate(value):
            r = outer.child(entry, i)
            if r.is_table():
                yield r

    def entries(self) -> Iterator[tuple[str, Reader]]:
        """`name = value` pairs of this table, each with its own reader."""
        return ((name, self.child(value, name)) for name, value in self.table.items())

    # -- one value each ------------------------------------------------------------------------------

    def _get(self, key: builtins.str | None) -> Any:
        if key is None:
            return self.value
        return self.table.get(key, _MISSING)

    def str(
        self,
        key: builtins.str | None = None,
        default: T = None,  # type: ignore[assignment]
        *,
        empty_ok: builtins.bool = False,
    ) -> builtins.str | T:
        value = self._get(key)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            self.problem(f"expected a string, got {kind(value)}", key)
            return default
        if not empty_ok and not value.strip():
            self.problem("must not be empty", key)
            return default
        return value

    def int(
        self,
        key: builtins.str,
        default: T = None,  # type: ignore[assignment]
        *,
        low: builtins.int | None = None,
        high: builtins.int | None = None,
    ) -> builtins.int | T:
        value = self._get(key)
        if value is _MISSING:
            return default
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if low is not None and high is not None and not (is_int and low <= value <= high):
            self.problem(f"expected an integer from {low} to {high}, got {value!r}", key)
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(f"expected an integer, got {kind(value)}", key)
            return default
        if low is not None and value < low:
            self.problem(f"must be at least {low}, got {value!r}", key)
            return default
        return value

    def number(self, key: builtins.str, default: T = None, *, low: float | None = None) -> float | T:  # type: ignore[assignment]
        """An integer or a float (never a boolean), at least `low`."""
        value = self._get(key)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.problem(f"expected a number, got {kind(value) if not isinstance(value, float) else value}", key)
            return default
        if low is not None and value < low:
            self.problem(f"must be at least {low:g}, got {value!r}", key)
            return default
        return value

    def seconds(
        self,
        key: builtins.str | None = None,
        default: T = None,  # type: ignore[assignment]
        *,
        zero_ok: builtins.bool = False,
        high: float | None = None,
    ) -> float | T:
        value = self._get(key)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problem(f"expected a number of seconds, got {kind(value)}", key)
            return default
        if not (value >= 0 if zero_ok else value > 0):
            self.problem(f"must be {'zero or more' if zero_ok else 'positive'}, got {value}", key)
            return default
        if not math.isfinite(value):
            self.problem(f"must be a finite number of seconds, got {value}", key)
            return default
        if high is not None and value > high:
            self.problem(f"must be at most {high:g} seconds, got {value}", key)
            return default
        return float(value)

    def bool(self, key: builtins.str, default: T = None) -> builtins.bool | T:  # type: ignore[assignment]
        value = self._get(key)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            self.problem(f"expected true or false, got {kind(value)}", key)
            return default
        return value

    def str_list(self, key: builtins.str | None = None, default: T = None) -> list[builtins.str] | T:  # type: ignore[assignment]
        """A list of non-empty strings; a bad element is a problem at its index and is left out."""
        value = self._get(key)
        if value is _MISSING:
            return default
        if not isinstance(value, list):
            self.problem(f"expected a list of strings, got {kind(value)}", key)
            return default
        inner = self.child(value, key) if key is not None else self
        return [text for i, item in enumerate(value) if (text := inner.child(item, i).str()) is not None]

    def url(self, key: builtins.str, default: T = None) -> builtins.str | T:  # type: ignore[assignment]
        text = self.str(key)
        if text is None:
            return default
        if not _URL_RE.match(text):
            self.problem(f"expected an http:// or https:// URL, got {text!r}", key)
            return default
        return text

    def path(self, key: builtins.str | None = None, default: T = None) -> Path | T:  # type: ignore[assignment]
        """A path relative to the config file's directory (`~` expanded)."""
        text = self.str(key)
        if text is None:
            return default
        return self.base_dir / Path(text).expanduser()

    def env_name(self, key: builtins.str, default: T = None) -> builtins.str | T:  # type: ignore[assignment]
        text = self.str(key)
        if text is None:
            return default
        if not ENV_NAME_RE.fullmatch(text):
            self.problem(f"{text!r} is not an environment variable name", key)
            return default
        return text


# -- typed sections: a dataclass's fields read by their types ------------------------------------------------

Check = Callable[[Any, Reader, builtins.str], Any]  # (value, its table, its key) -> the value, or None after a problem


def must(test: Callable[[Any], builtins.bool], says: builtins.str) -> Check:
    """A check: the value passes `test`, else the problem `says` (a format string of `value`)."""

    def check(value: Any, r: Reader, key: builtins.str) -> Any:
        if test(value):
            return value
        r.problem(says.format(value=value), key)
        return None

    return check


def listen_address(text: builtins.str, r: Reader, key: builtins.str) -> builtins.str | None:
    """A check for a server's `"host:port"` (port 0: any free port, for tests): a problem when it is not one."""
    _, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= builtins.int(port) <= 65535:
        r.problem(f'expected "host:port", got {text!r}', key)
        return None
    return text


def host_and_port(listen: builtins.str, host: builtins.str) -> tuple[builtins.str, builtins.int]:
    """A checked `"host:port"` split in two; no host (":9095") is `host`, an IPv6 address loses its brackets."""
    h, _, port = listen.rpartition(":")
    return h.strip("[]") or host, builtins.int(port)


def one_of(values: Sequence[builtins.str]) -> Check:
    return must(lambda value: value in values, f"{{value!r}} is not one of {', '.join(values)}")


def setting(
    default: Any = dataclasses.MISSING,
    doc: builtins.str = "",
    *,
    unit: builtins.str = "",
    key: builtins.str | None = None,
    low: float | None = None,
    high: float | None = None,
    zero_ok: builtins.bool = False,
    empty_ok: builtins.bool = False,
    kind: builtins.str = "",
    check: Check | None = None,
    factory: Callable[[], Any] | None = None,
    why: builtins.str = "",
) -> Any:
    """A config field: its default (none: required, `why` said when missing), a one-line doc, its unit ("s": a
    number of seconds, `zero_ok`, at most `high`), its TOML `key` if not the field's name, a range (`low`, `high`),
    `kind` when the type does not say ("url", "env_name", "table": as written), a `check` run on a well-typed value."""
    meta = {name: value for name, value in locals().items() if name not in ("default", "factory")}  # the rest
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def read(cls: type[T], r: Reader, **given: Any) -> T | None:
    """The dataclass `cls` read from the table `r` (not a table: None, its parent said so): every field but `given`
    by its type and its setting(); an unknown key, a missing required one and a bad value are problems on `r`, a
    bad optional value keeps its default. None when a required field is missing or bad."""
    if not isinstance(r.value, Mapping):
        return None
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init and f.name not in given]  # type: ignore[arg-type]
    r.only([f.metadata.get("key") or f.name for f in fields])
    values = dict(given)
    ok = True
    for f in fields:
        key = f.metadata.get("key") or f.name
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if not r.has(key):
            if required:
                ok = r.require(key, f.metadata.get("why", ""))  # False, with its problem
            continue
        value = _value(r, key, hints[f.name], f.metadata)
        if value is not None and (check := f.metadata.get("check")) is not None:
            value = check(value, r, key)
        if value is not None:
            values[f.name] = value
        elif required:
            ok = False
    return cls(**values) if ok else None


def _value(r: Reader, key: builtins.str, hint: Any, meta: Mapping[builtins.str, Any]) -> Any:
    if isinstance(hint, types.UnionType):  # `X | None`: read as X
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    args = typing.get_args(hint)
    if meta["kind"] in ("url", "env_name"):
        return getattr(r, meta["kind"])(key)
    if meta["kind"] == "table":
        return r.at(key).table  # {} when not a table: at() said so
    if hint is builtins.str:
        return r.str(key, empty_ok=meta["empty_ok"])
    if typing.get_origin(hint) is tuple and args[0] is Path:  # each relative to the config file's directory
        found = r.str_list(key)
        return None if found is None else tuple(r.base_dir / Path(d).expanduser() for d in found)
    if hint is builtins.bool:
        return r.bool(key)
    if hint is builtins.int:
        return r.int(key, low=meta["low"], high=meta["high"])
    if hint is float and meta["unit"] == "s":
        return r.seconds(key, zero_ok=meta["zero_ok"], high=meta["high"])
    if hint is float:
        value = r.number(key, low=meta["low"])
        return None if value is None else float(value)
    if hint is Path:
        return r.path(key)
    if typing.get_origin(hint) is tuple and args[0] is builtins.str:
        found = r.str_list(key)
        return None if found is None else tuple(found)
    if typing.get_origin(hint) is tuple and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
        entries = r.items(key, header=r.where(key))
        return tuple(x for entry in entries if (x := read(args[0], entry)) is not None)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return read(hint, r.at(key))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        text, names = r.str(key), [m.value for m in hint]
        if text is not None and text not in names:
            r.problem(f"{text!r} is not a {hint.__name__.lower()} ({', '.join(names)})", key)
        return hint(text) if text in names else None
    if typing.get_origin(hint) is Mapping:  # a table of `name = value`, each read as the value's type
        table = r.at(key)
        values = {name: _value(table, name, args[1], meta) for name in table.table}
        return {name: v for name, v in values.items() if v is not None}
    raise TypeError(f"{key}: no reader for {hint!r}")
