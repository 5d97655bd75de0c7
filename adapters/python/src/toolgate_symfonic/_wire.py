"""What the adapter puts on the wire: JSON-safe copies of events and state.

symfonic hands its hooks live objects: the ``args`` dict of a tool call is the
very dict LangGraph will dispatch, and ``state`` is the LangGraph node state
(message objects, the callback manager, the capability registry). Nothing in
here keeps a reference to either: every value sent to the service is a fresh,
JSON-safe copy.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

#: Keys of the JSON state the adapter sends with every event. Anything else in
#: symfonic's node state stays in the process.
STATE_KEYS: tuple[str, ...] = (
    "run_id",
    "tenant_id",
    "sub_tenant_id",
    "query",
    "allowed_tool_names",
    "tool_calls",
)

_MAX_DEPTH = 64


def json_safe(value: Any, _depth: int = 0) -> Any:
    """Returns a deep, JSON-serialisable copy of ``value``.

    dicts become dicts with string keys, lists / tuples / sets become lists,
    strings, booleans, ``None`` and finite numbers are kept; non-finite floats
    become ``None``; anything else (a LangChain message, a datetime, a custom
    object) becomes ``str(value)``. Nesting deeper than 64 levels is cut off
    as a string, so a cyclic structure cannot recurse forever.
    """
    kind = type(value)
    # The exact built-in types first: isinstance against the Mapping ABC
    # is the slowest test here, and nearly every value is one of these.
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict and _depth < _MAX_DEPTH:
        return {
            (k if type(k) is str else str(k)): json_safe(v, _depth + 1) for k, v in value.items()
        }
    if kind is list and _depth < _MAX_DEPTH:
        return [json_safe(v, _depth + 1) for v in value]
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if _depth >= _MAX_DEPTH:
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): json_safe(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v, _depth + 1) for v in value]
    return str(value)


def _json_kind(value: Any) -> type | None:
    """The JSON type of a JSON-safe value: ``bool``, ``int``, ``float``,
    ``str``, ``list``, ``dict``, or ``None`` for ``null``."""
    if value is None:
        return None
    for kind in (bool, int, float, str, list, dict):
        if isinstance(value, kind):
            return kind
    return type(value)


def _same_json(a: Any, b: Any) -> bool:
    """Whether two JSON-safe values are the same JSON value: types compared
    strictly (``1``, ``1.0`` and ``true`` differ), object key order ignored."""
    kind = _json_kind(a)
    if kind is not _json_kind(b):
        return False
    if kind is dict:
        return a.keys() == b.keys() and all(_same_json(v, b[k]) for k, v in a.items())
    if kind is list:
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def restore_unchanged(sent: Any, original: Any, returned: Any) -> Any:
    """``returned`` with every part that is still what was sent put back as
    the ``original`` Python value it was made from.

    ``sent`` is ``json_safe(original)``, what a guard received; ``returned``
    is what the guard answered. Where ``returned`` holds the same JSON value
    as ``sent``, the result is ``original`` itself (the very object: a
    ``datetime``, ``bytes``, a ``set``, a tuple, a NaN, a structure deeper
    than ``json_safe`` sends, a ``str`` subclass). Where an object (or a
    list of the same length) changed, its members are compared one by one
    (an object's by key, a list's by position), so only what the guard
    changed is new. Everything else is ``returned`` as is.
    """
    if _same_json(sent, returned):
        return original
    if isinstance(returned, dict) and isinstance(sent, dict) and isinstance(original, Mapping):
        # json_safe writes a key as str(key): map each back to its original.
        keys = {(k if type(k) is str else str(k)): k for k in original}
        out = {}
        for key, value in returned.items():
            if key in sent and key in keys:
                out[keys[key]] = restore_unchanged(sent[key], original[keys[key]], value)
            else:
                out[key] = value
        return out
    if (
        isinstance(returned, list)
        and isinstance(sent, list)
        and isinstance(original, (list, tuple))
        and len(returned) == len(sent) == len(original)
    ):
        return [
            restore_unchanged(s, o, r) for s, o, r in zip(sent, original, returned, strict=True)
        ]
    return returned


def _current_tool_calls(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool calls of this turn: those on the newest AI message, if any."""
    messages = state.get("messages") or ()
    if not messages:
        return []
    last = messages[-1]
    calls = getattr(last, "tool_calls", None)
    if not calls:
        return []
    out = []
    for call in calls:
        if not isinstance(call, Mapping):
            continue
        out.append(
            {
                "name": str(call.get("name", "")),
                "args": json_safe(call.get("args") or {}),
                "id": str(call.get("id", "")),
            }
        )
    return out


