"""The state API and ``validate_config``, natively: no component is built.

Outside a component :mod:`toolgate_guest.state` is an in-memory store with the
host's semantics for what a single call sees, so a stateful guard's unit tests
run on the build machine's Python; the last tests drive the example
loop-breaker guard that way.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

import toolgate_guest as tg
from toolgate_guest import build, state
from toolgate_guest.state import Scope

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    state.reset()
    yield
    state.reset()


# -------------------------------------------------------------------- state


def test_get_set_delete_in_each_scope() -> None:
    assert state.get("k") is None
    state.set("k", "run value")
    state.set("k", "tenant value", scope="tenant")
    assert state.get("k") == state.get("k", scope=Scope.RUN) == "run value"
    assert state.get("k", scope=Scope.TENANT) == "tenant value"
    state.delete("k")
    assert state.get("k") is None
    assert state.get("k", scope="tenant") == "tenant value"
    state.delete("never set")  # deleting an absent key is no error


def test_scopes_are_str_enums_and_unknown_ones_are_refused() -> None:
    assert Scope.RUN == "run" and Scope.TENANT == "tenant" and Scope("tenant") is Scope.TENANT
    with pytest.raises(ValueError, match="unknown state scope 'thread'; expected 'run' or 'tenant'"):
        state.get("k", scope="thread")  # type: ignore[arg-type]


def test_add_counts_from_zero_and_returns_the_new_value() -> None:
    assert state.add("n") == 1
    assert state.add("n", 5) == 6
    assert state.add("n", -7) == -1
    assert state.get("n") == "-1"
    assert state.add("n", 3, scope="tenant") == 3  # another scope, another counter
    state.set("m", "+41")
    assert state.add("m", 1) == 42


def test_set_with_a_ttl_of_zero_is_a_delete() -> None:
    state.set("k", "v")
    state.set("k", "w", ttl_ms=0)
    assert state.get("k") is None
    state.set("k", "v", ttl_ms=60_000)  # natively a ttl is not enforced, only accepted
    assert state.get("k") == "v"


@pytest.mark.parametrize("value", ["x", "1.5", "", " 1", "1_000", "٣"])
def test_add_on_a_value_that_is_not_a_decimal_integer_is_refused(value: str) -> None:
    # The host traps such a call (state-invalid); natively it raises.
    state.set("k", value)
    with pytest.raises(ValueError, match="state add on 'k': its value is not a decimal integer"):
        state.add("k", 1)
    assert state.get("k") == value


def test_add_outside_s64_is_refused_and_changes_nothing() -> None:
    assert state.add("k", 2**63 - 1) == 2**63 - 1
    with pytest.raises(OverflowError, match=r"state add on 'k': 9223372036854775807 \+ 1 is outside s64"):
        state.add("k", 1)
    assert state.get("k") == str(2**63 - 1)
    with pytest.raises(OverflowError, match="delta"):
        state.add("j", 2**63)


@pytest.mark.parametrize("call, message", [
    (lambda: state.get(1), "state key must be a str, not int"),  # type: ignore[arg-type]
    (lambda: state.set("k", 1), "state value must be a str, not int"),  # type: ignore[arg-type]
    (lambda: state.add("k", True), "state add delta must be an int, not bool"),
    (lambda: state.add("k", 1.0), "state add delta must be an int, not float"),  # type: ignore[arg-type]
    (lambda: state.set("k", "v", ttl_ms="1"), "state ttl_ms must be an int or None, not str"),  # type: ignore[arg-type]
])
def test_arguments_of_the_wrong_type_are_refused(call, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        call()
    assert state.get("k") is None


def test_a_negative_ttl_is_refused() -> None:
    with pytest.raises(ValueError, match=r"state ttl_ms -1 is outside 0..2\*\*64-1"):
        state.add("k", 1, ttl_ms=-1)
    assert state.get("k") is None


def test_the_state_module_is_reachable_from_the_package() -> None:
    assert tg.state is state


# ----------------------------------------------------- what the build detects


@pytest.mark.parametrize("source, uses", [
    ("from toolgate_guest import state\n", True),
    ("from toolgate_guest import Guard, state as st\n", True),
    ("from toolgate_guest.state import add, Scope\n", True),
    ("import toolgate_guest.state\n", True),
    ("import toolgate_guest as tg\ndef f(e):\n    return tg.state.add('n')\n", True),
    ("from toolgate_guest import Guard, steer\n", False),
    ("import toolgate_guest as tg\ndef f(event):\n    return event.state, tg.log\n", False),
    ("state = 1\nfrom other import state\n", False),
])
def test_the_build_imports_state_only_for_a_guard_that_uses_it(source: str, uses: bool) -> None:
    assert build.imports_module(source, "state") is uses


def load(tmp_path: Path, source: str, name: str = "g") -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    try:
        return build.load_module(path)
    finally:
        sys.modules.pop(name, None)


def test_find_target_sees_validate_config_and_state(tmp_path: Path) -> None:
    t = build.find_target(load(tmp_path, """
        from toolgate_guest import Guard, state
        class G(Guard):
            def validate_config(self, config): pass
            def on_before_tool_call(self, event): return None
    """))
    assert (t.seams, t.config, t.state) == (["steering"], True, True)
    t = build.find_target(load(tmp_path, """
        def validate_config(config): pass
        def on_tool_result(event): pass
    """, name="h"))
    assert (t.seams, t.config, t.state) == (["result"], True, False)
    t = build.find_target(load(tmp_path, "def on_tool_result(event): pass\n", name="i"), state=True)
    assert (t.config, t.state) == (False, True)


def test_validate_config_alone_is_no_guard(tmp_path: Path) -> None:
    with pytest.raises(build.BuildError, match="implements no hook"):
        build.find_target(load(tmp_path, "def validate_config(config): pass\n"))


# ------------------------------------------------------------ validate_config


class Checked(tg.Guard):
    def validate_config(self, config):
        if config.get("n", 1) < 1:
            raise ValueError(f"n must be 1 or more, not {config['n']}")
        if "bogus" in config:
            raise TypeError
        if "answer" in config:
            return config["answer"]

    def on_before_tool_call(self, event):
        return None


def test_check_config_accepts_refuses_with_the_message_or_lets_a_bug_through() -> None:
    assert tg.validates_config(Checked) and not tg.validates_config(tg.Guard)
    assert tg.check_config(Checked, {}) is None
    assert tg.check_config(Checked, {"n": 3}) is None
    assert tg.check_config(Checked, {"n": 0}) == "n must be 1 or more, not 0"
    assert tg.check_config(Checked, {"bogus": 1}) == "TypeError"  # no message: the type's name
    with pytest.raises(TypeError, match=r"validate_config returned bool; expected None \(raise ValueError"):
        tg.check_config(Checked, {"answer": True})
    with pytest.raises(KeyError, match="'limit'"):  # a bug in the check: a trap in a component
        tg.check_config(Checked, BrokenConfig())


class BrokenConfig(dict):
    """A config whose every lookup fails, as a check with a bug would."""

    def get(self, key, default=None):
        raise KeyError("limit")


def test_check_config_of_a_module_guard(tmp_path: Path) -> None:
    module = load(tmp_path, """
        def validate_config(config):
            if config:
                raise ValueError(f"no config keys, got {sorted(config)}")
        def on_tool_result(event): pass
    """)
    assert tg.validates_config(module)
    assert tg.check_config(module, {}) is None
    assert tg.check_config(module, {"b": 1, "a": 2}) == "no config keys, got ['a', 'b']"


# ------------------------------------------------------- a stateful guard


@pytest.fixture(scope="module")
def loop_breaker() -> ModuleType:
    path = REPO / "plugins/python/loop-breaker/guard.py"
    spec = importlib.util.spec_from_file_location("loop_breaker_guard", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call(guard: tg.Guard, call_id: str, args: dict, tool: str = "run_query") -> tg.Skip | None:
    return guard.on_before_tool_call(tg.BeforeToolCallEvent("run-1", tool, call_id, args))


def result(guard: tg.Guard, call_id: str, is_error: bool, deferred: bool = False, tool: str = "run_query") -> None:
    guard.on_tool_result(tg.ToolResultCallbackEvent("run-1", tool, None, call_id, deferred, is_error))


def test_loop_breaker_steers_the_third_identical_call_after_two_failures(loop_breaker: ModuleType) -> None:
    g = loop_breaker.LoopBreaker()
    args = {"sql": "SELECT 1", "db": "main"}
    assert call(g, "c1", args) is None
    result(g, "c1", is_error=True)
    assert call(g, "c2", {"db": "main", "sql": "SELECT 1"}) is None  # same args, other key order
    result(g, "c2", is_error=True)
    verdict = call(g, "c3", args)
    assert verdict == tg.steer(
        "This exact call (run_query with these same arguments) has failed 2 times in this run. "
        "Do not repeat it: try something else (other arguments, another tool, or ask the user).")
    result(g, "c3", is_error=True)  # the steered call's own (error) result counts nothing
    assert "failed 2 times" in call(g, "c4", args).content
    assert call(g, "c5", {**args, "sql": "SELECT 2"}) is None  # other args
    assert call(g, "c6", args, tool="search") is None  # other tool


def test_loop_breaker_counts_no_success_no_deferral_and_no_unknown_call(loop_breaker: ModuleType) -> None:
    g = loop_breaker.LoopBreaker()
    args = {"q": "x"}
    assert call(g, "c1", args) is None
    result(g, "c1", is_error=False)  # a success
    result(g, "c9", is_error=True)  # a call it never saw
    assert call(g, "c2", args) is None
    result(g, "c2", is_error=True, deferred=True)  # not yet: its result comes later
    result(g, "c2", is_error=True)  # now it has failed
    assert call(g, "c3", args) is None  # one failure so far
    result(g, "c3", is_error=True)
    assert call(g, "c4", args).is_error is True
    assert state.get(f"fails:{loop_breaker.call_key('search', args)}") is None
    assert state.get(f"fails:{loop_breaker.call_key('run_query', args)}") == "2"


def test_loop_breaker_validates_max_failures(loop_breaker: ModuleType) -> None:
    check = lambda config: tg.check_config(loop_breaker.LoopBreaker, config)  # noqa: E731
    assert check({}) is None and check({"max_failures": 1}) is None and check({"max_failures": 10}) is None
    assert check({"max_failures": 0}) == "config: max_failures must be an integer of 1 or more, not 0"
    assert check({"max_failures": "2"}) == "config: max_failures must be an integer of 1 or more, not '2'"
    assert check({"max_failures": True}) == "config: max_failures must be an integer of 1 or more, not True"
    assert check({"max_failures": 2.0}) == "config: max_failures must be an integer of 1 or more, not 2.0"
    assert check({"max_fails": 2}) == "config: unknown key 'max_fails'; the only key is max_failures"


def test_query_limit_validates_its_limit() -> None:
    path = REPO / "plugins/python/query-limit/guard.py"
    spec = importlib.util.spec_from_file_location("query_limit_guard", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert tg.validates_config(module)
    assert tg.check_config(module, {}) is None and tg.check_config(module, {"limit": 7}) is None
    assert tg.check_config(module, {"limit": -1}) == "config: limit must be a positive integer, not -1"
    assert tg.check_config(module, {"max": 1}) == "config: unknown key 'max'; the only key is limit"
    rewritten = module.on_tool_call_dispatch(tg.ToolCallDispatchEvent("r", 0, "react", "c", "run_query",
                                                                      {"sql": "SELECT 1 ;"}))
    assert rewritten == tg.rewrite("run_query", {"sql": "SELECT 1 LIMIT 100"})  # config() is {} natively
