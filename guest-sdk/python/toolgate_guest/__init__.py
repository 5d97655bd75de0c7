"""Write toolgate guards in Python.

A guard is a class that subclasses :class:`Guard` and overrides only the hooks
it needs; ``toolgate-guest-build guard.py -o guard.wasm`` turns it into a
component that exports exactly those seams (the host consults a guard only at
the seams its component exports).

=============  =======================================  ==================================  ==============================
seam           method (symfonic's hook)                 event (symfonic's class)            returns
=============  =======================================  ==================================  ==============================
``routing``    ``on_tool_routing_decision(event)``      :class:`ToolRoutingDecisionEvent`   names to keep visible, or None
``rewrite``    ``on_tool_call_dispatch(event)``         :class:`ToolCallDispatchEvent`      :class:`Rewrite`, or None
``steering``   ``on_before_tool_call(event)``           :class:`BeforeToolCallEvent`        :func:`steer`, :func:`cancel`,
                                                                                            :func:`proceed`, or None
``result``     ``on_tool_result(event)``                :class:`ToolResultCallbackEvent`    nothing
``response``   ``on_response_render(event)``            :class:`ResponseRenderEvent`        the answer to give (a str),
                                                                                            or None to keep ``content``
=============  =======================================  ==================================  ==============================

The hooks and events carry symfonic's names; the hook's ``state`` argument
is the event's ``state`` field. Events are dataclasses whose fields mirror
the WIT records (``toolgate:guard/types@0.3.0``) in snake_case, with the JSON
fields (``args``, ``state``, ``result``) already parsed. Every hook call runs
in a brand-new instance: nothing in memory survives from one call to the
next; what a guard must remember it keeps with :mod:`toolgate_guest.state`.
A guard granted outbound HTTP reaches it with :mod:`toolgate_guest.http`.

A guard may also define ``validate_config(config)`` (a method, or a
module-level function beside the hooks): the build then exports the
contract's ``config`` interface, and the host calls it once when it loads the
plugin, with the manifest's ``config`` table as a dict. Returning None accepts
it; raising ``ValueError`` (or ``TypeError``) refuses the plugin at load with
the exception's message. A guard without it exports no ``config``, and the
host loads it with any config.

Lifecycle events — symfonic's thirteen fire-and-forget hooks — are methods
too, named as symfonic names them: ``on_agent_start``, ``on_agent_end``,
``on_node_start``, ``on_node_end``, ``on_node_error``, ``on_llm_start``,
``on_llm_pre_call``, ``on_llm_end``, ``on_token_composition``,
``on_user_correction``, ``on_procedure_selection``, ``on_react_loop_end``,
``on_fabrication_detected`` (:data:`LIFECYCLE`), each given its event (a
dataclass named as symfonic's class, :class:`LLMEndEvent`, ...; JSON fields
such as ``usage`` parsed; see :mod:`toolgate_guest.lifecycle`) and returning
nothing. A guard defining any of them exports ``observe``, subscribed to
exactly those: the host calls it for nothing else. What an observer learns it
keeps in :mod:`toolgate_guest.state` (the ``run`` scope is the event's
``run_id``), where its decisions read it::

    class Budget(Guard):
        def on_llm_end(self, event: LLMEndEvent) -> None:
            state.add("tokens", int(event.usage.get("total_tokens", 0)))

        def on_before_tool_call(self, event):
            return cancel("over budget") if int(state.get("tokens") or 0) > 1000 else None

Deprecated names, still accepted: the hooks ``narrow``, ``dispatch``,
``before_tool_call`` and ``on_result`` (the WIT functions' names; see
:data:`DEPRECATED_HOOKS`) and the events ``RoutingEvent``, ``DispatchEvent``
and ``ToolResultEvent`` (aliases of the classes above).

A hook that raises is logged through the host and traps: the host counts it as
a fault and goes on as if the guard had returned nothing (or applies the
plugin's ``on_error`` policy).

This module is bundled into every component, so it imports only the standard
library.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from toolgate_guest import http, state
from toolgate_guest.lifecycle import (
    LIFECYCLE,
    AgentEndEvent,
    AgentStartEvent,
    FabricationDetectedEvent,
    LLMEndEvent,
    LLMPreCallEvent,
    LLMStartEvent,
    NodeEndEvent,
    NodeErrorEvent,
    NodeStartEvent,
    ProcedureSelectionEvent,
    ReactLoopEndEvent,
    TokenCompositionEvent,
    UserCorrectionEvent,
)

__all__ = [
    "AgentEndEvent",
    "AgentStartEvent",
    "FabricationDetectedEvent",
    "LIFECYCLE",
    "LLMEndEvent",
    "LLMPreCallEvent",
    "LLMStartEvent",
    "NodeEndEvent",
    "NodeErrorEvent",
    "NodeStartEvent",
    "ProcedureSelectionEvent",
    "ReactLoopEndEvent",
    "TokenCompositionEvent",
    "UserCorrectionEvent",
    "observed_hooks",
    "BeforeToolCallEvent",
    "CONFIG_HOOK",
    "DEPRECATED_HOOKS",
    "DispatchEvent",
    "Guard",
    "Proceed",
    "ResponseRenderEvent",
    "Rewrite",
    "RoutingEvent",
    "SEAMS",
    "Skip",
    "ToolCallDispatchEvent",
    "ToolInfo",
    "ToolResultCallbackEvent",
    "ToolResultEvent",
    "ToolRoutingDecisionEvent",
    "Verdict",
    "cancel",
    "check_config",
    "config",
    "log",
    "proceed",
    "rewrite",
    "skip",
    "steer",
]

#: Each seam and the method (or module-level function) that implements it:
#: symfonic's hook names.
SEAMS: Dict[str, str] = {
    "routing": "on_tool_routing_decision",
    "rewrite": "on_tool_call_dispatch",
    "steering": "on_before_tool_call",
    "result": "on_tool_result",
    "response": "on_response_render",
}

#: Deprecated: each seam's former hook name (its WIT function's), still
#: accepted where the guard does not implement the hook under its own name
#: (the response seam's hook never had another).
DEPRECATED_HOOKS: Dict[str, str] = {
    "routing": "narrow",
    "rewrite": "dispatch",
    "steering": "before_tool_call",
    "result": "on_result",
}

#: The method (or module-level function) that checks the plugin's config at
#: load, exported as the ``config`` interface's ``validate-config``.
CONFIG_HOOK = "validate_config"

Json = Any
"""A value decoded from JSON text."""


def _object(text: str, what: str) -> Dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a JSON object: {type(value).__name__}")
    return value


# --------------------------------------------------------------------------
# Events (toolgate:guard/types@0.3.0)
# --------------------------------------------------------------------------


@dataclass
class ToolInfo:
    """One tool the model may be offered this turn."""

    #: The LangChain tool ``name``.
    name: str
    #: The tool's description, as the model sees it (empty when unknown).
    description: str = ""


@dataclass
class ToolRoutingDecisionEvent:
    """``on_tool_routing_decision``: which tools are visible this turn.

    symfonic's ``ToolRoutingDecisionEvent``, plus the visible tools, the query
    and the state (WIT: ``routing-event``).
    """

    #: The agent run this turn belongs to.
    run_id: str
    #: The routing mode in effect: "observe" or "enforce".
    mode: str
    #: The intent label the framework's router assigned to the query.
    intent_label: str
    #: How many tools the full manifest holds.
    total_tools: int
    #: The tool names visible so far (after earlier guards' narrowing).
    narrowed_tool_names: List[str]
    #: The framework's rough estimate of prompt tokens saved by narrowing.
    saved_tokens_estimate: int = 0
    #: The visible tools with their descriptions.
    tools: List[ToolInfo] = field(default_factory=list)
    #: The user's query, when the caller knows it.
    query: Optional[str] = None
    #: The caller's state (``{}`` when there is none).
    state: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wit(cls, e: Any) -> "ToolRoutingDecisionEvent":
        return cls(
            run_id=e.run_id,
            mode=e.mode,
            intent_label=e.intent_label,
            total_tools=e.total_tools,
            narrowed_tool_names=list(e.narrowed_tool_names),
            saved_tokens_estimate=e.saved_tokens_estimate,
            tools=[ToolInfo(t.name, t.description) for t in e.tools],
            query=e.query,
            state=_object(e.state, "state"),
        )


@dataclass
class ToolCallDispatchEvent:
    """``on_tool_call_dispatch``: a tool call about to be dispatched.

    symfonic's ``ToolCallDispatchEvent``, plus the state (WIT:
    ``dispatch-event``).
    """

    #: The agent run this turn belongs to.
    run_id: str
    #: 0-indexed React loop iteration that produced this call.
    iteration_index: int
    #: The node that emitted the call.
    node_name: str
    #: The LangChain ``tool_call`` id (a rewrite cannot change it).
    call_id: str
    #: The tool the call names (after any earlier guard's rewrite).
    tool_name: str
    #: The call's arguments (after any earlier rewrite).
    args: Dict[str, Any]
    #: The post-routing palette: the only names a rewrite may target.
    available_tools: List[str] = field(default_factory=list)
    #: The caller's state (``{}`` when there is none).
    state: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wit(cls, e: Any) -> "ToolCallDispatchEvent":
        return cls(
            run_id=e.run_id,
            iteration_index=e.iteration_index,
            node_name=e.node_name,
            call_id=e.call_id,
            tool_name=e.tool_name,
            args=_object(e.args, "args"),
            available_tools=list(e.available_tools),
            state=_object(e.state, "state"),
        )


@dataclass
class BeforeToolCallEvent:
    """``on_before_tool_call``: a tool call about to run.

    symfonic's ``BeforeToolCallEvent``, plus the state (WIT:
    ``before-tool-call-event``).
    """

    #: The agent run this turn belongs to.
    run_id: str
    #: The (post-rewrite) tool about to run.
    tool_name: str
    #: The LangChain ``tool_call`` id this decision applies to.
    call_id: str
    #: The (post-rewrite) arguments.
    args: Dict[str, Any]
    #: The caller's state (``{}`` when there is none).
    state: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wit(cls, e: Any) -> "BeforeToolCallEvent":
        return cls(
            run_id=e.run_id,
            tool_name=e.tool_name,
            call_id=e.call_id,
            args=_object(e.args, "args"),
            state=_object(e.state, "state"),
        )


@dataclass
class ToolResultCallbackEvent:
    """``on_tool_result``: what a tool returned.

    symfonic's ``ToolResultCallbackEvent``, plus the state (WIT:
    ``tool-result-event``).
    """

    #: The agent run this turn belongs to.
    run_id: str
    #: The tool that produced the result.
    tool_name: str
    #: The ``ToolMessage.content``, decoded (None on framework cancellation).
    result: Json
    #: The ``tool_call`` id correlating this result to its dispatch.
    call_id: str
    #: True when the result will be supplied later by a resume cycle.
    deferred: bool = False
    #: True when the ``ToolMessage`` carried ``status="error"``.
    is_error: bool = False
    #: The caller's state (``{}`` when there is none).
    state: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wit(cls, e: Any) -> "ToolResultCallbackEvent":
        return cls(
            run_id=e.run_id,
            tool_name=e.tool_name,
            result=json.loads(e.result),
            call_id=e.call_id,
            deferred=e.deferred,
            is_error=e.is_error,
            state=_object(e.state, "state"),
        )


@dataclass
class ResponseRenderEvent:
    """``on_response_render``: the run's final answer, about to be returned.

    symfonic's ``ResponseRenderEvent``, plus the answer as it stands and the
    state (WIT: ``response-event``).
    """

    #: The agent run this turn belongs to.
    run_id: str
    #: 0-indexed React loop iteration that produced the final answer; -1
    #: when the engine, not the React loop, emitted the event.
    iteration_index: int
    #: The model that produced the final answer.
    model: str
    #: The node that produced the final answer.
    node_name: str
    #: The final answer before any handler rewrote it.
    original_content: str
    #: The answer as it stands: the previous guard's (or handler's) output.
    content: str
    #: The caller's state (``{}`` when there is none).
    state: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wit(cls, e: Any) -> "ResponseRenderEvent":
        return cls(
            run_id=e.run_id,
            iteration_index=e.iteration_index,
            model=e.model,
            node_name=e.node_name,
            original_content=e.original_content,
            content=e.content,
            state=_object(e.state, "state"),
        )


# Deprecated: the former names of the events (aliases, the same classes).
RoutingEvent = ToolRoutingDecisionEvent
DispatchEvent = ToolCallDispatchEvent
ToolResultEvent = ToolResultCallbackEvent


# --------------------------------------------------------------------------
# What a guard returns
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Proceed:
    """Run the tool normally; later guards are still consulted."""


@dataclass(frozen=True)
class Skip:
    """Do not run the tool; the model sees ``content`` instead.

    ``is_error`` True (or None, the default) steers: the model sees an error
    result and retries. False cancels: a benign result the model moves past.
    An empty ``content`` is malformed and the host treats it as proceed.
    """

    content: str
    is_error: Optional[bool] = True


Verdict = Union[Proceed, Skip]
"""What a steering guard decides for one call."""


@dataclass
class Rewrite:
    """A rewritten call: the tool to call instead and its new arguments.

    ``args`` must be a JSON object, or the host drops the rewrite with a
    warning. The next guard sees ``tool_name`` whatever it is; the chain's
    resulting call must name a tool in the event's ``available_tools``, or the
    host drops the rewrite with a warning and the original call runs.
    """

    tool_name: str
    args: Dict[str, Any]


def proceed() -> Proceed:
    """Run the tool (the same as returning None)."""
    return Proceed()


def steer(message: str) -> Skip:
    """Refuse the call; the model sees ``message`` as an error result and retries."""
    return Skip(message, True)


def cancel(message: str) -> Skip:
    """Refuse the call; the model sees ``message`` as a benign result and moves on."""
    return Skip(message, False)


def skip(content: str, is_error: Optional[bool] = True) -> Skip:
    """Refuse the call with an explicit ``is_error`` (None means the default, True)."""
    return Skip(content, is_error)


def rewrite(tool_name: str, args: Dict[str, Any]) -> Rewrite:
    """Replace the call with ``tool_name(**args)``."""
    return Rewrite(tool_name, args)


# --------------------------------------------------------------------------
# The guard
# --------------------------------------------------------------------------


class Guard:
    """Base class of a guard: override the hooks you need, leave the rest.

    The build exports a seam only when its method is overridden, so a guard
    that overrides just ``on_before_tool_call`` is a steering-only component
    and costs nothing at the other seams. A fresh instance is made for every
    call. A hook under its deprecated name (:data:`DEPRECATED_HOOKS`, such as
    ``before_tool_call``) still counts.

    A subclass that also defines ``validate_config(self, config)`` exports
    ``validate-config``: called once at load with the manifest's ``config``
    (a dict), it returns None to accept it or raises ``ValueError`` to refuse
    the plugin with that message.
    """

    def on_tool_routing_decision(self, event: ToolRoutingDecisionEvent) -> Optional[List[str]]:
        """Routing: the tool names to keep visible, or None to leave them."""
        return None

    def on_tool_call_dispatch(self, event: ToolCallDispatchEvent) -> Optional[Rewrite]:
        """Rewrite: a replacement call, or None to pass the call through."""
        return None

    def on_before_tool_call(self, event: BeforeToolCallEvent) -> Optional[Verdict]:
        """Steering: :func:`steer` / :func:`cancel` to refuse, None to proceed."""
        return None

    def on_tool_result(self, event: ToolResultCallbackEvent) -> None:
        """Result: observe what a tool returned."""
        return None

    def on_response_render(self, event: ResponseRenderEvent) -> Optional[str]:
        """Response: the final answer to give instead of ``event.content``,
        or None to keep it."""
        return None

    # Lifecycle hooks: a guard overriding any of them exports ``observe``,
    # subscribed to exactly those. Each observes its event; nothing to return.

    def on_agent_start(self, event: AgentStartEvent) -> None:
        """``on_agent_start``: agent execution begins."""

    def on_agent_end(self, event: AgentEndEvent) -> None:
        """``on_agent_end``: agent execution completed."""

    def on_node_start(self, event: NodeStartEvent) -> None:
        """``on_node_start``: a graph node is about to run."""

    def on_node_end(self, event: NodeEndEvent) -> None:
        """``on_node_end``: a graph node completed."""

    def on_node_error(self, event: NodeErrorEvent) -> None:
        """``on_node_error``: a graph node raised."""

    def on_llm_start(self, event: LLMStartEvent) -> None:
        """``on_llm_start``: the LLM is invoked (the engine-view prompt)."""

    def on_llm_pre_call(self, event: LLMPreCallEvent) -> None:
        """``on_llm_pre_call``: right before the provider call."""

    def on_llm_end(self, event: LLMEndEvent) -> None:
        """``on_llm_end``: the LLM returned (with its ``usage``)."""

    def on_token_composition(self, event: TokenCompositionEvent) -> None:
        """``on_token_composition``: input tokens by prompt section."""

    def on_user_correction(self, event: UserCorrectionEvent) -> None:
        """``on_user_correction``: the user corrected a previous answer."""

    def on_procedure_selection(self, event: ProcedureSelectionEvent) -> None:
        """``on_procedure_selection``: the force-resolver picked a procedural skill."""

    def on_react_loop_end(self, event: ReactLoopEndEvent) -> None:
        """``on_react_loop_end``: the React loop ended with an empty final response."""

    def on_fabrication_detected(self, event: FabricationDetectedEvent) -> None:
        """``on_fabrication_detected``: the fabrication check found suspect content."""


def _implements(guard: Any, method: str) -> bool:
    impl = getattr(guard, method, None)
    if isinstance(guard, type) and issubclass(guard, Guard):
        return impl is not None and impl is not getattr(Guard, method, None)
    return callable(impl)


def validates_config(guard: Any) -> bool:
    """Whether ``guard`` (a :class:`Guard` subclass or a module) defines
    :data:`CONFIG_HOOK`, and so exports ``validate-config``."""
    return _implements(guard, CONFIG_HOOK)


def check_config(guard: Any, config: Dict[str, Any]) -> Optional[str]:
    """What ``guard``'s ``validate_config`` tells the host about ``config``.

    None when it accepts the config (returns None); the refusal's message
    when it raises ``ValueError`` or ``TypeError``. Any other exception, or an
    answer other than None, propagates: in a component that traps, and the
    host refuses the plugin as faulted. A class guard is checked on a fresh
    instance, as its hooks are. The component's ``validate-config`` export
    runs exactly this, so a unit test can call it natively.
    """
    target = guard() if isinstance(guard, type) else guard
    try:
        answer = getattr(target, CONFIG_HOOK)(config)
    except (ValueError, TypeError) as exc:
        return str(exc) or type(exc).__name__
    if answer is not None:
        raise TypeError(f"{CONFIG_HOOK} returned {type(answer).__name__}; "
                        "expected None (raise ValueError to refuse the config)")
    return None


def hook_name(guard: Any, seam: str) -> Optional[str]:
    """The name of the method (or function) implementing ``seam`` in ``guard``.

    The hook's own name (:data:`SEAMS`) when the guard implements it, else its
    deprecated name (:data:`DEPRECATED_HOOKS`) when the guard implements that,
    else None. A guard implementing both names of one seam is refused
    (``TypeError``): which one runs would be a guess.
    """
    name, old = SEAMS[seam], DEPRECATED_HOOKS.get(seam)
    new_impl = _implements(guard, name)
    old_impl = old is not None and _implements(guard, old)
    if new_impl and old_impl:
        raise TypeError(f"the guard implements both {name} and {old}, its deprecated name; keep {name}")
    if new_impl:
        return name
    return old if old_impl else None


def implemented_seams(guard: Any) -> List[str]:
    """The seams a guard implements, in WIT order.

    ``guard`` is a :class:`Guard` subclass (a seam counts when its method is
    overridden) or any other object, such as a module, whose attributes named
    after the hooks are callables. A hook counts under its own name or its
    deprecated one (see :func:`hook_name`).
    """
    return [seam for seam in SEAMS if hook_name(guard, seam) is not None]


def observed_hooks(guard: Any) -> List[str]:
    """The lifecycle hooks a guard implements (:data:`LIFECYCLE`'s names,
    in its order): those its ``observe`` export subscribes to. Empty when it
    observes nothing (and so exports no ``observe``)."""
    return [hook for hook in LIFECYCLE if _implements(guard, hook)]


# --------------------------------------------------------------------------
# What the host lends every guard
# --------------------------------------------------------------------------

_LEVELS = ("trace", "debug", "info", "warn", "error")


def _host() -> Any:
    try:
        from wit_world.imports import host  # only exists inside a component
    except ImportError:
        return None
    return host


def log(message: str, level: str = "info") -> None:
    """Writes one line to the host's log, tagged with the plugin's name.

    ``level`` is one of trace, debug, info, warn, error. The host budgets log
    calls and bytes per hook call. Outside a component (in unit tests) the line
    goes to stderr.
    """
    if level not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; expected one of {', '.join(_LEVELS)}")
    host = _host()
    if host is None:
        sys.__stderr__.write(f"[{level}] {message}\n")
        return
    host.log(host.Level[level.upper()], message)


def config() -> Dict[str, Any]:
    """The plugin's configuration (the manifest's ``config`` table); ``{}`` when none.

    Outside a component (in unit tests) this is ``{}``.
    """
    host = _host()
    if host is None:
        return {}
    return _object(host.config(), "config")

