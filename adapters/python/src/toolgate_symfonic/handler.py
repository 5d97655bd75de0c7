"""``ToolgateHandler``: symfonic's four tool seams, forwarded to ``toolgate serve``.

Each hook turns symfonic's event into the JSON event of the toolgate HTTP API,
posts it with a JSON-safe subset of the hook's ``state`` to
``POST {base_url}/v1/{seam}``, and returns what the service answers, which is
exactly what the symfonic hook must return.

The handler owns its failures. A transport error, a timeout, an HTTP error or
an answer that does not fit the contract is logged (logger
``toolgate_symfonic``), counted in :attr:`ToolgateHandler.failures`, and
resolved by the handler's failure policy; no hook ever raises.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import httpx
from symfonic.core.callbacks import BaseCallbackHandler
from symfonic.core.contracts.callbacks import (
    BeforeToolCallEvent,
    ToolCallDispatchEvent,
    ToolResultCallbackEvent,
    ToolRoutingDecisionEvent,
)

from ._wire import json_safe, state_subset

if TYPE_CHECKING:
    from .palette import ToolgatePaletteResolver

logger = logging.getLogger("toolgate_symfonic")

#: The two failure policies. ``fail_open`` (the default) behaves like
#: symfonic does for a handler that raises: the call goes on as if no guard
#: had answered. ``fail_closed`` refuses instead.
FailurePolicy = Literal["fail_open", "fail_closed"]

#: What the model sees when a call is refused because the guard service
#: failed under ``fail_closed``. Fixed, and labelled as coming from toolgate,
#: so it is never mistaken for a guard's own verdict.
FAIL_CLOSED_MESSAGE = (
    "[toolgate] The tool-call guard service is unavailable, so this call was "
    "not run (fail-closed policy). The call itself may be fine; it could not "
    "be checked."
)

#: Seam names, as in the HTTP paths.
Seam = Literal["steering", "rewrite", "routing", "result"]


class ServiceError(Exception):
    """The guard service could not give a usable answer.

    Raised inside the handler only; the hooks turn it into the failure
    policy's outcome and never let it out.
    """


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

    @property
    def hidden(self) -> frozenset[str]:
        """Names a routing guard hid this run (empty when none did)."""
        if self.visible is None:
            return frozenset()
        return frozenset(self.offered) - frozenset(self.visible)


class ToolgateHandler(BaseCallbackHandler):
    """A symfonic callback handler that consults a ``toolgate serve`` service.

    Register it per run (``agent.run(query, callbacks=[handler])``); to let
    routing guards narrow the tools the model sees, also install its palette
    resolver on the agent once (:meth:`install`).

    Args:
        base_url: Where ``toolgate serve`` listens, e.g.
            ``"http://127.0.0.1:7878"``.
        token: Sent as ``Authorization: Bearer <token>`` when set.
        tenant: The tenant whose policies apply. ``None`` (the default) uses
            the ``tenant_id`` of symfonic's state (the run's
            ``TenantScope``); with neither, only the global chain runs.
        timeout: Total seconds one service call may take (connect, send,
            wait, read), default 3.0. Past it the call counts as failed.
        failure_policy: ``"fail_open"`` (default) or ``"fail_closed"``; see
            the module README for what each seam does on failure.
        deny_hidden_tools: When true, a call to a tool that a routing guard
            hid this run is refused by the adapter itself (steered with an
            error message) without asking the service. Off by default:
            hiding a tool only keeps it out of the model's palette, and a
            model can still name it.
        max_runs: How many runs' routing verdicts and states to remember
            (oldest forgotten first), default 1024.
        client: An ``httpx.AsyncClient`` to use instead of the handler's own
            (its base URL, headers and limits are then yours to set; the
            handler's ``timeout`` still bounds every call).
        trust_env: Passed to the handler's own client: whether proxy
            environment variables apply. Off by default, so a loopback
            service is never sent through a proxy.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        tenant: str | None = None,
        timeout: float = 3.0,
        failure_policy: FailurePolicy = "fail_open",
        deny_hidden_tools: bool = False,
        max_runs: int = 1024,
        client: httpx.AsyncClient | None = None,
        trust_env: bool = False,
    ) -> None:
        if failure_policy not in ("fail_open", "fail_closed"):
            raise ValueError(
                f"failure_policy must be 'fail_open' or 'fail_closed', got {failure_policy!r}"
            )
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        if max_runs < 1:
            raise ValueError(f"max_runs must be at least 1, got {max_runs!r}")
        self.base_url = base_url.rstrip("/")
        self.tenant = tenant
        self.timeout = float(timeout)
        self.failure_policy: FailurePolicy = failure_policy
        self.deny_hidden_tools = deny_hidden_tools
        self.max_runs = max_runs
        self._token = token
        self._trust_env = trust_env
        self._external_client = client
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._resolver_installed = False
        #: Service calls made, per seam.
        self.calls: Counter[str] = Counter()
        #: Service calls that failed (and were resolved by the policy), per seam.
        self.failures: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"ToolgateHandler({self.base_url!r}, failure_policy={self.failure_policy!r})"

    # ------------------------------------------------------------------
    # Wiring
    # ------------------------------------------------------------------

    def palette_resolver(
        self, inner: Any | None = None, *, always_route: bool = False
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

    def install(self, agent: Any, *, always_route: bool = False) -> ToolgatePaletteResolver:
        """Registers this handler's palette resolver on a ``SymfonicAgent``.

        Wraps the resolver the agent registered at construction (so
        ``FrameworkConfig.role_tools`` keeps working) and replaces it in the
        agent's capability registry, the place symfonic documents for a
        custom ``ToolPaletteResolver`` (``agent._deps``). Call it once per
        agent, after constructing it. Returns the installed resolver.
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

    async def aclose(self) -> None:
        """Closes the handler's own HTTP client (an injected one is left open)."""
        client, self._client, self._client_loop = self._client, None, None
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> ToolgateHandler:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------
    # The four symfonic hooks
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
            value = await self._call("steering", wire_event, sub, run.tenant)
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
            wire_event = {
                "run_id": str(event.run_id),
                "iteration_index": int(event.iteration_index),
                "node_name": str(event.node_name),
                "call_id": str(event.call_id),
                "tool_name": str(event.tool_name),
                "args": json_safe(event.args if event.args is not None else {}),
                "available_tools": [str(n) for n in event.available_tools],
            }
            value = await self._call("rewrite", wire_event, sub, run.tenant)
            return _rewrite_verdict(value)
        except Exception as exc:  # noqa: BLE001 - a hook never raises
            return self._failed("rewrite", exc, getattr(event, "call_id", None))

    async def on_tool_routing_decision(self, event: ToolRoutingDecisionEvent) -> None:
        """Routing: remembers the framework's decision for the run.

        symfonic's hook is observe-only (its return value is ignored), so the
        guards' narrowing is applied by the palette resolver
        (:meth:`install`), which consults the service on the run's first
        model turn with the tools' descriptions, the query and the run's
        tenant. Without an installed resolver the service is consulted here,
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
            run = self._runs.get(run_id)
            sub: dict[str, Any] = (
                dict(run.state) if run is not None and run.state else {"run_id": run_id}
            )
            sub["tool_calls"] = []
            tenant = run.tenant if run is not None else self.tenant
            wire_event = {
                "run_id": run_id,
                "tool_name": str(event.tool_name),
                "result": json_safe(event.result),
                "call_id": str(event.call_id),
                "deferred": bool(event.deferred),
                "is_error": bool(event.is_error),
            }
            await self._call("result", wire_event, sub, tenant)
        except Exception as exc:  # noqa: BLE001 - a hook never raises
            self._failed("result", exc, getattr(event, "call_id", None))
        return None

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

    def _http(self) -> httpx.AsyncClient:
        """The HTTP client for the running event loop (connections are reused)."""
        if self._external_client is not None:
            return self._external_client
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop or self._client.is_closed:
            # A client's pooled connections belong to the loop that opened
            # them; a handler reused under a new loop gets a new client.
            headers = {"Accept": "application/json"}
            if self._token:
                headers["Authorization"] = f"Bearer {self._token}"
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=headers,
                timeout=httpx.Timeout(self.timeout),
                limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
                trust_env=self._trust_env,
            )
            self._client_loop = loop
        return self._client

    async def _call(
        self,
        seam: Seam,
        event: dict[str, Any],
        state: dict[str, Any],
        tenant: str | None,
    ) -> Any:
        """POSTs one event; returns the decoded answer or raises ServiceError."""
        self.calls[seam] += 1
        body: dict[str, Any] = {"event": event, "state": state}
        if tenant is not None:
            body["tenant"] = str(tenant)
        content = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
        path = f"/v1/{seam}"
        if self._external_client is not None:
            path = f"{self.base_url}{path}"
        try:
            async with asyncio.timeout(self.timeout):
                response = await self._http().post(
                    path, content=content, headers={"Content-Type": "application/json"}
                )
        except TimeoutError as exc:
            raise ServiceError(f"no answer within {self.timeout:g}s") from exc
        except httpx.HTTPError as exc:
            raise ServiceError(f"{type(exc).__name__}: {exc or 'transport error'}") from exc
        if response.status_code != 200:
            raise ServiceError(f"HTTP {response.status_code}: {response.text[:300]!r}")
        try:
            return response.json()
        except ValueError as exc:
            raise ServiceError(f"answer is not JSON: {response.text[:300]!r}") from exc

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
        else:
            outcome = "result not observed"
        cause = str(exc) if isinstance(exc, ServiceError) else f"{type(exc).__name__}: {exc}"
        logger.warning(
            "toolgate: %s call to %s failed (%s)%s; %s: %s",
            seam,
            self.base_url,
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
