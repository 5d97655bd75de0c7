"""Lifecycle events (``observe``) in guards written with the JS/TS and the
Python SDKs.

- ``budget`` (``tests/langs/guards``): plugins/rust/token-budget rewritten in
  TypeScript and in Python; the Rust guard's own case file
  (``plugins/rust/token-budget/token-budget.test.toml``: ``on_llm_end``
  events, then the decision) passes under ``toolgate test`` against each.
- ``hostile-observe``: every lifecycle hook it implements throws. Behind
  ``toolgate serve``, every observation faults and is counted
  (``toolgate_observe_faults_total``), and the guard's decisions of the same
  run still answer. (Four faults: a guard's observer faults count toward its
  quarantine like any other, and the fifth within the window, `[quarantine]
  faults = 5`, would quarantine the whole guard.)
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, build_test_guards

GUARDS = REPO / "tests/langs/guards"
LANGS = ("js", "python")
# A JS or Python component's first instantiation on a busy machine can
# outlast the load probe's default cap: these tests are about the answers.
PATIENT = ("--probe-timeout-ms", "600000")


@pytest.fixture(scope="session")
def budget(toolgate_bin: Path) -> dict[str, Path]:
    return build_test_guards(toolgate_bin, "budget", {"js": GUARDS / "budget.ts", "python": GUARDS / "budget-py"})


@pytest.fixture(scope="session")
def hostile(toolgate_bin: Path) -> dict[str, Path]:
    return build_test_guards(
        toolgate_bin, "hostile-observe",
        {"js": GUARDS / "hostile-observe.ts", "python": GUARDS / "hostile-observe-py"},
    )


def budget_cases(dir: Path, wasm: Path) -> Path:
    """The Rust token-budget's case file, pointed at `wasm` (copied into `dir`)."""
    dir.mkdir(parents=True, exist_ok=True)
    (dir / "budget.wasm").write_bytes(wasm.read_bytes())
    cases = (REPO / "plugins/rust/token-budget/token-budget.test.toml").read_text()
    cases, n = re.subn(r'(?m)^path = ".*"$', 'path = "budget.wasm"', cases)
    assert n == 1, "the case file names one plugin"
    (dir / "budget.test.toml").write_text(cases)
    return dir


