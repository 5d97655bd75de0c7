"""Builds a guard that implements all four seams and runs it in wasmtime.

The component is run by wasmtime's Python bindings with a fake host (it
records log lines and serves a configuration), so this checks the SDK's glue
end to end — every seam, every return shape, print/stderr capture, a raising
hook — without the toolgate host. Takes one componentize-py build (~30 s).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

wasmtime = pytest.importorskip("wasmtime", reason="pip install wasmtime (the SDK's test extra)")
from wasmtime.component import Component, Linker, Record  # noqa: E402

from toolgate_guest import build  # noqa: E402
from toolgate_guest.wasminfo import read_component_file  # noqa: E402

PKG = "toolgate:guard"
VER = "@0.1.0"

GUARD = '''
import sys
from toolgate_guest import Guard, cancel, config, log, rewrite, steer


class Everything(Guard):
    def narrow(self, event):
        print(f"narrowing {len(event.tools)} tools for {event.intent_label}")
        if event.query is None:
            return None
        return [n for n in event.narrowed_tool_names if not n.startswith("admin_")]

    def dispatch(self, event):
        if event.tool_name == "as_dict":
            return {"tool_name": "search", "args": {**event.args, "tenant": event.state["tenant"]}}
        if event.tool_name == "from_config":
            return rewrite(config()["target"], {"n": event.iteration_index})
        return None

    def before_tool_call(self, event):
        action = event.args.get("do")
        if action == "steer":
            return steer(f"no: {event.call_id}")
        if action == "cancel":
            return cancel("skipped politely")
        if action == "seed":
            return {"action": "skip", "content": "seed shape"}
        if action == "raise":
            raise ValueError("bad sql " + event.args["sql"])
        if action == "bad":
            return 42
        if action == "stderr":
            sys.stderr.write("careful\\n")
        return None

    def on_result(self, event):
        log(f"result={event.result!r} deferred={event.deferred} error={event.is_error}", "debug")
'''


class Host:
    """A fake host: the component's imports, recording what the guard logs."""

    def __init__(self, component_path: Path) -> None:
        self.engine = wasmtime.Engine()
        self.component = Component.from_file(self.engine, str(component_path))
        self.logs: list[tuple[str, str]] = []
        self.config = "{}"
        self.linker = Linker(self.engine)
        with self.linker.root() as root:
            with root.add_instance(f"{PKG}/host{VER}") as host:
                host.add_func("log", lambda _store, level, msg: self.logs.append((level, msg)))
                host.add_func("config", lambda _store: self.config)
            with root.add_instance(f"{PKG}/types{VER}"):
                pass

    def call(self, seam: str, func: str, **fields: Any) -> Any:
        """Calls one hook on a fresh instance, as the host does."""
        store = wasmtime.Store(self.engine)
        instance = self.linker.instantiate(store, self.component)
        iface = instance.get_export_index(store, f"{PKG}/{seam}{VER}")
        assert iface is not None, f"component does not export {seam}"
        f = instance.get_func(store, instance.get_export_index(store, func, iface))
        record = Record()
        for key, value in fields.items():
            setattr(record, key.replace("_", "-"), value)
        result = f(store, record)
        f.post_return(store)
        return result


def fields(value: Any) -> Any:
    return {k.replace("-", "_"): v for k, v in vars(value).items()} if isinstance(value, Record) else value


def build_guard(tmp_path_factory: pytest.TempPathFactory, name: str, source: str) -> Path:
    """Builds the guard `source` into `<name>.wasm` in a fresh directory."""
    tmp = tmp_path_factory.mktemp(name)
    src = tmp / f"{name}.py"
    src.write_text(textwrap.dedent(source))
    out = tmp / f"{name}.wasm"
    build.build(src, out, quiet=True)
    return out


