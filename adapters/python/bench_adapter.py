#!/usr/bin/env python3
"""The latency toolgate adds to each symfonic hook, in-process and over HTTP.

For each of the four hooks it times, in one process and one event loop, the
same run, interleaved in rounds so machine noise hits every path alike:

- ``python``: an in-process ``BaseCallbackHandler`` doing the same checks
  as the guards, in Python (what a user would write without toolgate);
- ``embedded``: ``ToolgateHandler(plugins=dir)``: the guards in this process
  (``toolgate.Host``), a fresh sandboxed instance per guard call;
- ``host``: ``await Host.decide(...)`` alone (the embedded path without the
  adapter's event and state conversion);
- ``http``: ``ToolgateHandler(url=...)`` against ``toolgate serve`` over the
  same directory, on a kept-alive connection.

The guards are the Rust examples sql-guard (steering), query-limit
(rewrite), hide-admin-tools (routing) and result-audit (result).

    python bench_adapter.py                  # starts toolgate serve itself
    python bench_adapter.py -n 5000
    python bench_adapter.py --baseline /tmp/base/adapters/python/src

``--gaps-ms 1,5,20,100`` adds a second table: the steering hook called one
at a time after each idle gap (as an agent calls it: one decision, then the
model's turn), every path interleaved call by call (in a new random order
each time: what ran just before a call warms or cools the CPU it finds, so
no path may always follow the same one), beside a floor — a
plain Python function doing a guard's kind of work (the event to JSON and
back, a search) timed after the same gaps — so what the gap costs the
machine and what it costs toolgate are told apart.

``--baseline DIR`` adds ``embedded`` and ``host`` columns for another build
of the two packages, interleaved with the others in the same rounds:
``DIR`` holds its ``toolgate/`` (with the built ``_native`` extension) and
``toolgate_symfonic/``, e.g. the ``src`` of another checkout after
``maturin develop --release`` there. They are loaded under other names, so
both versions run in this one process.

It starts ``toolgate serve`` (``TOOLGATE_BIN``, default
``target/release/toolgate``) over the components in ``TOOLGATE_PLUGINS``
(default ``build/plugins``), ``rust/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

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


#: The paths' order, shuffled anew for each round and each spread call;
#: seeded, so a run's order can be repeated.
_order = random.Random(42)


def shuffled(items: Any) -> list[Any]:
    """``items`` as a list in a new random order (see :data:`_order`)."""
    out = list(items)
    _order.shuffle(out)
    return out


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


def load_baseline(src: Path, into: Path) -> tuple[Any, Any]:
    """The packages under ``src`` as ``toolgate_base`` and
    ``toolgate_symfonic_base`` (copied to ``into``, their imports of each
    other renamed); returns the two modules."""
    import importlib
    import re
    import shutil

    for name in ("toolgate", "toolgate_symfonic"):
        target = into / f"{name}_base"
        shutil.copytree(src / name, target, ignore=shutil.ignore_patterns("__pycache__"))
        for py in target.glob("*.py"):
            text = re.sub(r"\b(from|import) toolgate(_symfonic)?\b", r"\1 toolgate\2_base",
                          py.read_text())
            py.write_text(text)
    sys.path.insert(0, str(into))
    return importlib.import_module("toolgate_base"), importlib.import_module("toolgate_symfonic_base")


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


class PythonGuards(BaseCallbackHandler):
    """The example guards' checks as a plain in-process symfonic handler."""

    async def on_before_tool_call(self, event: Any, state: Any) -> dict[str, Any] | None:
        if event.tool_name == "run_query":
            sql = event.args.get("sql")
            if isinstance(sql, str) and "WHERE" not in sql.upper():
                return {"action": "skip", "content": "Add a WHERE clause before running this query.",
                        "is_error": True}
        return None

    async def on_tool_call_dispatch(self, event: Any, state: Any) -> dict[str, Any] | None:
        sql = event.args.get("sql") if event.tool_name == "run_query" else None
        if isinstance(sql, str) and "LIMIT" not in sql.upper():
            return {"tool_name": event.tool_name,
                    "args": {**event.args, "sql": sql.rstrip("; ") + " LIMIT 100"}}
        return None

    async def on_tool_routing_decision(self, event: Any) -> None:
        self.visible = [n for n in event.narrowed_tool_names if not n.startswith("admin_")]

    async def on_tool_result(self, event: Any) -> None:
        self.seen = (event.tool_name, len(str(event.result)))


