"""Maps the WIT exports onto a guard's methods.

The build generates an app module that calls the factories below, one per seam
the guard implements; componentize-py then finds the classes it expects
(``Steering``, ``Rewrite``, ...) in that module. This module imports the
bindings componentize-py generates (``wit_world``), so it only loads inside a
component (or next to bindings made with ``componentize-py bindings``).

Per call: the WIT record becomes a typed event, a fresh guard instance (for a
class) handles it, and its answer becomes the WIT value. ``print`` and
``sys.stderr`` go to the host log, so they work with stubbed WASI too. A hook
that raises is logged (type, message, innermost frames) and re-raised, which
traps: the host records a fault.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, List, Optional

from wit_world import exports as _wit
from wit_world.imports import host as _host
from wit_world.imports import types as _t

import toolgate_guest as _tg

_MAX_LINE = 4096  # bytes per captured output line sent to the log


class _HostStream:
    """A text stream whose lines go to the host log at one level."""

    def __init__(self, level: Any) -> None:
        self._level = level
        self._buf = ""

    def write(self, text: str) -> int:
        self._buf += text
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            _host.log(self._level, line[:_MAX_LINE])
        return len(text)

    def flush(self) -> None:
        if self._buf:
            _host.log(self._level, self._buf[:_MAX_LINE])
            self._buf = ""

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return "utf-8"


def _describe(exc: BaseException) -> str:
    # Built from code objects, never source lines: reading source files needs
    # WASI filesystem calls, which trap when WASI is stubbed.
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append(f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}")
        tb = tb.tb_next
    where = "; ".join(frames[-4:])
    return f"guard raised {type(exc).__name__}: {exc}" + (f" (at {where})" if where else "")


def _captured(body: Callable[[], Any]) -> Any:
    """Runs ``body`` with print/stderr going to the host log.

    Anything that raises is logged as an error and re-raised, trapping.
    """
    out, err = sys.stdout, sys.stderr
    sys.stdout = _HostStream(_host.Level.INFO)
    sys.stderr = _HostStream(_host.Level.WARN)
    try:
        return body()
    except BaseException as exc:
        _host.log(_host.Level.ERROR, _describe(exc)[:_MAX_LINE])
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = out, err


def _call(guard: Any, method: str, event_type: Any, record: Any, convert: Callable[[Any, str], Any]) -> Any:
    """One hook call: WIT record → event → guard → WIT value.

    Anything that raises on the way (a malformed event, the guard itself, an
    answer of the wrong shape) is logged as an error and re-raised, trapping.
    ``convert`` gets the answer and the hook's name (for its messages).
    """
    def body() -> Any:
        event = event_type.from_wit(record)
        target = guard() if isinstance(guard, type) else guard
        return convert(getattr(target, method)(event), method)

    return _captured(body)


# ---------------------------------------------------------------- conversions


def to_verdict(value: Any, hook: str = "on_before_tool_call") -> Any:
    """A guard's steering answer as a WIT ``verdict``.

    Accepts None / :class:`Proceed` (proceed), :class:`Skip`, or the seed's
    dict shape (``{"action": "proceed"}`` / ``{"action": "skip", "content":
    ..., "is_error": ...}``).
    """
    if value is None or isinstance(value, _tg.Proceed):
        return _t.Verdict_Proceed()
    if isinstance(value, _tg.Skip):
        return _t.Verdict_Skip(_t.Skip(_string(value.content, "skip content"), _flag(value.is_error)))
    if isinstance(value, dict):
        action = value.get("action")
        if action == "proceed":
            return _t.Verdict_Proceed()
        if action == "skip":
            content = value.get("content")
            return _t.Verdict_Skip(
                _t.Skip("" if content is None else _string(content, "skip content"), _flag(value.get("is_error")))
            )
        raise ValueError(f"steering verdict has unknown action {action!r}")
    raise TypeError(f"{hook} returned {type(value).__name__}; expected steer(...), cancel(...), proceed() or None")


def to_rewrite(value: Any, hook: str = "on_tool_call_dispatch") -> Optional[Any]:
    """A guard's rewrite answer as a WIT ``option<rewrite>``.

    Accepts None, :class:`Rewrite`, or a dict ``{"tool_name": ..., "args": {...}}``.
    """
    import json

    if value is None:
        return None
    if isinstance(value, _tg.Rewrite):
        name, args = value.tool_name, value.args
    elif isinstance(value, dict):
        name, args = value.get("tool_name"), value.get("args")
    else:
        raise TypeError(f"{hook} returned {type(value).__name__}; expected rewrite(...) or None")
    return _t.Rewrite(_string(name, "rewrite tool_name"), json.dumps(args, separators=(",", ":")))


def to_names(value: Any, hook: str = "on_tool_routing_decision") -> Optional[List[str]]:
    """A guard's routing answer as a WIT ``option<list<string>>``."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{hook} returned {type(value).__name__}; expected a list of tool names or None")
    return [_string(n, "tool name") for n in value]


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def _flag(value: Any) -> Optional[bool]:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"skip is_error must be a bool or None, not {type(value).__name__}")
    return value