@pytest.fixture(scope="module")
def component(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_guard(tmp_path_factory, "everything", GUARD)


@pytest.fixture(scope="module")
def compiled(component: Path) -> Host:
    return Host(component)  # compiling the component takes seconds: once


@pytest.fixture
def host(compiled: Host) -> Host:
    compiled.logs.clear()
    compiled.config = "{}"
    return compiled


def steering(host: Host, args: dict[str, Any]) -> Any:
    return host.call("steering", "before-tool-call", run_id="r", tool_name="t", call_id="call-7",
                     args=json.dumps(args), state="{}")


def test_exports_every_implemented_seam_and_imports_no_wasi(component: Path) -> None:
    info = read_component_file(component)
    seams = sorted(n for n in info.export_names() if n.startswith(PKG))
    assert seams == [f"{PKG}/{s}{VER}" for s in ("result", "rewrite", "routing", "steering")]
    assert sorted(info.import_names()) == [f"{PKG}/host{VER}", f"{PKG}/types{VER}"]


def test_steering_verdicts(host: Host) -> None:
    assert steering(host, {}) is None
    assert fields(steering(host, {"do": "steer"})) == {"content": "no: call-7", "is_error": True}
    assert fields(steering(host, {"do": "cancel"})) == {"content": "skipped politely", "is_error": False}
    assert fields(steering(host, {"do": "seed"})) == {"content": "seed shape", "is_error": None}


def test_a_raising_hook_is_logged_then_traps(host: Host) -> None:
    with pytest.raises((wasmtime.Trap, wasmtime.WasmtimeError)):
        steering(host, {"do": "raise", "sql": "SELECT 1"})
    errors = [m for level, m in host.logs if level == "error"]
    assert len(errors) == 1, host.logs
    assert errors[0].startswith("guard raised ValueError: bad sql SELECT 1 (at ")
    assert "in before_tool_call" in errors[0]


def test_a_wrong_return_type_traps_with_a_message(host: Host) -> None:
    with pytest.raises((wasmtime.Trap, wasmtime.WasmtimeError)):
        steering(host, {"do": "bad"})
    assert [level for level, _ in host.logs] == ["error"], host.logs
    assert host.logs[0][1].startswith(
        "guard raised TypeError: before_tool_call returned int; expected steer(...)")


def test_a_malformed_event_is_logged_then_traps(host: Host) -> None:
    with pytest.raises((wasmtime.Trap, wasmtime.WasmtimeError)):
        host.call("steering", "before-tool-call", run_id="r", tool_name="t", call_id="c",
                  args="[1, 2]", state="{}")
    assert host.logs[0][1].startswith("guard raised ValueError: args is not a JSON object: list")


def test_stderr_goes_to_the_log_as_warn(host: Host) -> None:
    assert steering(host, {"do": "stderr"}) is None
    assert host.logs == [("warn", "careful")]


def test_rewrite(host: Host) -> None:
    def dispatch(tool: str, args: dict[str, Any], state: dict[str, Any]) -> Any:
        return fields(host.call("rewrite", "dispatch", run_id="r", iteration_index=4, node_name="react",
                                call_id="c", tool_name=tool, args=json.dumps(args),
                                available_tools=["search"], state=json.dumps(state)))

    assert dispatch("other", {"q": 1}, {}) is None
    got = dispatch("as_dict", {"q": "x"}, {"tenant": "acme"})
    assert got["tool_name"] == "search"
    assert json.loads(got["args"]) == {"q": "x", "tenant": "acme"}
    host.config = '{"target": "search"}'
    got = dispatch("from_config", {}, {})
    assert (got["tool_name"], json.loads(got["args"])) == ("search", {"n": 4})


def test_routing_and_print(host: Host) -> None:
    def narrow(query: str | None) -> Any:
        tools = [Record(), Record()]
        for t, n in zip(tools, ("search", "admin_drop")):
            setattr(t, "name", n)
            setattr(t, "description", "")
        return host.call("routing", "narrow", run_id="r", mode="enforce", intent_label="sql",
                         total_tools=5, narrowed_tool_names=["search", "admin_drop"],
                         saved_tokens_estimate=0, tools=tools, query=query, state="{}")

    assert narrow("find it") == ["search"]
    assert narrow(None) is None
    assert host.logs == [("info", "narrowing 2 tools for sql")] * 2


def test_result_seam_logs(host: Host) -> None:
    assert host.call("result", "on-result", run_id="r", tool_name="t", result='{"rows": 3}',
                     call_id="c", deferred=False, is_error=True, state="{}") is None
    assert host.logs == [("debug", "result={'rows': 3} deferred=False error=True")]


# A guard written with symfonic's hook names (the guard above uses their
# deprecated aliases): each seam is exported and reaches its hook.
NAMED_GUARD = '''
from toolgate_guest import Guard, log, rewrite, steer


class Named(Guard):
    def on_tool_routing_decision(self, event):
        return event.narrowed_tool_names[:1]

    def on_tool_call_dispatch(self, event):
        return rewrite("search", {"was": event.tool_name})

    def on_before_tool_call(self, event):
        if event.args.get("do") == "bad":
            return 42
        return steer(f"no: {event.tool_name}")

    def on_tool_result(self, event):
        log(f"saw {event.tool_name}")
'''


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> Host:
    return Host(build_guard(tmp_path_factory, "named", NAMED_GUARD))


def test_symfonic_hook_names_reach_every_seam(named: Host) -> None:
    named.logs.clear()
    tools = [Record()]
    setattr(tools[0], "name", "a")
    setattr(tools[0], "description", "")
    assert named.call("routing", "narrow", run_id="r", mode="enforce", intent_label="x", total_tools=2,
                      narrowed_tool_names=["a", "b"], saved_tokens_estimate=0, tools=tools, query=None,
                      state="{}") == ["a"]
    got = fields(named.call("rewrite", "dispatch", run_id="r", iteration_index=0, node_name="react",
                            call_id="c", tool_name="t", args="{}", available_tools=["search"], state="{}"))
    assert (got["tool_name"], json.loads(got["args"])) == ("search", {"was": "t"})
    assert fields(steering(named, {})) == {"content": "no: t", "is_error": True}
    assert named.call("result", "on-result", run_id="r", tool_name="t", result="null", call_id="c",
                      deferred=False, is_error=False, state="{}") is None
    assert named.logs == [("info", "saw t")]
    with pytest.raises((wasmtime.Trap, wasmtime.WasmtimeError)):
        steering(named, {"do": "bad"})
    assert named.logs[-1][1].startswith("guard raised TypeError: on_before_tool_call returned int")
