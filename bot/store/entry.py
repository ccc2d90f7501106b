"""The async facade, derived from the sync one: `name = entry(Group.name)` on a `…Calls` class makes `await
store.name(...)` run `ledger.name(...)` on the store's writer thread, with the same signature (written once,
on the Ledger method), through `Store._call` (one unit, transient errors retried)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

P = ParamSpec("P")
T = TypeVar("T")


class Caller:
    """What an entry needs of the store: run `fn(ledger)` as one unit on the writer thread (bot.store.Store)."""

    # `fn` takes the Ledger; typed Any here so this module needn't import the ledger that imports it.
    async def _call(self, fn: Callable[[Any], T], *, urgent: bool = False, background: bool = False) -> T:
        raise NotImplementedError


def _settled(value: Any) -> Any:
    """A list or an iterator (a generator of messages, say) is taken as it is now, on the caller's thread, once:
    a retried call sees the same items, and nothing the caller holds is read from the writer thread."""
    return list(value) if isinstance(value, list | Iterator) else value


class Entry(Generic[P, T]):
    """The async entry of one Ledger method. `urgent`: on the path of a Slack ack (events, clicks), so it goes
    ahead of the runs' bookkeeping in the writer's queue; `background`: nobody's run or ack waits on it (a
    POSTed change event, a retention sweep), so it goes after both."""

    def __init__(
        self, method: Callable[Concatenate[Any, P], T], *, urgent: bool = False, background: bool = False
    ) -> None:
        if urgent and background:
            raise TypeError(f"{method.__name__}: an entry is urgent or background, not both")
        self.method, self.urgent, self.background, self.name = method, urgent, background, method.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.name:
            raise TypeError(f"{owner.__name__}.{name} = entry(…{self.name}): an entry keeps its Ledger method's name")

    @overload
    def __get__(self, store: None, owner: type) -> Entry[P, T]: ...
    @overload
    def __get__(self, store: Caller, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, store: Caller | None, owner: type) -> Entry[P, T] | Callable[P, Coroutine[Any, Any, T]]:
        if store is None:
            return self
        name, urgent, background = self.name, self.urgent, self.background

        @functools.wraps(self.method)
        async def call(*args: P.args, **kwargs: P.kwargs) -> T:
            args_now = tuple(_settled(a) for a in args)
            kwargs_now = {k: _settled(v) for k, v in kwargs.items()}
            result: T = await store._call(
                lambda db: getattr(db, name)(*args_now, **kwargs_now), urgent=urgent, background=background
            )
            return result

        return call


def entry(method: Callable[Concatenate[Any, P], T], *, urgent: bool = False, background: bool = False) -> Entry[P, T]:
    return Entry(method, urgent=urgent, background=background)
