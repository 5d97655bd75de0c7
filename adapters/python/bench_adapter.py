#!/usr/bin/env python3
"""The latency the adapter adds to each symfonic hook.

For each of the four hooks it times, in one process and one event loop:

- ``baseline``: the same hook on a plain in-process ``BaseCallbackHandler``
  (a no-op), i.e. what symfonic pays for any handler;
- ``adapter``: ``ToolgateHandler``'s hook against a running ``toolgate
  serve`` (event and state conversion, HTTP on a kept-alive connection, the
  guard chain, answer checks);
- ``http``: a bare ``httpx`` POST of a prepared body to the same endpoint
  (the service and transport alone, without the adapter's own work).

"added" is adapter minus baseline at the same percentile.

    python bench_adapter.py                  # starts toolgate serve itself
    python bench_adapter.py --url http://127.0.0.1:7878 -n 5000

Without ``--url`` it starts ``toolgate serve`` (``TOOLGATE_BIN``, default
``target/release/toolgate``) over the Rust example guards sql-guard,
query-limit, hide-admin-tools and result-audit (``TOOLGATE_PLUGINS``,
default ``build/plugins``), one guard per seam.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import AIMessage, HumanMessage
from symfonic.core.callbacks import BaseCallbackHandler
from symfonic.core.contracts.callbacks import (
    BeforeToolCallEvent,
    ToolCallDispatchEvent,
    ToolResultCallbackEvent,
    ToolRoutingDecisionEvent,
)

from toolgate_symfonic import ToolgateHandler, json_safe, state_subset

sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))

TOOLS = ("run_query", "send_email", "list_tables", "admin_purge")
GUARDS = ("sql-guard", "query-limit", "hide-admin-tools", "result-audit")


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


async def timed(fn: Callable[[], Awaitable[Any]], n: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        await fn()
    out = []
    for _ in range(n):
        start = time.perf_counter_ns()
        await fn()
        out.append((time.perf_counter_ns() - start) / 1000.0)
    out.sort()
    return out


def node_state() -> dict[str, Any]:
    """A node state shaped like symfonic's (messages, scope, run id, query)."""
    ai = AIMessage(
        content="",
        tool_calls=[{"name": "run_query", "args": {"sql": "SELECT * FROM users WHERE id = 7"}, "id": "c1"}],
    )
    return {
        "messages": [HumanMessage(content="look up user 7"), ai],
        "query": "look up user 7",
        "tenant_id": "acme",
        "sub_tenant_id": None,
        "run_id": "bench-run",
        "allowed_tool_names": None,
        "resolved_tools": None,
        "agent_depth": 0,
        "deps": object(),
        "_callback_manager": object(),
    }


