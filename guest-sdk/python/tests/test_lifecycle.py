"""Lifecycle events in the Python SDK, natively: the event dataclasses built
from their WIT records (JSON fields parsed and checked), which hooks a guard
observes, and how the build exports ``observe`` for them. (Built components
observing events through the real host: tests/langs/test_lifecycle.py.)"""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import toolgate_guest as tg
from toolgate_guest import build


def test_every_hook_has_its_event_class_named_as_symfonic_names_it() -> None:
    assert list(tg.LIFECYCLE) == [
        "on_agent_start", "on_agent_end", "on_node_start", "on_node_end", "on_node_error",
        "on_llm_start", "on_llm_pre_call", "on_llm_end", "on_token_composition",
        "on_user_correction", "on_procedure_selection", "on_react_loop_end",
        "on_fabrication_detected",
    ]
    names = [cls.__name__ for cls, _ in tg.LIFECYCLE.values()]
    assert names[5:8] == ["LLMStartEvent", "LLMPreCallEvent", "LLMEndEvent"]
    for hook, (cls, case) in tg.LIFECYCLE.items():
        assert dataclasses.is_dataclass(cls)
        assert hook == "on_" + case.replace("-", "_")
        # Every hook is a method of Guard that does nothing.
        assert getattr(tg.Guard(), hook)(None) is None


def test_llm_end_usage_arrives_parsed_and_other_fields_intact() -> None:
    rec = SimpleNamespace(model="m", output="o", usage='{"total_tokens": 12, "input_tokens": 10}',
                          run_id="r", node_name="react", pricing_unknown=True, duration_ms=1.5,
                          started_at_utc="2026-01-01T00:00:00Z", iteration_index=2, turn_index=1)
    e = tg.LLMEndEvent.from_wit(rec)
    assert e == tg.LLMEndEvent("m", "o", {"total_tokens": 12, "input_tokens": 10}, "r", "react",
                               True, 1.5, "2026-01-01T00:00:00Z", 2, 1)


def test_lists_dicts_and_any_are_parsed_as_the_seed_types_them() -> None:
    pre = tg.LLMPreCallEvent.from_wit(SimpleNamespace(
        model="m", messages='[{"role": "user"}]', tools='[]', run_id="r",
        invocation_params='{"temperature": 0}', node_name="n"))
    assert (pre.messages, pre.tools, pre.invocation_params) == ([{"role": "user"}], [], {"temperature": 0})
    fix = tg.UserCorrectionEvent.from_wit(SimpleNamespace(
        turn_id="t", original_response="a", correction_text="b", activation_log='{"k": 1}',
        tenant_id="acme", scope="null"))
    assert (fix.activation_log, fix.scope) == ({"k": 1}, None)
    fab = tg.FabricationDetectedEvent.from_wit(SimpleNamespace(
        run_id="r", mode="observe", action_taken="observed", findings='[{"claim": "x"}]',
        refuse_threshold=0.5, max_finding_confidence=0.9, original_draft_preview="d",
        replacement_preview=None, preview_truncated=False))
    assert fab.findings == [{"claim": "x"}] and fab.replacement_preview is None


def test_a_json_field_of_the_wrong_shape_is_an_error_naming_it() -> None:
    rec = SimpleNamespace(model="m", output="o", usage="[1]", run_id="r", node_name="",
                          pricing_unknown=False, duration_ms=0.0, started_at_utc="",
                          iteration_index=0, turn_index=0)
    with pytest.raises(ValueError, match="event field 'usage' is not a JSON object: list"):
        tg.LLMEndEvent.from_wit(rec)


def find(tmp_path: Path, source: str, name: str = "guard", **kw: object) -> build.Target:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    try:
        return build.find_target(build.load_module(path), **kw)  # type: ignore[arg-type]
    finally:
        sys.modules.pop(name, None)


def test_a_guard_defining_lifecycle_hooks_exports_observe_after_its_seams(tmp_path: Path) -> None:
    t = find(tmp_path, """
        from toolgate_guest import Guard
        class G(Guard):
            def on_llm_end(self, event): pass
            def on_agent_start(self, event): pass
            def on_before_tool_call(self, event): return None
    """)
    assert (t.class_name, t.seams) == ("G", ["steering", "observe"])
    assert tg.observed_hooks(t.module.G) == ["on_agent_start", "on_llm_end"]
    t = find(tmp_path, "def on_node_error(event): pass\n", name="f")
    assert (t.class_name, t.seams) == (None, ["observe"])
    assert tg.observed_hooks(t.module) == ["on_node_error"]
    assert tg.observed_hooks(tg.Guard) == []


def test_seams_option_takes_observe(tmp_path: Path) -> None:
    src = """
        from toolgate_guest import Guard
        class G(Guard):
            def on_llm_end(self, event): pass
            def on_before_tool_call(self, event): return None
    """
    assert find(tmp_path, src, seams=["observe"]).seams == ["observe"]
    with pytest.raises(build.BuildError, match="does not implement a lifecycle hook"):
        find(tmp_path, """
            from toolgate_guest import Guard
            class G(Guard):
                def on_before_tool_call(self, event): return None
        """, seams=["observe"])


def test_the_world_and_the_app_export_observe() -> None:
    _, world = build.world_for(["steering", "observe"], state=True)
    assert "    export %observe;\n" in world
    src = build.app_source("guard", "G", ["steering", "observe"])
    assert src.endswith("Steering = _exports.steering(guard.G)\nObserve = _exports.observe(guard.G)\n")
    assert "lifecycle.py" in build._RUNTIME_FILES
