"""The async Store is the Ledger's methods run on the writer thread, each declared once, on the Ledger, with its
lane in the writer's queue: `@lane.urgent` (on the path of a Slack ack: events, clicks; ahead of the runs'
bookkeeping), `@lane.normal` (the runs' bookkeeping), `@lane.background` (nobody's run or ack waits on it: a
POSTed change event, a retention sweep; after both). On a Ledger the method is itself; on the Store,
`await store.name(...)` runs `ledger.name(...)` with the same signature through `Store._call` (one unit on the
writer thread, transient errors retried).

A reach's store functions (its own tables, in its folder) are marked the same way, on a function whose first
parameter is the ledger: `name(ledger, ...)` is the call itself, `await name(store, ...)` runs it on the writer
thread through the same `Store._call`, so the core never imports the reach."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

L = TypeVar("L")  # the table group (bot.store.runs.Runs, ...) the method is defined on
P = ParamSpec("P")
T = TypeVar("T")


class Caller:
    """What a lane needs of the store: run `fn(ledger)` as one unit on the writer thread (bot.store.Store)."""

    # `fn` takes the Ledger; typed Any here so this module needn't import the ledger that imports it.
    async def _call(self, fn: Callable[[Any], T], *, urgent: bool = False, background: bool = False) -> T:
        raise NotImplementedError


def _settled(value: Any) -> Any:
    """A list or an iterator (a generator of messages, say) is taken as it is now, on the caller's thread, once:
    a retried call sees the same items, and nothing the caller holds is read from the writer thread."""
    return list(value) if isinstance(value, list | Iterator) else value


class Entry(Generic[L, P, T]):
    """A Ledger method (or a reach's function of the ledger) marked with its lane: on a Ledger, the method; on a
    Caller (the Store), its async call."""

    def __init__(self, method: Callable[Concatenate[L, P], T], *, urgent: bool = False, background: bool = False):
        self.method, self.urgent, self.background = method, urgent, background

    @overload
    def __get__(self, obj: None, owner: type) -> Self: ...
    @overload
    def __get__(self, obj: Caller, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, obj: L, owner: type) -> Callable[P, T]: ...

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        return self._on(obj) if isinstance(obj, Caller) else types.MethodType(self.method, obj)

    @overload
    def __call__(self, on: Caller, /, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, T]: ...
    @overload
    def __call__(self, on: L, /, *args: P.args, **kwargs: P.kwargs) -> T: ...

    def __call__(self, on: Any, /, *args: Any, **kwargs: Any) -> Any:
        """A reach's function: `fn(ledger, ...)` runs it here; `fn(store, ...)` is its call on the writer thread."""
        return self._on(on)(*args, **kwargs) if isinstance(on, Caller) else self.method(on, *args, **kwargs)

    def _on(self, obj: Caller) -> Callable[P, Coroutine[Any, Any, T]]:
        method, urgent, background = self.method, self.urgent, self.background

        @functools.wraps(method)
        async def call(*args: P.args, **kwargs: P.kwargs) -> T:
            args_now = tuple(_settled(a) for a in args)
            kwargs_now = {k: _settled(v) for k, v in kwargs.items()}
            result: T = await obj._call(
                lambda db: method(db, *args_now, **kwargs_now), urgent=urgent, background=background
            )
            return result

        return call


class _Lanes:
    """The decorators: `@lane.normal`, `@lane.urgent`, `@lane.background`."""

    def normal(self, method: Callable[Concatenate[L, P], T]) -> Entry[L, P, T]:
        return Entry(method)

    def urgent(self, method: Callable[Concatenate[L, P], T]) -> Entry[L, P, T]:
        return Entry(method, urgent=True)

    def background(self, method: Callable[Concatenate[L, P], T]) -> Entry[L, P, T]:
        return Entry(method, background=True)


lane = _Lanes()
