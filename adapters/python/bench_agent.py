#!/usr/bin/env python3
"""What toolgate costs inside real agent runs, timed from symfonic's side.

Each run is a real ``SymfonicAgent.run()`` over a scripted model (no model
or network time): the query routes tools (``enforce``), the model calls
``list_tables`` then ``run_query`` and answers with an e-mail address in
its text, each turn reporting token usage. Per run symfonic fires one
routing decision, two dispatches, two steering calls, two results, one
response render and its lifecycle events (agent, node and LLM start/end,
token composition, ...).

Paths, interleaved in rounds in one process and one event loop so machine
noise hits every path alike:

- ``none``: no callback handler (the floor);
- ``python``: a plain Python ``BaseCallbackHandler`` doing a steering
  check, a result count and a token count (what a user writes without
  toolgate);
- ``embedded``: ``ToolgateHandler(plugins=dir)`` over the README's chain —
  hide-admin-tools (routing), query-limit (rewrite), sql-guard (steering),
  result-audit (result), pii-redact (response) — in this process;
- ``embedded+observer``: the same plus one guard observing every
  lifecycle event (the ``observer`` test guest: a state ``add``, ``get``
  and ``set`` per event);
- ``http``, ``http+observer``: the same two sets behind ``toolgate
  serve`` (``TOOLGATE_BIN``, default ``target/release/toolgate``);
- ``http/httpx``: ``http`` through an injected ``httpx.AsyncClient``
  instead of the handler's own HTTP/1.1 connections (the baseline of that
  choice).

Each hook is timed around ``CallbackManager``'s own method (what the
agent awaits), and the whole ``run()``. ``--gap-ms`` sleeps before each
run (an agent's model turn is tens of ms or more), so a run finds the host
idle, as a real one does.

    python bench_agent.py                 # 5 rounds of 20 runs per path
    python bench_agent.py --runs 50 --gap-ms 20

``--baseline DIR`` adds an ``embedded (baseline)`` path: another build of
the two packages (``DIR`` holds its ``toolgate/``, with the built
``_native``, and ``toolgate_symfonic/``, as ``bench_adapter.py
--baseline`` takes them), over the same components, interleaved with the
rest, so a change is measured against the build before it in one run.
``--chain tools`` leaves ``pii-redact`` out (the four tool seams only:
what a build before the ``0.3.0`` contract can load), so an older build's
components and packages can be the baseline:

    TOOLGATE_PLUGINS=/old/build/plugins python bench_agent.py \
        --chain tools --baseline /old/adapters/python/src

Components: ``TOOLGATE_PLUGINS`` (default ``build/plugins``) ``rust/``, and
the test guest ``observer`` (``TOOLGATE_GUESTS``, default
``target/wasm-guests/wasm32-wasip2/release``; ``cargo test --workspace``
builds it).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))

from agent_kit import call, make_agent, say, spent  # noqa: E402
import httpx  # noqa: E402
from symfonic.core.callbacks import BaseCallbackHandler  # noqa: E402
from symfonic.core.callbacks.manager import CallbackManager  # noqa: E402
from toolgate_server import ToolgateServer, plugin_dir, required_guest, rust_plugin  # noqa: E402

from bench_adapter import load_baseline, shuffled  # noqa: E402

from toolgate import LIFECYCLE_HOOKS  # noqa: E402
from toolgate_symfonic import ToolgateHandler  # noqa: E402

QUERY = "run the query and email the result"
KEYWORDS = {"run_query": ["query"], "send_email": ["email"], "delete_user": ["delete"]}
CHAINS = {
    "readme": ("hide-admin-tools", "query-limit", "sql-guard", "result-audit", "pii-redact"),
    "tools": ("hide-admin-tools", "query-limit", "sql-guard", "result-audit"),
}
TOOL_HOOKS = (
    "on_tool_routing_decision",
    "on_tool_call_dispatch",
    "on_before_tool_call",
    "on_tool_result",
    "on_response_render",
)

#: path -> hook (or "run") -> durations in µs.
timings: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
current = {"path": ""}


def time_callback_manager() -> None:
    """Wraps each of ``CallbackManager``'s hook methods in a timer keyed by
    the path being run."""
    for name in TOOL_HOOKS + LIFECYCLE_HOOKS:
        original = getattr(CallbackManager, name, None)
        if original is None:  # fired by other parts of symfonic, not this run
            continue

        async def timed(self: Any, *a: Any, _orig: Any = original, _name: str = name, **kw: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return await _orig(self, *a, **kw)
            finally:
                timings[current["path"]][_name].append((time.perf_counter_ns() - start) / 1000)

        setattr(CallbackManager, name, timed)


class PlainHandler(BaseCallbackHandler):  # type: ignore[misc]
    """The checks in Python: a WHERE rule, a result count, a token count."""

    def __init__(self) -> None:
        self.results = 0
        self.tokens = 0

    async def on_before_tool_call(self, event: Any, state: Any) -> Any:
        sql = str(event.args.get("sql", ""))
        if re.match(r"(?i)\s*(delete|update)\b", sql) and not re.search(r"(?i)\bwhere\b", sql):
            return {"action": "skip", "content": "Add a WHERE clause before running this query."}
        return None

    async def on_tool_result(self, event: Any) -> None:
        self.results += 1

    async def on_llm_end(self, event: Any) -> None:
        self.tokens += int((event.usage or {}).get("total_tokens", 0))


def script() -> list[Any]:
    return [
        spent(call("list_tables", "c1"), 120, 10),
        spent(call("run_query", "c2", sql="SELECT name FROM users WHERE id = 7"), 160, 12),
        spent(say("Ann's address is ann@example.com."), 200, 20),
    ]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_run(handler: Any) -> None:
    agent, _ = make_agent(script(), tool_routing_mode="enforce", trigger_keywords=KEYWORDS)
    callbacks = []
    if handler is not None:
        if hasattr(handler, "install"):  # a ToolgateHandler, this build's or the baseline's
            handler.install(agent)
        callbacks = [handler]
    start = time.perf_counter_ns()
    await agent.run(QUERY, callbacks=callbacks)
    timings[current["path"]]["run"].append((time.perf_counter_ns() - start) / 1000)


async def bench(args: argparse.Namespace, work: Path) -> None:
    names = CHAINS[args.chain]
    chain = {f"{n}.wasm": rust_plugin(n) for n in names}
    plain = plugin_dir(work / "chain", chain)
    observed = plugin_dir(work / "observed", {**chain, "zz-observer.wasm": required_guest("observer")})
    # The observer's steering proceeds, so the run is the same with it.
    (observed / "toolgate.toml").write_text(
        "".join(f'[[plugin]]\npath = "{n}.wasm"\n\n' for n in names)
        + '[[plugin]]\npath = "zz-observer.wasm"\n[plugin.config]\nproceed = true\n'
    )
    servers = [
        ToolgateServer(plain, work / "serve-chain.log").start(),
        ToolgateServer(observed, work / "serve-observed.log").start(),
    ]
    httpx_client = httpx.AsyncClient(trust_env=False)
    try:
        handlers: dict[str, Any] = {
            "none": None,
            "python": PlainHandler(),
            "embedded": ToolgateHandler(plugins=plain, watch=False),
            "embedded+observer": ToolgateHandler(plugins=observed, watch=False),
            "http": ToolgateHandler(url=servers[0].url),
            # The same service through an httpx client, the transport the
            # handler used before its own (BENCHMARKS.md, "HTTP per hook").
            "http/httpx": ToolgateHandler(url=servers[0].url, client=httpx_client),
            "http+observer": ToolgateHandler(url=servers[1].url),
        }
        if args.baseline is not None:
            base = load_baseline(args.baseline, work / "baseline")[1]
            handlers["embedded (baseline)"] = base.ToolgateHandler(plugins=plain, watch=False)
        for path, handler in handlers.items():  # warm up: compile, connect
            current["path"] = "warmup"
            for _ in range(3):
                await one_run(handler)
        for _ in range(args.rounds):
            # A new order each round: no path always runs after the same
            # one (what ran before warms or cools the CPU a path finds).
            for path, handler in shuffled(handlers.items()):
                current["path"] = path
                for _ in range(args.runs):
                    if args.gap_ms:
                        await asyncio.sleep(args.gap_ms / 1000)
                    await one_run(handler)
        for handler in handlers.values():
            if hasattr(handler, "aclose"):
                await handler.aclose()
    finally:
        await httpx_client.aclose()
        for server in servers:
            server.stop()


def report(args: argparse.Namespace) -> None:
    paths = [p for p in timings if p != "warmup"]
    runs = args.rounds * args.runs
    print(f"{runs} runs per path, {args.rounds} interleaved rounds, gap {args.gap_ms} ms before each run")
    print()
    print(f"{'path':<20}{'run p50 ms':>12}{'run p90 ms':>12}{'added p50 ms':>14}")
    floor = statistics.median(timings["none"]["run"])
    for p in paths:
        run = timings[p]["run"]
        print(f"{p:<20}{statistics.median(run) / 1000:>12.2f}{pct(run, 0.9) / 1000:>12.2f}"
              f"{(statistics.median(run) - floor) / 1000:>14.2f}")
    print()
    print("per hook, as the agent awaits it (p50 µs; per run: calls)")
    header = f"{'hook':<28}" + "".join(f"{p:>19}" for p in paths)
    print(header)
    for hook in TOOL_HOOKS + LIFECYCLE_HOOKS:
        if not any(timings[p].get(hook) for p in paths):
            continue
        cells = []
        for p in paths:
            values = timings[p].get(hook, [])
            if values:
                cells.append(f"{statistics.median(values):>10.1f} ({len(values) / runs:.0f}x)".rjust(19))
            else:
                cells.append(f"{'-':>19}")
        print(f"{hook:<28}" + "".join(cells))
    print()
    for p in paths:
        if p == "none":
            continue
        events = [v for h in LIFECYCLE_HOOKS for v in timings[p].get(h, [])]
        if events:
            print(f"{p}: {len(events) / runs:.0f} lifecycle events a run, p50 {statistics.median(events):.1f} µs each")
    for base, with_observer in (("embedded", "embedded+observer"), ("http", "http+observer")):
        if base in timings and with_observer in timings:
            a = statistics.median(timings[base]["run"])
            b = statistics.median(timings[with_observer]["run"])
            print(f"{with_observer} / {base}: run p50 {b / a:.2f} ({(b - a) / 1000:+.2f} ms)")
    if "embedded (baseline)" in timings:
        cells = []
        for hook in TOOL_HOOKS + ("run",):
            now, base = timings["embedded"].get(hook), timings["embedded (baseline)"].get(hook)
            if now and base:
                cells.append(f"{hook} {statistics.median(now) / statistics.median(base):.2f}x")
        print("embedded / embedded (baseline), p50: " + ", ".join(cells))
    if "http" in timings and "http/httpx" in timings:
        own = [v for h in TOOL_HOOKS[1:] for v in timings["http"].get(h, [])]
        lib = [v for h in TOOL_HOOKS[1:] for v in timings["http/httpx"].get(h, [])]
        print(f"http per tool hook p50: own client {statistics.median(own):.0f} µs, "
              f"httpx {statistics.median(lib):.0f} µs ({statistics.median(own) / statistics.median(lib):.2f}x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per path and round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--gap-ms", type=float, default=0.0, help="idle time before each run")
    parser.add_argument("--chain", choices=sorted(CHAINS), default="readme",
                        help="the README's five guards, or the four tool seams' (no response seam)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="another build's packages (toolgate/, toolgate_symfonic/) as a further path")
    args = parser.parse_args()
    time_callback_manager()
    with tempfile.TemporaryDirectory(prefix="toolgate-bench-agent-") as work:
        asyncio.run(bench(args, Path(work)))
    report(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