# -------------------------------------------------------------------- exports


def _hook(guard: Any, seam: str) -> str:
    name = _tg.hook_name(guard, seam)
    if name is None:
        raise TypeError(f"the guard implements no {_tg.SEAMS[seam]} hook")
    return name


# Each export class implements its WIT function (`before-tool-call`, ...) by
# calling the guard's hook: symfonic's name, or its deprecated alias.


def steering(guard: Any) -> type:
    """The ``Steering`` export class for a guard."""
    hook = _hook(guard, "steering")

    class Steering(_wit.Steering):
        def before_tool_call(self, event: Any) -> Any:
            return _call(guard, hook, _tg.BeforeToolCallEvent, event, to_verdict)

    return Steering


def rewrite(guard: Any) -> type:
    """The ``Rewrite`` export class for a guard."""
    hook = _hook(guard, "rewrite")

    class Rewrite(_wit.Rewrite):
        def dispatch(self, event: Any) -> Any:
            return _call(guard, hook, _tg.ToolCallDispatchEvent, event, to_rewrite)

    return Rewrite


def routing(guard: Any) -> type:
    """The ``Routing`` export class for a guard."""
    hook = _hook(guard, "routing")

    class Routing(_wit.Routing):
        def narrow(self, event: Any) -> Any:
            return _call(guard, hook, _tg.ToolRoutingDecisionEvent, event, to_names)

    return Routing


def result(guard: Any) -> type:
    """The ``Result`` export class for a guard."""
    hook = _hook(guard, "result")

    class Result(_wit.Result):
        def on_result(self, event: Any) -> None:
            _call(guard, hook, _tg.ToolResultCallbackEvent, event, _nothing)

    return Result


def response(guard: Any) -> type:
    """The ``Response`` export class for a guard."""
    hook = _hook(guard, "response")

    class Response(_wit.Response):
        def render(self, event: Any) -> Optional[str]:
            return _call(guard, hook, _tg.ResponseRenderEvent, event, to_answer)

    return Response


def observe(guard: Any) -> type:
    """The ``Observe`` export class for a guard defining lifecycle hooks:
    ``subscriptions`` answers the flags of exactly the hooks it defines, and
    ``observe`` calls the hook of the event's case with the event as its
    dataclass. A hook that raises faults the observation (logged, re-raised:
    the host counts and skips it); what it returns is ignored."""
    from wit_world.exports import observe as _obs

    hooks = _tg.observed_hooks(guard)
    if not hooks:
        raise TypeError("the guard implements no lifecycle hook")
    flags = _obs.EventKinds(0)
    by_case: dict[type, tuple[str, Any]] = {}
    for hook in hooks:
        event_type, case = _tg.LIFECYCLE[hook]
        flags |= getattr(_obs.EventKinds, case.replace("-", "_").upper())
        camel = "".join(word.capitalize() for word in case.split("-"))
        by_case[getattr(_obs, f"LifecycleEvent_{camel}")] = (hook, event_type)

    class Observe(_wit.Observe):
        def subscriptions(self) -> Any:
            return flags

        def observe(self, event: Any) -> None:
            # The host sends only the events subscribed to; anything else is ignored.
            found = by_case.get(type(event))
            if found is not None:
                hook, event_type = found
                _call(guard, hook, event_type, event.value, _nothing)

    return Observe


def to_answer(value: Any, hook: str = "on_response_render") -> Optional[str]:
    """A guard's response answer as a WIT ``option<string>``: a str, or None
    to keep the content."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{hook} returned {type(value).__name__}; expected the answer (a str) or None")
    return value


def _nothing(value: Any, hook: str = "on_tool_result") -> None:
    return None


def _config_object(text: str) -> Any:
    return _tg._object(text, "config") if text.strip() else {}


def config(guard: Any) -> type:
    """The ``Config`` export class (``validate-config``) for a guard."""
    from componentize_py_types import Err

    if not _tg.validates_config(guard):
        raise TypeError(f"the guard defines no {_tg.CONFIG_HOOK}")

    class Config(_wit.Config):
        def validate_config(self, config: str) -> None:
            refusal = _captured(lambda: _tg.check_config(guard, _config_object(config)))
            if refusal is not None:
                raise Err(refusal)

    return Config


FACTORIES: dict[str, Callable[[Any], type]] = {
    "routing": routing,
    "rewrite": rewrite,
    "steering": steering,
    "result": result,
    "response": response,
    "observe": observe,
    "config": config,
}
