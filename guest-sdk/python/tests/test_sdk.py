"""The SDK's pure-Python parts: events, verdicts, guard discovery, WIT handling.

These run on the build machine's Python, without building a component.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import toolgate_guest as tg
from toolgate_guest import build
from toolgate_guest.wasminfo import ComponentFormatError, read_component

SDK = Path(__file__).resolve().parents[1]
# The contract this SDK builds against (the repository's `wit/` is newer).
REPO_WIT = SDK.parents[1] / "wit" / "guard.wit"


# ------------------------------------------------------------------- events


def test_before_tool_call_event_parses_json_fields() -> None:
    rec = SimpleNamespace(run_id="r", tool_name="run_query", call_id="c",
                          args='{"sql": "SELECT 1", "n": [1, 2]}', state='{"tenant_id": "t"}')
    e = tg.BeforeToolCallEvent.from_wit(rec)
    assert e == tg.BeforeToolCallEvent("r", "run_query", "c", {"sql": "SELECT 1", "n": [1, 2]},
                                       {"tenant_id": "t"})


def test_dispatch_event_parses_json_fields() -> None:
    rec = SimpleNamespace(run_id="r", iteration_index=3, node_name="react", call_id="c",
                          tool_name="t", args="{}", available_tools=["t", "u"], state="{}")
    e = tg.ToolCallDispatchEvent.from_wit(rec)
    assert (e.iteration_index, e.args, e.available_tools, e.state) == (3, {}, ["t", "u"], {})


def test_routing_event_converts_tools_and_query() -> None:
    rec = SimpleNamespace(run_id="r", mode="enforce", intent_label="sql", total_tools=9,
                          narrowed_tool_names=["a", "b"], saved_tokens_estimate=12,
                          tools=[SimpleNamespace(name="a", description="A"),
                                 SimpleNamespace(name="b", description="")],
                          query=None, state="{}")
    e = tg.ToolRoutingDecisionEvent.from_wit(rec)
    assert e.tools == [tg.ToolInfo("a", "A"), tg.ToolInfo("b", "")]
    assert e.query is None and e.total_tools == 9 and e.saved_tokens_estimate == 12


@pytest.mark.parametrize("result", ['"text"', "null", '{"rows": [1]}', "[1, 2]", "3.5"])
def test_tool_result_event_result_is_any_json(result: str) -> None:
    rec = SimpleNamespace(run_id="r", tool_name="t", result=result, call_id="c",
                          deferred=True, is_error=False, state="{}")
    e = tg.ToolResultCallbackEvent.from_wit(rec)
    assert e.result == json.loads(result) and e.deferred is True


def test_args_that_are_not_an_object_are_an_error() -> None:
    rec = SimpleNamespace(run_id="r", tool_name="t", call_id="c", args="[1]", state="{}")
    with pytest.raises(ValueError, match="args is not a JSON object: list"):
        tg.BeforeToolCallEvent.from_wit(rec)


def test_former_names_are_aliases() -> None:
    assert tg.ToolRoutingDecisionEvent is tg.RoutingEvent
    assert tg.ToolCallDispatchEvent is tg.DispatchEvent
    assert tg.ToolResultCallbackEvent is tg.ToolResultEvent


# ------------------------------------------------------------------ verdicts


def test_verdict_helpers() -> None:
    assert tg.proceed() == tg.Proceed()
    assert tg.steer("fix it") == tg.Skip("fix it", True)
    assert tg.cancel("not allowed") == tg.Skip("not allowed", False)
    assert tg.skip("x", None) == tg.Skip("x", None)
    assert tg.rewrite("t", {"a": 1}) == tg.Rewrite("t", {"a": 1})


def test_log_and_config_outside_a_component(capsys: pytest.CaptureFixture[str]) -> None:
    tg.log("hello", "warn")
    assert tg.config() == {}
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        tg.log("x", "loud")


# ----------------------------------------------------------------- discovery


def write_module(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


def find(tmp_path: Path, source: str, name: str = "g", **kw: object) -> build.Target:
    path = write_module(tmp_path, name, source)
    try:
        return build.find_target(build.load_module(path), **kw)  # type: ignore[arg-type]
    finally:
        sys.modules.pop(name, None)


def test_class_guard_exports_only_overridden_hooks(tmp_path: Path) -> None:
    t = find(tmp_path, """
        from toolgate_guest import Guard
        class G(Guard):
            def on_before_tool_call(self, event): return None
            def on_tool_result(self, event): pass
    """)
    assert (t.class_name, t.seams) == ("G", ["steering", "result"])


def test_function_guard(tmp_path: Path) -> None:
    t = find(tmp_path, """
        def on_tool_call_dispatch(event): return None
        def on_tool_routing_decision(event): return None
        def helper(): pass
    """)
    assert (t.class_name, t.seams) == (None, ["routing", "rewrite"])


def test_a_response_guard_exports_the_response_seam(tmp_path: Path) -> None:
    t = find(tmp_path, """
        from toolgate_guest import Guard
        class G(Guard):
            def on_response_render(self, event): return event.content.upper()
    """)
    assert (t.class_name, t.seams) == ("G", ["response"])
    t = find(tmp_path, "def on_response_render(event): return None\n", name="f")
    assert (t.class_name, t.seams) == (None, ["response"])
    assert "Response = _exports.response(guard.G)\n" in build.app_source("guard", "G", ["response"])


def test_response_event_parses_state() -> None:
    wit = SimpleNamespace(run_id="r", iteration_index=3, model="m", node_name="react",
                          original_content="a", content="b", state='{"k": [1]}')
    e = tg.ResponseRenderEvent.from_wit(wit)
    assert (e.run_id, e.iteration_index, e.model, e.node_name) == ("r", 3, "m", "react")
    assert (e.original_content, e.content, e.state) == ("a", "b", {"k": [1]})


def test_deprecated_hook_names_still_count(tmp_path: Path) -> None:
    t = find(tmp_path, """
        from toolgate_guest import Guard
        class G(Guard):
            def before_tool_call(self, event): return None
            def on_result(self, event): pass
    """)
    assert (t.class_name, t.seams) == ("G", ["steering", "result"])
    t = find(tmp_path, """
        def dispatch(event): return None
        def narrow(event): return None
    """, name="h")
    assert (t.class_name, t.seams) == (None, ["routing", "rewrite"])
    assert tg.hook_name(t.module, "rewrite") == "dispatch"


def test_a_hook_under_both_names_is_refused(tmp_path: Path) -> None:
    with pytest.raises(build.BuildError, match="implements both on_before_tool_call and before_tool_call"):
        find(tmp_path, """
            from toolgate_guest import Guard
            class G(Guard):
                def on_before_tool_call(self, event): return None
                def before_tool_call(self, event): return None
        """)


def test_imported_guard_classes_are_not_candidates(tmp_path: Path) -> None:
    t = find(tmp_path, """
        from toolgate_guest import Guard
        class Mine(Guard):
            def on_tool_routing_decision(self, event): return None
    """)
    assert t.class_name == "Mine"


def test_several_classes_need_class_option(tmp_path: Path) -> None:
    source = """
        from toolgate_guest import Guard
        class A(Guard):
            def on_tool_routing_decision(self, event): return None
        class B(Guard):
            def on_tool_call_dispatch(self, event): return None
    """
    with pytest.raises(build.BuildError, match=r"several Guard subclasses \(A, B\); pick one with --class"):
        find(tmp_path, source)
    assert find(tmp_path, source, class_name="B").seams == ["rewrite"]


def test_no_hook_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(build.BuildError, match="implements no hook; override one of on_tool_routing_decision, on_tool_call_dispatch"):
        find(tmp_path, "x = 1\n")


def test_seams_option_narrows_and_checks(tmp_path: Path) -> None:
    source = """
        from toolgate_guest import Guard
        class G(Guard):
            def on_before_tool_call(self, event): return None
            def on_tool_call_dispatch(self, event): return None
    """
    assert find(tmp_path, source, seams=["steering"]).seams == ["steering"]
    with pytest.raises(build.BuildError, match="--seams asks for routing but the guard does not implement on_tool_routing_decision"):
        find(tmp_path, source, seams=["routing"])
    with pytest.raises(build.BuildError, match="unknown seam"):
        find(tmp_path, source, seams=["bogus"])


def test_import_error_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(build.BuildError, match=r"g\.py: importing it raised ModuleNotFoundError"):
        find(tmp_path, "import no_such_module_here\n")


def test_reserved_and_invalid_module_names(tmp_path: Path) -> None:
    with pytest.raises(build.BuildError, match="reserved"):
        build.module_name(tmp_path / "wit_world.py")
    with pytest.raises(build.BuildError, match="not a valid Python module name"):
        build.module_name(tmp_path / "1guard.py")
    assert build.module_name(tmp_path / "sql-guard.py") == "sql_guard"


def test_app_source_binds_each_seam() -> None:
    src = build.app_source("guard", "SqlGuard", ["rewrite", "steering"])
    assert "import guard\n" in src
    assert "Rewrite = _exports.rewrite(guard.SqlGuard)\n" in src
    assert "Steering = _exports.steering(guard.SqlGuard)\n" in src
    assert "Routing" not in src
    assert "Result = _exports.result(guard)\n" in build.app_source("guard", None, ["result"])
    assert "Config" not in src
    assert build.app_source("guard", "G", ["steering"], config=True).endswith(
        "Steering = _exports.steering(guard.G)\nConfig = _exports.config(guard.G)\n")


# ----------------------------------------------------------------------- WIT


def test_keyword_escaping() -> None:
    text = textwrap.dedent("""
        interface result {
            use types.{tool-result-event};
            on-result: func(event: tool-result-event);
        }
        record r {
            result: json,
            is-result: bool,
        }
        world result-guard { export result; }
    """)
    out = build.escape_wit_keywords(text)
    assert "interface %result {" in out
    assert "    %result: json," in out
    assert "export %result;" in out
    assert "on-result: func" in out and "is-result: bool" in out and "world result-guard" in out
    assert build.escape_wit_keywords(out) == out


def test_packaged_wit_is_the_contract() -> None:
    packaged = build.default_wit()
    assert packaged.read_text() == REPO_WIT.read_text()
    assert f"package {build.WIT_PACKAGE}@{build.WIT_VERSION};" in REPO_WIT.read_text()


def world_items(tmp_path: Path, seams: list[str], **kw: bool) -> list[tuple[str, str]]:
    name, extra = build.world_for(seams, **kw)
    assert name == build.GUEST_WORLD
    dest = tmp_path / "-".join([*seams, *sorted(k for k, v in kw.items() if v)])
    build.copy_wit(REPO_WIT.parent, dest, extra)
    assert sorted(p.name for p in dest.iterdir()) == ["guard.wit"]  # not the frozen 0.1.0 copy
    text = (dest / "guard.wit").read_text()
    world = text[text.index(f"world {name} {{"):]
    return re.findall(r"(import|export) %?([\w-]+);", world)


def test_the_generated_world_imports_and_exports_only_what_the_guard_uses(tmp_path: Path) -> None:
    # Never the contract's per-seam worlds: they import state and http too.
    assert world_items(tmp_path, ["steering"]) == [("import", "host"), ("export", "steering")]
    assert world_items(tmp_path, ["rewrite", "result"]) == [
        ("import", "host"), ("export", "rewrite"), ("export", "result")]
    assert world_items(tmp_path, ["steering", "result"], state=True, config=True) == [
        ("import", "host"), ("import", "state"), ("export", "steering"), ("export", "result"),
        ("export", "config")]
    assert world_items(tmp_path, ["steering"], http=True) == [
        ("import", "host"), ("import", "http"), ("export", "steering")]


def test_copy_wit_refuses_another_package_or_version(tmp_path: Path) -> None:
    other = tmp_path / "other.wit"
    other.write_text("package acme:thing@1.0.0;\n")
    with pytest.raises(build.BuildError, match="not the toolgate:guard@0.3.0 package"):
        build.copy_wit(other, tmp_path / "out")
    for old in ("v0.1.0", "v0.2.0"):
        with pytest.raises(build.BuildError, match="not the toolgate:guard@0.3.0 package"):
            build.copy_wit(REPO_WIT.parent / old, tmp_path / old)


def test_pyproject_pins_the_checked_componentize_py() -> None:
    pyproject = (SDK / "pyproject.toml").read_text()
    assert re.search(r'"componentize-py==([^"]+)"', pyproject).group(1) == build.COMPONENTIZE_PY_VERSION


# ------------------------------------------------------------------ wasminfo


def leb(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def name(s: str) -> bytes:
    return b"\x00" + leb(len(s)) + s.encode()


def section(sid: int, body: bytes) -> bytes:
    return bytes([sid]) + leb(len(body)) + body


def test_wasminfo_reads_imports_and_exports() -> None:
    imports = leb(2) + name("toolgate:guard/host@0.1.0") + b"\x05" + leb(0) \
        + name("f") + b"\x01" + leb(1)
    exports = leb(2) + name("toolgate:guard/steering@0.1.0") + b"\x05" + leb(0) + b"\x00" \
        + name("g") + b"\x01" + leb(3) + b"\x01\x01" + leb(1)
    skipped = section(1, b"\x00asm\x01\x00\x00\x00")  # a nested core module
    data = b"\x00asm\x0d\x00\x01\x00" + skipped + section(10, imports) + section(11, exports)
    info = read_component(data)
    assert [(e.name, e.kind) for e in info.imports] == [("toolgate:guard/host@0.1.0", "instance"), ("f", "func")]
    assert info.export_names() == ["toolgate:guard/steering@0.1.0", "g"]


def test_wasminfo_refuses_core_modules_and_garbage() -> None:
    with pytest.raises(ComponentFormatError, match="core WebAssembly module"):
        read_component(b"\x00asm\x01\x00\x00\x00")
    with pytest.raises(ComponentFormatError, match="bad magic"):
        read_component(b"nope")
    with pytest.raises(ComponentFormatError, match="section 10 runs past the end"):
        read_component(b"\x00asm\x0d\x00\x01\x00" + b"\x0a\x05\x01")
    with pytest.raises(ComponentFormatError, match="unexpected end of data"):
        read_component(b"\x00asm\x0d\x00\x01\x00" + section(10, b"\x01\x00\x09abc"))