@pytest.mark.parametrize("lang", LANGS)
def test_the_token_budget_case_file_passes_against_an_observer_of_each_language(toolgate_bin, budget, tmp_path, lang):
    dir = budget_cases(tmp_path / lang, budget[lang])
    proc = subprocess.run([str(toolgate_bin), "test", *PATIENT, str(dir)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "5 passed, 0 failed", proc.stdout


def llm_end(run_id: str, total: int) -> dict[str, Any]:
    return {"hook": "on_llm_end",
            "event": {"model": "m", "output": "o", "usage": {"total_tokens": total}, "run_id": run_id}}


def metric(text: str, name: str) -> int:
    found = re.search(rf"(?m)^toolgate_{name} (\d+)$", text)
    assert found, f"no toolgate_{name} in the metrics"
    return int(found.group(1))


@pytest.mark.parametrize("lang", LANGS)
def test_a_throwing_observer_faults_every_observation_and_its_decisions_still_answer(serving, hostile, tmp_path, lang):
    dir = tmp_path / lang
    dir.mkdir()
    (dir / "hostile.wasm").write_bytes(hostile[lang].read_bytes())
    (dir / "toolgate.toml").write_text('[[plugin]]\npath = "hostile.wasm"\n')
    server = serving(dir)
    assert sorted(server.get("/v1/hooks")["hooks"]) == ["on_agent_start", "on_llm_end"]
    events = [{"hook": "on_agent_start", "event": {"query": "q", "run_id": "r1"}}]
    events += [llm_end("r1", i) for i in range(3)]
    for e in events:
        assert server.post("/v1/observe", e) == {"observed": "queued"}
    # Unobserved hooks are not queued.
    assert server.post("/v1/observe", {"hook": "on_node_start", "event": {"node_name": "n", "run_id": "r1"}}) == {
        "observed": "unobserved"}
    # A decision of the run waits for the run's observations, then answers.
    steer = server.post("/v1/steering", {"event": {"run_id": "r1", "tool_name": "forbidden", "call_id": "c", "args": {}}})
    assert steer["action"] == "skip" and steer["content"] == "no", steer
    ok = server.post("/v1/steering", {"event": {"run_id": "r1", "tool_name": "search", "call_id": "c2", "args": {}}})
    assert ok is None, ok  # proceed
    deadline = time.monotonic() + 120
    while metric(server.text("/metrics"), "observe_faults_total") < len(events) and time.monotonic() < deadline:
        time.sleep(0.2)
    text = server.text("/metrics")
    assert metric(text, "observe_faults_total") == len(events)
    assert metric(text, "observations_total") == len(events)
    logged = "".join(server.log)
    hook = "onLlmEnd" if lang == "js" else "on_llm_end"
    assert f"{hook}" in logged and "exploded on r1" in logged, logged[-4000:]


# Every lifecycle event with every field, as `POST /v1/observe` takes it.
EVERY_EVENT: dict[str, dict[str, Any]] = {
    "on_agent_start": {"query": "Hé 😀?", "run_id": "r1"},
    "on_agent_end": {"run_id": "r1", "final_response": "done", "duration_ms": 12.5, "node_count": 3},
    "on_node_start": {"node_name": "react", "run_id": "r1"},
    "on_node_end": {"node_name": "react", "run_id": "r1", "duration_ms": 2.25},
    "on_node_error": {"node_name": "tools", "run_id": "r1", "error": "boom", "error_type": "ValueError"},
    "on_llm_start": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "run_id": "r1",
                     "system_prompt": "be brief", "node_name": "react", "turn_index": 2},
    "on_llm_pre_call": {"model": "m", "messages": [], "tools": [{"name": "search", "description": "d", "schema": {}}],
                        "run_id": "r1", "invocation_params": {"temperature": 0.5}, "node_name": "react"},
    "on_llm_end": {"model": "m", "output": "o", "usage": {"total_tokens": 42, "nested": {"a": [1, None]}},
                   "run_id": "r1", "node_name": "react", "pricing_unknown": True, "duration_ms": 3.5,
                   "started_at_utc": "2026-12-05T00:00:00Z", "iteration_index": 4, "turn_index": 1},
    "on_token_composition": {"system_prompt_tokens": 9007199254740993, "tool_definitions_tokens": 2,
                             "conversation_history_tokens": 3, "memory_context_tokens": 4, "run_id": "r1"},
    # The two events that carry no run.
    "on_user_correction": {"turn_id": "t1", "original_response": "a", "correction_text": "b",
                           "activation_log": {"k": [1]}, "tenant_id": "acme", "scope": {"org": "o"}},
    "on_procedure_selection": {"procedure_id": "p1", "action_tool": None, "pre_tool": "lookup",
                               "force_mode": "soft", "candidate_count": 2},
    "on_react_loop_end": {"run_id": "r1", "iteration_index": 7, "content_type": "str", "has_tool_calls": True,
                          "tool_call_count": 2, "termination_reason": "tool_calls_with_no_text"},
    "on_fabrication_detected": {"run_id": "r1", "mode": "observe", "action_taken": "observed",
                                "findings": [{"claim": "x", "confidence": 0.9}], "refuse_threshold": 0.8,
                                "max_finding_confidence": 0.9, "original_draft_preview": "draft",
                                "replacement_preview": None, "preview_truncated": False},
}


def snake(event: dict[str, Any]) -> dict[str, Any]:
    """An event as a guard kept it, keyed in snake_case (the TS SDK's fields are
    camelCase), its absent options (`null` in Python, left out in TS) dropped.
    Only the top level: JSON fields keep the keys they were sent with."""
    return {re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), k): v for k, v in event.items() if v is not None}


@pytest.fixture(scope="session")
def observe_all(toolgate_bin: Path) -> dict[str, Path]:
    return build_test_guards(
        toolgate_bin, "observe-all", {"js": GUARDS / "observe-all.ts", "python": GUARDS / "observe-all-py"},
    )


@pytest.mark.parametrize("lang", LANGS)
def test_every_lifecycle_event_reaches_its_hook_with_every_field(serving, observe_all, tmp_path, lang):
    dir = tmp_path / lang
    dir.mkdir()
    (dir / "observe-all.wasm").write_bytes(observe_all[lang].read_bytes())
    server = serving(dir)
    assert sorted(server.get("/v1/hooks")["hooks"]) == sorted(EVERY_EVENT)
    for hook, event in EVERY_EVENT.items():
        assert server.post("/v1/observe", {"hook": hook, "event": event}) == {"observed": "queued"}, hook
    decide = {"event": {"run_id": "r1", "tool_name": "t", "call_id": "c", "args": {}}}
    # The decision of run r1 waits for r1's events; the two without a run may come later.
    deadline = time.monotonic() + 120
    while True:
        seen = json.loads(server.post("/v1/steering", decide)["content"])
        if len(seen) == len(EVERY_EVENT) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert {hook: snake(e) for hook, e in seen.items()} == {hook: snake(e) for hook, e in EVERY_EVENT.items()}