def state_subset(state: Any) -> dict[str, Any]:
    """The documented, JSON-safe subset of symfonic's node ``state``.

    Keys (always present; ``None`` when symfonic has no value):

    - ``run_id`` (str): the agent run.
    - ``tenant_id`` / ``sub_tenant_id`` (str): the run's tenant scope.
    - ``query`` (str): the user's query for this run.
    - ``allowed_tool_names`` (list of str): symfonic's allow-list, if set.
    - ``tool_calls`` (list of ``{"name", "args", "id"}``): every tool call of
      the current turn (the newest AI message), ``[]`` when there is none.
      At the rewrite seam it is always ``[]``: symfonic calls
      ``on_tool_call_dispatch`` before the turn's AI message is in its state.
    """
    if not isinstance(state, Mapping):
        state = {}
    out: dict[str, Any] = {}
    for key in ("run_id", "tenant_id", "sub_tenant_id", "query"):
        value = state.get(key)
        out[key] = None if value is None else str(value)
    allowed = state.get("allowed_tool_names")
    out["allowed_tool_names"] = None if allowed is None else [str(n) for n in allowed]
    out["tool_calls"] = _current_tool_calls(state)
    return out


# The host's rule for a tenant directory name (``validate_tenant``):
# 1-64 characters of [A-Za-z0-9_.-], not starting with a dot.
_PLAIN_TENANT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")
_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-")


@functools.lru_cache(maxsize=1024)
def tenant_dir(tenant_id: str) -> str:
    """The tenant directory name (under ``tenants/``) for a symfonic tenant id.

    symfonic accepts any non-empty string as a tenant id (``acme:eu``,
    ``org/team``, ``Zürich``); toolgate's tenant directories are plain names.
    The mapping is injective and its result is always a plain name, a single
    path component that cannot escape ``tenants/``:

    1. An id that already is a valid directory name (1-64 characters of
       ``[A-Za-z0-9_.-]``, not starting with ``.``) and does not start with
       ``__`` is used as is: ``acme`` -> ``acme``.
    2. Any other id becomes ``__`` followed by the id with every byte of its
       UTF-8 encoding outside ``[A-Za-z0-9.-]`` written as ``_XX`` (two
       uppercase hex digits): ``acme:eu`` -> ``__acme_3Aeu``,
       ``org/team`` -> ``__org_2Fteam``, ``__x`` -> ``___5F_5Fx``.
    3. If that is longer than 64 characters: ``___x`` followed by the first
       56 hex digits of the SHA-256 of the id's UTF-8 bytes.
    """
    if _PLAIN_TENANT.fullmatch(tenant_id) and not tenant_id.startswith("__"):
        return tenant_id
    raw = tenant_id.encode("utf-8", "surrogatepass")
    encoded = "__" + "".join(chr(b) if b in _KEPT else f"_{b:02X}" for b in raw)
    if len(encoded) <= 64:
        return encoded
    return "___x" + hashlib.sha256(raw).hexdigest()[:56]


def tool_name_of(tool: Any) -> str | None:
    """The ``name`` of a LangChain tool (or any object / mapping with one)."""
    name = tool.get("name") if isinstance(tool, Mapping) else getattr(tool, "name", None)
    return name if isinstance(name, str) and name else None


def describe_tools(tools: Sequence[Any]) -> list[dict[str, str]]:
    """``[{"name", "description"}]`` for the tools that have a name."""
    out = []
    for tool in tools:
        name = tool_name_of(tool)
        if name is None:
            continue
        if isinstance(tool, Mapping):
            desc = tool.get("description")
        else:
            desc = getattr(tool, "description", None)
        out.append({"name": name, "description": desc if isinstance(desc, str) else ""})
    return out


