"""The Python loop-breaker (result + steering, with run state), through the host.

The component comes from `plugins/python/build` into
``$TOOLGATE_PLUGINS/python/loop-breaker.wasm``. A trace of steering and
result events goes through `toolgate replay --json` in one process, so the
state the guard keeps in the run's scope lives from line to line, as in a
served run. The rule (`plugins/python/loop-breaker/guard.py`): an error
result counts one failure of its call (same tool, same arguments); a call
whose identical call has failed `max_failures` times (default 2) in the run
is steered. Every verdict of the trace is asserted exactly. A config the
guard refuses keeps it from loading, as `toolgate list` shows.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import only_entry, plugin_dir, replay

SQL = {"sql": "SELECT * FROM orders", "db": "main"}
SAME_SQL_REORDERED = {"db": "main", "sql": "SELECT * FROM orders"}
OTHER_SQL = {"sql": "SELECT * FROM orders LIMIT 5", "db": "main"}


def steered(failures: str) -> dict[str, Any]:
    """The verdict on a call that has already failed `failures` ("2 times")."""
    return {
        "action": "skip",
        "content": f"This exact call (run_query with these same arguments) has failed {failures} in this "
        "run. Do not repeat it: try something else (other arguments, another tool, or ask the user).",
        "is_error": True,
    }


def call(run: str, call_id: str, args: dict[str, Any], tool: str = "run_query") -> dict[str, Any]:
    return {"seam": "steering", "event": {"run_id": run, "tool_name": tool, "call_id": call_id, "args": args}}


def done(run: str, call_id: str, *, failed: bool, deferred: bool = False, tool: str = "run_query") -> dict[str, Any]:
    result = {"error": "relation does not exist"} if failed else {"rows": []}
    return {"seam": "result", "event": {"run_id": run, "tool_name": tool, "call_id": call_id,
                                        "result": result, "is_error": failed, "deferred": deferred}}


PROCEED, OBSERVED = (None, "proceed"), (None, "observed")

# (line, expected result, expected outcome), in trace order. Default config.
TRACE = [
    # run r1: the same call fails twice; the third identical attempt is steered.
    (call("r1", "c1", SQL), *PROCEED),
    (done("r1", "c1", failed=True), *OBSERVED),
    (call("r1", "c2", SAME_SQL_REORDERED), *PROCEED),  # the same args, keys in another order
    (done("r1", "c2", failed=True), *OBSERVED),
    # run r2 has failed nothing yet, and the same tool with other args in r1 neither.
    (call("r2", "c1", SQL), *PROCEED),
    (done("r2", "c1", failed=True), *OBSERVED),
    (call("r1", "c3", OTHER_SQL), *PROCEED),
    (done("r1", "c3", failed=True), *OBSERVED),
    (call("r1", "c4", SQL), steered("2 times"), "skip"),
    # The steered call's result (the model saw an error) is no new failure.
    (done("r1", "c4", failed=True), *OBSERVED),
    (call("r1", "c5", SQL), steered("2 times"), "skip"),
    (call("r1", "c6", SQL, tool="search"), *PROCEED),  # another tool, the same args
    # r2's second failure: now r2 steers it too; r1's other args failed once only.
    (call("r2", "c2", SQL), *PROCEED),
    (done("r2", "c2", failed=True), *OBSERVED),
    (call("r2", "c3", SQL), steered("2 times"), "skip"),
    (call("r1", "c7", OTHER_SQL), *PROCEED),
    # run r3: a success counts nothing (nor resets the count); a deferred
    # result counts once its resumed result arrives; a result of a call the
    # guard never saw counts nothing.
    (call("r3", "c1", SQL), *PROCEED),
    (done("r3", "c1", failed=True), *OBSERVED),
    (call("r3", "c2", SQL), *PROCEED),
    (done("r3", "c2", failed=False), *OBSERVED),
    (done("r3", "unseen", failed=True), *OBSERVED),
    (call("r3", "c3", SQL), *PROCEED),
    (done("r3", "c3", failed=True, deferred=True), *OBSERVED),
    (call("r3", "c4", SQL), *PROCEED),  # still one failure: c3's result is not in
    (done("r3", "c3", failed=True), *OBSERVED),
    (call("r3", "c5", SQL), steered("2 times"), "skip"),
]


def loop_breaker_dir(plugins_root: Path, tmp: Path, config: str | None = None) -> Path:
    """A plugin directory holding the Python loop-breaker, with `config`
    (TOML lines of its `[plugin.config]`) when given."""
    d = plugin_dir(plugins_root, "python", "loop-breaker", tmp=tmp)
    if config is not None:
        (d / "toolgate.toml").write_text(f'[[plugin]]\npath = "loop-breaker.wasm"\n[plugin.config]\n{config}\n')
    return d


def assert_decisions(decisions: list[dict[str, Any]], trace: list[tuple[dict[str, Any], Any, str]]) -> None:
    for (line, expected, outcome), decision in zip(trace, decisions, strict=True):
        where = (decision["line"], line)
        assert decision["result"] == expected, where
        entry = only_entry(decision, "loop-breaker")
        assert entry["outcome"] == outcome and entry.get("fault") is None, (where, entry)


def test_failures_are_counted_per_identical_call_and_per_run(
    toolgate_bin: Path, plugins_root: Path, tmp_path: Path
) -> None:
    plugins = loop_breaker_dir(plugins_root, tmp_path)
    assert_decisions(replay(toolgate_bin, plugins, [line for line, _, _ in TRACE]), TRACE)


def test_max_failures_from_the_config(toolgate_bin: Path, plugins_root: Path, tmp_path: Path) -> None:
    trace = [
        (call("r1", "c1", SQL), *PROCEED),
        (done("r1", "c1", failed=True), *OBSERVED),
        (call("r1", "c2", SQL), steered("once"), "skip"),
        (call("r1", "c3", OTHER_SQL), *PROCEED),
        (done("r1", "c3", failed=True), *OBSERVED),
        (call("r1", "c4", OTHER_SQL), steered("once"), "skip"),
    ]
    one = loop_breaker_dir(plugins_root, tmp_path / "one", "max_failures = 1")
    assert_decisions(replay(toolgate_bin, one, [line for line, _, _ in trace]), trace)

    three = [line for line, _, _ in TRACE[:4]] + [done("r1", "c2", failed=True), call("r1", "c9", SQL),
                                                  done("r1", "c9", failed=True), call("r1", "c10", SQL)]
    decisions = replay(toolgate_bin, loop_breaker_dir(plugins_root, tmp_path / "three", "max_failures = 3"), three)
    # c2's result was counted once: a second result of one call id finds no pending call.
    assert [d["result"] for d in decisions] == [None] * 7 + [steered("3 times")]


def listed(toolgate_bin: Path, plugins: Path) -> dict[str, Any]:
    proc = subprocess.run([str(toolgate_bin), "list", "--plugins", str(plugins)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("config, message", [
    ("max_failures = 0", "config: max_failures must be an integer of 1 or more, not 0"),
    ('max_failures = "2"', "config: max_failures must be an integer of 1 or more, not '2'"),
    ("max_failures = 2.5", "config: max_failures must be an integer of 1 or more, not 2.5"),
    ("max_fails = 2", "config: unknown key 'max_fails'; the only key is max_failures"),
])
def test_a_bad_config_is_refused_at_load(
    config: str, message: str, toolgate_bin: Path, plugins_root: Path, tmp_path: Path
) -> None:
    out = listed(toolgate_bin, loop_breaker_dir(plugins_root, tmp_path, config))
    assert out["global"] == []
    d = tmp_path / "python-loop-breaker"
    # The manifest's line of the config, then the component.
    assert out["errors"] == [f"{d}/toolgate.toml:3 ({d}/loop-breaker.wasm): "
                             f"plugin `loop-breaker` refuses its config: {message}"]


def test_a_good_config_loads_at_both_seams(toolgate_bin: Path, plugins_root: Path, tmp_path: Path) -> None:
    out = listed(toolgate_bin, loop_breaker_dir(plugins_root, tmp_path, "max_failures = 5"))
    (plugin,) = out["global"]
    assert (plugin["name"], sorted(plugin["seams"]), out["errors"]) == ("loop-breaker", ["result", "steering"], [])
