#!/usr/bin/env python3
"""Differential test: toolgate's chain rules against the real symfonic-core.

Seeded random chains of 1-5 guards, over all five seams, run twice:

- symfonic side: Python handlers (``ScriptedHandler``) built from the
  scripts, driven through symfonic-core's own code: its ``CallbackManager``
  (every seam; ``on_response_render`` for the response seam), the tool node's guard step (``_run_guards`` of
  ``symfonic.observability.tool_span_seam``: steering) and a real
  ``SymfonicAgent`` whose React node chains the rewrites and validates the
  result against ``available_tools`` (rewrite).
- toolgate side: the ``scripted`` test guard (``tests/guests/scripted``),
  one copy per guard, each with its script as ``config``, in a plugin
  directory with one tenant per case, all cases through one
  ``toolgate replay --json`` process.

``ScriptedHandler`` answers exactly as the ``scripted`` guard does for the
same config (a script it cannot read raises where the guard panics), so
any difference in what comes out is a difference in the chain rules or in
the data passing through them. Compared, per seam:

- steering: the verdict (the tool runs, or the synthesized result's
  content and error flag) and which guards were consulted;
- rewrite: the call that is dispatched (tool name and args, exactly:
  integers stay integers, key order is kept);
- routing: which guards were consulted, in order (see the intentional
  differences below for what is not compared);
- result: which guards were consulted and what each logging guard saw
  (the scripted guard logs the result JSON it was handed; toolgate's log
  line is read back);
- response: the final answer, exactly, and which guards were consulted
  (scripts rewrite to a text, append to the content they were given, pass
  it on, raise, or return nothing: a non-string on symfonic's side).

toolgate's side also fails a case when it refuses the event (exit 2: the
case is reported and the rest replayed without it) or leaves a guard out of
the chain because it did not load (its warning is reported). Every guard
keeps the default ``on_error = "skip"``: ``"deny"`` (fail closed) is an
operator's opt-in with no symfonic counterpart.

Places where toolgate differs from symfonic on purpose are listed in
``INTENTIONAL_DIFFERENCES`` and are excluded by those names where the
comparison skips them; nothing else is excluded. Inputs that one side
cannot express at all are not generated (see ``NOT_GENERATED``).

Usage (from the repository root, with the adapter's virtualenv):

    adapters/python/.venv/bin/python adapters/python/differential.py \\
        [--cases N] [--seed S] [--seams steering,rewrite,routing,result,response] \\
        [--bin PATH] [--scripted PATH] [--batch N] [--no-directed] [--no-shrink]

``--cases`` is per seam (default 250). It prints, per seam, how many cases
agreed and how many did not, then each distinct mismatch with a minimal
reproduction (shrunk by removing guards and simplifying the event and
scripts while the same mismatch remains). Exit status: 0 when everything
agreed, 1 on a mismatch, 2 on a usage or setup error.

Paths: ``--bin`` (default ``$TOOLGATE_BIN``, else ``target/release/toolgate``,
else ``target/debug/toolgate``) and ``--scripted`` (default
``$TOOLGATE_SCRIPTED``, else
``target/wasm-guests/wasm32-wasip2/release/scripted.wasm``, which
``cargo test`` builds).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import logging
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

SEAMS = ("steering", "rewrite", "routing", "result", "response")

#: Where toolgate differs from symfonic on purpose (README, "Where toolgate
#: goes beyond the seed", and the seam table). The comparison names these
#: where it leaves something out; nothing else is left out.
INTENTIONAL_DIFFERENCES = {
    "routing-narrowing": (
        "symfonic's on_tool_routing_decision is observe-only: every handler "
        "gets the same event and nothing it returns is read. toolgate lets a "
        "routing guard narrow the palette: each guard sees the previous "
        "narrowing and the answer is the intersection (applied in symfonic "
        "through the adapter's ToolPaletteResolver). So at routing only the "
        "guards consulted are compared, not the answer nor the event each "
        "guard saw."
    ),
    "state-on-every-seam": (
        "toolgate hands every guard the hook's state as JSON ({} where "
        "symfonic passes none, the adapter's safe subset elsewhere); "
        "symfonic passes its LangGraph node state, which is not JSON. The "
        "scripts never read state, and the state is not compared."
    ),
    "return-size-limits": (
        "toolgate refuses a string a guard returns beyond max_return_kib "
        "(oversized-return fault); a Python handler has no such limit. "
        "Generated strings stay far below the default 4 MiB."
    ),
}

#: Inputs that are not generated because one side cannot express them, so
#: there is nothing to compare.
NOT_GENERATED = {
    "unrepresentable-verdicts": (
        "a Python handler can return any object (a non-dict verdict, a "
        "non-string content or tool_name, is_error that is not a bool); a "
        "guard's reply is a typed WIT record, so only the shapes the WIT "
        "can carry are generated."
    ),
    "invalid-json-args": (
        "a guard can return args text that is not JSON (raw_args); a Python "
        "handler cannot."
    ),
    "lone-surrogates": (
        "Python strings can hold lone surrogates; WIT strings, Rust strings "
        "and TOML configs cannot."
    ),
    "non-object-event-args": (
        "symfonic builds dispatch and steering events from LangChain tool "
        "calls, whose args are always a dict."
    ),
    "nesting-beyond-adapter": (
        "args and results are nested at most 64 levels, what the adapter "
        "sends (toolgate_symfonic.json_safe); deeper values reach toolgate "
        "as strings."
    ),
}

# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------


@dataclass
class Case:
    """One chain and one event at one seam."""

    seam: str
    #: Each guard's config, in registration order (the scripted guard's
    #: config: ``{seam: script}``, or ``{}`` for a guard with no script).
    chain: list[dict[str, Any]]
    #: The event as toolgate takes it (the seed's dataclass fields as JSON).
    event: dict[str, Any]
    #: A label: "random #N" or the name of a directed case.
    label: str = ""


PALETTE_POOL = [
    "run_query",
    "send_email",
    "search",
    "delete_user",
    "list_tables",
    "admin_purge",
    "fetch_url",
    "write_file",
]

OUT_OF_PALETTE = [
    "not_there",
    "unknown_tool",
    "",
    " ",
    "run_query ",
    "RUN_QUERY",
    "run_query\u200b",
    "r\u00e9sum\u00e9",
    "\u5de5\u5177",
    "\U0001f527",
    "a\u0000b",
    "send_email\n",
]

#: Strings that look empty, are whitespace of some kind, or are odd. All
#: short: INTENTIONAL_DIFFERENCES["return-size-limits"].
ODD_STRINGS = [
    "",
    " ",
    "   ",
    "\t",
    "\n",
    "\r\n",
    " \t\n ",
    "\u00a0",
    "\u3000",
    "\u0085",
    "\u2028",
    "\u2029",
    "\u200b",
    "\ufeff",
    "\u0000",
    "\u001f",
    "\u007f",
    "\u001b[31mred",
    "\u00e9",
    "e\u0301",
    "\u5de5\u5177",
    "\U0001f600",
    "\u202eevil",
    'a "quoted" \\ back',
    "x" * 300,
]

PLAIN_CONTENTS = [
    "Add a WHERE clause before running this query.",
    "Not permitted.",
    "no",
    ".",
]

BIG_INTS = [
    2**63 - 1,
    2**63,
    2**63 + 1,
    -(2**63),
    -(2**63) - 1,
    2**64 - 1,
    2**64,
    2**64 + 1,
    -(2**64),
    2**53 + 1,
    10**30,
    2**128,
    -(2**127) - 1,
    10**39,
    -(10**40),
    2 * 10**45,
    12345678901234567890123456789012345678901234567890,
]

FLOATS = [0.5, -0.0, 1.0, 1e300, 2.5e-8, 123456789.125, -1.5]

KEYS = ["z", "a", "m", "b", "sql", "id", "\u00e9", "10", "9", "", " ", "trail", "A"]

MAX_DEPTH = 64


def gen_scalar(rng: random.Random) -> Any:
    pick = rng.random()
    if pick < 0.25:
        return rng.choice(BIG_INTS)
    if pick < 0.4:
        return rng.randint(-1000, 1000)
    if pick < 0.5:
        return rng.choice(FLOATS)
    if pick < 0.75:
        return rng.choice(ODD_STRINGS + PLAIN_CONTENTS)
    if pick < 0.85:
        return rng.choice([True, False])
    return None


def gen_deep(rng: random.Random, depth: int) -> Any:
    """A value nested ``depth`` levels (objects and arrays)."""
    value: Any = gen_scalar(rng)
    for _ in range(depth):
        value = {rng.choice(KEYS): value} if rng.random() < 0.6 else [value]
    return value


def gen_value(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON value, at most ``MAX_DEPTH - depth`` levels deep."""
    if depth >= MAX_DEPTH:
        return gen_scalar(rng)
    pick = rng.random()
    if pick < 0.55:
        return gen_scalar(rng)
    if pick < 0.75:
        return gen_object(rng, depth + 1)
    if pick < 0.92:
        return [gen_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return gen_deep(rng, rng.randint(1, MAX_DEPTH - depth))


def gen_object(rng: random.Random, depth: int = 1) -> dict[str, Any]:
    """A JSON object, keys in a random (rarely sorted) order."""
    keys = rng.sample(KEYS, rng.randint(0, 4))
    return {k: gen_value(rng, depth) for k in keys}


def gen_args(rng: random.Random) -> dict[str, Any]:
    """A call's args: an object, sometimes holding a deep value."""
    if rng.random() < 0.1:
        return {}
    args = gen_object(rng, 1)
    if rng.random() < 0.15:
        args[rng.choice(KEYS)] = gen_deep(rng, rng.randint(1, MAX_DEPTH - 1))
    return args


def gen_toml_value(rng: random.Random, depth: int = 0) -> Any:
    """A value a TOML config can carry: no null, integers within i64,
    objects with sorted keys (toml's tables are sorted by key)."""
    pick = rng.random()
    if depth < 3 and pick < 0.2:
        return gen_toml_object(rng, depth + 1)
    if depth < 3 and pick < 0.3:
        return [gen_toml_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    value = gen_scalar(rng)
    while value is None or (isinstance(value, int) and not -(2**63) <= value < 2**63):
        value = gen_scalar(rng)
    return value


def gen_toml_object(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    keys = sorted(rng.sample(KEYS, rng.randint(0, 3)))
    return {k: gen_toml_value(rng, depth) for k in keys}


def gen_raw_json(rng: random.Random) -> str:
    """JSON text for ``raw_args``: mostly objects, sometimes not an object,
    sometimes with a duplicate key."""
    pick = rng.random()
    if pick < 0.2:
        value: Any = rng.choice(
            [[1, 2], [], "args", 5, 2**64, 1.5, True, None, [{"a": 1}], ""]
        )
        return json.dumps(value)
    obj = gen_args(rng)
    text = json.dumps(obj, ensure_ascii=rng.random() < 0.5)
    if obj and rng.random() < 0.1:
        key = next(iter(obj))
        text = text[:-1] + ", " + json.dumps(key) + ": " + json.dumps(gen_scalar(rng)) + "}"
    return text


def gen_steering_script(rng: random.Random) -> Any:
    pick = rng.random()
    if pick < 0.2:
        return None
    if pick < 0.35:
        return {"action": "proceed"}
    if pick < 0.9:
        script: dict[str, Any] = {"action": "skip"}
        roll = rng.random()
        if roll < 0.45:
            script["content"] = rng.choice(ODD_STRINGS)
        elif roll < 0.9:
            script["content"] = rng.choice(PLAIN_CONTENTS)
        elif roll < 0.95:
            script["content"] = rng.choice([5, True, ["x"]])  # not a string
        # else: no content at all
        if rng.random() < 0.6:
            script["is_error"] = rng.choice([True, False])
        return script
    return {"action": rng.choice(["jump", "", "SKIP"])}  # unreadable


def gen_rewrite_script(rng: random.Random, palette: list[str], index: int) -> Any:
    def name() -> str:
        return rng.choice(palette) if rng.random() < 0.6 else rng.choice(OUT_OF_PALETTE)

    pick = rng.random()
    if pick < 0.15:
        return None
    if pick < 0.3:
        return {"tool_name": name()}
    if pick < 0.4:
        return {"args": gen_toml_object(rng)}
    if pick < 0.5:
        return {"tool_name": name(), "args": gen_toml_object(rng)}
    if pick < 0.75:
        script: dict[str, Any] = {"raw_args": gen_raw_json(rng)}
        if rng.random() < 0.6:
            script["tool_name"] = name()
        return script
    if pick < 0.95:
        return {"append_trail": f"g{index + 1}"}
    return {"tool_name": rng.choice([5, True])}  # unreadable


def gen_routing_script(rng: random.Random, names: list[str]) -> Any:
    pick = rng.random()
    if pick < 0.25:
        return None
    if pick < 0.9:
        keep = rng.sample(names, rng.randint(0, len(names)))
        if rng.random() < 0.3:
            keep.append(rng.choice(OUT_OF_PALETTE))
        return {"keep": keep}
    return {"keep": rng.choice(["run_query", 5, [1]])}  # unreadable


def gen_result_script(rng: random.Random) -> Any:
    return rng.choice([None, {"log": True}, {"log": True}, {"log": False}])


#: What a ``nothing`` response script answers on symfonic's side: a
#: non-string, which symfonic drops with a warning (toolgate: none).
NOT_STRINGS = [0, 7, 1.5, True, False, [], ["x"], {"content": "x"}]


def gen_text(rng: random.Random) -> str:
    return rng.choice(ODD_STRINGS + PLAIN_CONTENTS + ["Mail ada@example.org.", "ok"])


def gen_response_script(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.12:
        return None
    if r < 0.27:
        return {"pass": True}
    if r < 0.47:
        return {"set": gen_text(rng)}
    if r < 0.72:
        return {"append": gen_text(rng)}
    if r < 0.84:
        return {"raise": True}
    if r < 0.95:
        return {"nothing": rng.choice(NOT_STRINGS)}
    # Unreadable: the guard panics, the handler raises.
    return rng.choice([{"set": 5}, {"append": ["x"]}, {"jump": True}, {"pass": False}])


def gen_case(rng: random.Random, seam: str, n: int) -> Case:
    length = rng.randint(1, 5)
    run_id = f"run-{n}"
    call_id = f"call-{n}"
    if seam == "steering":
        chain = [wrap(seam, gen_steering_script(rng)) for _ in range(length)]
        event = {
            "run_id": run_id,
            "tool_name": rng.choice(PALETTE_POOL + OUT_OF_PALETTE[:2]),
            "call_id": call_id,
            "args": gen_args(rng),
        }
    elif seam == "rewrite":
        palette = rng.sample(PALETTE_POOL, rng.randint(1, 4))
        chain = [wrap(seam, gen_rewrite_script(rng, palette, i)) for i in range(length)]
        original = rng.choice(palette) if rng.random() < 0.8 else rng.choice(OUT_OF_PALETTE[:2])
        event = {
            "run_id": run_id,
            "iteration_index": 0,
            "node_name": "react",
            "call_id": call_id,
            "tool_name": original,
            "args": gen_args(rng),
            "available_tools": palette,
        }
    elif seam == "routing":
        total = rng.randint(1, len(PALETTE_POOL))
        narrowed = rng.sample(PALETTE_POOL[:total], rng.randint(0, total))
        chain = [wrap(seam, gen_routing_script(rng, narrowed or PALETTE_POOL)) for _ in range(length)]
        event = {
            "run_id": run_id,
            "mode": rng.choice(["observe", "enforce"]),
            "intent_label": rng.choice(["sql", "email", "unknown"] + ODD_STRINGS[:6]),
            "total_tools": total,
            "narrowed_tool_names": narrowed,
            "saved_tokens_estimate": rng.randint(0, 5000),
        }
    elif seam == "response":
        chain = [wrap(seam, gen_response_script(rng)) for _ in range(length)]
        event = {
            "run_id": run_id,
            # -1: what symfonic's run() sends (an answer the engine emitted).
            "iteration_index": rng.randint(-1, 9),
            "model": rng.choice(["fake-model", "claude", "\u00e9-model"]),
            "node_name": "react",
            "original_content": gen_text(rng),
        }
    else:
        chain = [wrap(seam, gen_result_script(rng)) for _ in range(length)]
        event = {
            "run_id": run_id,
            "tool_name": rng.choice(PALETTE_POOL),
            "result": gen_value(rng),
            "call_id": call_id,
            "deferred": False,
            "is_error": rng.random() < 0.2,
        }
    return Case(seam, chain, event, f"random #{n}")


def wrap(seam: str, script: Any) -> dict[str, Any]:
    """A guard's config for one seam's script (none: an empty config)."""
    return {} if script is None else {seam: script}


def generate(seed: int, per_seam: int, seams: tuple[str, ...]) -> list[Case]:
    """``per_seam`` random cases for each seam, reproducible from ``seed``."""
    cases = []
    for seam in seams:
        rng = random.Random(f"{seed}:{seam}")
        cases.extend(gen_case(rng, seam, n) for n in range(per_seam))
    return cases


def directed_cases() -> list[Case]:
    """Chains the issue tracker has named, always run first."""
    palette = ["run_query", "send_email"]
    sql = {"sql": "DELETE FROM users WHERE id = 7"}

    def steering(name: str, *scripts: dict[str, Any]) -> Case:
        event = {"run_id": "r", "tool_name": "run_query", "call_id": "c", "args": sql}
        return Case("steering", [wrap("steering", s) for s in scripts], event, name)

    def rewrite(name: str, tool: str, args: dict[str, Any], *scripts: dict[str, Any]) -> Case:
        event = {
            "run_id": "r",
            "iteration_index": 0,
            "node_name": "react",
            "call_id": "c",
            "tool_name": tool,
            "args": args,
            "available_tools": palette,
        }
        return Case("rewrite", [wrap("rewrite", s) for s in scripts], event, name)

    cases = [
        steering("skip with a space", {"action": "skip", "content": " "}),
        steering(
            "skip with a space, then another skip",
            {"action": "skip", "content": " "},
            {"action": "skip", "content": "second"},
        ),
        steering("skip with empty content", {"action": "skip", "content": ""}),
        rewrite(
            "rewrite to a missing tool, then args",
            "run_query",
            sql,
            {"tool_name": "not_there"},
            {"raw_args": '{"x": 1}'},
        ),
        rewrite(
            "rewrite to a missing tool with args, then back into the palette",
            "run_query",
            sql,
            {"tool_name": "not_there", "raw_args": '{"x": 1}'},
            {"tool_name": "send_email"},
        ),
        rewrite(
            "fix a hallucinated tool name",
            "unknown_tool",
            sql,
            {"raw_args": '{"x": 1}'},
            {"tool_name": "send_email"},
        ),
        rewrite(
            "big integer and key order through a guard",
            "run_query",
            {"z": 1, "id": 18446744073709551616, "a": -(2**63) - 1},
            {"tool_name": "run_query"},
        ),
        rewrite(
            "big integer in rewritten args",
            "run_query",
            sql,
            {"raw_args": '{"id": 18446744073709551616, "b": 1, "a": 2}'},
        ),
        rewrite(
            "key order through a guard",
            "run_query",
            {"z": 1, "a": 2, "m": {"y": 3, "b": 4}},
            {"tool_name": "run_query"},
        ),
        rewrite(
            "an integer beyond 128 bits through a guard",
            "run_query",
            {"id": 10**39},
            {"tool_name": "run_query"},
        ),
        rewrite(
            "args nested as deep as the adapter sends",
            "run_query",
            nested(MAX_DEPTH),
            {"append_trail": "g1"},
        ),
        rewrite("args that are not an object", "run_query", sql, {"raw_args": "[1, 2]"}),
    ]
    result_event = {
        "run_id": "r",
        "tool_name": "run_query",
        "result": {"rows": 18446744073709551616, "a": [2**63, -(2**64)]},
        "call_id": "c",
        "deferred": False,
        "is_error": False,
    }
    cases.append(Case("result", [wrap("result", {"log": True})], result_event, "big integer in a result"))
    deep_event = {**result_event, "result": nested(MAX_DEPTH)}
    cases.append(Case("result", [wrap("result", {"log": True})], deep_event, "a result nested as deep as the adapter sends"))
    return cases


def nested(depth: int) -> dict[str, Any]:
    """An object ``depth`` levels deep (itself included), alternating
    objects and arrays, with a big integer at the bottom."""
    value: Any = 2**64
    for level in range(depth - 1):
        value = [value] if level % 2 else {"d": value}
    return {"d": value}


# ---------------------------------------------------------------------------
# The Python twin of the scripted guard
# ---------------------------------------------------------------------------


class ScriptUnreadable(Exception):
    """Raised where the scripted guard panics on a script it cannot read."""


def _get(value: Any, key: str) -> Any:
    """``serde_json::Value::get``: a key of an object, else nothing."""
    return value.get(key) if isinstance(value, dict) else None


def make_handler_class() -> type:
    """``ScriptedHandler``, a ``BaseCallbackHandler`` (imported lazily so the
    module loads without symfonic for ``--help``)."""
    from symfonic.core.callbacks import BaseCallbackHandler

    class ScriptedHandler(BaseCallbackHandler):
        """Answers every hook exactly as ``tests/guests/scripted`` does with
        the same config, and notes each call in ``journal`` as
        ``(seam, guard)`` (and what a logging result guard saw as
        ``("saw", guard, tool name, result)``)."""

        def __init__(self, name: str, config: dict[str, Any], journal: list[Any]) -> None:
            self.name = name
            self.config = config
            self.journal = journal

        def __repr__(self) -> str:
            return f"ScriptedHandler({self.name})"

        def _script(self, seam: str) -> Any:
            return self.config.get(seam)

        async def on_before_tool_call(self, event: Any, state: Any) -> Any:
            self.journal.append(("steering", self.name))
            script = self._script("steering")
            if script is None:
                return {"action": "proceed"}
            action = _get(script, "action")
            if action == "proceed":
                return {"action": "proceed"}
            if action == "skip":
                content = _get(script, "content")
                verdict: dict[str, Any] = {
                    "action": "skip",
                    "content": content if isinstance(content, str) else "",
                }
                is_error = _get(script, "is_error")
                if isinstance(is_error, bool):
                    verdict["is_error"] = is_error
                return verdict
            raise ScriptUnreadable(f"unreadable steering script {script!r}")

        async def on_tool_call_dispatch(self, event: Any, state: Any) -> Any:
            self.journal.append(("rewrite", self.name))
            script = self._script("rewrite")
            if script is None:
                return None
            tool_name = _get(script, "tool_name")
            if tool_name is None:
                tool_name = event.tool_name
            elif not isinstance(tool_name, str):
                raise ScriptUnreadable(f"rewrite.tool_name is not a string: {tool_name!r}")
            if isinstance(script, dict) and "append_trail" in script:
                args = dict(event.args)
                trail = args.get("trail")
                trail = list(trail) if isinstance(trail, list) else []
                trail.append(copy.deepcopy(script["append_trail"]))
                args["trail"] = trail
                return {"tool_name": event.tool_name, "args": args}
            if isinstance(script, dict) and "raw_args" in script:
                raw = script["raw_args"]
                if not isinstance(raw, str):
                    raise ScriptUnreadable(f"rewrite.raw_args is not a string: {raw!r}")
                return {"tool_name": tool_name, "args": json.loads(raw)}
            if isinstance(script, dict) and "args" in script:
                return {"tool_name": tool_name, "args": copy.deepcopy(script["args"])}
            return {"tool_name": tool_name, "args": event.args}

        async def on_tool_routing_decision(self, event: Any) -> Any:
            self.journal.append(("routing", self.name))
            script = self._script("routing")
            if script is None:
                return None
            keep = _get(script, "keep")
            if not isinstance(keep, list):
                raise ScriptUnreadable(f"routing.keep is not an array: {script!r}")
            for name in keep:
                if not isinstance(name, str):
                    raise ScriptUnreadable(f"routing.keep holds a non-string: {name!r}")
            return list(keep)

        async def on_response_render(self, content: str, state: Any, metadata: Any) -> Any:
            self.journal.append(("response", self.name))
            script = self._script("response")
            if script is None:
                return None
            if _get(script, "pass") is True:
                return content
            for key in ("set", "append"):
                if isinstance(script, dict) and key in script:
                    text = script[key]
                    if not isinstance(text, str):
                        raise ScriptUnreadable(f"response.{key} is not a string: {text!r}")
                    return text if key == "set" else content + text
            if _get(script, "raise") is True:
                raise RuntimeError("scripted: response raises")
            if isinstance(script, dict) and "nothing" in script:
                value = script["nothing"]
                return None if isinstance(value, str) else copy.deepcopy(value)
            raise ScriptUnreadable(f"unreadable response script {script!r}")

        async def on_tool_result(self, event: Any) -> None:
            self.journal.append(("result", self.name))
            script = self._script("result")
            if script is None:
                return
            if _get(script, "log") is True:
                self.journal.append(("saw", self.name, event.tool_name, copy.deepcopy(event.result)))

    return ScriptedHandler


# ---------------------------------------------------------------------------
# Running the symfonic side
# ---------------------------------------------------------------------------


@dataclass
class Answer:
    """What one side did with one case, in comparable form."""

    #: steering: None (the tool runs) or {"content", "is_error"};
    #: rewrite: {"tool_name", "args"} of the dispatched call;
    #: routing / result: None.
    outcome: Any = None
    #: Guards consulted, in order (names g1..g5).
    consulted: list[str] = field(default_factory=list)
    #: result: (guard, tool name, result) per logging guard, in order.
    seen: list[Any] = field(default_factory=list)
    #: toolgate: its result and trace; symfonic: None.
    raw: Any = None
    #: toolgate: why it refused the case (exit 2), else None.
    refused: str | None = None
    #: toolgate: guards of the case it did not load, with why.
    not_loaded: list[str] = field(default_factory=list)


class SymfonicSide:
    """Runs cases through symfonic-core's own code."""

    def __init__(self) -> None:
        from symfonic.core.callbacks.manager import CallbackManager

        self.CallbackManager = CallbackManager
        self.Handler = make_handler_class()
        self._agents: dict[tuple[str, ...], Any] = {}

    def handlers(self, case: Case, journal: list[Any]) -> list[Any]:
        return [self.Handler(f"g{i + 1}", cfg, journal) for i, cfg in enumerate(case.chain)]

    async def run(self, case: Case) -> Answer:
        journal: list[Any] = []
        handlers = self.handlers(case, journal)
        run = getattr(self, f"_{case.seam}")
        outcome = await run(case, handlers)
        consulted = [name for hook, name, *_ in journal if hook == case.seam]
        seen = [(name, tool, value) for hook, name, tool, value in
                (j for j in journal if j[0] == "saw")]
        return Answer(outcome=outcome, consulted=consulted, seen=seen)

    async def _steering(self, case: Case, handlers: list[Any]) -> Any:
        # The tool node's own guard step: one tool call, the manager's
        # verdict turned into a synthesized ToolMessage or an execution.
        from symfonic.observability.tool_span_seam import _run_guards

        e = case.event
        call = {"name": e["tool_name"], "args": copy.deepcopy(e["args"]), "id": e["call_id"]}
        state = {"run_id": e["run_id"]}
        executed, synthesized = await _run_guards(self.CallbackManager(handlers), [call], state)
        if executed:
            return None
        (message,) = synthesized
        return {"content": message.content, "is_error": message.status == "error"}

    async def _rewrite(self, case: Case, handlers: list[Any]) -> Any:
        # A real agent run: the React node chains on_tool_call_dispatch
        # through the manager and validates the result against the palette;
        # the dispatched call is read off the AI message the model sees on
        # its next turn.
        from langchain_core.messages import AIMessage

        e = case.event
        agent, model = self._agent(tuple(e["available_tools"]))
        call = {"name": e["tool_name"], "args": copy.deepcopy(e["args"]), "id": e["call_id"]}
        model.responses = [
            AIMessage(content="", tool_calls=[call]),
            AIMessage(content="done"),
        ]
        model.i = 0
        model.turns = []
        await agent.run("differential", callbacks=handlers)
        for turn in reversed(model.turns):
            for message in reversed(turn):
                for tc in getattr(message, "tool_calls", None) or []:
                    if tc.get("id") == e["call_id"]:
                        return {"tool_name": tc["name"], "args": tc["args"]}
        raise RuntimeError(f"symfonic dispatched no call {e['call_id']!r}; turns: {model.turns!r}")

    async def _routing(self, case: Case, handlers: list[Any]) -> Any:
        from symfonic.core.contracts.callbacks import ToolRoutingDecisionEvent

        e = case.event
        event = ToolRoutingDecisionEvent(
            run_id=e["run_id"],
            mode=e["mode"],
            intent_label=e["intent_label"],
            total_tools=e["total_tools"],
            narrowed_tool_names=list(e["narrowed_tool_names"]),
            saved_tokens_estimate=e["saved_tokens_estimate"],
        )
        await self.CallbackManager(handlers).on_tool_routing_decision(event)
        return None

    async def _result(self, case: Case, handlers: list[Any]) -> Any:
        from symfonic.core.contracts.callbacks import ToolResultCallbackEvent

        e = case.event
        event = ToolResultCallbackEvent(
            run_id=e["run_id"],
            tool_name=e["tool_name"],
            result=copy.deepcopy(e["result"]),
            call_id=e["call_id"],
            deferred=e["deferred"],
            is_error=e["is_error"],
        )
        await self.CallbackManager(handlers).on_tool_result(event)
        return None

    async def _response(self, case: Case, handlers: list[Any]) -> Any:
        # The manager run() calls: registration order, each handler given
        # the previous one's answer; a raise logged and skipped, a
        # non-string dropped with a warning.
        from symfonic.core.contracts.callbacks import ResponseRenderEvent

        e = case.event
        event = ResponseRenderEvent(
            run_id=e["run_id"],
            iteration_index=e["iteration_index"],
            model=e["model"],
            node_name=e["node_name"],
            original_content=e["original_content"],
        )
        state = {"run_id": e["run_id"], "final_response": e["original_content"]}
        return await self.CallbackManager(handlers).on_response_render(
            e["original_content"], state, event
        )

    def _agent(self, palette: tuple[str, ...]) -> tuple[Any, Any]:
        """A real ``SymfonicAgent`` whose tools are exactly ``palette`` (so
        ``available_tools`` is the palette), reused across cases."""
        if palette in self._agents:
            return self._agents[palette]
        from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
        from langchain_core.tools import StructuredTool
        from symfonic.agent import DomainTemplate, FrameworkConfig, SymfonicAgent

        class Model(FakeMessagesListChatModel):
            turns: Any = None

            def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
                return self

            def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
                self.turns.append(list(messages))
                return super()._generate(messages, *args, **kwargs)

        class Provider:
            _symfonic_provider_family = "anthropic"

            def __init__(self, model: Any) -> None:
                self.model = model

            def get_chat_model(self, config: Any) -> Any:
                return self.model

            def supports_thinking(self) -> bool:
                return False

            def supports_streaming(self) -> bool:
                return False

            def supports_forced_tool_choice(self, config: Any) -> bool:
                return False

        def make_tool(name: str) -> Any:
            def run(**kwargs: Any) -> str:
                return "ok"

            return StructuredTool.from_function(
                func=run,
                name=name,
                description=f"The {name} tool.",
                args_schema={"type": "object", "properties": {}, "additionalProperties": True},
            )

        model = Model(responses=[], turns=[])
        config = FrameworkConfig(
            lazy_tooling=False,
            tool_routing_mode="off",
            always_include_tools=(),
            domain=DomainTemplate(name="differential", tool_trigger_keywords={}),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            agent = SymfonicAgent(Provider(model), tools=[make_tool(n) for n in palette], config=config)
        self._agents[palette] = (agent, model)
        return agent, model


# ---------------------------------------------------------------------------
# Running the toolgate side
# ---------------------------------------------------------------------------


def toml_string(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif o < 0x20 or o == 0x7F or 0x80 <= o < 0xA0 or o in (0x2028, 0x2029):
            out.append(f"\\u{o:04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if not -(2**63) <= v < 2**63:
            raise ValueError(f"TOML cannot hold the integer {v}")
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"TOML config value {v} is not finite")
        return repr(v) if ("e" in repr(v) or "." in repr(v)) else repr(v) + ".0"
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_string(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise ValueError(f"TOML cannot hold {v!r}")


#: Each guard's wall-clock deadline. Thousands of guards load at once and a
#: busy machine can push one's load-time probe past the default 200 ms (the
#: guard is then left out of the chain, reported as "did not load"); the
#: deadline is not what is under test here.
TIMEOUT_MS = 10_000
#: Each guard's memory cap (the scripted guard needs little).
MEMORY_MIB = 16


#: The compiled code each case's guards may hold (one scripted guard's,
#: shared by all of them: about 1 MiB).
CODE_MIB = 8

#: Each case is a tenant; the operator's policy makes room for a batch of
#: them: the deadline above the default ceiling, a small share each (one
#: instance, a few MiB of memory and code) so a batch fits the engine's pool
#: and memory budget.
GLOBAL_MANIFEST = f"""[ceilings]
timeout_ms = {TIMEOUT_MS}
memory_mib = {MEMORY_MIB}

[shares]
global_instances = 1
global_memory_mib = {MEMORY_MIB}
tenant_instances = 1
tenant_memory_mib = {MEMORY_MIB}
tenant_code_mib = {CODE_MIB}
"""


def manifest(case: Case) -> str:
    """The tenant manifest of one case: one scripted guard per script."""
    lines = []
    for i, cfg in enumerate(case.chain):
        lines += [
            "[[plugin]]",
            f'name = "g{i + 1}"',
            'path = "scripted.wasm"',
            f"timeout_ms = {TIMEOUT_MS}",
            f"memory_mib = {MEMORY_MIB}",
        ]
        lines.append(f"config = {toml_value(cfg)}")
        lines.append("")
    return "\n".join(lines)


ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: The field a guard's log line ends with, naming the plugin (tenant/guard).
LOG_LINE = re.compile(r' plugin="?(?P<plugin>c\d+/g\d+)"?')


def unsanitize(text: str) -> str:
    """Undoes the log formatter's escaping of DEL and C1 control characters
    (``\\x7f``, ``\\u{85}``) in a logged JSON text. In JSON a backslash
    always starts a two-character escape (``\\\\``, ``\\n``, ``\\u0001``),
    never ``\\x`` nor ``\\u{``, so the two cannot be confused. The log
    also writes the line separators U+2028 and U+2029 as ``\\u2028`` and
    ``\\u2029`` (one event, one line): JSON's own escape of the same
    characters, so taking them back changes no JSON value."""
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if text.startswith("\\x7f", i):
            out.append("\x7f")
            i += 4
            continue
        if text.startswith(("\\u2028", "\\u2029"), i):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
            continue
        m = re.match(r"\\u\{([0-9a-f]+)\}", text[i:])
        if m:
            out.append(chr(int(m.group(1), 16)))
            i += m.end()
            continue
        out.append(text[i : i + 2])
        i += 2
    return "".join(out)


class ToolgateSide:
    """Runs cases through one ``toolgate replay`` process per batch."""

    def __init__(self, binary: Path, scripted: Path) -> None:
        self.binary = binary
        self.scripted = scripted

    def run(self, cases: list[Case]) -> list[Answer]:
        answers: dict[int, Answer] = {}
        pending = list(range(len(cases)))
        while pending:
            refused = self._replay(cases, pending, answers)
            if refused is None:
                break
            answers[refused[0]] = Answer(refused=refused[1])
            pending = [i for i in pending if i not in answers]
        return [answers[i] for i in range(len(cases))]

    def _replay(
        self, cases: list[Case], indices: list[int], answers: dict[int, Answer]
    ) -> tuple[int, str] | None:
        """Runs ``indices``; on a refused line returns (case index, why)."""
        with tempfile.TemporaryDirectory(prefix="toolgate-differential-") as tmp:
            root = Path(tmp) / "plugins"
            tenants = root / "tenants"
            tenants.mkdir(parents=True)
            (root / "toolgate.toml").write_text(GLOBAL_MANIFEST, encoding="utf-8")
            master = Path(tmp) / "scripted.wasm"
            master.write_bytes(self.scripted.read_bytes())
            trace_lines = []
            for i in indices:
                case = cases[i]
                tenant = f"c{i:06d}"
                d = tenants / tenant
                d.mkdir()
                # A tenant's files may not be hard links (the host refuses them).
                shutil.copyfile(master, d / "scripted.wasm")
                (d / "toolgate.toml").write_text(manifest(case), encoding="utf-8")
                # No state: the scripts never read it, and symfonic's is
                # not JSON (INTENTIONAL_DIFFERENCES["state-on-every-seam"]).
                line = {"seam": case.seam, "event": case.event, "tenant": tenant}
                trace_lines.append(json.dumps(line, ensure_ascii=False))
            trace = Path(tmp) / "trace.jsonl"
            trace.write_text("\n".join(trace_lines) + "\n", encoding="utf-8")
            env = dict(os.environ, TOOLGATE_LOG="warn,toolgate::sandbox=info", NO_COLOR="1")
            proc = subprocess.run(
                [str(self.binary), "replay", "--json", "--plugins", str(root), str(trace)],
                capture_output=True,
                env=env,
                timeout=1800,
            )
            stdout = proc.stdout.decode("utf-8")
            stderr = proc.stderr.decode("utf-8", errors="replace")
            if proc.returncode != 0:
                m = re.search(re.escape(str(trace)) + r":(\d+): (.*)", stderr)
                if proc.returncode == 2 and m:
                    return indices[int(m.group(1)) - 1], m.group(2).strip()
                raise RuntimeError(
                    f"toolgate replay failed ({proc.returncode}):\n{stderr[-4000:]}"
                )
            by_line: dict[int, dict[str, Any]] = {}
            for text in stdout.split("\n"):
                if text.startswith("{"):
                    record = json.loads(text)
                    by_line[record["line"]] = record
            seen: dict[int, list[Any]] = {}
            not_loaded: dict[int, list[str]] = {}
            for text in stderr.split("\n"):
                text = ANSI.sub("", text)
                if "plugin not loaded" in text:
                    where = re.search(r"tenants/c(\d+)/", text)
                    if where:
                        not_loaded.setdefault(int(where.group(1)), []).append(text.strip())
                    continue
                found = list(LOG_LINE.finditer(text))
                if not found or " saw " not in text:
                    continue
                m = found[-1]
                tenant, guard = m.group("plugin").split("/")
                message = unsanitize(text[text.index(" saw ") + 5 : m.start()])
                seen.setdefault(int(tenant[1:]), []).append((guard, message))
            for n, i in enumerate(indices, start=1):
                record = by_line.get(n)
                if record is None:
                    raise RuntimeError(f"toolgate replay printed nothing for line {n}:\n{stderr[-4000:]}")
                answers[i] = self._answer(cases[i], record, seen.get(i, []))
                answers[i].not_loaded = not_loaded.get(i, [])
        return None

    @staticmethod
    def _answer(case: Case, record: dict[str, Any], logs: list[Any]) -> Answer:
        result = record["result"]
        trace = record["trace"]
        consulted = [t["plugin"].split("/", 1)[1] for t in trace]
        answer = Answer(consulted=consulted, raw={"result": result, "trace": trace})
        if case.seam == "steering":
            answer.outcome = (
                None if result is None else {"content": result["content"], "is_error": result["is_error"]}
            )
        elif case.seam == "rewrite":
            e = case.event
            answer.outcome = (
                {"tool_name": e["tool_name"], "args": e["args"]}
                if result is None
                else {"tool_name": result["tool_name"], "args": result["args"]}
            )
        elif case.seam == "response":
            answer.outcome = result
        elif case.seam == "result":
            tool = case.event["tool_name"]
            for guard, message in logs:
                if message.startswith(tool + " "):
                    try:
                        value: Any = json.loads(message[len(tool) + 1 :])
                    except ValueError:
                        value = ("unparsable log", message)
                    answer.seen.append((guard, tool, value))
                else:
                    answer.seen.append((guard, "?", ("unexpected log", message)))
        # routing: the answer (the intersection) is not compared:
        # INTENTIONAL_DIFFERENCES["routing-narrowing"].
        return answer


# ---------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------


def strict(v: Any) -> Any:
    """A form of a JSON value equal only for the same value: integers and
    floats apart, object keys in order, -0.0 apart from 0.0."""
    if v is None or isinstance(v, (bool, str)):
        return (type(v).__name__, v)
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, float):
        return ("float", repr(v))
    if isinstance(v, dict):
        return ("object", tuple((k, strict(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return ("array", tuple(strict(x) for x in v))
    return ("other", repr(v))


def data_difference(a: Any, b: Any, path: str = "$") -> str:
    """How two JSON values first differ, as a short class name plus where."""
    if isinstance(a, bool) or isinstance(b, bool):
        return f"value differs at {path}" if a != b or type(a) is not type(b) else ""
    if isinstance(a, int) and isinstance(b, float):
        if -(2**63) <= a < 2**64:
            return f"integer within 64 bits became a float at {path}"
        if -(2**127) <= a < 2**128:
            return f"integer beyond 64 bits (within 128) became a float at {path}"
        return f"integer beyond 128 bits became a float at {path}"
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return "" if strict(a) == strict(b) else f"number differs at {path}"
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            if sorted(a) == sorted(b):
                inner = [data_difference(a[k], b[k], f"{path}.{k}") for k in a]
                inner = [x for x in inner if x]
                return inner[0] if inner else f"key order differs at {path}"
            return f"keys differ at {path}"
        for k in a:
            d = data_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return ""
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"length differs at {path}"
        for n, (x, y) in enumerate(zip(a, b)):
            d = data_difference(x, y, f"{path}[{n}]")
            if d:
                return d
        return ""
    return "" if strict(a) == strict(b) else f"value differs at {path}"


def generalise(difference: str) -> str:
    """A data difference without its path, for grouping."""
    return difference.split(" at ", 1)[0]


def compare(case: Case, sym: Answer, tg: Answer) -> str | None:
    """None when both sides agree, else the mismatch's class."""
    if tg.refused is not None:
        return f"{case.seam}: toolgate refused the event ({tg.refused.split(':')[0]})"
    if tg.not_loaded:
        # A guard toolgate failed to load is left out of the chain (with a
        # warning); name the cause (say, the load-time probe's deadline).
        why = re.sub(r".*plugin not loaded: \S+: ", "", tg.not_loaded[0])
        return f"{case.seam}: toolgate did not load a guard ({why.split(':')[0]})"
    if case.seam == "steering":
        if (sym.outcome is None) != (tg.outcome is None):
            if sym.outcome is None:
                return "steering: symfonic runs the tool, toolgate skips it"
            return "steering: symfonic skips the call, toolgate runs the tool"
        if sym.outcome is not None and strict(sym.outcome) != strict(tg.outcome):
            return "steering: both skip, with different content or is_error"
        if sym.consulted != tg.consulted:
            return "steering: different guards consulted"
        return None
    if case.seam == "rewrite":
        s, t = sym.outcome, tg.outcome
        if s["tool_name"] != t["tool_name"]:
            return "rewrite: a different tool is dispatched"
        if strict(s["args"]) != strict(t["args"]):
            d = data_difference(s["args"], t["args"])
            if d.startswith(("integer ", "key order", "number differs")):
                return f"rewrite: dispatched args, {generalise(d)}"
            return "rewrite: different args are dispatched"
        if sym.consulted != tg.consulted:
            return "rewrite: different guards consulted"
        return None
    if case.seam == "routing":
        # The answer is not compared: INTENTIONAL_DIFFERENCES["routing-narrowing"].
        if sym.consulted != tg.consulted:
            return "routing: different guards consulted"
        return None
    if case.seam == "response":
        if not isinstance(tg.outcome, str):
            return "response: toolgate's answer is not a string"
        if sym.outcome != tg.outcome:
            return "response: a different answer is returned"
        if sym.consulted != tg.consulted:
            return "response: different guards consulted"
        return None
    if sym.consulted != tg.consulted:
        return "result: different guards consulted"
    if [g for g, _, _ in sym.seen] != [g for g, _, _ in tg.seen]:
        return "result: different guards logged what they saw"
    for (_, _, a), (_, _, b) in zip(sym.seen, tg.seen):
        if strict(a) != strict(b):
            d = data_difference(a, b)
            return f"result: a guard saw a different result, {generalise(d)}"
    return None


# ---------------------------------------------------------------------------
# Running, shrinking, reporting
# ---------------------------------------------------------------------------


@dataclass
class Outcome:
    case: Case
    sym: Answer
    tg: Answer
    mismatch: str | None


class Differential:
    def __init__(self, binary: Path, scripted: Path, batch: int = 200, progress: bool = False) -> None:
        self.symfonic = SymfonicSide()
        self.toolgate = ToolgateSide(binary, scripted)
        self.batch = batch
        self.progress = progress
        self.loop = asyncio.new_event_loop()
        quiet()

    def run(self, cases: list[Case]) -> list[Outcome]:
        out: list[Outcome] = []
        for start in range(0, len(cases), self.batch):
            chunk = cases[start : start + self.batch]
            tg = self.toolgate.run(chunk)
            sym = self.loop.run_until_complete(self._symfonic(chunk))
            out.extend(Outcome(c, s, t, compare(c, s, t)) for c, s, t in zip(chunk, sym, tg))
            if self.progress:
                print(f"  {len(out)}/{len(cases)} cases run", file=sys.stderr, flush=True)
        return out

    async def _symfonic(self, cases: list[Case]) -> list[Answer]:
        return [await self.symfonic.run(c) for c in cases]

    def shrink(self, outcome: Outcome, rounds: int = 60, chunk: int = 64, budget: float = 120.0) -> Outcome:
        """A smaller case with the same mismatch: guards dropped, the event
        and the scripts simplified. Each round tries the candidates smallest
        first, ``chunk`` at a time, and keeps the smallest that still shows
        the mismatch."""
        best = outcome
        deadline = time.monotonic() + budget
        for _ in range(rounds):
            if time.monotonic() > deadline:
                break
            candidates = sorted(smaller(best.case), key=case_size)
            found = None
            for start in range(0, len(candidates), chunk):
                hits = [o for o in self.run(candidates[start : start + chunk]) if o.mismatch == best.mismatch]
                if hits:
                    found = min(hits, key=lambda o: case_size(o.case))
                    break
            if found is None or case_size(found.case) >= case_size(best.case):
                break
            best = found
        return best


def smaller(case: Case) -> list[Case]:
    """Candidate simplifications of ``case``."""
    out: list[Case] = []
    if len(case.chain) > 1:
        for i in range(len(case.chain)):
            out.append(replace(case, chain=case.chain[:i] + case.chain[i + 1 :]))
    e = case.event
    for key in ("args", "result"):
        if key in e:
            for v in simpler_json(e[key]):
                if key == "args" and not isinstance(v, dict):
                    v = {"v": v}
                out.append(replace(case, event={**e, key: v}))
    if isinstance(e.get("original_content"), str) and len(e["original_content"]) > 1:
        half = e["original_content"][: len(e["original_content"]) // 2]
        out.append(replace(case, event={**e, "original_content": half}))
    if "available_tools" in e and len(e["available_tools"]) > 1:
        for i, name in enumerate(e["available_tools"]):
            if name == e["tool_name"]:
                continue
            palette = e["available_tools"][:i] + e["available_tools"][i + 1 :]
            out.append(replace(case, event={**e, "available_tools": palette}))
    for i, cfg in enumerate(case.chain):
        script = cfg.get(case.seam)

        def with_script(new: Any, i: int = i, cfg: dict[str, Any] = cfg) -> Case:
            return replace(case, chain=case.chain[:i] + [{**cfg, case.seam: new}] + case.chain[i + 1 :])

        if not isinstance(script, dict):
            continue
        if isinstance(script.get("raw_args"), str):
            try:
                raw = json.loads(script["raw_args"])
            except ValueError:
                raw = None
            for v in simpler_json(raw):
                out.append(with_script({**script, "raw_args": json.dumps(v, ensure_ascii=False)}))
        if isinstance(script.get("args"), dict):
            for v in simpler_json(script["args"]):
                if isinstance(v, dict):
                    out.append(with_script({**script, "args": v}))
        if isinstance(script.get("content"), str) and len(script["content"]) > 1:
            out.append(with_script({**script, "content": script["content"][: len(script["content"]) // 2]}))
        for key in ("set", "append"):
            if isinstance(script.get(key), str) and len(script[key]) > 1:
                out.append(with_script({**script, key: script[key][: len(script[key]) // 2]}))
        for key in ("is_error", "tool_name"):
            if key in script and len(script) > 1:
                out.append(with_script({k: v for k, v in script.items() if k != key}))
    return out


def simpler_json(v: Any) -> list[Any]:
    """Values simpler than ``v``: with one member removed, or one part put
    in the place of the whole (any part, at any depth)."""
    out: list[Any] = []
    if isinstance(v, dict):
        if v:
            out.append({})
        keys = list(v)
        for k in keys:
            out.append({x: v[x] for x in keys if x != k})
        for k in keys:
            for s in simpler_json(v[k])[:2]:
                out.append({x: (s if x == k else v[x]) for x in keys})
    elif isinstance(v, list):
        if v:
            out.append([])
        for i in range(len(v)):
            out.append(v[:i] + v[i + 1 :])
        for i, x in enumerate(v):
            for s in simpler_json(x)[:2]:
                out.append(v[:i] + [s] + v[i + 1 :])
    elif isinstance(v, str) and len(v) > 1:
        out.append(v[: len(v) // 2])
    out.extend(p for p in parts(v) if p is not v)
    return out


def parts(v: Any) -> list[Any]:
    """Every value nested in ``v`` (``v`` included), each once."""
    found: list[Any] = []
    seen: set[str] = set()

    def walk(x: Any) -> None:
        key = json.dumps(x, sort_keys=False)
        if key not in seen:
            seen.add(key)
            found.append(x)
        if isinstance(x, dict):
            for y in x.values():
                walk(y)
        elif isinstance(x, list):
            for y in x:
                walk(y)

    walk(v)
    return found


def case_size(c: Case) -> int:
    """How big a case is: guards weigh most, then the JSON text."""
    return 1000 * len(c.chain) + len(json.dumps([c.chain, c.event], ensure_ascii=True))


def quiet() -> None:
    """symfonic logs every dropped verdict and every handler that raised;
    the comparison reads outcomes, not logs."""
    logging.getLogger("symfonic").setLevel(logging.CRITICAL)
    logging.getLogger("langchain").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore")


def describe(o: Outcome) -> str:
    """A reproduction of one case: chain, event, both answers."""
    c = o.case
    lines = [f"  case ({c.label}) at seam {c.seam}, {len(c.chain)} guard(s), in order:"]
    for i, cfg in enumerate(c.chain):
        lines.append(f"    g{i + 1} config: {json.dumps(cfg, ensure_ascii=True)}")
    lines.append(f"  event: {json.dumps(c.event, ensure_ascii=True)}")
    lines.append(f"  symfonic: {show(c, o.sym)}")
    lines.append(f"  toolgate: {show(c, o.tg)}")
    if o.tg.raw is not None:
        trace = ", ".join(
            f"{t['plugin'].split('/', 1)[1]}: {t['outcome']}"
            + (f" ({t.get('fault') or t.get('detail')})" if t.get("fault") or t.get("detail") else "")
            for t in o.tg.raw["trace"]
        )
        lines.append(f"  toolgate result {json.dumps(o.tg.raw['result'], ensure_ascii=True)}; trace: {trace}")
    return "\n".join(lines)


def show(case: Case, a: Answer) -> str:
    if a.refused is not None:
        return f"refused: {a.refused}"
    parts = [f"did not load: {m}" for m in a.not_loaded]
    if case.seam == "steering":
        parts.append("runs the tool" if a.outcome is None else f"skips: {json.dumps(a.outcome, ensure_ascii=True)}")
    elif case.seam == "rewrite":
        parts.append(f"dispatches {json.dumps(a.outcome, ensure_ascii=True)}")
    elif case.seam == "response":
        parts.append(f"answers {json.dumps(a.outcome, ensure_ascii=True)}")
    parts.append(f"consulted {a.consulted}")
    if case.seam == "result":
        parts.append(f"saw {json.dumps([[g, v] for g, _, v in a.seen], ensure_ascii=True)}")
    return "; ".join(parts)


def report(
    outcomes: list[Outcome], diff: Differential | None, do_shrink: bool = True, budget: float = 120.0
) -> tuple[str, bool]:
    """The per-seam counts and each distinct mismatch with a minimal case."""
    lines = []
    agree: Counter[str] = Counter()
    differ: Counter[str] = Counter()
    classes: dict[str, list[Outcome]] = {}
    for o in outcomes:
        if o.mismatch is None:
            agree[o.case.seam] += 1
        else:
            differ[o.case.seam] += 1
            classes.setdefault(o.mismatch, []).append(o)
    for seam in SEAMS:
        if agree[seam] or differ[seam]:
            lines.append(f"{seam:9} {agree[seam]:6} agree {differ[seam]:6} differ")
    lines.append("")
    lines.append(
        "not compared, on purpose: " + ", ".join(sorted(INTENTIONAL_DIFFERENCES))
        + " (see INTENTIONAL_DIFFERENCES)"
    )
    for name, group in sorted(classes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        smallest = min(group, key=lambda o: case_size(o.case))
        if diff is not None and do_shrink:
            smallest = diff.shrink(smallest, budget=budget)
        lines.append("")
        lines.append(f"MISMATCH {name}: {len(group)} case(s); minimal:")
        lines.append(describe(smallest))
    return "\n".join(lines), not classes


def default_binary() -> Path:
    env = os.environ.get("TOOLGATE_BIN")
    if env:
        return Path(env)
    for profile in ("release", "debug"):
        p = REPO / "target" / profile / "toolgate"
        if p.exists():
            return p
    return REPO / "target" / "release" / "toolgate"


def default_scripted() -> Path:
    env = os.environ.get("TOOLGATE_SCRIPTED")
    if env:
        return Path(env)
    return REPO / "target" / "wasm-guests" / "wasm32-wasip2" / "release" / "scripted.wasm"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Differential test of toolgate's chain rules against symfonic-core.",
    )
    p.add_argument("--cases", type=int, default=250, help="random cases per seam (default 250)")
    p.add_argument("--seed", type=int, default=None, help="the seed (default: random, printed)")
    p.add_argument("--seams", default=",".join(SEAMS), help="comma-separated seams (default: all four)")
    p.add_argument("--bin", type=Path, default=None, help="the toolgate binary")
    p.add_argument("--scripted", type=Path, default=None, help="the scripted guard component")
    p.add_argument("--batch", type=int, default=200, help="cases per toolgate process (default 200: one tenant each, within the engine's 256 instance slots)")
    p.add_argument("--no-directed", action="store_true", help="skip the directed cases")
    p.add_argument("--no-shrink", action="store_true", help="report the smallest case as found")
    args = p.parse_args(argv)
    seams = tuple(s.strip() for s in args.seams.split(",") if s.strip())
    unknown = [s for s in seams if s not in SEAMS]
    if unknown:
        p.error(f"unknown seam(s) {unknown}; expected some of {list(SEAMS)}")
    binary = args.bin or default_binary()
    scripted = args.scripted or default_scripted()
    for path, what in ((binary, "toolgate binary (cargo build -p toolgate)"),
                       (scripted, "scripted guard (cargo test builds it)")):
        if not path.is_file():
            print(f"differential: no {what} at {path}", file=sys.stderr)
            return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    cases = [] if args.no_directed else [c for c in directed_cases() if c.seam in seams]
    cases += generate(seed, args.cases, seams)
    print(f"differential: seed {seed}, {len(cases)} cases ({args.cases} random per seam), "
          f"toolgate {binary}, scripted {scripted}", flush=True)
    start = time.monotonic()
    diff = Differential(binary, scripted, batch=args.batch, progress=True)
    outcomes = diff.run(cases)
    diff.progress = False
    print(f"ran in {time.monotonic() - start:.1f} s", flush=True)
    text, ok = report(outcomes, diff, do_shrink=not args.no_shrink)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
