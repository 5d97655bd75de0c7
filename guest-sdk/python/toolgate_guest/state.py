"""State a guard keeps between calls, in a scope the host chooses.

Every hook call runs on a fresh instance, so a guard that must remember —
count calls, notice a loop, enforce a rate — keeps what it needs here. A guard
names only the scope and a key in it; the host puts the call's tenant and the
plugin's name in front (and, for the ``run`` scope, the event's ``run_id``),
so no key can reach another tenant's, plugin's or run's state::

    from toolgate_guest import cancel, state

    def on_before_tool_call(event):
        # At most 2 send_email per run:
        if event.tool_name == "send_email" and state.add("send_email", 1) > 2:
            state.add("send_email", -1)  # a refused call is not counted
            return cancel("Tool call limit exceeded. Do not call 'send_email' again.")
        return None

Keys and values are strings (store anything else as JSON text). ``scope`` is
``"run"`` (the default) or ``"tenant"``, or a :class:`Scope`.

Within one call a guard reads its own writes. :func:`set` and :func:`delete`
become visible to other calls when this call returns; a call that faults
leaves none of them. :func:`add` is applied at once and atomically, so
concurrent calls count exactly; a call that faults gives back what it added.
Going over a budget (operations per call, keys or bytes per scope), the store
being unreachable, or :func:`add` on a value that is not an integer traps the
call: the host treats it like any fault (``docs/state.md``, "Guard state").

Outside a component (a guard's unit tests on the build machine's Python) the
same functions work on an in-memory dict of this process, with no budgets and
no expiry but ``ttl_ms=0``; writes are visible at once, and the ``run`` scope
is one for every run. :func:`reset` empties it. A misuse the host would trap
on raises here (``ValueError``, ``OverflowError``, ``TypeError``), so a test
sees it.

This module imports only the standard library.
"""

from __future__ import annotations

import re
import sys
from enum import Enum
from typing import Any, Dict, Literal, Optional, Tuple, Union

__all__ = ["Scope", "ScopeName", "add", "delete", "get", "reset", "set"]


class Scope(str, Enum):
    """Whose state an operation reads or writes (equal to its name as a str)."""

    #: This run's (tenant, plugin, the event's ``run_id``): dropped once the
    #: run has been idle for the plugin's ``state_run_ttl_s``.
    RUN = "run"
    #: The tenant's (tenant, plugin): shared by all its runs, and by every
    #: replica sharing one store.
    TENANT = "tenant"


ScopeName = Union[Scope, Literal["run", "tenant"]]
"""A scope: a :class:`Scope` or its name."""

_S64 = (-(1 << 63), (1 << 63) - 1)
_U64_MAX = (1 << 64) - 1
_DECIMAL = re.compile(r"[+-]?[0-9]+")  # what the host's add reads as an integer


def get(key: str, *, scope: ScopeName = Scope.RUN) -> Optional[str]:
    """The value at ``key``, or None when it is absent or expired."""
    return _store().get(_scope(scope), _str(key, "key"))


def set(key: str, value: str, *, scope: ScopeName = Scope.RUN, ttl_ms: Optional[int] = None) -> None:
    """Sets ``key`` to ``value``, visible to other calls once this call returns.

    ``ttl_ms``: how long the value lives, in milliseconds (None: as long as
    its scope; 0: gone at once, like :func:`delete`; longer than the plugin's
    ``state_max_ttl_s``: cut to it).
    """
    _store().set(_scope(scope), _str(key, "key"), _str(value, "value"), _ttl(ttl_ms))


def delete(key: str, *, scope: ScopeName = Scope.RUN) -> None:
    """Removes ``key``, visible to other calls once this call returns."""
    _store().delete(_scope(scope), _str(key, "key"))


def add(key: str, delta: int = 1, *, scope: ScopeName = Scope.RUN, ttl_ms: Optional[int] = None) -> int:
    """Adds ``delta`` to the integer at ``key`` (absent: 0), at once and
    atomically, and returns the new value.

    ``ttl_ms`` is the expiry of a key this call creates (an existing key keeps
    its own): a counter over a fixed window. A value that is not a decimal
    integer, or a sum outside the signed 64-bit range, traps the call (raises
    ``ValueError`` / ``OverflowError`` outside a component).
    """
    if not isinstance(delta, int) or isinstance(delta, bool):
        raise TypeError(f"state add delta must be an int, not {type(delta).__name__}")
    if not _S64[0] <= delta <= _S64[1]:
        raise OverflowError(f"state add delta {delta} is outside s64")
    return _store().add(_scope(scope), _str(key, "key"), delta, _ttl(ttl_ms))


