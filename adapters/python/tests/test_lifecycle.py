"""Lifecycle events through a real ``SymfonicAgent.run()``, over both transports.

The guards run in-process and in a real ``toolgate serve`` (the ``guards``
fixture of ``test_e2e``); the scripted model reports token usage, which
symfonic hands to ``on_llm_end``. What is shown:

- ``has_hook`` follows the loaded guards: with no guard that observes or
  answers the response seam, symfonic's ``has_hook`` is false for the
  optional lifecycle hooks and ``on_response_render`` and builds none of
  their events, and the handler sends nothing; after a reload that loads
  such guards, it is true and they are sent;
- ``token-budget`` cancels the first tool call after the run's budget is
  spent, with its exact content, and a new run starts from zero;
- an observing guard receives the very sequence of events (hook, run id,
  key fields) that a plain Python handler registered beside it records.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_kit import call, make_agent, say, spent
from langchain_core.messages import ToolMessage
from symfonic.core.callbacks import BaseCallbackHandler
from symfonic.core.callbacks.manager import CallbackManager
from symfonic.core.contracts import callbacks as contracts
from test_e2e import PII_ANSWER, REDACTED, Guards, StartGuards, guards, run_agent  # noqa: F401
from toolgate_server import plugin_dir, required_guest, rust_plugin

from toolgate_symfonic import REQUIRED_HOOKS, ToolgateHandler

#: The lifecycle hooks symfonic builds an event for only when ``has_hook``.
OPTIONAL_HOOKS = (
    "on_llm_pre_call",
    "on_user_correction",
    "on_procedure_selection",
    "on_react_loop_end",
    "on_fabrication_detected",
)
OVER_BUDGET = "Token budget of 100 exceeded. Answer with what you have."


def reload(g: Guards, handler: ToolgateHandler) -> None:
    """Makes the guards take the plugin directory as it is now."""
    if g.server is None:
        assert handler.host is not None
        handler.host.reload()
    else:
        response = httpx.post(f"{g.url}/v1/reload", json={}, timeout=120.0, trust_env=False)
        assert response.status_code == 200, response.text


def tool_messages(transcript: Any) -> dict[str, ToolMessage]:
    return {
        m.tool_call_id: m for turn in transcript.turns for m in turn if isinstance(m, ToolMessage)
    }


def test_has_hook_follows_the_loaded_guards(
    guards: StartGuards, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = guards("sql-guard")
    asked: list[tuple[str, bool]] = []
    real_has_hook = CallbackManager.has_hook

    def has_hook(self: CallbackManager, name: str) -> bool:
        answer = real_has_hook(self, name)
        asked.append((name, answer))
        return answer

    monkeypatch.setattr(CallbackManager, "has_hook", has_hook)
    built: Counter[str] = Counter()
    for cls in (contracts.LLMPreCallEvent, contracts.ResponseRenderEvent):
        real_init = cls.__init__

        def counting_init(self: Any, *a: Any, _init: Any = real_init, **kw: Any) -> None:
            built[type(self).__name__] += 1
            _init(self, *a, **kw)

        monkeypatch.setattr(cls, "__init__", counting_init)

    def script() -> list[Any]:
        return [
            spent(call("list_tables", "c1"), 10, 5),
            spent(say(PII_ANSWER), 10, 5),
        ]

    handler = g.handler(hooks_refresh=0.0)
    agent, _ = make_agent(script())
    assert run_agent(agent, handler).final_response == PII_ANSWER
    for hook in OPTIONAL_HOOKS + ("on_response_render",):
        assert not hasattr(handler, hook), hook
    assert ("on_llm_pre_call", False) in asked and ("on_response_render", False) in asked
    assert not any(answer for name, answer in asked if name in OPTIONAL_HOOKS)
    assert not any(answer for name, answer in asked if name == "on_response_render")
    assert built == {}, "no optional event built"
    # The required hooks are there (symfonic warns about a handler without
    # them) but send nothing.
    assert all(hasattr(handler, hook) for hook in REQUIRED_HOOKS)
    assert handler.calls["observe"] == 0 and handler.calls["response"] == 0
    assert handler.wanted_hooks() == frozenset()

    # Load an observer of every hook and a response guard, then reload.
    plugin_dir(
        g.plugins,
        {"observer.wasm": required_guest("observer"), "pii-redact.wasm": rust_plugin("pii-redact")},
    )
    reload(g, handler)
    asked.clear()
    agent, _ = make_agent(script())
    assert run_agent(agent, handler).final_response == REDACTED
    assert ("on_llm_pre_call", True) in asked and ("on_response_render", True) in asked
    assert built["LLMPreCallEvent"] == 2 and built["ResponseRenderEvent"] == 1
    assert handler.wanted_hooks() == frozenset(REQUIRED_HOOKS) | frozenset(OPTIONAL_HOOKS)
    # Every event of the run was sent: on_agent_start, two model turns
    # (start, pre-call, end each), the nodes, on_agent_end.
    assert handler.calls["observe"] >= 8
    assert handler.calls["response"] == 1
    assert handler.failures == {}


def test_token_budget_cancels_the_first_tool_call_after_the_budget(
    guards: StartGuards, tmp_path: Path
) -> None:
    manifest = tmp_path / "budget.toml"
    manifest.write_text(
        '[[plugin]]\npath = "token-budget.wasm"\n[plugin.config]\nmax_tokens = 100\n'
    )
    g = guards(extra={"token-budget.wasm": rust_plugin("token-budget"), "toolgate.toml": manifest})
    agent, t = make_agent(
        [
            # Run 1: 50 tokens, the call runs; 60 more (110), the next is cancelled.
            spent(call("run_query", "a1", sql="SELECT 1"), 30, 20),
            spent(call("run_query", "a2", sql="SELECT 2"), 40, 20),
            spent(say("over budget"), 5, 5),
            # Run 2 starts from zero: 50 tokens, the call runs.
            spent(call("run_query", "b1", sql="SELECT 3"), 30, 20),
            spent(say("done"), 5, 5),
        ]
    )
    handler = g.handler()

    async def two_runs() -> None:
        try:
            await agent.run("first", callbacks=[handler])
            await agent.run("second", callbacks=[handler])
        finally:
            await handler.aclose()

    asyncio.run(two_runs())
    seen = tool_messages(t)
    assert seen["a2"].content == OVER_BUDGET
    assert seen["a2"].status == "success"  # is_error false: the model moves on
    assert t.ran == [("run_query", {"sql": "SELECT 1"}), ("run_query", {"sql": "SELECT 3"})]
    assert seen["a1"].content == "ok: SELECT 1" and seen["b1"].content == "ok: SELECT 3"
    assert handler.wanted_hooks() == {"on_llm_end"}
    manager = CallbackManager([handler])
    assert manager.has_hook("on_llm_end")
    assert not any(manager.has_hook(hook) for hook in OPTIONAL_HOOKS + ("on_response_render",))
    # Only on_llm_end is sent: one per model turn.
    assert handler.calls["observe"] == 5
    assert handler.failures == {}


class Recorder(BaseCallbackHandler):
    """A plain Python handler: records each lifecycle event of a run as the
    ``observer`` test guest does with ``detail`` (hook, run id, key fields),
    and each steering consultation as ``("steer", call_id)``."""

    def __init__(self) -> None:
        self.log: list[Any] = []

    def _add(self, hook: str, *fields: Any) -> None:
        self.log.append(f"{hook}({';'.join(str(f) for f in fields)})")

    async def on_agent_start(self, e: Any) -> None:
        self._add("on_agent_start", e.run_id, e.query)

    async def on_agent_end(self, e: Any) -> None:
        self._add("on_agent_end", e.run_id, e.final_response or "")

    async def on_node_start(self, e: Any) -> None:
        self._add("on_node_start", e.run_id, e.node_name)

    async def on_node_end(self, e: Any) -> None:
        self._add("on_node_end", e.run_id, e.node_name)

    async def on_node_error(self, e: Any) -> None:
        self._add("on_node_error", e.run_id, e.node_name, e.error_type)

    async def on_llm_start(self, e: Any) -> None:
        # A negative index goes on the wire as 0 (the contract's is unsigned).
        self._add("on_llm_start", e.run_id, e.model, max(e.turn_index, 0))

    async def on_llm_pre_call(self, e: Any) -> None:
        self._add("on_llm_pre_call", e.run_id, e.model, len(e.tools))

    async def on_llm_end(self, e: Any) -> None:
        usage = e.usage
        self._add(
            "on_llm_end",
            e.run_id,
            e.model,
            usage.get("input_tokens", "-"),
            usage.get("output_tokens", "-"),
        )

    async def on_token_composition(self, e: Any) -> None:
        self._add("on_token_composition", e.run_id, e.system_prompt_tokens)

    async def on_react_loop_end(self, e: Any) -> None:
        self._add("on_react_loop_end", e.run_id, e.termination_reason)

    async def on_fabrication_detected(self, e: Any) -> None:
        self._add("on_fabrication_detected", e.run_id, e.action_taken)

    async def on_before_tool_call(self, event: Any, state: Any) -> None:
        self.log.append(("steer", event.call_id))
        return None

    def before(self, call_id: str) -> list[str]:
        """The events recorded before the steering of ``call_id``."""
        return [e for e in self.log[: self.log.index(("steer", call_id))] if isinstance(e, str)]


def test_an_observer_sees_what_a_python_handler_beside_it_records(
    guards: StartGuards, tmp_path: Path
) -> None:
    manifest = tmp_path / "observer.toml"
    manifest.write_text('[[plugin]]\npath = "observer.wasm"\n[plugin.config]\ndetail = true\n')
    g = guards(extra={"observer.wasm": required_guest("observer"), "toolgate.toml": manifest})
    # The observer cancels every tool call with what the run's observations
    # left in its state: "seen=N hooks=<event>,<event>,...". Two runs under
    # one run id, so the second one's call also reads the first run's end.
    agent, t = make_agent(
        [
            spent(call("list_tables", "c1"), 12, 5),
            spent(say("first done"), 7, 3),
            spent(call("list_tables", "c2"), 20, 8),
            spent(say("second done"), 1, 1),
        ]
    )
    recorder = Recorder()
    handler = g.handler()

    async def two_runs() -> None:
        try:
            for query in ("first question", "second question"):
                await agent.run(query, callbacks=[recorder, handler], run_id="obs-run")
        finally:
            await handler.aclose()

    asyncio.run(two_runs())
    seen = tool_messages(t)
    for call_id in ("c1", "c2"):
        expected = recorder.before(call_id)
        assert seen[call_id].content == f"seen={len(expected)} hooks={','.join(expected)}"
    whole_first_run = recorder.before("c2")
    assert "on_agent_end(obs-run;first done)" in whole_first_run
    assert any(e.startswith("on_llm_end(obs-run;") and e.endswith(";12;5)") for e in whole_first_run)
    assert any(e.startswith("on_llm_pre_call(obs-run;") for e in whole_first_run)
    assert t.ran == []
    assert handler.failures == {}


def test_every_symfonic_event_converts_to_what_the_host_takes(tmp_path: Path) -> None:
    """Each of symfonic's thirteen event classes, as symfonic builds them
    (LangChain messages, a tenant scope, -1 indexes), goes through
    ``lifecycle_event`` into ``Host.observe`` unrefused."""
    from agent_kit import scope
    from langchain_core.messages import HumanMessage, SystemMessage

    from toolgate import Host
    from toolgate_symfonic import LIFECYCLE_FIELDS, lifecycle_event

    plugins = plugin_dir(tmp_path / "plugins", {"observer.wasm": required_guest("observer")})
    host = Host(plugins, watch=False, max_instances=8)
    messages = [SystemMessage("be brief"), HumanMessage("hi"), call("list_tables", "c1")]
    events = {
        "on_agent_start": contracts.AgentStartEvent(query="q", run_id="r"),
        "on_agent_end": contracts.AgentEndEvent(
            run_id="r", final_response=None, duration_ms=1.5, node_count=None
        ),
        "on_node_start": contracts.NodeStartEvent(node_name="react", run_id="r"),
        "on_node_end": contracts.NodeEndEvent(node_name="react", run_id="r", duration_ms=2.0),
        "on_node_error": contracts.NodeErrorEvent(
            node_name="tools", run_id="r", error="boom", error_type="ValueError"
        ),
        "on_llm_start": contracts.LLMStartEvent(
            model="m", messages=messages, run_id="r", turn_index=-1
        ),
        "on_llm_pre_call": contracts.LLMPreCallEvent(
            model="m",
            messages=messages,
            tools=[{"name": "t", "description": "d", "schema": {"type": "object"}}],
            run_id="r",
        ),
        "on_llm_end": contracts.LLMEndEvent(
            model="m", output="o", usage={"input_tokens": 3, "output_tokens": 2},
            run_id="r", iteration_index=-1,
        ),
        "on_token_composition": contracts.TokenCompositionEvent(system_prompt_tokens=7, run_id="r"),
        "on_user_correction": contracts.UserCorrectionEvent(
            turn_id="t", original_response="a", correction_text="b",
            activation_log={"k": [1]}, tenant_id="acme", scope=scope("acme"),
        ),
        "on_procedure_selection": contracts.ProcedureSelectionEvent(
            procedure_id=None, action_tool="x", pre_tool="y", force_mode="soft", candidate_count=2
        ),
        "on_react_loop_end": contracts.ReactLoopEndEvent(
            run_id="r", iteration_index=3, content_type="str", has_tool_calls=False,
            tool_call_count=0, termination_reason="no_content_no_tool_calls",
        ),
        "on_fabrication_detected": contracts.FabricationDetectedEvent(
            run_id="r", mode="observe", action_taken="observed", findings=[{"claim": "x"}],
            refuse_threshold=0.8, max_finding_confidence=0.5, original_draft_preview="d",
            replacement_preview=None, preview_truncated=False,
        ),
    }
    assert set(events) == set(LIFECYCLE_FIELDS)
    for hook, event in events.items():
        assert host.observe(hook, lifecycle_event(hook, event)) == "queued", hook
    llm_start = lifecycle_event("on_llm_start", events["on_llm_start"])
    assert llm_start["turn_index"] == 0
    assert llm_start["messages"][0] == {"type": "system", "content": "be brief"}
    assert llm_start["messages"][2]["tool_calls"][0]["name"] == "list_tables"
    correction = lifecycle_event("on_user_correction", events["on_user_correction"])
    assert correction["scope"]["tenant_id"] == "acme"