async def bench(url: str, n: int, warmup: int) -> list[dict[str, Any]]:
    state = node_state()
    args = {"sql": "SELECT * FROM users WHERE id = 7"}
    steering = BeforeToolCallEvent(run_id="bench-run", tool_name="run_query", call_id="c1", args=args)
    dispatch = ToolCallDispatchEvent(
        run_id="bench-run", iteration_index=0, node_name="react", call_id="c1",
        tool_name="run_query", args=args, available_tools=TOOLS,
    )
    routing = ToolRoutingDecisionEvent(
        run_id="bench-run", mode="enforce", intent_label="action",
        total_tools=len(TOOLS), narrowed_tool_names=list(TOOLS),
    )
    result = ToolResultCallbackEvent(
        run_id="bench-run", tool_name="run_query", result="1 row: id=7 name=Ada", call_id="c1",
    )

    baseline = BaseCallbackHandler()
    handler = ToolgateHandler(url, timeout=10.0)
    sub = state_subset(state)
    bodies = {
        "steering": {"event": {"run_id": "bench-run", "tool_name": "run_query", "call_id": "c1",
                               "args": json_safe(args)}, "state": sub, "tenant": "acme"},
        "rewrite": {"event": {"run_id": "bench-run", "iteration_index": 0, "node_name": "react",
                              "call_id": "c1", "tool_name": "run_query", "args": json_safe(args),
                              "available_tools": list(TOOLS)},
                    "state": {**sub, "tool_calls": []}, "tenant": "acme"},
        "routing": {"event": {"run_id": "bench-run", "mode": "enforce", "intent_label": "action",
                              "total_tools": len(TOOLS), "narrowed_tool_names": list(TOOLS),
                              "saved_tokens_estimate": 0},
                    "state": {"run_id": "bench-run", "tool_calls": []}},
        "result": {"event": {"run_id": "bench-run", "tool_name": "run_query",
                             "result": "1 row: id=7 name=Ada", "call_id": "c1",
                             "deferred": False, "is_error": False},
                   "state": {**sub, "tool_calls": []}, "tenant": "acme"},
    }
    hooks: dict[str, tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]] = {
        "on_before_tool_call (steering)": (
            lambda: baseline.on_before_tool_call(steering, state),
            lambda: handler.on_before_tool_call(steering, state),
        ),
        "on_tool_call_dispatch (rewrite)": (
            lambda: baseline.on_tool_call_dispatch(dispatch, state),
            lambda: handler.on_tool_call_dispatch(dispatch, state),
        ),
        "on_tool_routing_decision (routing)": (
            lambda: baseline.on_tool_routing_decision(routing),
            lambda: handler.on_tool_routing_decision(routing),
        ),
        "on_tool_result (result)": (
            lambda: baseline.on_tool_result(result),
            lambda: handler.on_tool_result(result),
        ),
    }
    seams = ["steering", "rewrite", "routing", "result"]
    rows = []
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10.0) as raw:
        for (name, (base_fn, adapter_fn)), seam in zip(hooks.items(), seams, strict=True):
            content = json.dumps(bodies[seam]).encode()

            async def post(seam: str = seam, content: bytes = content) -> Any:
                response = await raw.post(
                    f"/v1/{seam}", content=content, headers={"Content-Type": "application/json"}
                )
                response.raise_for_status()
                return response.json()

            b = await timed(base_fn, n, warmup)
            a = await timed(adapter_fn, n, warmup)
            h = await timed(post, n, warmup)
            rows.append({"hook": name, "baseline": b, "adapter": a, "http": h})
    failures = dict(handler.failures)
    await handler.aclose()
    if failures:
        raise SystemExit(f"service calls failed during the benchmark: {failures}")
    return rows


def report(rows: list[dict[str, Any]], n: int) -> None:
    def us(v: float) -> str:
        return f"{v:,.1f}"

    print(f"\nper-hook latency, microseconds, n={n} each (sequential, one event loop)\n")
    head = ("hook", "baseline p50", "p99", "adapter p50", "p99", "added p50", "p99",
            "bare HTTP p50", "p99")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        b, a, h = row["baseline"], row["adapter"], row["http"]
        bp50, bp99 = percentile(b, 0.5), percentile(b, 0.99)
        ap50, ap99 = percentile(a, 0.5), percentile(a, 0.99)
        print(
            "| " + " | ".join([
                row["hook"], us(bp50), us(bp99), us(ap50), us(ap99),
                us(ap50 - bp50), us(ap99 - bp99),
                us(percentile(h, 0.5)), us(percentile(h, 0.99)),
            ]) + " |"
        )
    mean_adapter = statistics.fmean(v for row in rows for v in row["adapter"])
    print(f"\nmean adapter hook call: {us(mean_adapter)} us")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running toolgate serve (default: start one)")
    parser.add_argument("-n", type=int, default=2000, help="timed calls per hook and path")
    parser.add_argument("--warmup", type=int, default=200, help="untimed calls first")
    opts = parser.parse_args()

    if opts.url:
        report(asyncio.run(bench(opts.url, opts.n, opts.warmup)), opts.n)
        return 0

    from toolgate_server import SetupError, ToolgateServer, plugin_dir, rust_plugin

    with tempfile.TemporaryDirectory(prefix="toolgate-bench-") as tmp:
        try:
            plugins = plugin_dir(Path(tmp) / "plugins", {f"{g}.wasm": rust_plugin(g) for g in GUARDS})
            server = ToolgateServer(plugins, Path(tmp) / "toolgate.log")
            server.start()
        except SetupError as exc:
            print(f"bench_adapter: {exc}", file=sys.stderr)
            return 2
        try:
            print(f"toolgate serve at {server.url} with guards: {', '.join(GUARDS)}")
            report(asyncio.run(bench(server.url, opts.n, opts.warmup)), opts.n)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
