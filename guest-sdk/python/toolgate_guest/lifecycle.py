"""Lifecycle events (``toolgate:guard/observe@0.3.0``): symfonic's thirteen
fire-and-forget hooks, each a dataclass named as its symfonic class
(:class:`LLMEndEvent`, ...) with the seed's snake_case fields.

A guard observes an event by defining the method of its hook
(``on_llm_end(self, event)``, ...; see :data:`LIFECYCLE`): the build then
exports ``observe``, subscribed to exactly the hooks the guard defines, and
the host calls it for nothing else. Observers return nothing; what they learn
they keep in :mod:`toolgate_guest.state` (the ``run`` scope is the event's
``run_id``), where the guard's decisions read it. JSON fields arrive parsed:
the seed's ``dict`` as a dict, ``list`` as a list, ``Any`` as any value.

This module is bundled into every component: it imports only the standard
library.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Dict, List, Optional, Tuple

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
]


def _parse(text: str, kind: type, name: str) -> Any:
    value = json.loads(text)
    if kind is not object and not isinstance(value, kind):
        raise ValueError(f"event field {name!r} is not a JSON {'object' if kind is dict else 'array'}: "
                         f"{type(value).__name__}")
    return value


class _Event:
    """What every lifecycle event shares: built from its WIT record, field
    by field, the JSON ones (``_JSON``: name -> dict, list or object)
    parsed."""

    _JSON: ClassVar[Dict[str, type]] = {}

    @classmethod
    def from_wit(cls, e: Any) -> Any:
        """The event of the WIT record ``e``."""
        values = {}
        for f in fields(cls):  # type: ignore[arg-type]
            raw = getattr(e, f.name)
            kind = cls._JSON.get(f.name)
            values[f.name] = raw if kind is None else _parse(raw, kind, f.name)
        return cls(**values)


@dataclass
class AgentStartEvent(_Event):
    """``on_agent_start``: agent execution begins."""

    #: The user's query.
    query: str
    #: The agent run.
    run_id: str


@dataclass
class AgentEndEvent(_Event):
    """``on_agent_end``: agent execution completed."""

    #: The agent run.
    run_id: str
    #: The final answer (None when streaming).
    final_response: Optional[str]
    #: How long the run took, milliseconds.
    duration_ms: float
    #: Nodes run (None when streaming).
    node_count: Optional[int]


@dataclass
class NodeStartEvent(_Event):
    """``on_node_start``: a graph node is about to run."""

    #: The node.
    node_name: str
    #: The agent run.
    run_id: str


@dataclass
class NodeEndEvent(_Event):
    """``on_node_end``: a graph node completed."""

    #: The node.
    node_name: str
    #: The agent run.
    run_id: str
    #: How long it ran, milliseconds.
    duration_ms: float


@dataclass
class NodeErrorEvent(_Event):
    """``on_node_error``: a graph node raised."""

    #: The node.
    node_name: str
    #: The agent run.
    run_id: str
    #: The exception's message.
    error: str
    #: The exception's class name.
    error_type: str


@dataclass
class LLMStartEvent(_Event):
    """``on_llm_start``: the LLM is invoked (the engine-view prompt)."""

    _JSON = {"messages": list}

    #: The model invoked.
    model: str
    #: The conversation (a list).
    messages: List[Any]
    #: The agent run.
    run_id: str
    #: The system prompt.
    system_prompt: str
    #: The calling node.
    node_name: str
    #: The turn.
    turn_index: int


@dataclass
class LLMPreCallEvent(_Event):
    """``on_llm_pre_call``: right before the provider call (the wire-accurate payload)."""

    _JSON = {"messages": list, "tools": list, "invocation_params": dict}

    #: The model invoked.
    model: str
    #: The post-consolidation messages.
    messages: List[Any]
    #: The bound tools: ``{"name", "description", "schema"}`` records.
    tools: List[Any]
    #: The agent run.
    run_id: str
    #: Provider invocation kwargs (``{}`` when unknown).
    invocation_params: Dict[str, Any]
    #: The calling node.
    node_name: str


@dataclass
class LLMEndEvent(_Event):
    """``on_llm_end``: the LLM returned."""

    _JSON = {"usage": dict}

    #: The model invoked.
    model: str
    #: What it returned.
    output: str
    #: The provider's usage dict (token counts: ``total_tokens``,
    #: ``input_tokens``/``output_tokens``, ``prompt_tokens``/``completion_tokens``).
    usage: Dict[str, Any]
    #: The agent run.
    run_id: str
    #: The calling node ("react", ...).
    node_name: str
    #: The model had no price.
    pricing_unknown: bool
    #: The call's latency, milliseconds.
    duration_ms: float
    #: When it started, ISO-8601.
    started_at_utc: str
    #: The React loop iteration.
    iteration_index: int
    #: The turn.
    turn_index: int


@dataclass
class TokenCompositionEvent(_Event):
    """``on_token_composition``: input tokens by prompt section."""

    #: Tokens of the system prompt.
    system_prompt_tokens: int
    #: Tokens of the tool definitions.
    tool_definitions_tokens: int
    #: Tokens of the conversation history.
    conversation_history_tokens: int
    #: Tokens of the memory context.
    memory_context_tokens: int
    #: The agent run.
    run_id: str


@dataclass
class UserCorrectionEvent(_Event):
    """``on_user_correction``: the user corrected a previous answer (no run:
    its ``run`` state scope is the empty run)."""

    _JSON = {"activation_log": dict, "scope": object}

    #: The corrected turn.
    turn_id: str
    #: The answer corrected.
    original_response: str
    #: The user's correction.
    correction_text: str
    #: That turn's activation log.
    activation_log: Dict[str, Any]
    #: symfonic's tenant.
    tenant_id: str
    #: The ``TenantScope`` (None: none).
    scope: Any


@dataclass
class ProcedureSelectionEvent(_Event):
    """``on_procedure_selection``: the force-resolver picked a procedural
    skill (no run: its ``run`` state scope is the empty run)."""

    #: The winning skill's id.
    procedure_id: Optional[str]
    #: The action tool it resolves to.
    action_tool: Optional[str]
    #: The tool ``tool_choice`` is forced to.
    pre_tool: str
    #: "off", "soft" or "hard".
    force_mode: str
    #: Candidates considered (at least 1).
    candidate_count: int


@dataclass
class ReactLoopEndEvent(_Event):
    """``on_react_loop_end``: the React loop ended with an empty final response."""

    #: The agent run.
    run_id: str
    #: The terminating iteration.
    iteration_index: int
    #: Python type name of the message's content.
    content_type: str
    #: The last message carried tool calls.
    has_tool_calls: bool
    #: How many.
    tool_call_count: int
    #: "tool_calls_with_no_text", "no_content_no_tool_calls" or "recursion_exhausted".
    termination_reason: str


@dataclass
class FabricationDetectedEvent(_Event):
    """``on_fabrication_detected``: the fabrication check found suspect content."""

    _JSON = {"findings": list}

    #: The agent run.
    run_id: str
    #: "off", "observe", "revise" or "refuse".
    mode: str
    #: "none", "observed", "revise_forced" or "refuse_replaced".
    action_taken: str
    #: The findings (a list of dicts).
    findings: List[Any]
    #: The threshold in effect.
    refuse_threshold: float
    #: The strongest finding.
    max_finding_confidence: float
    #: The draft's first 240 characters.
    original_draft_preview: str
    #: The replacement's (refuse mode).
    replacement_preview: Optional[str]
    #: The draft was longer than 240.
    preview_truncated: bool


#: Each lifecycle hook (a guard's method, symfonic's name), in the WIT
#: variant's order: its event class and the WIT case (``llm-end``).
LIFECYCLE: Dict[str, Tuple[type, str]] = {
    "on_agent_start": (AgentStartEvent, "agent-start"),
    "on_agent_end": (AgentEndEvent, "agent-end"),
    "on_node_start": (NodeStartEvent, "node-start"),
    "on_node_end": (NodeEndEvent, "node-end"),
    "on_node_error": (NodeErrorEvent, "node-error"),
    "on_llm_start": (LLMStartEvent, "llm-start"),
    "on_llm_pre_call": (LLMPreCallEvent, "llm-pre-call"),
    "on_llm_end": (LLMEndEvent, "llm-end"),
    "on_token_composition": (TokenCompositionEvent, "token-composition"),
    "on_user_correction": (UserCorrectionEvent, "user-correction"),
    "on_procedure_selection": (ProcedureSelectionEvent, "procedure-selection"),
    "on_react_loop_end": (ReactLoopEndEvent, "react-loop-end"),
    "on_fabrication_detected": (FabricationDetectedEvent, "fabrication-detected"),
}
