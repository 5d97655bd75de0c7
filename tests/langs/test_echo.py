"""Big integers and key order reach a guard of every language unchanged.

The ``echo`` guard of each language (``tests/langs/guards``; Rust's is the
``tests/guests/echo`` test guest) hands back the call's args as it read
them: a rewrite to the same tool with its parsed args serialised again, and
a steering cancel with them as JSON text. Args holding integers beyond 2^53
(and beyond i64 and u64) in non-sorted key order go through ``toolgate
check`` and ``toolgate replay`` and must come back with every digit and in
the order sent.

What a language cannot keep, asserted precisely so a change shows:

- JS: an object puts integer-like keys ("2", "10") first, in numeric order
  (the language's property order). Other keys keep their order, and
  integers beyond 2^53 arrive as exact ``bigint`` values.
- Go: a guard that decodes args into a map (``guest.Object``) and encodes
  them again writes the keys sorted (encoding/json's map order); the values
  are exact. The echo rewrite passes ``Args`` on as they are, and keeps
  the order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    REPO,
    build_test_guards,
    check,
    dispatch_event,
    replay,
    rust_test_guest,
    steering_event,
)

GUARDS = REPO / "tests/langs/guards"
SOURCES = {"js": GUARDS / "echo.ts", "python": GUARDS / "echo-py", "go": GUARDS / "echo-go"}
LANGS = ("rust", "js", "python", "go")

# Sent as this exact text: keys out of order at every level, integers past
# 2^53, i64::MIN and u64::MAX, in objects and in a list.
ARGS_TEXT = (
    '{"zeta":9007199254740993,'
    '"alpha":{"min":-9223372036854775808,"max":18446744073709551615,"b":0.5},'
    '"mid":[18446744073709551615,-9007199254740993,1,2.5],'
    '"sql":"SELECT 1","a":null}'
)
ARGS = json.loads(ARGS_TEXT)
# Integer-like keys, which JS objects put first.
INDEX_KEYS_TEXT = '{"b":1,"10":9007199254740993,"2":true}'
# A JS or Python component's first instantiation on a busy machine can
# outlast the load probe's default cap (1 s), which refuses the plugin:
# these tests are about the data, so the probe gets all the time it needs.
PATIENT = ("--probe-timeout-ms", "600000")


def text(value: Any) -> str:
    """``value`` as compact JSON: equal texts mean equal values in the same order."""
    return json.dumps(value, separators=(",", ":"))


def sorted_keys(value: Any) -> Any:
    """``value`` with every object's keys sorted (what Go's map encoding writes)."""
    if isinstance(value, dict):
        return {k: sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_keys(v) for v in value]
    return value


def expected(lang: str, seam: str, args_text: str) -> str:
    """What the echo guard of ``lang`` hands back at ``seam`` for ``args_text``."""
    args = json.loads(args_text)
    if lang == "go" and seam == "steering":
        return text(sorted_keys(args))
    if lang == "js":
        index = {k: v for k, v in args.items() if k.isdigit()}
        rest = {k: v for k, v in args.items() if not k.isdigit()}
        args = {**{k: index[k] for k in sorted(index, key=int)}, **rest}
    return text(args)


@pytest.fixture(scope="session")
def echo(toolgate_bin: Path) -> dict[str, Path]:
    """Each language's echo component."""
    return {"rust": rust_test_guest("echo"), **build_test_guards(toolgate_bin, "echo", SOURCES)}


def plugins(tmp: Path, wasm: Path) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "echo.wasm").write_bytes(wasm.read_bytes())
    return tmp


def handed_back(seam: str, decision: dict[str, Any]) -> str:
    """The args the guard handed back, as compact JSON text."""
    assert [t["outcome"] for t in decision["trace"]] == ["rewrite" if seam == "rewrite" else "skip"], decision
    result = decision["result"]
    if seam == "rewrite":
        assert result["tool_name"] == "run_query", result
        return text(result["args"])
    assert result["is_error"] is False, result
    return text(json.loads(result["content"]))


def events(args_text: str) -> list[dict[str, Any]]:
    args = json.loads(args_text)
    return [
        {"seam": "rewrite", "event": dispatch_event("run_query", args)},
        {"seam": "steering", "event": steering_event("run_query", args)},
    ]


@pytest.mark.parametrize("lang", LANGS)
def test_big_integers_and_key_order_through_check(toolgate_bin, echo, tmp_path, lang):
    dir = plugins(tmp_path, echo[lang])
    for line in events(ARGS_TEXT):
        seam = line["seam"]
        got = handed_back(seam, check(toolgate_bin, dir, seam, line["event"], options=PATIENT))
        assert got == expected(lang, seam, ARGS_TEXT), f"{lang} {seam}"
        # Everything but Go's map encoding keeps the text exactly.
        if not (lang == "go" and seam == "steering"):
            assert got == ARGS_TEXT, f"{lang} {seam}"


@pytest.mark.parametrize("lang", LANGS)
def test_big_integers_and_key_order_through_replay(toolgate_bin, echo, tmp_path, lang):
    dir = plugins(tmp_path, echo[lang])
    lines = events(ARGS_TEXT) + events(INDEX_KEYS_TEXT)
    decisions = replay(toolgate_bin, dir, lines, *PATIENT)
    sent = [ARGS_TEXT, ARGS_TEXT, INDEX_KEYS_TEXT, INDEX_KEYS_TEXT]
    for line, decision, args_text in zip(lines, decisions, sent):
        seam = line["seam"]
        assert handed_back(seam, decision) == expected(lang, seam, args_text), f"{lang} {seam} {args_text}"
