"""Lifecycle events in Go guards, behind a real ``toolgate serve``.

- ``tests/langs/guards/observe-go`` observes all thirteen hooks (one
  ``observe.Handle``) and keeps what it saw in state; its steering answers
  with it. Every field of every event, sent to ``POST /v1/observe``, comes
  back exactly (the SDK's hand-written lifting of the ``lifecycle-event``
  variant); a run's events arrive in order before its next decision.
- Scripted to panic, spin or blow its state budget on every event, each
  observation is a fault the host counts (``toolgate_observe_faults_total``)
  and skips; decisions still answer.
- ``plugins/go/token-budget`` decides a run's calls as the Rust one does:
  proceed under the budget, cancel every call and hide every tool once the
  run's ``on_llm_end`` usage reaches ``max_tokens``, a new run from zero;
  its case file passes under ``toolgate test``.

The observe guard is built with ``toolgate build`` into
``build/test-guards/go/`` (``conftest.build_test_guards``); token-budget
comes from ``scripts/build-plugins go rust``.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, Serving, build_test_guards, steering_event

GUARDS = REPO / "tests/langs/guards"
RUN = "run-1"
# A Go component's first instantiation on a busy machine can outlast the
# load probe's default cap: these tests are about what the guard sees.
PATIENT = ("--probe-timeout-ms", "600000")

# One event of every hook, every field given (the WIT record's, in
# symfonic's names), in the order a run would send them.
EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("on_agent_start", {"query": "Hé \U0001f600 where?", "run_id": RUN}),
    ("on_node_start", {"node_name": "react", "run_id": RUN}),
    ("on_token_composition", {
        "system_prompt_tokens": 3, "tool_definitions_tokens": 4,
        "conversation_history_tokens": 5, "memory_context_tokens": 18446744073709551615,
        "run_id": RUN,
    }),
    ("on_llm_start", {
        "model": "m-1", "messages": [{"role": "user", "content": "q"}], "run_id": RUN,
        "system_prompt": "be brief", "node_name": "react", "turn_index": 2,
    }),
    ("on_llm_pre_call", {
        "model": "m-1", "messages": [{"role": "system"}], "run_id": RUN,
        "tools": [{"name": "search", "description": "d", "schema": {"type": "object"}}],
        "invocation_params": {"temperature": 0.5}, "node_name": "react",
    }),
    ("on_llm_end", {
        "model": "m-1", "output": "o", "usage": {"total_tokens": 12345678901234, "input_tokens": 1},
        "run_id": RUN, "node_name": "react", "pricing_unknown": True, "duration_ms": 12.25,
        "started_at_utc": "2026-01-02T03:04:05Z", "iteration_index": 4, "turn_index": 4294967295,
    }),
    ("on_procedure_selection", {
        "procedure_id": None, "action_tool": "send_email", "pre_tool": "lookup",
        "force_mode": "soft", "candidate_count": 3,
    }),
    ("on_node_error", {"node_name": "tools", "run_id": RUN, "error": "boom", "error_type": "ValueError"}),
    ("on_node_end", {"node_name": "react", "run_id": RUN, "duration_ms": 1.5}),
    ("on_react_loop_end", {
        "run_id": RUN, "iteration_index": 7, "content_type": "list", "has_tool_calls": True,
        "tool_call_count": 2, "termination_reason": "tool_calls_with_no_text",
    }),
    ("on_fabrication_detected", {
        "run_id": RUN, "mode": "refuse", "action_taken": "refuse_replaced",
        "findings": [{"claim": "x", "confidence": 0.9}], "refuse_threshold": 0.75,
        "max_finding_confidence": 0.9, "original_draft_preview": "draft",
        "replacement_preview": "replaced", "preview_truncated": True,
    }),
    ("on_user_correction", {
        "turn_id": "t-1", "original_response": "a", "correction_text": "no, b",
        "activation_log": {"skills": ["s"]}, "tenant_id": "acme", "scope": {"org": "o"},
    }),
    ("on_agent_end", {"run_id": RUN, "final_response": "done \u00e9", "duration_ms": 99.0, "node_count": 4}),
]
# on_user_correction and on_procedure_selection carry no run id: the empty run's.
IN_RUN = [hook for hook, e in EVENTS if "run_id" in e]


@pytest.fixture(scope="session")
def observer(toolgate_bin: Path) -> Path:
    return build_test_guards(toolgate_bin, "observe", {"go": GUARDS / "observe-go"})["go"]


def plugin_dir(tmp: Path, name: str, wasm: Path, manifest: str) -> Path:
    """A plugin directory holding `wasm` as `<name>.wasm`, with its manifest lines."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / f"{name}.wasm").write_bytes(wasm.read_bytes())
    (tmp / "toolgate.toml").write_text(f'[[plugin]]\npath = "{name}.wasm"\n{manifest}\n')
    return tmp


def observe(server: Serving, hook: str, event: dict[str, Any]) -> str:
    status, body = server.send("/v1/observe", {"hook": hook, "event": event})
    assert status == 202, body
    return body["observed"]


