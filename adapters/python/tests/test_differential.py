"""toolgate's chain rules against the real symfonic-core, differentially.

The same scripts drive Python handlers through symfonic-core 9.12's own
CallbackManager, tool-node guard step and React node, and the ``scripted``
guard through ``toolgate replay`` (see ``adapters/python/differential.py``
for what is compared and what is left out on purpose). Every case must come
out the same on both sides; a failure lists each distinct mismatch with a
minimal reproduction.

Needs the toolgate binary (``TOOLGATE_BIN``, default
``target/release/toolgate``, else ``target/debug/toolgate``) and the scripted
guard (``TOOLGATE_SCRIPTED``, default
``target/wasm-guests/wasm32-wasip2/release/scripted.wasm``, built by
``cargo test``). ``TOOLGATE_DIFFERENTIAL_CASES`` (random cases per seam,
default 100) and ``TOOLGATE_DIFFERENTIAL_SEED`` (default 20261201) change
the run; the on-demand script runs any number.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import differential  # noqa: E402

CASES = int(os.environ.get("TOOLGATE_DIFFERENTIAL_CASES", "100"))
SEED = int(os.environ.get("TOOLGATE_DIFFERENTIAL_SEED", "20261201"))


@pytest.fixture(scope="module")
def runner() -> differential.Differential:
    binary = differential.default_binary()
    scripted = differential.default_scripted()
    if not binary.is_file():
        pytest.fail(f"toolgate binary not found at {binary}; build it (cargo build -p toolgate) or set TOOLGATE_BIN")
    if not scripted.is_file():
        pytest.fail(
            f"scripted guard not found at {scripted}; `cargo test` builds it, or set TOOLGATE_SCRIPTED"
        )
    return differential.Differential(binary, scripted)


def check(runner: differential.Differential, cases: list[differential.Case]) -> None:
    outcomes = runner.run(cases)
    text, ok = differential.report(outcomes, runner, budget=15.0)
    assert ok, f"toolgate and symfonic-core disagree:\n{text}"


def test_directed_cases_agree(runner: differential.Differential) -> None:
    """The chains the issue tracker named: whitespace skip content, rewrites
    through tools outside the palette, big integers and key order."""
    check(runner, differential.directed_cases())


@pytest.mark.parametrize("seam", differential.SEAMS)
def test_random_chains_agree(runner: differential.Differential, seam: str) -> None:
    check(runner, differential.generate(SEED, CASES, (seam,)))


def test_every_seam_is_compared() -> None:
    """The generator covers what the comparison claims to: each seam, chains
    of one to five guards, malformed and unreadable scripts, tools outside
    the palette, args that are not objects, big integers, deep nesting."""
    cases = differential.generate(SEED, CASES, differential.SEAMS)
    assert {c.seam for c in cases} == set(differential.SEAMS)
    assert {len(c.chain) for c in cases} == {1, 2, 3, 4, 5}
    scripts = [cfg.get(c.seam) for c in cases for cfg in c.chain]
    steering = [s for s in scripts if isinstance(s, dict) and "action" in s]
    assert any(s.get("content") == "" for s in steering)
    assert any(isinstance(s.get("content"), str) and s["content"] and not s["content"].strip() for s in steering)
    assert any(s["action"] not in ("skip", "proceed") for s in steering)
    rewrites = [s for s in scripts if isinstance(s, dict) and ("raw_args" in s or "tool_name" in s)]
    assert any(s.get("tool_name") in differential.OUT_OF_PALETTE for s in rewrites)
    assert any(isinstance(s.get("raw_args"), str) and not s["raw_args"].startswith("{") for s in rewrites)
    text = repr([c.event for c in cases])
    assert str(2**64) in text and str(-(2**63) - 1) in text

    def depth(v: object) -> int:
        if isinstance(v, dict):
            return 1 + max((depth(x) for x in v.values()), default=0)
        if isinstance(v, list):
            return 1 + max((depth(x) for x in v), default=0)
        return 0

    deepest = max(depth(c.event.get("args", c.event.get("result"))) for c in cases)
    assert 32 <= deepest <= differential.MAX_DEPTH