#: symfonic's thirteen lifecycle hooks and the fields of each one's event
#: (the seed's names, which toolgate's events take as they are).
LIFECYCLE_FIELDS: dict[str, tuple[str, ...]] = {
    "on_agent_start": ("query", "run_id"),
    "on_agent_end": ("run_id", "final_response", "duration_ms", "node_count"),
    "on_node_start": ("node_name", "run_id"),
    "on_node_end": ("node_name", "run_id", "duration_ms"),
    "on_node_error": ("node_name", "run_id", "error", "error_type"),
    "on_llm_start": ("model", "messages", "run_id", "system_prompt", "node_name", "turn_index"),
    "on_llm_pre_call": (
        "model",
        "messages",
        "tools",
        "run_id",
        "invocation_params",
        "node_name",
    ),
    "on_llm_end": (
        "model",
        "output",
        "usage",
        "run_id",
        "node_name",
        "pricing_unknown",
        "duration_ms",
        "started_at_utc",
        "iteration_index",
        "turn_index",
    ),
    "on_token_composition": (
        "system_prompt_tokens",
        "tool_definitions_tokens",
        "conversation_history_tokens",
        "memory_context_tokens",
        "run_id",
    ),
    "on_user_correction": (
        "turn_id",
        "original_response",
        "correction_text",
        "activation_log",
        "tenant_id",
        "scope",
    ),
    "on_procedure_selection": (
        "procedure_id",
        "action_tool",
        "pre_tool",
        "force_mode",
        "candidate_count",
    ),
    "on_react_loop_end": (
        "run_id",
        "iteration_index",
        "content_type",
        "has_tool_calls",
        "tool_call_count",
        "termination_reason",
    ),
    "on_fabrication_detected": (
        "run_id",
        "mode",
        "action_taken",
        "findings",
        "refuse_threshold",
        "max_finding_confidence",
        "original_draft_preview",
        "replacement_preview",
        "preview_truncated",
    ),
}

#: Fields the contract types as unsigned counts: a negative value (symfonic
#: writes -1 for "not from the React loop") is sent as 0.
_COUNTS = frozenset(
    (
        "iteration_index",
        "turn_index",
        "node_count",
        "candidate_count",
        "tool_call_count",
        "system_prompt_tokens",
        "tool_definitions_tokens",
        "conversation_history_tokens",
        "memory_context_tokens",
    )
)


def _message(message: Any) -> Any:
    """A LangChain message as JSON: ``{"type", "content"}`` plus, where the
    message has them, ``tool_calls``, ``tool_call_id`` and ``name``; a value
    that is no message goes through :func:`json_safe`."""
    kind = getattr(message, "type", None)
    if not isinstance(kind, str) or not hasattr(message, "content"):
        return json_safe(message)
    out: dict[str, Any] = {"type": kind, "content": json_safe(message.content)}
    for key in ("tool_calls", "tool_call_id", "name"):
        value = getattr(message, key, None)
        if value:
            out[key] = json_safe(value)
    return out


def _record(value: Any) -> Any:
    """A structured object as a JSON object of its fields: a pydantic model
    (symfonic's ``TenantScope``) by its ``model_dump(mode="json")``, a
    dataclass by its fields; anything else through :func:`json_safe`."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return json_safe(dump(mode="json"))
        except Exception:  # noqa: BLE001 - fall back to its text
            return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    return json_safe(value)


def lifecycle_event(hook: str, event: Any) -> dict[str, Any]:
    """The JSON form toolgate takes of symfonic's event for ``hook``.

    Every field of the hook's event class (:data:`LIFECYCLE_FIELDS`) that
    the event has, as a JSON-safe copy (:func:`json_safe`); ``messages``
    as ``{"type", "content", ...}`` records; ``scope`` (symfonic's
    ``TenantScope``, a pydantic model) as an object of its fields; a negative count as 0. A field the event lacks is
    left out (the host fills a field with a default, and names a missing
    required one).
    """
    out: dict[str, Any] = {}
    for name in LIFECYCLE_FIELDS[hook]:
        try:
            value = getattr(event, name)
        except AttributeError:
            continue
        if name == "messages" and isinstance(value, (list, tuple)):
            out[name] = [_message(m) for m in value]
        elif name == "scope" and value is not None:
            out[name] = _record(value)
        elif name in _COUNTS and type(value) is int and value < 0:
            out[name] = 0
        else:
            out[name] = json_safe(value)
    return out