def steer(server: Serving, run: str) -> Any:
    status, body = server.send("/v1/steering", {"event": {**steering_event("search", {}), "run_id": run}})
    assert status == 200, body
    return body


def test_every_field_of_every_event_reaches_the_go_observer_in_order(observer, serving, tmp_path):
    server = serving(plugin_dir(tmp_path, "observe", observer, ""), *PATIENT)
    hooks = json.loads(server.text("/v1/hooks"))["hooks"]
    assert sorted(hooks) == sorted(hook for hook, _ in EVENTS), "its handlers are its subscriptions"
    for hook, event in EVENTS:
        assert observe(server, hook, event) == "queued"
    # At once: the decision waits for the observations queued before it.
    answer = steer(server, RUN)
    assert answer["action"] == "skip", answer
    said = json.loads(answer["content"])
    assert said["seen"] == len(IN_RUN)
    assert said["hooks"] == ",".join(IN_RUN), "the run's events in the order they were sent"
    assert said["events"] == dict(EVENTS), "every field, as it was sent"
    other = json.loads(steer(server, "run-2")["content"])
    assert (other["seen"], other["hooks"]) == (0, ""), "another run saw none of them"


@pytest.mark.parametrize("attack", ["trap", "spin", "blow"])
def test_a_hostile_go_observer_faults_on_every_event_and_decisions_still_answer(
    observer, serving, tmp_path, attack
):
    # spin: a short deadline, so each call ends soon.
    server = serving(plugin_dir(tmp_path, "observe", observer,
                                f"timeout_ms = 50\n[plugin.config]\n{attack} = true"), *PATIENT)
    # Four: a fifth fault within the window would quarantine the guard
    # (docs/tenants.md, "[quarantine]"), and its steering would not run.
    faults = 4
    for _ in range(faults):
        assert observe(server, "on_llm_end", {"model": "m", "output": "o", "usage": {}, "run_id": RUN}) == "queued"
    said = json.loads(steer(server, RUN)["content"])
    assert said == {"seen": 0, "hooks": "", "events": {}}, "a faulting observation leaves nothing"
    until = time.monotonic() + 120
    while True:
        metrics = server.text("/metrics")
        if f"toolgate_observe_faults_total {faults}" in metrics:
            break
        assert time.monotonic() < until, metrics
        time.sleep(0.05)
    assert f"toolgate_observations_total {faults}" in metrics
    assert "lifecycle observation faulted" in "".join(server.log)
    # Still serving: the next decision answers.
    assert json.loads(steer(server, "run-2")["content"])["seen"] == 0


def llm_end(run: str, usage: dict[str, int]) -> dict[str, Any]:
    return {"model": "m", "output": "o", "usage": usage, "run_id": run}


def routing(server: Serving, run: str) -> Any:
    status, body = server.send("/v1/routing", {"event": {
        "run_id": run, "mode": "enforce", "intent_label": "i", "total_tools": 2,
        "narrowed_tool_names": ["search", "send_email"],
    }})
    assert status == 200, body
    return body


CANCEL = {"action": "skip", "content": "Token budget of 100 exceeded. Answer with what you have.", "is_error": False}


@pytest.mark.parametrize("lang", ["go", "rust"])
def test_token_budget_cancels_the_very_next_call_and_a_new_run_starts_from_zero(
    plugins_root, serving, tmp_path, lang
):
    wasm = plugins_root / lang / "token-budget.wasm"
    if not wasm.is_file():
        pytest.fail(f"{wasm} is missing; scripts/build-plugins {lang}")
    server = serving(plugin_dir(tmp_path, "token-budget", wasm, "[plugin.config]\nmax_tokens = 100"), *PATIENT)
    assert json.loads(server.text("/v1/hooks"))["hooks"] == ["on_llm_end"]
    observe(server, "on_llm_end", llm_end("r1", {"input_tokens": 50, "output_tokens": 10}))
    under = steer(server, "r1")
    for tokens in ({"total_tokens": 20}, {"prompt_tokens": 15, "completion_tokens": 5}):
        observe(server, "on_llm_end", llm_end("r1", tokens))
    # No sleep: the very next decision sees both.
    over = steer(server, "r1")
    hidden = routing(server, "r1")
    fresh = steer(server, "r2")
    assert under is None, "60 of 100: the call proceeds"
    assert over == CANCEL
    assert hidden == [], "routing hides every tool"
    assert fresh is None, "a new run starts from zero"
    assert routing(server, "r2") == ["search", "send_email"]


def test_go_token_budget_case_file_passes(toolgate_bin, plugins_root):
    if not (plugins_root / "go/token-budget.wasm").is_file():
        pytest.fail("build/plugins/go/token-budget.wasm is missing; scripts/build-plugins go")
    proc = subprocess.run(
        [str(toolgate_bin), "test", str(REPO / "plugins/go/token-budget")],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.endswith("6 passed, 0 failed\n"), proc.stdout
