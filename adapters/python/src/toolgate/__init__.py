"""toolgate in-process: sandboxed WebAssembly tool-call guards, no service to run.

>>> from toolgate import Host
>>> host = Host("plugins/")                                  # doctest: +SKIP
>>> await host.steering({"run_id": "r", "tool_name": "run_query",
...                      "call_id": "c1", "args": {"sql": "DELETE FROM users"}})  # doctest: +SKIP
{'action': 'skip', 'content': 'Add a WHERE clause before running this query.', 'is_error': True}

:class:`Host` loads a plugin directory with the toolgate library itself (the
Rust crate behind ``toolgate serve``, compiled into the extension module
``toolgate._native``): the same chains, limits, manifests, tenants, compiled
cache and hot reload. Each seam method takes the event and state as Python
values, sends them to the host as JSON text (integers of any size and key
order survive both ways) and returns exactly what the symfonic hook returns.
Guard calls run without the GIL: a call gets its first slice on the calling
thread (a small guard finishes there in microseconds); one still running at
the next 1 ms epoch tick continues on the host's own Tokio runtime while the
coroutine awaits it, so the event loop is never held longer than that.
Each new component is compiled in a child process (this interpreter running
``toolgate/_compile.py``) under a time and a memory bound, so a compile bomb
in a plugin directory is refused without costing this process its memory.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from ._native import Host as _NativeHost
from ._native import dumps as _native_dumps
from ._native import BusyError, RequestError, ToolgateError

# The extension names its exceptions after itself; they are this package's.
for _exc in (BusyError, RequestError, ToolgateError):
    _exc.__module__ = __name__

__all__ = ["BusyError", "Host", "LIFECYCLE_HOOKS", "RequestError", "ToolgateError", "SEAMS"]

#: The five seams, in the order symfonic fires them.
SEAMS: tuple[str, ...] = ("routing", "rewrite", "steering", "result", "response")

#: symfonic's thirteen fire-and-forget hooks a guard may observe
#: (:meth:`Host.observe`), in the order the contract lists them.
LIFECYCLE_HOOKS: tuple[str, ...] = (
    "on_agent_start",
    "on_agent_end",
    "on_node_start",
    "on_node_end",
    "on_node_error",
    "on_llm_start",
    "on_llm_pre_call",
    "on_llm_end",
    "on_token_composition",
    "on_user_correction",
    "on_procedure_selection",
    "on_react_loop_end",
    "on_fabrication_detected",
)


def _dumps(value: Any) -> str:
    """The request's JSON text: written by the extension when the value is
    plain JSON (dicts with str keys, lists, str, int, finite float, bool,
    None: several times faster than ``json.dumps``), else by ``json.dumps``
    (which raises for what is not JSON). The host reads both the same."""
    text = _native_dumps(value)
    if text is None:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return text


def _compile_command() -> list[str]:
    """The compile child: this interpreter running ``toolgate/_compile.py``
    (``-P``: the file's own directory stays off ``sys.path``)."""
    if not sys.executable:
        raise ToolgateError(
            "no Python interpreter to compile in (sys.executable is empty): "
            "pass compile_in_process=True"
        )
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_compile.py")
    return [sys.executable, "-P", script]


class Host:
    """A plugin directory loaded in this process, with hot reload.

    Args:
        plugins: The plugin directory (``*.wasm``, an optional
            ``toolgate.toml``, ``tenants/<name>/``), as for
            ``toolgate serve --plugins``.
        cache_dir: Where compiled components are cached. Default:
            ``$TOOLGATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/toolgate``, else
            ``~/.cache/toolgate``.
        no_cache: Compile every component; read and write no cache.
        watch: Reload when the directory changes (default true). Calls in
            flight finish on the chain they began with.
        settle_ms: How long the directory must be quiet before a reload.
        max_instances: Guard instances alive at once across all plugins
            (a call finding none free faults with ``capacity``).
        pooling: Use wasmtime's pooling allocator (fast fresh instances).
        inline: Give each call its first slice on the calling thread (the
            GIL released; a guest still running at the next 1 ms epoch tick
            yields and the call continues on the host's runtime while the
            coroutine awaits it). Small guards then answer with no thread
            hop. ``False``: every call goes to the runtime at once.
        compile_timeout_s: Longest one compile may take, in seconds; then
            the compile is stopped and the plugin refused (default 120).
        compile_memory_mib: Most memory one compile may use, in MiB: the
            ``RLIMIT_DATA`` of the compiling child process, whose own
            interpreter counts too (default 2048; at least 32).
        compile_in_process: Compile in this process instead of a child
            process: no memory bound, and past ``compile_timeout_s`` the
            plugin is refused but the compile runs on to its end on a
            background thread.
        state: Where guards' state lives (the ``state`` import):
            ``"memory"`` (this process, 64 MiB in all; the default),
            ``"memory:MIB"``, or a Redis URL
            (``"redis://[:password@]host[:port][/db]"``), shared by every
            process naming it — several agent processes, or ``toolgate
            serve`` replicas, then count together.
        decision_log: Write every decision as a JSON line: a mapping with
            the keys of the global manifest's ``[decision_log]`` (docs/decision-log.md,
            "The decision log"), e.g. ``{"path": "decisions.jsonl",
            "include": ["args"], "mask": ["args.password"]}``; the
            manifest's table, if any, overrides it key by key. ``None``
            (the default): off unless the manifest sets it. A relative
            ``path`` is taken from the working directory. Writing never
            delays a decision: a full queue drops lines and counts them.

    Each new component (one not in the compiled cache) is compiled in a
    child process: this interpreter (``sys.executable``) running
    ``toolgate/_compile.py``, which runs exactly what ``toolgate compile``
    runs for ``toolgate serve``. The child limits its own memory and CPU
    time and is killed at ``compile_timeout_s``; a component past a bound
    (a compile bomb) is refused and reported in :meth:`plugins`
    (``"errors"``, ``<path>: compile refused: ...``) while the other
    plugins load.

    Raises:
        ToolgateError: The directory does not exist, or its manifest does not
            parse, or there is no interpreter to compile with
            (``sys.executable`` is empty: pass ``compile_in_process=True``).
            A component that fails to load is skipped and reported in
            :meth:`plugins` (``"errors"``) and on standard error.
        ValueError: A compile bound is out of range (``compile_timeout_s``
            not positive, ``compile_memory_mib`` under 32), or ``state`` is
            not one of the forms above, or ``decision_log`` names an
            unknown key or a bad value (the message names the key).

    The library logs (guard faults, reloads, load errors) go to standard
    error, filtered by ``$TOOLGATE_LOG`` (default ``warn``).
    """

    def __init__(
        self,
        plugins: str | os.PathLike[str],
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        no_cache: bool = False,
        watch: bool = True,
        settle_ms: int = 250,
        max_instances: int = 256,
        pooling: bool = True,
        inline: bool = True,
        compile_timeout_s: float = 120.0,
        compile_memory_mib: int = 2048,
        compile_in_process: bool = False,
        state: str = "memory",
        decision_log: Mapping[str, Any] | None = None,
    ) -> None:
        timeout_ms = round(compile_timeout_s * 1000)
        if not timeout_ms > 0:
            raise ValueError(f"compile_timeout_s must be positive, got {compile_timeout_s!r}")
        self._native = _NativeHost(
            os.fspath(plugins),
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
            no_cache=no_cache,
            watch=watch,
            settle_ms=settle_ms,
            max_instances=max_instances,
            pooling=pooling,
            inline=inline,
            compile_command=None if compile_in_process else _compile_command(),
            compile_timeout_ms=timeout_ms,
            compile_memory_mib=compile_memory_mib,
            state=state,
            decision_log=None if decision_log is None else json.dumps(dict(decision_log)),
        )

    def __repr__(self) -> str:
        return repr(self._native)

    # ------------------------------------------------------------------
    # The five seams
    # ------------------------------------------------------------------

    async def decide(
        self,
        seam: str,
        event: Mapping[str, Any],
        *,
        state: Mapping[str, Any] | None = None,
        tenant: str | None = None,
        trace: bool = False,
    ) -> Any:
        """Runs ``event`` through the chain of ``seam`` for ``tenant``.

        Returns what the symfonic hook returns (see the seam methods), or
        with ``trace=True`` ``{"result": ..., "trace": [...]}``: one entry
        per guard consulted (``plugin``, ``outcome``, ``fault``, ``detail``,
        ``fuel_used``, ``micros``).

        Raises:
            RequestError: The request is invalid (a missing or mistyped
                event field, a tenant name that is not a valid directory
                name); the message names the field.
            BusyError: The tenant already had as many requests in progress
                as its share allows (``[shares] tenant_requests``) for the
                share's whole wait, or was over its rate (``[shares]
                tenant_rate``) by more than that wait; nothing was decided.
            ValueError: ``seam`` is not one of :data:`SEAMS`, or a value is
                not JSON (a non-finite float).
        """
        body: dict[str, Any] = {"event": event}
        if state is not None:
            body["state"] = state
        if tenant is not None:
            body["tenant"] = tenant
        answer = self._native.decide(seam, _dumps(body), trace)
        if not isinstance(answer, str):
            answer = await answer
        return None if answer == "null" else json.loads(answer)

    async def routing(
        self,
        event: Mapping[str, Any],
        *,
        state: Mapping[str, Any] | None = None,
        tenant: str | None = None,
        trace: bool = False,
    ) -> Any:
        """``on_tool_routing_decision``: the tool names left visible (a list)."""
        return await self.decide("routing", event, state=state, tenant=tenant, trace=trace)

    async def rewrite(
        self,
        event: Mapping[str, Any],
        *,
        state: Mapping[str, Any] | None = None,
        tenant: str | None = None,
        trace: bool = False,
    ) -> Any:
        """``on_tool_call_dispatch``: ``None`` or ``{"tool_name", "args"}``."""
        return await self.decide("rewrite", event, state=state, tenant=tenant, trace=trace)

    async def steering(
        self,
        event: Mapping[str, Any],
        *,
        state: Mapping[str, Any] | None = None,
        tenant: str | None = None,
        trace: bool = False,
    ) -> Any:
        """``on_before_tool_call``: ``None`` or ``{"action": "skip", "content", "is_error"}``."""
        return await self.decide("steering", event, state=state, tenant=tenant, trace=trace)

    async def result(
        self,
        event: Mapping[str, Any],
        *,
        state: Mapping[str, Any] | None = None,
        tenant: str | None = None,
        trace: bool = False,
    ) -> Any:
        """``on_tool_result``: ``None`` (guards only observe)."""
        return await self.decide("result", event, state=state, tenant=tenant, trace=trace)

    async def response(
        self,
        event: Mapping[str, Any],
        *,
        state: Mapping[str, Any] | None = None,
        tenant: str | None = None,
        trace: bool = False,
    ) -> Any:
        """``on_response_render``: the final answer to give, a ``str``.

        ``event`` carries ``ResponseRenderEvent``'s fields (``run_id``,
        ``iteration_index``, ``model``, ``node_name``, ``original_content``).
        The response guards run in registration order, each given the
        previous one's answer as ``content``; the answer is the last one
        (``original_content`` when no guard changed it). A guard that
        faults is skipped; one configured ``on_error = "deny"`` withholds
        the answer with a fixed message instead (docs/failures.md).
        """
        return await self.decide("response", event, state=state, tenant=tenant, trace=trace)

    # ------------------------------------------------------------------
    # Lifecycle events
    # ------------------------------------------------------------------

    def observe(
        self, hook: str, event: Mapping[str, Any], *, tenant: str | None = None
    ) -> str:
        """Hands one lifecycle event to the guards that observe ``hook`` and
        returns at once, before any guard runs.

        ``hook`` is one of :data:`LIFECYCLE_HOOKS`; ``event`` carries the
        fields of symfonic's event class for it (``on_llm_end``: ``model``,
        ``output``, ``usage``, ``run_id``, ...; fields with a default may
        be left out). The host delivers a run's observations on its own
        runtime, in the order they were handed over, each guard under its
        own limits (a fault is logged, counted and skipped); a later
        decision of the same run (``run_id``) waits for them, so it sees
        their state writes (docs/lifecycle.md).

        Returns ``"queued"``, ``"unobserved"`` (no guard of the chain
        observes ``hook``: nothing was done) or ``"dropped"`` (the run
        already had 1,024 observations waiting; counted).

        Raises:
            RequestError: ``hook`` is not a lifecycle hook, or a field of
                ``event`` is missing or of the wrong type, or ``tenant`` is
                not a valid tenant name; the message names it, as
                ``toolgate serve``'s ``POST /v1/observe`` does.
            BusyError: the tenant's guards are not serving yet.
            ValueError: a value is not JSON (a non-finite float).
        """
        body: dict[str, Any] = {"hook": hook, "event": event}
        if tenant is not None:
            body["tenant"] = tenant
        return str(self._native.observe(_dumps(body)))

    def hooks(self) -> dict[str, Any]:
        """The hooks worth sending now, following reloads: ``toolgate
        serve``'s ``GET /v1/hooks`` document. ``hooks``: the lifecycle
        hooks some loaded guard (of any tenant) observes; ``response``:
        whether some loaded guard answers the response seam;
        ``generation``: the plugin set generation it describes."""
        return dict(json.loads(self._native.hooks()))

    # ------------------------------------------------------------------
    # What is loaded
    # ------------------------------------------------------------------

    def plugins(self) -> dict[str, Any]:
        """What is loaded: ``toolgate serve``'s ``GET /v1/plugins`` document
        (``generation``, ``global``, ``tenants``, ``errors``); limits carry
        their units (``timeout_ms``, ``memory_bytes``, ...)."""
        return json.loads(self._native.plugins())

    def seams(self, tenant: str | None = None) -> list[str]:
        """The seams some plugin of ``tenant``'s chain subscribes to."""
        return list(self._native.seams(tenant))

    def reload(self) -> dict[str, Any]:
        """Re-reads the directory now (blocking; the GIL is released) and
        returns the reload report (``generation``, ``loaded``, ``removed``,
        ``errors``, ``compiled``, ``cache_hits``)."""
        return json.loads(self._native.reload())

    def metrics(self) -> str:
        """The host's metrics, OpenMetrics text (``toolgate serve``'s
        ``/metrics`` series without the HTTP ones)."""
        return str(self._native.metrics())

    @property
    def generation(self) -> int:
        """The plugin set generation serving now."""
        return int(self._native.generation)

    @property
    def root(self) -> str:
        """The plugin directory."""
        return os.fspath(self._native.root)

    @property
    def watching(self) -> bool:
        """Whether the directory is watched for changes."""
        return bool(self._native.watching)

    def close(self) -> None:
        """Stops watching the directory; calls keep working."""
        self._native.close()