async def bench(
    url: str, plugins: Path, n: int, warmup: int, rounds: int, baseline: tuple[Any, Any] | None = None,
    gaps: tuple[float, ...] = (), spread_n: int = 0,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from toolgate import Host

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

    python = PythonGuards()
    host = Host(plugins, watch=False)
    # One call id throughout: a budget far beyond the run keeps it unspent.
    embedded = ToolgateHandler(plugins=host, timeout=1e9)
    http = ToolgateHandler(url=url, timeout=1e9)
    base_host = base_embedded = None
    if baseline is not None:
        base_host = baseline[0].Host(plugins, watch=False)
        base_embedded = baseline[1].ToolgateHandler(plugins=base_host, timeout=1e9)
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

    def hook(seam: str, h: Any) -> Callable[[], Awaitable[Any]]:
        if seam == "steering":
            return lambda: h.on_before_tool_call(steering, state)
        if seam == "rewrite":
            return lambda: h.on_tool_call_dispatch(dispatch, state)
        if seam == "routing":
            return lambda: h.on_tool_routing_decision(routing)
        return lambda: h.on_tool_result(result)

    names = {
        "steering": "on_before_tool_call (steering: sql-guard)",
        "rewrite": "on_tool_call_dispatch (rewrite: query-limit)",
        "routing": "on_tool_routing_decision (routing: hide-admin-tools)",
        "result": "on_tool_result (result: result-audit)",
    }
    rows = []
    for seam in ("steering", "rewrite", "routing", "result"):
        body = bodies[seam]
        paths: dict[str, Callable[[], Awaitable[Any]]] = {
            "python": hook(seam, python),
            "embedded": hook(seam, embedded),
            "host": lambda body=body, seam=seam: host.decide(
                seam, body["event"], state=body["state"], tenant=body.get("tenant")),
            "http": hook(seam, http),
        }
        if base_host is not None:
            paths["embedded (baseline)"] = hook(seam, base_embedded)
            paths["host (baseline)"] = lambda body=body, seam=seam: base_host.decide(
                seam, body["event"], state=body["state"], tenant=body.get("tenant"))
        samples: dict[str, list[float]] = {k: [] for k in paths}
        for fn in paths.values():
            await timed(fn, warmup, 0)
        for _ in range(rounds):
            for key, fn in shuffled(paths.items()):
                samples[key].extend(await timed(fn, n // rounds, 0))
        rows.append({"hook": names[seam], **{k: sorted(v) for k, v in samples.items()}})
    spread_rows = []
    if gaps:
        spread_paths: dict[str, Callable[[], Awaitable[Any]]] = {
            "floor": plain_work,
            "python": hook("steering", python),
            "embedded": hook("steering", embedded),
            "host": lambda: host.decide("steering", bodies["steering"]["event"],
                                        state=bodies["steering"]["state"], tenant="acme"),
            "http": hook("steering", http),
        }
        if base_host is not None:
            spread_paths["embedded (baseline)"] = hook("steering", base_embedded)
            spread_paths["host (baseline)"] = lambda: base_host.decide(
                "steering", bodies["steering"]["event"], state=bodies["steering"]["state"], tenant="acme")
        for gap in gaps:
            samples = {k: [] for k in spread_paths}
            for _ in range(spread_n):
                # Shuffled each time, so every path follows every other
                # equally often: what ran just before a call warms or cools
                # the CPU it finds. (Rotating one order kept each path's
                # predecessor: the baseline's handler always came after the
                # HTTP path's busy millisecond, and an A/A run of one build
                # timed it 1.04-1.30x faster than the same build's.)
                for key, fn in shuffled(spread_paths.items()):
                    await asyncio.sleep(gap / 1000)
                    start = time.perf_counter_ns()
                    await fn()
                    samples[key].append((time.perf_counter_ns() - start) / 1000.0)
            spread_rows.append({"gap": gap, **{k: sorted(v) for k, v in samples.items()}})
    failures = {"embedded": dict(embedded.failures), "http": dict(http.failures)}
    if base_embedded is not None:
        failures["embedded (baseline)"] = dict(base_embedded.failures)
    await http.aclose()
    if any(failures.values()):
        raise SystemExit(f"guard calls failed during the benchmark: {failures}")
    return rows, spread_rows


async def plain_work() -> None:
    """A guard's kind of work in plain Python: the steering event to JSON
    text, parsed back, searched. The floor of the spread table."""
    doc = json.loads(json.dumps({"event": {"tool_name": "run_query", "call_id": "c1",
                                           "args": {"sql": "SELECT * FROM users WHERE id = 7"}}}))
    if "WHERE" not in doc["event"]["args"]["sql"].upper():
        raise AssertionError("unreachable")


def report_spread(rows: list[dict[str, Any]], n: int) -> None:
    if not rows:
        return
    print(f"\non_before_tool_call (steering: sql-guard) one call at a time after an idle gap,"
          f" p50 / p99 microseconds, n={n} per gap and path (interleaved call by call)\n")
    paths = tuple(k for k in rows[0] if k != "gap")
    head = ["idle gap"] + list(paths)
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        cells = [f"{row['gap']:g} ms"] + [
            f"{percentile(row[p], 0.5):,.1f} / {percentile(row[p], 0.99):,.1f}" for p in paths
        ]
        print("| " + " | ".join(cells) + " |")


def report(rows: list[dict[str, Any]], n: int) -> None:
    def us(v: float) -> str:
        return f"{v:,.1f}"

    print(f"\nper-hook latency, microseconds, n={n} per hook and path (sequential, one event loop)\n")
    paths = tuple(k for k in rows[0] if k != "hook")
    head = ["hook"] + [f"{p} p50 / p99" for p in paths]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        cells = [row["hook"]] + [
            f"{us(percentile(row[p], 0.5))} / {us(percentile(row[p], 0.99))}" for p in paths
        ]
        print("| " + " | ".join(cells) + " |")
    for p in paths:
        mean = statistics.fmean(v for row in rows for v in row[p])
        print(f"mean {p} hook call: {us(mean)} us")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=4000, help="timed calls per hook and path")
    parser.add_argument("--warmup", type=int, default=300, help="untimed calls first")
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds")
    parser.add_argument("--gaps-ms", default="", metavar="MS,MS,...",
                        help="also time the steering hook after each of these idle gaps")
    parser.add_argument("--spread-n", type=int, default=60, help="calls per gap and path")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="also time another build of toolgate/ and toolgate_symfonic/ in DIR")
    opts = parser.parse_args()

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
            print(f"toolgate serve at {server.url} and toolgate.Host, guards: {', '.join(GUARDS)}")
            baseline = None
            if opts.baseline is not None:
                baseline = load_baseline(opts.baseline, Path(tmp) / "baseline")
                print(f"baseline: {opts.baseline}")
            try:
                gaps = tuple(float(g) for g in opts.gaps_ms.split(",") if g.strip())
            except ValueError:
                parser.error(f"--gaps-ms {opts.gaps_ms!r}: expected numbers, e.g. 1,5,20,100")
            rows, spread = asyncio.run(bench(server.url, plugins, opts.n, opts.warmup, opts.rounds,
                                             baseline, gaps, opts.spread_n))
            report(rows, opts.n)
            report_spread(spread, opts.spread_n)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
