"""``ToolgateHandler``: symfonic's tool seams and final answer, answered by toolgate guards.

The guards run either in this process (``ToolgateHandler(plugins="dir")``: a
``toolgate.Host`` over a plugin directory, the default) or in a
``toolgate serve`` service (``ToolgateHandler(url="http://...")``). Each hook
turns symfonic's event into toolgate's JSON event, sends it with a JSON-safe
subset of the hook's ``state`` and the run's tenant, and returns the answer,
which is exactly what the symfonic hook must return. Both transports take the
same request and give the same answer: one handler, one set of semantics.

The handler owns its failures. A transport error, a timeout, an open circuit
breaker, a refused request or an answer that does not fit the contract is
logged (logger ``toolgate_symfonic``), counted in
:attr:`ToolgateHandler.failures`, and resolved by the handler's failure
policy; no hook ever raises. A guard that faulted (or replied malformed) was
already handled by the host (its ``on_error``); the handler reads it from
the answer's trace, logs it and counts it in ``failures`` too.
"""

from __future__ import annotations

import logging
import os
import time
import types
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import httpx
from symfonic.core.callbacks import BaseCallbackHandler
from symfonic.core.contracts.callbacks import (
    AgentEndEvent,
    AgentStartEvent,
    BeforeToolCallEvent,
    FabricationDetectedEvent,
    LLMEndEvent,
    LLMPreCallEvent,
    LLMStartEvent,
    NodeEndEvent,
    NodeErrorEvent,
    NodeStartEvent,
    ProcedureSelectionEvent,
    ReactLoopEndEvent,
    ResponseRenderEvent,
    TokenCompositionEvent,
    UserCorrectionEvent,
    ToolCallDispatchEvent,
    ToolResultCallbackEvent,
    ToolRoutingDecisionEvent,
)

from ._transport import (
    CircuitBreaker,
    ConfigurationError,
    EmbeddedTransport,
    HttpTransport,
    ServiceError,
    open_host,
)
from ._wire import (
    describe_tools,
    json_safe,
    lifecycle_event,
    restore_unchanged,
    state_subset,
    tenant_dir,
    tool_name_of,
)

if TYPE_CHECKING:
    from toolgate import Host

    from .palette import ToolgatePaletteResolver

logger = logging.getLogger("toolgate_symfonic")

#: The two failure policies. ``fail_open`` (the default) behaves like
#: symfonic does for a handler that raises: the call goes on as if no guard
#: had answered. ``fail_closed`` refuses instead.
FailurePolicy = Literal["fail_open", "fail_closed"]

#: What the model sees when a call is refused because the guards could not
#: be consulted under ``fail_closed``. Fixed, and labelled as coming from
#: toolgate, so it is never mistaken for a guard's own verdict.
FAIL_CLOSED_MESSAGE = (
    "[toolgate] The tool-call guard service is unavailable, so this call was "
    "not run (fail-closed policy). The call itself may be fine; it could not "
    "be checked."
)

#: What the caller receives instead of the run's answer when the response
#: guards could not be consulted under ``fail_closed``. Fixed, and labelled
#: as coming from toolgate.
FAIL_CLOSED_ANSWER = (
    "[toolgate] This answer was withheld: the response guards could not be "
    "consulted (fail-closed policy)."
)

#: Seam names, as in the HTTP paths (``observe``: a lifecycle event).
Seam = Literal["steering", "rewrite", "routing", "result", "response", "observe"]

#: The lifecycle hooks symfonic's ``CallbackHandler`` protocol requires:
#: symfonic builds their events whenever any handler is registered (its
#: gate is ``CallbackManager.is_noop``, not ``has_hook``) and warns once
#: about a handler that lacks one, so the handler always has them; they
#: forward an event only while some loaded guard observes the hook.
REQUIRED_HOOKS: frozenset[str] = frozenset(
    (
        "on_agent_start",
        "on_agent_end",
        "on_node_start",
        "on_node_end",
        "on_node_error",
        "on_llm_start",
        "on_llm_end",
        "on_token_composition",
    )
)


class _Offered:
    """A hook the handler has only while some loaded guard wants it.

    symfonic builds the event of an optional hook only when
    ``CallbackManager.has_hook(name)`` is true, which is ``hasattr`` on each
    handler, asked anew at every emission: reading this attribute raises
    ``AttributeError`` (so ``hasattr`` is false and symfonic builds
    nothing) unless the loaded guards subscribe to it now.
    """

    def __init__(self, method: Any) -> None:
        self.method = method
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.wanted = "response" if name == "on_response_render" else name

    def __get__(self, handler: Any, owner: type | None = None) -> Any:
        if handler is None:
            return self
        if handler._offers(self.wanted):
            return types.MethodType(self.method, handler)
        raise AttributeError(
            f"{type(handler).__name__} has no {self.name} now: no loaded guard wants it"
        )

__all__ = [
    "FAIL_CLOSED_ANSWER",
    "FAIL_CLOSED_MESSAGE",
    "REQUIRED_HOOKS",
    "ConfigurationError",
    "FailurePolicy",
    "ServiceError",
    "ToolgateHandler",
]