def reset() -> None:
    """Empties the in-memory store used outside a component (for tests).

    Inside a component it does nothing: state belongs to the host.
    """
    _MEMORY.clear()


# ---------------------------------------------------------------- arguments


def _scope(scope: Any) -> Scope:
    try:
        return Scope(scope)
    except ValueError:
        raise ValueError(f"unknown state scope {scope!r}; expected 'run' or 'tenant'") from None


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"state {what} must be a str, not {type(value).__name__}")
    return value


def _ttl(ttl_ms: Any) -> Optional[int]:
    if ttl_ms is None:
        return None
    if not isinstance(ttl_ms, int) or isinstance(ttl_ms, bool):
        raise TypeError(f"state ttl_ms must be an int or None, not {type(ttl_ms).__name__}")
    if not 0 <= ttl_ms <= _U64_MAX:
        raise ValueError(f"state ttl_ms {ttl_ms} is outside 0..2**64-1")
    return ttl_ms


# ------------------------------------------------------------------- stores


class _Memory:
    """Off WebAssembly: one dict per process, written through at once."""

    def __init__(self) -> None:
        self._map: Dict[Tuple[Scope, str], str] = {}

    def get(self, scope: Scope, key: str) -> Optional[str]:
        return self._map.get((scope, key))

    def set(self, scope: Scope, key: str, value: str, ttl_ms: Optional[int]) -> None:
        if ttl_ms == 0:
            self._map.pop((scope, key), None)
        else:
            self._map[(scope, key)] = value

    def delete(self, scope: Scope, key: str) -> None:
        self._map.pop((scope, key), None)

    def add(self, scope: Scope, key: str, delta: int, ttl_ms: Optional[int]) -> int:
        current = self._map.get((scope, key), "0")
        if not _DECIMAL.fullmatch(current):
            raise ValueError(f"state add on {key!r}: its value is not a decimal integer")
        total = int(current) + delta
        if not _S64[0] <= total <= _S64[1]:
            raise OverflowError(f"state add on {key!r}: {current} + {delta} is outside s64")
        self._map[(scope, key)] = str(total)
        return total

    def clear(self) -> None:
        self._map.clear()


class _Host:
    """Inside a component: the host's ``toolgate:guard/state`` import."""

    def __init__(self, wit: Any) -> None:
        self._wit = wit
        self._scopes = {Scope.RUN: wit.Scope.RUN, Scope.TENANT: wit.Scope.TENANT}

    def get(self, scope: Scope, key: str) -> Optional[str]:
        return self._wit.get(self._scopes[scope], key)

    def set(self, scope: Scope, key: str, value: str, ttl_ms: Optional[int]) -> None:
        self._wit.set(self._scopes[scope], key, value, ttl_ms)

    def delete(self, scope: Scope, key: str) -> None:
        self._wit.delete(self._scopes[scope], key)

    def add(self, scope: Scope, key: str, delta: int, ttl_ms: Optional[int]) -> int:
        return self._wit.add(self._scopes[scope], key, delta, ttl_ms)


# Imported once, when this module is (in a component, while componentize-py
# initialises it at build time): an import at call time would search a
# filesystem that a component built with stubbed WASI does not have.
try:
    from wit_world.imports import state as _wit  # only in a component importing state
except ImportError:
    _wit = None

_MEMORY = _Memory()
_BACKEND: Union[_Memory, _Host, None] = _Host(_wit) if _wit is not None else (
    None if sys.platform == "wasi" else _MEMORY)


def _store() -> Union[_Memory, _Host]:
    if _BACKEND is None:
        raise RuntimeError(
            "this guard was built without the toolgate:guard/state import; the build adds it "
            "when the guard file imports toolgate_guest.state, or with --state"
        )
    return _BACKEND