@dataclass
class _Run:
    """What the handler remembers about one agent run."""

    state: dict[str, Any] = field(default_factory=dict)
    tenant: str | None = None
    routing_event: dict[str, Any] | None = None
    #: Set once the guards' routing verdict for this run is known.
    routed: bool = False
    #: Names the guards were offered, and those they left visible.
    offered: tuple[str, ...] = ()
    visible: tuple[str, ...] | None = None
    #: True when routing failed under ``fail_closed``: show no tool at all.
    closed: bool = False
    #: Seconds spent waiting on the guards, per tool call of this run (a
    #: call id that recurs in another run has a budget of its own there).
    spent: dict[str, float] = field(default_factory=dict)

    @property
    def hidden(self) -> frozenset[str]:
        """Names a routing guard hid this run (empty when none did)."""
        if self.visible is None:
            return frozenset()
        return frozenset(self.offered) - frozenset(self.visible)


class ToolgateHandler(BaseCallbackHandler):
    """A symfonic callback handler whose hooks are answered by toolgate guards.

    ``ToolgateHandler(plugins="guards/")`` runs the guards in this process
    (a :class:`toolgate.Host`; pass a ``Host`` to share one between
    handlers); ``ToolgateHandler(url="http://127.0.0.1:7878")`` asks a
    ``toolgate serve`` service. Register it per run
    (``agent.run(query, callbacks=[handler])``) and install it on the agent
    once (:meth:`install`) so routing guards narrow the tools the model sees.

    Args:
        plugins: A plugin directory, or a ``toolgate.Host``. Exactly one of
            ``plugins`` and ``url``.
        url: Where ``toolgate serve`` listens.
        token: Sent as ``Authorization: Bearer <token>`` (``url`` only).
        tenant: The tenant whose policies apply. ``None`` (the default) uses
            the ``tenant_id`` of symfonic's state (the run's
            ``TenantScope``); with neither, only the global chain runs. Any
            symfonic tenant id is accepted; it names the directory
            ``tenants/<tenant_dir(id)>`` (see :func:`tenant_dir`).
        timeout: The seconds the guards may add to one tool call, all its
            hooks together (rewrite, steering, result; a routing
            consultation gets its own), default 3.0. A hook that finds the
            budget spent fails at once.
        failure_policy: ``"fail_open"`` (default) or ``"fail_closed"``; see
            ``docs/failures.md`` for what each seam does on failure.
        deny_hidden_tools: When true, a call to a tool that a routing guard
            hid this run is refused by the adapter itself (steered with an
            error message) without asking the guards.
        max_runs: How many runs' routing verdicts, states and call budgets
            to remember (oldest forgotten first), default 1024.
        breaker_threshold: ``url`` only: consecutive failures that open the
            circuit breaker, default 3.
        breaker_cooldown: ``url`` only: seconds the open circuit fails calls
            at once before letting a probe through, default 5.0.
        client: ``url`` only: an ``httpx.AsyncClient`` to use instead of
            the handler's own.
        trust_env: ``url`` only: whether the handler's own client honours
            proxy environment variables (off).
        hooks_refresh: ``url`` only: how old, in seconds, the service's
            list of wanted hooks (``GET /v1/hooks``) may be when a run
            starts before it is asked again (default 1.0; 0: at every
            run's start). In-process the host's generation is checked at
            every ``hasattr``, so a reload is seen at once.
        host_options: ``plugins`` as a directory only: keyword arguments of
            ``toolgate.Host`` (``cache_dir``, ``watch``, ``max_instances``,
            ...).
    """

    def __init__(
        self,
        plugins: str | os.PathLike[str] | Host | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
        tenant: str | None = None,
        timeout: float = 3.0,
        failure_policy: FailurePolicy = "fail_open",
        deny_hidden_tools: bool = False,
        max_runs: int = 1024,
        breaker_threshold: int = 3,
        breaker_cooldown: float = 5.0,
        client: httpx.AsyncClient | None = None,
        trust_env: bool = False,
        hooks_refresh: float = 1.0,
        **host_options: Any,
    ) -> None:
        if failure_policy not in ("fail_open", "fail_closed"):
            raise ValueError(
                f"failure_policy must be 'fail_open' or 'fail_closed', got {failure_policy!r}"
            )
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        if max_runs < 1:
            raise ValueError(f"max_runs must be at least 1, got {max_runs!r}")
        if breaker_threshold < 1:
            raise ValueError(f"breaker_threshold must be at least 1, got {breaker_threshold!r}")
        if not breaker_cooldown >= 0:
            raise ValueError(f"breaker_cooldown must be >= 0, got {breaker_cooldown!r}")
        if not hooks_refresh >= 0:
            raise ValueError(f"hooks_refresh must be >= 0, got {hooks_refresh!r}")
        if isinstance(plugins, str) and plugins.startswith(("http://", "https://")):
            raise ValueError(
                f"{plugins!r} is a URL: pass it as ToolgateHandler(url=...) to use a "
                "toolgate service, or pass a plugin directory to run the guards in-process"
            )
        if (plugins is None) == (url is None):
            raise ValueError(
                "pass exactly one of plugins (a plugin directory or a toolgate.Host, "
                "in-process) and url (a toolgate serve service)"
            )
        self.tenant = tenant
        self.timeout = float(timeout)
        self.failure_policy: FailurePolicy = failure_policy
        self.deny_hidden_tools = deny_hidden_tools
        self.max_runs = max_runs
        self._transport: HttpTransport | EmbeddedTransport
        #: The circuit breaker of the HTTP transport (``None`` in-process).
        self.breaker: CircuitBreaker | None = None
        if url is not None:
            if host_options:
                raise TypeError(f"unexpected arguments for url=: {sorted(host_options)}")
            self.breaker = CircuitBreaker(breaker_threshold, float(breaker_cooldown))
            self._transport = HttpTransport(
                url,
                token=token,
                client=client,
                trust_env=trust_env,
                breaker=self.breaker,
                policy=failure_policy,
            )
        else:
            if token is not None or client is not None:
                raise TypeError("token and client apply to url= only")
            from toolgate import Host

            host = plugins if isinstance(plugins, Host) else open_host(plugins, **host_options)  # type: ignore[arg-type]
            self._transport = EmbeddedTransport(host)
        self.hooks_refresh = float(hooks_refresh)
        # What the loaded guards want (``Host.hooks()`` / ``GET /v1/hooks``):
        # the lifecycle hooks, whether a response guard is loaded, the
        # generation it describes; ``None`` until known.
        self._wanted: frozenset[str] = frozenset()
        self._wanted_response = True
        self._wanted_generation: int | None = None
        self._wanted_polled: float | None = None
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._resolver_installed = False
        self._logged_config_errors: set[str] = set()
        self._routing_warned = False
        self._routing_checked: set[str | None] = set()
        #: Calls made to the guards, per seam.
        self.calls: Counter[str] = Counter()
        #: Calls that failed (and were resolved by the policy), and guards
        #: that faulted or replied malformed (handled by the host), per seam.
        self.failures: Counter[str] = Counter()
        #: Guards that faulted or replied malformed, per plugin name (a
        #: tenant's plugins are ``<tenant>/<name>``).
        self.guard_faults: Counter[str] = Counter()
        #: Failures that were refused requests (a configuration error), per seam.
        self.config_errors: Counter[str] = Counter()

    @property
    def base_url(self) -> str | None:
        """The service's URL (``None`` in-process)."""
        return self._transport.url if isinstance(self._transport, HttpTransport) else None

    @property
    def host(self) -> Host | None:
        """The in-process ``toolgate.Host`` (``None`` over HTTP)."""
        return self._transport.host if isinstance(self._transport, EmbeddedTransport) else None

    @property
    def transport(self) -> str:
        """``"embedded"`` or ``"http"``."""
        return "embedded" if isinstance(self._transport, EmbeddedTransport) else "http"

    def __repr__(self) -> str:
        where = (
            f"url={self.base_url!r}"
            if self.base_url is not None
            else f"plugins={str(self._transport)[len('plugins '):]!r}"
        )
        return f"ToolgateHandler({where}, failure_policy={self.failure_policy!r})"

    # ------------------------------------------------------------------
    # Wiring
    # ------------------------------------------------------------------

    def palette_resolver(
        self, inner: Any | None = None, *, always_route: bool = True
    ) -> ToolgatePaletteResolver:
        """A ``ToolPaletteResolver`` that applies this handler's routing verdicts.

        ``inner`` is the resolver it wraps (normally the one symfonic
        registered, which applies ``FrameworkConfig.role_tools``); its
        result is narrowed further, never widened. See
        :class:`~toolgate_symfonic.palette.ToolgatePaletteResolver` for
        ``always_route``.
        """
        from .palette import ToolgatePaletteResolver

        self._resolver_installed = True
        return ToolgatePaletteResolver(self, inner=inner, always_route=always_route)

    def install(self, agent: Any, *, always_route: bool = True) -> ToolgatePaletteResolver:
        """Registers this handler's palette resolver on a ``SymfonicAgent``.

        From then on routing guards narrow the tools bound to the model on
        every turn of every run, whatever symfonic's ``tool_routing_mode``:
        the guards are consulted once per run (on its first model turn) and
        their verdict applies to every turn. With ``always_route=False`` they
        are consulted only on runs for which symfonic fired its own routing
        event (``tool_routing_mode`` "observe" or "enforce" and its narrower
        dropped a tool).

        Wraps the resolver the agent registered at construction (so
        ``FrameworkConfig.role_tools`` keeps working) and replaces it in the
        agent's capability registry, the place symfonic documents for a
        custom ``ToolPaletteResolver`` (``agent._deps``). Call it once per
        agent, after constructing it. Returns the installed resolver.

        Raises:
            TypeError: the agent has no capability registry.
        """
        from symfonic.core.tool_palette_resolver import ToolPaletteResolver

        deps = getattr(agent, "_deps", None)
        if deps is None or not hasattr(deps, "register"):
            raise TypeError(
                f"{type(agent).__name__} has no capability registry (_deps); "
                "register handler.palette_resolver() on its BaseAgentDeps yourself"
            )
        inner = deps.get(ToolPaletteResolver)
        resolver = self.palette_resolver(inner, always_route=always_route)
        deps.register(ToolPaletteResolver, resolver)
        return resolver

    async def check(self) -> list[str]:
        """Raises :class:`ConfigurationError` unless the guards can be asked
        and every file of the plugin directory loaded; returns the warnings.

        Over HTTP the service's ``GET /v1/plugins`` (with this handler's URL
        and token), in-process the host's ``plugins()``: the same document,
        the same findings. An error: a file that failed to load (a corrupt
        ``.wasm``, a manifest rejected), the service unreachable or
        refusing. A warning (returned, and logged at WARNING): no guard
        loaded at all (an empty plugin directory), a plugin serving without
        its snapshot. Call it once at start-up to fail loudly instead of
        resolving every hook by the failure policy.
        """
        warnings = await self._transport.check()
        self._wanted_polled = None
        await self._refresh_wanted()
        for warning in warnings:
            logger.warning("toolgate: %s: %s", self._transport, warning)
        return warnings

    async def aclose(self) -> None:
        """Closes the handler's own HTTP client (an injected one is left open)."""
        await self._transport.aclose()

    async def __aenter__(self) -> ToolgateHandler:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------
    # The symfonic hooks
    # ------------------------------------------------------------------

    async def on_before_tool_call(
        self, event: BeforeToolCallEvent, state: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Steering: ``None`` (proceed) or ``{"action": "skip", ...}``."""
        try:
            sub = state_subset(state)
            run = self._remember(sub, event.run_id)
            if self.deny_hidden_tools and event.tool_name in run.hidden:
                logger.info(
                    "toolgate: refusing call %s to %r: hidden this run by a routing guard",
                    event.call_id,
                    event.tool_name,
                )
                return {
                    "action": "skip",
                    "content": (
                        f"[toolgate] The tool {event.tool_name!r} is not available "
                        "for this request."
                    ),
                    "is_error": True,
                }
            wire_event = {
                "run_id": str(event.run_id),
                "tool_name": str(event.tool_name),
                "call_id": str(event.call_id),
                "args": json_safe(event.args if event.args is not None else {}),
            }
            value = await self._call(
                "steering", wire_event, sub, run.tenant, run, str(event.call_id)
            )
            return _steering_verdict(value)
        except Exception as exc:  # noqa: BLE001 - a hook never raises
            return self._failed("steering", exc, getattr(event, "call_id", None))

    async def on_tool_call_dispatch(
        self, event: ToolCallDispatchEvent, state: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Rewrite: ``None`` (unchanged) or ``{"tool_name", "args"}``."""
        try:
            sub = state_subset(state)
            # The AI message being dispatched is not in symfonic's state yet:
            # whatever is there belongs to an earlier turn.
            sub["tool_calls"] = []
            run = self._remember(sub, event.run_id)
            self._check_routing_installed(run.tenant)
            call_id = str(event.call_id)
            # The first hook of a tool call: its budget starts here.
            run.spent.pop(call_id, None)
            original = event.args if event.args is not None else {}
            wire_event = {
                "run_id": str(event.run_id),
                "iteration_index": int(event.iteration_index),
                "node_name": str(event.node_name),
                "call_id": call_id,
                "tool_name": str(event.tool_name),
                "args": json_safe(original),
                "available_tools": [str(n) for n in event.available_tools],
            }
            value = await self._call("rewrite", wire_event, sub, run.tenant, run, call_id)
            verdict = _rewrite_verdict(value)
            if verdict is not None:
                # What the guards left as it was sent is dispatched as the
                # original Python value, not as its JSON approximation.
                verdict["args"] = dict(
                    restore_unchanged(wire_event["args"], original, verdict["args"])
                )
            return verdict
        except Exception as exc:  # noqa: BLE001 - a hook never raises
            return self._failed("rewrite", exc, getattr(event, "call_id", None))

    async def on_tool_routing_decision(self, event: ToolRoutingDecisionEvent) -> None:
        """Routing: remembers the framework's decision for the run.

        symfonic's hook is observe-only (its return value is ignored), so the
        guards' narrowing is applied by the palette resolver
        (:meth:`install`), which consults the guards on the run's first
        model turn with the tools' descriptions, the query and the run's
        tenant. Without an installed resolver the guards are consulted here,
        for the guards' benefit only: the verdict is kept
        (:meth:`visible_tools`) but cannot change what the model sees.
        """
        try:
            run_id = str(event.run_id)
            run = self._run(run_id)
            run.routing_event = {
                "run_id": run_id,
                "mode": str(event.mode),
                "intent_label": str(event.intent_label),
                "total_tools": int(event.total_tools),
                "narrowed_tool_names": [str(n) for n in event.narrowed_tool_names],
                "saved_tokens_estimate": int(event.saved_tokens_estimate),
            }
            run.routed = False
            if not self._resolver_installed:
                await self._route(run, dict(run.routing_event))
        except Exception as exc:  # noqa: BLE001 - a hook never raises
            logger.warning("toolgate: routing hook failed unexpectedly: %r", exc)
        return None

    async def on_tool_result(self, event: ToolResultCallbackEvent) -> None:
        """Result: lets result guards observe what a tool returned."""
        try:
            run_id = str(event.run_id)
            run = self._run(run_id)
            sub: dict[str, Any] = dict(run.state) if run.state else {"run_id": run_id}
            sub["tool_calls"] = []
            call_id = str(event.call_id)
            wire_event = {
                "run_id": run_id,
                "tool_name": str(event.tool_name),
                "result": json_safe(event.result),
                "call_id": call_id,
                "deferred": bool(event.deferred),
                "is_error": bool(event.is_error),
            }
            try:
                await self._call("result", wire_event, sub, run.tenant, run, call_id)
            finally:
                # The last hook of a tool call: its budget ends here.
                run.spent.pop(call_id, None)
        except Exception as exc:  # noqa: BLE001 - a hook never raises
            self._failed("result", exc, getattr(event, "call_id", None))
        return None

    async def _on_response_render(
        self, content: str, state: dict[str, Any], metadata: ResponseRenderEvent
    ) -> str:
        """Response: the run's final answer, as the response guards leave it.

        The handler has this hook only while some loaded guard (of any
        tenant) answers the response seam, or while that is not known (the
        service has not answered ``GET /v1/hooks`` yet): with none, symfonic
        builds no ``ResponseRenderEvent`` and the answer is not touched.

        symfonic calls it once per ``agent.run()`` (never from ``stream()``),
        after its own transformations and before ``on_agent_end``, with the
        answer as it stands (``content``: the previous handler's output, or
        the original) and returns what this handler answers to the next
        handler. The guards run in registration order from ``content``
        (each sees the previous guard's answer; ``original_content`` stays
        the run's own); a guard that faults is skipped. When the guards
        cannot be consulted, ``fail_open`` gives ``content`` back unchanged
        and ``fail_closed`` gives :data:`FAIL_CLOSED_ANSWER`.

        symfonic 9.12 sends ``iteration_index=-1`` ("emitted by the engine,
        not the React loop"); the guards receive it as it is.
        """
        try:
            sub = state_subset(state)
            # symfonic's render state lacks some of the run's keys (the
            # query): what the run's earlier hooks knew fills them.
            known = self._runs.get(str(sub.get("run_id") or metadata.run_id))
            if known is not None:
                for key, value in known.state.items():
                    if sub.get(key) is None:
                        sub[key] = value
            run = self._remember(sub, metadata.run_id)
            wire_event = {
                "run_id": str(metadata.run_id),
                "iteration_index": int(metadata.iteration_index),
                "model": str(metadata.model),
                "node_name": str(metadata.node_name),
                "original_content": str(metadata.original_content),
                "content": str(content),
            }
            value = await self._call("response", wire_event, sub, run.tenant)
            if not isinstance(value, str):
                raise ServiceError(f"response answer is not a string: {_preview(value)}")
            return value
        except Exception as exc:  # noqa: BLE001 - a hook never raises
            self._failed("response", exc, None)
            return FAIL_CLOSED_ANSWER if self.failure_policy == "fail_closed" else content

    on_response_render = _Offered(_on_response_render)

    # ------------------------------------------------------------------
    # Lifecycle events
    # ------------------------------------------------------------------

    async def on_agent_start(self, event: AgentStartEvent) -> None:
        """Lifecycle: a run begins. Over HTTP, first asks the service which
        hooks its guards want when the last answer is older than
        ``hooks_refresh`` (one ``GET /v1/hooks``)."""
        await self._refresh_wanted()
        await self._observe("on_agent_start", event)

    async def on_agent_end(self, event: AgentEndEvent) -> None:
        """Lifecycle: a run ended."""
        await self._observe("on_agent_end", event)

    async def on_node_start(self, event: NodeStartEvent) -> None:
        """Lifecycle: a graph node is about to run."""
        await self._observe("on_node_start", event)

    async def on_node_end(self, event: NodeEndEvent) -> None:
        """Lifecycle: a graph node completed."""
        await self._observe("on_node_end", event)

    async def on_node_error(self, event: NodeErrorEvent) -> None:
        """Lifecycle: a graph node raised."""
        await self._observe("on_node_error", event)

    async def on_llm_start(self, event: LLMStartEvent) -> None:
        """Lifecycle: the model is invoked."""
        await self._observe("on_llm_start", event)

    async def on_llm_end(self, event: LLMEndEvent) -> None:
        """Lifecycle: the model returned (``usage``: its token counts)."""
        await self._observe("on_llm_end", event)

    async def on_token_composition(self, event: TokenCompositionEvent) -> None:
        """Lifecycle: the input tokens by prompt section."""
        await self._observe("on_token_composition", event)

    async def _on_llm_pre_call(self, event: LLMPreCallEvent) -> None:
        """Lifecycle (optional): right before the provider call."""
        await self._observe("on_llm_pre_call", event)

    async def _on_user_correction(self, event: UserCorrectionEvent) -> None:
        """Lifecycle (optional): the user corrected an earlier answer."""
        await self._observe("on_user_correction", event)

    async def _on_procedure_selection(self, event: ProcedureSelectionEvent) -> None:
        """Lifecycle (optional): the force-resolver picked a procedure."""
        await self._observe("on_procedure_selection", event)

    async def _on_react_loop_end(self, event: ReactLoopEndEvent) -> None:
        """Lifecycle (optional): the React loop ended with no final text."""
        await self._observe("on_react_loop_end", event)

    async def _on_fabrication_detected(self, event: FabricationDetectedEvent) -> None:
        """Lifecycle (optional): the fabrication check found suspect content."""
        await self._observe("on_fabrication_detected", event)

    on_llm_pre_call = _Offered(_on_llm_pre_call)
    on_user_correction = _Offered(_on_user_correction)
    on_procedure_selection = _Offered(_on_procedure_selection)
    on_react_loop_end = _Offered(_on_react_loop_end)
    on_fabrication_detected = _Offered(_on_fabrication_detected)

    def wanted_hooks(self) -> frozenset[str]:
        """The lifecycle hooks some loaded guard observes, as this handler
        last saw it (in-process: now; over HTTP: at the last poll)."""
        self._offers("")
        return self._wanted

    def _offers(self, hook: str) -> bool:
        """Whether the loaded guards want ``hook`` (``"response"``: the
        response seam). In-process the host's generation is read each time
        and the wanted hooks re-read when it changed; over HTTP the last
        poll's answer stands (the response seam is offered until one
        came)."""
        transport = self._transport
        if isinstance(transport, EmbeddedTransport):
            generation = transport.host.generation
            if generation != self._wanted_generation:
                self._want(transport.host.hooks())
        if hook == "response":
            return self._wanted_response
        return hook in self._wanted

    def _want(self, doc: Mapping[str, Any]) -> None:
        """Takes a ``Host.hooks()`` / ``GET /v1/hooks`` document."""
        self._wanted = frozenset(str(h) for h in doc.get("hooks") or ())
        self._wanted_response = bool(doc.get("response", True))
        generation = doc.get("generation")
        self._wanted_generation = generation if isinstance(generation, int) else None

    async def _refresh_wanted(self) -> None:
        """Over HTTP: asks ``GET /v1/hooks`` when the last answer is older
        than ``hooks_refresh``. A failed poll keeps what was known."""
        transport = self._transport
        if not isinstance(transport, HttpTransport):
            return
        now = time.monotonic()
        if self._wanted_polled is not None and now - self._wanted_polled < self.hooks_refresh:
            return
        self._wanted_polled = now
        try:
            doc = await transport.hooks(min(self.timeout, 5.0))
        except Exception as exc:  # noqa: BLE001 - a hook never raises
            logger.debug("toolgate: cannot read %s/v1/hooks (%s); keeping the last answer", transport, exc)
            return
        self._want(doc)

    async def _observe(self, hook: str, event: Any) -> None:
        """Hands a lifecycle event to the guards that observe ``hook``.

        Nothing is built or sent unless some loaded guard observes it. The
        event goes with the run's tenant (known once a hook with the run's
        state fired; else the handler's ``tenant``). In-process the host
        queues it and returns at once; over HTTP the 202 of ``POST
        /v1/observe`` is awaited (the service answers before any guard
        runs), so the event is on the service before the run's next
        decision is sent, and that decision sees it.
        """
        if not self._offers(hook):
            return
        try:
            run_id = getattr(event, "run_id", None)
            run = self._runs.get(str(run_id)) if run_id else None
            tenant = run.tenant if run is not None else self.tenant
            if tenant is None and hook == "on_user_correction":
                tenant = getattr(event, "tenant_id", None) or None
            body: dict[str, Any] = {"hook": hook, "event": lifecycle_event(hook, event)}
            if tenant is not None:
                body["tenant"] = tenant_dir(str(tenant))
            self.calls["observe"] += 1
            await self._transport.observe(body, self.timeout)
        except Exception as exc:  # noqa: BLE001 - a hook never raises
            self._failed("observe", exc, None)

    # ------------------------------------------------------------------
    # Routing verdicts
    # ------------------------------------------------------------------

    def visible_tools(self, run_id: str) -> list[str] | None:
        """The tool names the routing guards left visible for a run.

        ``None`` while no verdict is known (no routing event yet, or the
        service failed under ``fail_open``); ``[]`` after a ``fail_closed``
        failure.
        """
        run = self._runs.get(str(run_id))
        if run is None or not run.routed:
            return None
        if run.closed:
            return []
        return None if run.visible is None else list(run.visible)

    def hidden_tools(self, run_id: str) -> frozenset[str]:
        """The tool names a routing guard hid for a run (empty when none)."""
        run = self._runs.get(str(run_id))
        return frozenset() if run is None else run.hidden

    async def routing_verdict(
        self, state: Any, tools: list[Any], *, always_route: bool = True
    ) -> _Run | None:
        """The run's routing record once the guards have been consulted.

        What a palette resolver applies: for the run ``state`` belongs to,
        the routing seam is consulted once (with symfonic's routing event,
        or with one built from ``tools`` when ``always_route``) and its
        verdict kept; ``None`` when the state names no run or there is
        nothing to route.
        """
        sub = state_subset(state)
        run_id = sub.get("run_id")
        if not run_id:
            return None
        run = self._remember(sub, run_id)
        if run.routed:
            return run
        if run.routing_event is not None:
            event = dict(run.routing_event)
        elif always_route:
            names = [n for n in (tool_name_of(t) for t in tools) if n]
            event = {
                "run_id": run_id,
                "mode": "off",
                "intent_label": "",
                "total_tools": len(names),
                "narrowed_tool_names": names,
                "saved_tokens_estimate": 0,
            }
        else:
            return None
        described = {t["name"]: t for t in describe_tools(tools)}
        event["tools"] = [
            described.get(name, {"name": name, "description": ""})
            for name in event["narrowed_tool_names"]
        ]
        query = state.get("query") if isinstance(state, Mapping) else None
        if isinstance(query, str):
            event["query"] = query
        await self._route(run, event)
        return run

    async def _route(self, run: _Run, wire_event: dict[str, Any]) -> None:
        """Consults the routing seam once and records the verdict on ``run``."""
        run.routed = True
        run.offered = tuple(wire_event.get("narrowed_tool_names", ()))
        run.visible = None
        run.closed = False
        state = dict(run.state) if run.state else {"run_id": wire_event.get("run_id")}
        state["tool_calls"] = []
        try:
            value = await self._call("routing", wire_event, state, run.tenant)
            if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                raise ServiceError(f"routing answer is not a list of names: {_preview(value)}")
            offered = set(run.offered)
            # A guard can hide a tool, never add one.
            run.visible = tuple(n for n in value if n in offered)
        except Exception as exc:  # noqa: BLE001 - the policy decides
            self._failed("routing", exc, None)
            if self.failure_policy == "fail_closed":
                run.closed = True
                run.visible = ()

    # ------------------------------------------------------------------
    # Internals
    # ------------------------------------------------------------------

    def _run(self, run_id: str) -> _Run:
        run = self._runs.get(run_id)
        if run is None:
            run = _Run(tenant=self.tenant)
            self._runs[run_id] = run
            while len(self._runs) > self.max_runs:
                self._runs.popitem(last=False)
        else:
            self._runs.move_to_end(run_id)
        return run

    def _remember(self, sub: dict[str, Any], event_run_id: Any) -> _Run:
        """Records the state subset and tenant of the run a hook belongs to."""
        run_id = sub.get("run_id") or str(event_run_id or "")
        run = self._run(run_id)
        run.state = {k: v for k, v in sub.items() if k != "tool_calls"}
        run.tenant = self.tenant if self.tenant is not None else sub.get("tenant_id")
        return run

    async def _call(
        self,
        seam: Seam,
        event: dict[str, Any],
        state: dict[str, Any],
        tenant: str | None,
        run: _Run | None = None,
        call_id: str | None = None,
    ) -> Any:
        """Asks the guards; returns the answer or raises ServiceError.

        ``run`` and ``call_id``: the tool call the hook belongs to; its hooks
        share one budget of ``timeout`` seconds, kept with its run.
        """
        self.calls[seam] += 1
        body: dict[str, Any] = {"event": event, "state": state}
        if tenant is not None:
            body["tenant"] = tenant_dir(str(tenant))
        budget = self.timeout
        if run is not None and call_id is not None:
            budget -= run.spent.get(call_id, 0.0)
            if budget <= 0:
                raise ServiceError(
                    f"the call's budget of {self.timeout:g}s is spent (earlier hooks of this call)"
                )
        start = time.monotonic()
        try:
            result, trace = await self._transport.call(seam, body, budget)
        finally:
            if run is not None and call_id is not None:
                run.spent[call_id] = run.spent.get(call_id, 0.0) + time.monotonic() - start
        for entry in trace:
            if entry.get("outcome") in ("fault", "malformed"):
                self._guard_fault(seam, entry, call_id)
        return result

    def _guard_fault(self, seam: Seam, entry: dict[str, Any], call_id: str | None) -> None:
        """Logs and counts a guard's fault (or malformed reply) from a trace.

        The host already applied the guard's ``on_error`` (skip, or deny);
        this makes it visible in Python: a WARNING record of the
        ``toolgate_symfonic`` logger whose ``extra`` fields are
        ``toolgate_plugin``, ``toolgate_fault`` (the fault class, or
        ``malformed``), ``toolgate_detail`` and ``toolgate_seam``.
        """
        plugin = str(entry.get("plugin", "?"))
        fault = str(entry.get("fault") or entry.get("outcome"))
        detail = str(entry.get("detail") or "")
        self.failures[seam] += 1
        self.guard_faults[plugin] += 1
        logger.warning(
            "toolgate: guard %s %s at %s%s (%s)%s; the host applied its on_error",
            plugin,
            "replied malformed" if fault == "malformed" else "faulted",
            seam,
            f" for call {call_id}" if call_id else "",
            fault,
            f": {detail}" if detail else "",
            extra={
                "toolgate_plugin": plugin,
                "toolgate_fault": fault,
                "toolgate_detail": detail,
                "toolgate_seam": seam,
            },
        )

    def _check_routing_installed(self, tenant: str | None) -> None:
        """Logs at ERROR, once, when routing guards are loaded but can never
        narrow the palette because no resolver is installed."""
        if self._resolver_installed or self._routing_warned:
            return
        transport = self._transport
        if isinstance(transport, EmbeddedTransport):
            key = None if tenant is None else tenant_dir(str(tenant))
            if key in self._routing_checked:
                return
            self._routing_checked.add(key)
            if transport.routing_guards(key):
                self._routing_warned = True
                logger.error(
                    "toolgate: routing guards are loaded in %s but this handler is not "
                    "installed on the agent, so they cannot hide any tool: call "
                    "handler.install(agent) once after constructing the agent",
                    transport,
                )

    def _failed(self, seam: Seam, exc: BaseException, call_id: Any) -> dict[str, Any] | None:
        """Logs and counts a failed call; returns the policy's outcome."""
        self.failures[seam] += 1
        closed = self.failure_policy == "fail_closed"
        if seam == "steering" and closed:
            outcome = "refusing the call"
        elif seam == "routing" and closed:
            outcome = "hiding every tool"
        elif seam == "steering":
            outcome = "letting the call proceed"
        elif seam == "rewrite":
            outcome = "dispatching the call unchanged"
        elif seam == "routing":
            outcome = "leaving the palette unchanged"
        elif seam == "response" and closed:
            outcome = "withholding the answer"
        elif seam == "response":
            outcome = "delivering the answer unchanged"
        elif seam == "observe":
            outcome = "event not observed"
        else:
            outcome = "result not observed"
        cause = str(exc) if isinstance(exc, ServiceError) else f"{type(exc).__name__}: {exc}"
        if isinstance(exc, ConfigurationError):
            self.config_errors[seam] += 1
            if cause not in self._logged_config_errors:
                self._logged_config_errors.add(cause)
                logger.error(
                    "toolgate: %s refused a %s request (%s): a configuration error, so no "
                    "guard is consulted until it is fixed; every such call is resolved by "
                    "%s (%s). Counted in handler.config_errors; logged once per reason.",
                    self._transport,
                    seam,
                    cause,
                    self.failure_policy,
                    outcome,
                )
            else:
                logger.debug("toolgate: %s request refused again (%s)", seam, cause)
        elif isinstance(exc, ServiceError) and cause.startswith("circuit open"):
            # The opening was logged at ERROR by the breaker.
            logger.debug("toolgate: %s call short-circuited (%s); %s", seam, cause, outcome)
        else:
            logger.warning(
                "toolgate: %s call to %s failed (%s)%s; %s: %s",
                seam,
                self._transport,
                cause,
                f" for call {call_id}" if call_id else "",
                self.failure_policy,
                outcome,
            )
        if seam == "steering" and closed:
            return {"action": "skip", "content": FAIL_CLOSED_MESSAGE, "is_error": True}
        return None


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _steering_verdict(value: Any) -> dict[str, Any] | None:
    """Checks the service's steering answer against the hook's contract."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ServiceError(f"steering answer is neither null nor an object: {_preview(value)}")
    action = value.get("action", "proceed")
    if action == "proceed":
        return None
    if action != "skip":
        raise ServiceError(f"steering answer has unknown action {action!r}")
    content = value.get("content")
    if not isinstance(content, str) or not content:
        raise ServiceError(f"steering skip without content: {_preview(value)}")
    is_error = value.get("is_error", True)
    if not isinstance(is_error, bool):
        raise ServiceError(f"steering is_error is not a boolean: {_preview(is_error)}")
    return {"action": "skip", "content": content, "is_error": is_error}


def _rewrite_verdict(value: Any) -> dict[str, Any] | None:
    """Checks the service's rewrite answer against the hook's contract."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ServiceError(f"rewrite answer is neither null nor an object: {_preview(value)}")
    name = value.get("tool_name")
    args = value.get("args")
    if not isinstance(name, str) or not isinstance(args, Mapping):
        raise ServiceError(f"rewrite answer lacks tool_name/args: {_preview(value)}")
    return {"tool_name": name, "args": dict(args)}
