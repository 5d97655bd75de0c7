"""The adapter against the real symfonic agent, a real ``toolgate serve``
and, where the real server cannot do what a test needs, a recording stub.

Against a real ``toolgate serve`` (test guests of ``tests/guests`` and the
Rust example guards): connection reuse, timeouts and the per-call budget
(the slow guard is the ``hostile`` test guest spinning until its deadline),
a refused token (401), and big integers and key order through HTTP into a
guard and back. The verdict scenarios over real guards are in
``test_e2e.py``.

What stays on the stub (``recording_service``), and why:

- what the adapter puts on the wire (paths, headers, the exact event and
  state bodies): only a recorder sees the request itself;
- answers ``toolgate serve`` never gives: a 500, a 200 whose body is not a
  verdict (``42``, an empty or unknown skip, text that is not JSON), a
  routing answer naming tools that were not offered, a rewrite to a tool
  that is not available (the host drops those itself); the adapter must
  survive them, and the circuit breaker is opened by them;
- routing answers scripted per test next to the request they answer (what
  the palette resolver applies, checked against what was sent). A steering
  guard's verdict, a rewrite and a cancel reaching symfonic from real
  guards are in ``test_e2e.py`` (their stub copies were removed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_kit import call, calls, make_agent, say, scope
from toolgate_server import SetupError, ToolgateServer, plugin_dir, required_guest, rust_plugin
from symfonic.core.contracts.callbacks import (
    BeforeToolCallEvent,
    ToolCallDispatchEvent,
    ToolResultCallbackEvent,
    ToolRoutingDecisionEvent,
)

from toolgate_symfonic import (
    FAIL_CLOSED_ANSWER,
    FAIL_CLOSED_MESSAGE,
    STATE_KEYS,
    ToolgateHandler,
    json_safe,
)

ALL_TOOLS = ["run_query", "send_email", "delete_user", "list_tables", "loop", "admin_purge"]
ROUTING_KEYWORDS = {"run_query": ["query"], "send_email": ["email"], "delete_user": ["delete"]}
ROUTED_QUERY = "run the query and email the result"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def drive(agent: Any, handler: ToolgateHandler, query: str = "q", **kw: Any) -> Any:
    try:
        return await agent.run(query, callbacks=[handler], **kw)
    finally:
        await handler.aclose()


# Generous: a loaded machine shows up as a slow test, never as a failure.
TIMEOUT = 30.0
# The hostile guard's deadline when it must outlast the adapter's timeout.
SPIN_MS = 60_000
# The per-call budget when one hook of the call must be answered in it.
BUDGET = 10.0

StartServer = Callable[..., ToolgateServer]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[StartServer]:
    """Starts a real ``toolgate serve`` over the given components (file name
    -> path); ``slow_ms`` lets every guard spin that long, unmetered by fuel."""
    servers: list[ToolgateServer] = []

    def start(components: dict[str, Path], slow_ms: int | None = None) -> ToolgateServer:
        problem = None
        try:
            plugins = plugin_dir(tmp_path / f"plugins-{len(servers)}", components)
            if slow_ms is not None:
                fuel = 2**63 - 1
                lines = [f"[ceilings]\ntimeout_ms = {slow_ms}\nfuel = {fuel}\n"]
                lines += [
                    f'[[plugin]]\npath = "{name}"\ntimeout_ms = {slow_ms}\nfuel = {fuel}\n'
                    for name in components
                ]
                (plugins / "toolgate.toml").write_text("\n".join(lines))
            server = ToolgateServer(plugins, tmp_path / f"toolgate-{len(servers)}.log")
            servers.append(server)
            return ready(server.start())
        except SetupError as exc:
            problem = str(exc)
        pytest.fail(problem, pytrace=False)

    yield start
    for server in servers:
        server.stop()


def ready(server: ToolgateServer, patience: float = 600.0) -> ToolgateServer:
    """Waits until the server has loaded its plugins (``GET /readyz`` is 200):
    a hook's time is then the guard's, not the first compile's."""
    import time

    import httpx

    deadline = time.monotonic() + patience
    while httpx.get(f"{server.url}/readyz", timeout=30.0, trust_env=False).status_code != 200:
        if time.monotonic() > deadline:
            raise SetupError(f"toolgate serve was not ready within {patience:g}s; log:\n{server.log()}")
        time.sleep(0.05)
    return server


# ---------------------------------------------------------------------------
# Wire format
# ---------------------------------------------------------------------------


def test_events_and_state_on_the_wire(service: Any) -> None:
    agent, t = make_agent([call("run_query", "c1", sql="SELECT 1 WHERE a"), say("done")])
    handler = ToolgateHandler(url=service.url)
    resp = run(drive(agent, handler, "count the users", scope=scope("acme")))
    assert resp.final_response == "done"
    assert [r["seam"] for r in service.requests] == ["rewrite", "steering", "result", "response"]
    # Every answer comes with its trace, for the guards' faults.
    assert {r["path"] for r in service.requests} == {
        "/v1/rewrite?trace=1",
        "/v1/steering?trace=1",
        "/v1/result?trace=1",
        "/v1/response?trace=1",
    }

    rewrite, steering, result, response = (r["body"] for r in service.requests)
    run_id = steering["state"]["run_id"]
    assert isinstance(run_id, str) and run_id
    assert steering["event"] == {
        "run_id": run_id,
        "tool_name": "run_query",
        "call_id": "c1",
        "args": {"sql": "SELECT 1 WHERE a"},
    }
    assert rewrite["event"] == {
        "run_id": run_id,
        "iteration_index": 0,
        "node_name": "react",
        "call_id": "c1",
        "tool_name": "run_query",
        "args": {"sql": "SELECT 1 WHERE a"},
        "available_tools": ALL_TOOLS,
    }
    assert result["event"] == {
        "run_id": run_id,
        "tool_name": "run_query",
        "result": "ok: SELECT 1 WHERE a",
        "call_id": "c1",
        "deferred": False,
        "is_error": False,
    }
    # symfonic's engine sends iteration_index=-1 ("not from the React
    # loop"): the guards receive it as it is.
    assert response["event"] == {
        "run_id": run_id,
        "iteration_index": -1,
        "model": response["event"]["model"],
        "node_name": "react",
        "original_content": "done",
        "content": "done",
    }
    assert isinstance(response["event"]["model"], str)
    expected_state = {
        "run_id": run_id,
        "tenant_id": "acme",
        "sub_tenant_id": None,
        "query": "count the users",
        "allowed_tool_names": None,
        "tool_calls": [{"name": "run_query", "args": {"sql": "SELECT 1 WHERE a"}, "id": "c1"}],
    }
    assert set(expected_state) == set(STATE_KEYS)
    assert steering["state"] == expected_state
    # At the rewrite seam the turn's AI message is not in symfonic's state yet.
    assert rewrite["state"] == {**expected_state, "tool_calls": []}
    # The result seam has no state in symfonic; the run's is sent, minus calls.
    assert result["state"] == {**expected_state, "tool_calls": []}
    # The response seam gets the state symfonic hands it (its last turn has no calls).
    assert response["state"] == {**expected_state, "tool_calls": []}
    # The tenant defaults to the run's TenantScope.
    assert {r["body"].get("tenant") for r in service.requests} == {"acme"}
    assert t.ran == [("run_query", {"sql": "SELECT 1 WHERE a"})]
    assert handler.failures == {}


def test_no_tenant_field_without_a_scope(service: Any) -> None:
    agent, _ = make_agent([call("list_tables", "c1"), say("done")])
    run(drive(agent, ToolgateHandler(url=service.url)))
    assert service.requests
    assert all("tenant" not in r["body"] for r in service.requests)
    assert service.requests[1]["body"]["state"]["tenant_id"] is None


def test_token_and_fixed_tenant(service: Any) -> None:
    agent, _ = make_agent([call("list_tables", "c1"), say("done")])
    handler = ToolgateHandler(url=service.url, token="s3cret", tenant="globex")
    run(drive(agent, handler, scope=scope("acme")))
    assert len(service.requests) == 4  # rewrite, steering, result, response
    for r in service.requests:
        assert r["headers"]["Authorization"] == "Bearer s3cret"
        assert r["headers"]["Content-Type"] == "application/json"
        assert r["body"]["tenant"] == "globex"
        # The state still says which scope the run had.
        assert r["body"]["state"]["tenant_id"] == "acme"


def test_multi_call_turn_is_judged_per_call(service: Any) -> None:
    service.answers["steering"] = lambda b: (
        (200, {"action": "skip", "content": "no email today", "is_error": False})
        if b["event"]["tool_name"] == "send_email"
        else (200, None)
    )
    agent, t = make_agent(
        [
            calls(("send_email", "e1", {"to": "a@b.c"}), ("list_tables", "l1", {})),
            say("done"),
        ]
    )
    handler = ToolgateHandler(url=service.url)
    run(drive(agent, handler))
    steering = service.seam_requests("steering")
    assert [b["event"]["call_id"] for b in steering] == ["e1", "l1"]
    both = [{"name": "send_email", "args": {"to": "a@b.c"}, "id": "e1"},
            {"name": "list_tables", "args": {}, "id": "l1"}]
    assert all(b["state"]["tool_calls"] == both for b in steering)
    assert t.ran == [("list_tables", {})]
    assert t.tool_message("e1").status == "success"
    assert t.tool_message("e1").content == "no email today"
    assert t.tool_message("l1").content == "users, orders"
    # A skipped call produces no result event.
    assert [b["event"]["call_id"] for b in service.seam_requests("result")] == ["l1"]


def client_ports(server_url: str) -> set[int]:
    """The local ports of every TCP connection (in any state, TIME_WAIT
    included) this machine has to the server's port, from /proc/net/tcp."""
    port = int(server_url.rsplit(":", 1)[1])
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote = (int(a.split(":")[1], 16) for a in line.split()[1:3])
        if remote == port:
            ports.add(local)
    return ports


def decisions(server: ToolgateServer, seam: str = "") -> int:
    """How many decisions the server made (at ``seam``, else at all), from
    its /metrics."""
    import httpx

    text = httpx.get(f"{server.url}/metrics", timeout=30.0, trust_env=False).text
    prefix = "toolgate_decisions_total{" + (f'seam="{seam}"' if seam else "")
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines() if line.startswith(prefix))


def test_connections_are_reused(serve: StartServer) -> None:
    server = serve({"sql-guard.wasm": rust_plugin("sql-guard"), "query-limit.wasm": rust_plugin("query-limit")})
    before = client_ports(server.url)
    # Distinct tools: symfonic cuts a loop that repeats one tool name.
    script = [
        call("list_tables", "c1"),
        call("run_query", "c2", sql="SELECT 2 WHERE a"),
        call("loop", "c3", n=3),
        call("delete_user", "c4", user_id="u4"),
        call("send_email", "c5", to="x@y.z"),
        say("done"),
    ]
    agent, t = make_agent(script)
    handler = ToolgateHandler(url=server.url, timeout=TIMEOUT)
    run(drive(agent, handler))
    opened = client_ports(server.url) - before
    assert len(t.ran) == 5
    assert handler.failures == {}
    # Three hooks per call, all answered by the server, over one
    # connection (no response guard is loaded, so the handler has no
    # on_response_render and the run's answer is not sent).
    assert len(opened) == 1, opened
    assert decisions(server) == 15
    assert handler.calls["response"] == 0


# ---------------------------------------------------------------------------
# Verdicts reach symfonic
# ---------------------------------------------------------------------------


def test_rewrite_to_an_unknown_tool_is_dropped_by_symfonic(service: Any) -> None:
    service.answers["rewrite"] = lambda b: (200, {"tool_name": "format_disk", "args": {}})
    agent, t = make_agent([call("list_tables", "c1"), say("ok")])
    run(drive(agent, ToolgateHandler(url=service.url)))
    assert t.ran == [("list_tables", {})]


# ---------------------------------------------------------------------------
# Failures
# ---------------------------------------------------------------------------


def test_unreachable_service_fail_open(dead_url: str, caplog: Any) -> None:
    agent, t = make_agent([call("run_query", "c1", sql="DELETE FROM users"), say("ok")])
    handler = ToolgateHandler(url=dead_url, timeout=2.0)
    with caplog.at_level(logging.WARNING, logger="toolgate_symfonic"):
        run(drive(agent, handler))
    assert t.ran == [("run_query", {"sql": "DELETE FROM users"})]
    assert handler.failures == {"rewrite": 1, "steering": 1, "result": 1, "response": 1}
    logged = [r.getMessage() for r in caplog.records if r.name == "toolgate_symfonic"]
    assert any("steering call to" in m and "letting the call proceed" in m for m in logged), logged
    assert any("ConnectionRefusedError" in m for m in logged), logged


def test_unreachable_service_fail_closed(dead_url: str) -> None:
    agent, t = make_agent([call("run_query", "c1", sql="SELECT 1 WHERE a"), say("ok")])
    handler = ToolgateHandler(url=dead_url, failure_policy="fail_closed")
    run(drive(agent, handler))
    assert t.ran == []
    msg = t.tool_message("c1")
    assert (msg.status, msg.content) == ("error", FAIL_CLOSED_MESSAGE)
    assert handler.failures == {"rewrite": 1, "steering": 1, "response": 1}


@pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
def test_timeout_is_a_failure(serve: StartServer, policy: str, caplog: Any) -> None:
    # A guard that spins on `loop` calls, at every seam, far longer than the
    # adapter waits: the adapter's timeout, not the guard's deadline, ends
    # each hook.
    server = serve({"hostile.wasm": required_guest("hostile")}, slow_ms=SPIN_MS)
    agent, t = make_agent([call("loop", "c1", n=1), say("ok")])
    handler = ToolgateHandler(url=server.url, timeout=0.3, failure_policy=policy)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="toolgate_symfonic"):
        run(drive(agent, handler))
    # Given up on by the adapter, not answered: no guard fault came back,
    # and the first hook failed for want of an answer within its 0.3 s.
    assert handler.guard_faults == {}
    logged = [r.getMessage() for r in caplog.records if r.name == "toolgate_symfonic"]
    assert "rewrite call" in logged[0] and "no answer within 0.3s" in logged[0], logged
    if policy == "fail_open":
        # The tool ran; its result hook found the call's budget spent.
        assert handler.failures == {"rewrite": 1, "steering": 1, "result": 1}
        assert t.ran == [("loop", {"n": 1})]
    else:
        assert handler.failures == {"rewrite": 1, "steering": 1}
        assert t.ran == []
        assert t.tool_message("c1").content == FAIL_CLOSED_MESSAGE


@pytest.mark.parametrize(
    "answer",
    [
        (500, {"error": "boom"}),
        (401, {"error": "missing token"}),
        (200, 42),
        (200, {"action": "skip", "content": ""}),
        (200, {"action": "explode"}),
        (200, {"action": "skip", "content": "x", "is_error": "yes"}),
        (200, b"not json"),
    ],
)
def test_bad_answers_follow_the_policy(service: Any, answer: tuple[int, Any]) -> None:
    service.answers["steering"] = lambda b: answer
    service.answers["rewrite"] = lambda b: answer
    for policy, ran in (("fail_open", True), ("fail_closed", False)):
        agent, t = make_agent([call("list_tables", "c1"), say("ok")])
        handler = ToolgateHandler(url=service.url, failure_policy=policy)  # type: ignore[arg-type]
        run(drive(agent, handler))
        assert handler.failures["steering"] == 1
        # A failed rewrite never rewrites, whatever the policy.
        assert handler.failures["rewrite"] == 1
        assert (t.ran == [("list_tables", {})]) is ran


def test_hooks_never_raise_on_odd_input(dead_url: str) -> None:
    handler = ToolgateHandler(url=dead_url, failure_policy="fail_closed", timeout=1.0)

    async def go() -> list[Any]:
        out = [
            await handler.on_before_tool_call(
                BeforeToolCallEvent(run_id="r", tool_name="t", call_id="c", args=None),  # type: ignore[arg-type]
                None,  # type: ignore[arg-type]
            ),
            await handler.on_tool_call_dispatch(
                ToolCallDispatchEvent(
                    run_id="r", iteration_index=0, node_name="react", call_id="c",
                    tool_name="t", args={"x": object()}, available_tools=("t",),
                ),
                {"messages": "not a list"},
            ),
            await handler.on_tool_routing_decision(
                ToolRoutingDecisionEvent(
                    run_id="r", mode="enforce", intent_label="action",
                    total_tools=2, narrowed_tool_names=["t"],
                )
            ),
            await handler.on_tool_result(
                ToolResultCallbackEvent(run_id="r", tool_name="t", result=object(), call_id="c")
            ),
            await handler.on_before_tool_call(object(), {})  # type: ignore[arg-type]
        ]
        await handler.aclose()
        return out

    steer, rewrite, routing, result, odd = run(go())
    assert steer == {"action": "skip", "content": FAIL_CLOSED_MESSAGE, "is_error": True}
    assert odd == steer
    assert (rewrite, routing, result) == (None, None, None)
    assert handler.visible_tools("r") == []


def test_json_safe_copies_and_sanitises() -> None:
    inner = {"b": [1, 2]}
    value = {"a": inner, "t": (1, "x"), 3: float("nan"), "o": object(), "f": 1.5}
    out = json_safe(value)
    assert out["a"] == inner and out["a"] is not inner and out["a"]["b"] is not inner["b"]
    assert out["t"] == [1, "x"]
    assert out["3"] is None
    assert out["o"].startswith("<object object")
    assert out["f"] == 1.5
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    depth, node = 0, json_safe(cyclic)
    while isinstance(node, list):
        node, depth = node[0], depth + 1
    assert isinstance(node, str) and depth <= 65
    cyclic_map: dict[str, Any] = {}
    cyclic_map["self"] = cyclic_map
    depth, node = 0, json_safe(cyclic_map)
    while isinstance(node, dict):
        node, depth = node["self"], depth + 1
    assert isinstance(node, str) and depth == 64
    assert not math.isnan(json_safe(1.0))

    class Name(str):
        pass

    name = Name("kept")
    assert json_safe(name) is name and json_safe([True])[0] is True


def test_restore_unchanged_puts_back_only_what_was_not_changed() -> None:
    import datetime

    from toolgate_symfonic._wire import restore_unchanged

    when = datetime.datetime(2024, 1, 2, 3, 4, 5)
    original = {"a": 1, "b": (1, 2), "c": float("nan"), "l": (when, 2), 7: {"x"}, "k": when}
    sent = json_safe(original)
    # 1 -> true is a change (JSON types compared strictly); so are the
    # second member of `l` and the dropped `k`; the rest is as sent.
    returned = {"7": ["x"], "a": True, "b": [1, 2], "c": None, "l": [str(when), 3], "new": 0}
    out = restore_unchanged(sent, original, returned)
    assert out["a"] is True
    assert out["b"] is original["b"] and out[7] is original[7] and math.isnan(out["c"])
    assert out["l"] == [when, 3] and out["l"][0] is when
    assert out["new"] == 0 and "k" not in out
    assert list(out) == [7, "a", "b", "c", "l", "new"]
    # A list whose length changed is the guard's, as it wrote it.
    assert restore_unchanged(sent, original, {"l": [str(when)]}) == {"l": [str(when)]}
    # Nothing changed: the original itself.
    assert restore_unchanged(sent, original, json_safe(original)) is original


def test_args_mutation_after_the_hook_does_not_leak(service: Any) -> None:
    seen: list[dict[str, Any]] = []

    def answer(body: dict[str, Any]) -> tuple[int, Any]:
        seen.append(body["event"]["args"])
        return 200, None

    service.answers["steering"] = answer
    handler = ToolgateHandler(url=service.url)
    args = {"sql": "SELECT 1", "opts": {"n": 1}}

    async def go() -> None:
        event = BeforeToolCallEvent(run_id="r", tool_name="run_query", call_id="c", args=args)
        assert await handler.on_before_tool_call(event, {"run_id": "r"}) is None
        await handler.aclose()

    run(go())
    assert seen == [{"sql": "SELECT 1", "opts": {"n": 1}}]
    assert args == {"sql": "SELECT 1", "opts": {"n": 1}}


def test_constructor_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="failure_policy"):
        ToolgateHandler(url="http://x", failure_policy="deny")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        ToolgateHandler(url="http://x", timeout=0)
    with pytest.raises(ValueError, match="max_runs"):
        ToolgateHandler(url="http://x", max_runs=0)


def test_runs_are_forgotten_oldest_first(service: Any) -> None:
    handler = ToolgateHandler(url=service.url, max_runs=2)

    async def go() -> None:
        for rid in ("r1", "r2", "r3"):
            await handler.on_tool_routing_decision(
                ToolRoutingDecisionEvent(
                    run_id=rid, mode="enforce", intent_label="action",
                    total_tools=3, narrowed_tool_names=["a", "b"],
                )
            )
        await handler.aclose()

    run(go())
    assert handler.visible_tools("r1") is None
    assert handler.visible_tools("r2") == ["a", "b"]
    assert handler.visible_tools("r3") == ["a", "b"]


# ---------------------------------------------------------------------------
# Routing through the palette resolver
# ---------------------------------------------------------------------------


def hide(*names: str) -> Any:
    return lambda b: (
        200,
        [n for n in b["event"]["narrowed_tool_names"] if n not in names],
    )


def test_routing_enforce_through_the_palette_resolver(service: Any) -> None:
    service.answers["routing"] = hide("send_email")
    agent, t = make_agent(
        [call("run_query", "c1", sql="SELECT 1 WHERE a"), say("done")],
        tool_routing_mode="enforce",
        trigger_keywords=ROUTING_KEYWORDS,
    )
    handler = ToolgateHandler(url=service.url)
    handler.install(agent)
    run(drive(agent, handler, ROUTED_QUERY, scope=scope("acme")))

    (routing,) = service.seam_requests("routing")
    run_id = routing["event"]["run_id"]
    assert routing["event"] == {
        "run_id": run_id,
        "mode": "enforce",
        "intent_label": "action",
        "total_tools": 6,
        "narrowed_tool_names": ["run_query", "send_email", "list_tables", "loop", "admin_purge"],
        "saved_tokens_estimate": routing["event"]["saved_tokens_estimate"],
        "tools": [
            {"name": "run_query", "description": "Run a SQL query against the customer database."},
            {"name": "send_email", "description": "Send an email to a customer."},
            {"name": "list_tables", "description": "List the database tables."},
            {"name": "loop", "description": "A harmless tool whose name a hostile guard reacts to."},
            {"name": "admin_purge", "description": "Purge a table (administrators only)."},
        ],
        "query": ROUTED_QUERY,
    }
    assert routing["event"]["saved_tokens_estimate"] > 0
    assert routing["tenant"] == "acme"
    assert routing["state"]["tenant_id"] == "acme" and routing["state"]["run_id"] == run_id
    # symfonic dropped delete_user; the guard hid send_email; both turns.
    assert t.bound == [["run_query", "list_tables", "loop", "admin_purge"]] * 2
    (rewrite,) = service.seam_requests("rewrite")
    assert rewrite["event"]["available_tools"] == ["run_query", "list_tables", "loop", "admin_purge"]
    assert handler.visible_tools(run_id) == ["run_query", "list_tables", "loop", "admin_purge"]
    assert handler.hidden_tools(run_id) == {"send_email"}


def test_routing_observe_hides_only_what_guards_hid(service: Any) -> None:
    service.answers["routing"] = hide("send_email")
    agent, t = make_agent(
        [say("done")], tool_routing_mode="observe", trigger_keywords=ROUTING_KEYWORDS
    )
    handler = ToolgateHandler(url=service.url)
    handler.install(agent)
    run(drive(agent, handler, ROUTED_QUERY))
    assert service.seam_requests("routing")[0]["event"]["mode"] == "observe"
    assert t.bound == [["run_query", "delete_user", "list_tables", "loop", "admin_purge"]]


def test_routing_without_resolver_is_observed_only(service: Any) -> None:
    service.answers["routing"] = hide("send_email")
    agent, t = make_agent(
        [say("done")], tool_routing_mode="enforce", trigger_keywords=ROUTING_KEYWORDS
    )
    handler = ToolgateHandler(url=service.url)
    run(drive(agent, handler, ROUTED_QUERY))
    (routing,) = service.seam_requests("routing")
    assert "tools" not in routing["event"] and "query" not in routing["event"]
    assert t.bound == [["run_query", "send_email", "list_tables", "loop", "admin_purge"]]
    assert handler.hidden_tools(routing["event"]["run_id"]) == {"send_email"}


def test_routing_guard_cannot_add_tools(service: Any) -> None:
    service.answers["routing"] = lambda b: (200, ["run_query", "delete_user", "format_disk"])
    agent, t = make_agent(
        [say("done")], tool_routing_mode="enforce", trigger_keywords=ROUTING_KEYWORDS
    )
    handler = ToolgateHandler(url=service.url)
    handler.install(agent)
    run(drive(agent, handler, ROUTED_QUERY))
    assert t.bound == [["run_query"]]


def test_always_route_consults_when_symfonic_routing_is_off(service: Any) -> None:
    service.answers["routing"] = hide("delete_user", "loop")
    agent, t = make_agent([call("list_tables", "c1"), say("done")])
    handler = ToolgateHandler(url=service.url)
    handler.install(agent, always_route=True)
    run(drive(agent, handler, "hello"))
    (routing,) = service.seam_requests("routing")
    assert routing["event"]["mode"] == "off"
    assert routing["event"]["narrowed_tool_names"] == ALL_TOOLS
    assert routing["event"]["query"] == "hello"
    assert t.bound == [["run_query", "send_email", "list_tables", "admin_purge"]] * 2


def test_routing_off_and_no_always_route_makes_no_call(service: Any) -> None:
    agent, t = make_agent([say("done")])
    handler = ToolgateHandler(url=service.url)
    handler.install(agent, always_route=False)
    run(drive(agent, handler))
    assert service.seam_requests("routing") == []
    assert t.bound == [ALL_TOOLS]


def test_routing_failure_fail_open_and_fail_closed(dead_url: str) -> None:
    for policy, bound in (("fail_open", [["run_query", "send_email", "list_tables", "loop", "admin_purge"]]),
                          ("fail_closed", [])):
        agent, t = make_agent(
            [say("done")], tool_routing_mode="enforce", trigger_keywords=ROUTING_KEYWORDS
        )
        handler = ToolgateHandler(url=dead_url, failure_policy=policy)  # type: ignore[arg-type]
        handler.install(agent)
        resp = run(drive(agent, handler, ROUTED_QUERY))
        # The answer could not be checked either: fail_closed withholds it.
        assert resp.final_response == ("done" if policy == "fail_open" else FAIL_CLOSED_ANSWER)
        assert handler.failures == {"routing": 1, "response": 1}
        # fail_closed binds no tool at all (symfonic skips bind_tools).
        assert t.bound == bound


def test_hidden_tool_named_anyway_still_runs_by_default(service: Any) -> None:
    # symfonic's palette only decides what the model is offered; LangGraph's
    # tool node still holds every registered tool.
    service.answers["routing"] = hide("send_email")
    agent, t = make_agent(
        [call("send_email", "e1", to="x@y.z"), say("done")],
        tool_routing_mode="enforce",
        trigger_keywords=ROUTING_KEYWORDS,
    )
    handler = ToolgateHandler(url=service.url)
    handler.install(agent)
    run(drive(agent, handler, ROUTED_QUERY))
    assert "send_email" not in t.bound[0]
    assert t.ran == [("send_email", {"to": "x@y.z", "body": ""})]


def test_routing_reaches_only_per_run_callbacks(service: Any) -> None:
    # symfonic dispatches the routing event to the run's callbacks only; a
    # handler registered on the agent's own CallbackManager never sees it.
    from symfonic.core.callbacks import CallbackManager

    service.answers["routing"] = hide("send_email")
    agent, t = make_agent(
        [call("list_tables", "l1"), say("done")],
        tool_routing_mode="enforce",
        trigger_keywords=ROUTING_KEYWORDS,
    )
    handler = ToolgateHandler(url=service.url)
    # always_route=False: rely on symfonic's routing event alone.
    handler.install(agent, always_route=False)
    agent._deps.get(CallbackManager).add(handler)

    async def go() -> None:
        try:
            await agent.run(ROUTED_QUERY)
        finally:
            await handler.aclose()

    run(go())
    assert service.seam_requests("routing") == []
    assert [r["seam"] for r in service.requests] == ["rewrite", "steering", "result", "response"]
    assert "send_email" in t.bound[0]


def test_deny_hidden_tools(service: Any) -> None:
    service.answers["routing"] = hide("send_email")
    agent, t = make_agent(
        [call("send_email", "e1", to="x@y.z"), say("done")],
        tool_routing_mode="enforce",
        trigger_keywords=ROUTING_KEYWORDS,
    )
    handler = ToolgateHandler(url=service.url, deny_hidden_tools=True)
    handler.install(agent)
    run(drive(agent, handler, ROUTED_QUERY))
    assert t.ran == []
    msg = t.tool_message("e1")
    assert msg.status == "error" and "send_email" in msg.content
    assert service.seam_requests("steering") == []


def test_install_keeps_role_tools(service: Any) -> None:
    from symfonic.agent import FrameworkConfig

    agent, t = make_agent([say("done")])
    agent._config = agent._config.model_copy(
        update={"role_tools": {"action": frozenset({"run_query", "send_email"})}}
    )
    assert isinstance(agent._config, FrameworkConfig)
    service.answers["routing"] = hide("send_email")
    handler = ToolgateHandler(url=service.url)
    handler.install(agent, always_route=True)
    run(drive(agent, handler))
    (routing,) = service.seam_requests("routing")
    assert routing["event"]["narrowed_tool_names"] == ["run_query", "send_email"]
    assert t.bound == [["run_query"]]


# ---------------------------------------------------------------------------
# The circuit breaker and the per-call budget (service transport)
# ---------------------------------------------------------------------------


def _steer(handler: ToolgateHandler, call_id: str, tool: str = "list_tables") -> Any:
    event = BeforeToolCallEvent(run_id="r", tool_name=tool, call_id=call_id, args={})
    return handler.on_before_tool_call(event, {"run_id": "r"})


class BreakerClock:
    """The circuit breaker's clock, moved by the test alone: the cool-down
    ends when the test says so, however long the calls around it take."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_breaker_opens_then_probes_and_closes(
    service: Any, caplog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import toolgate_symfonic._transport as transport

    clock = BreakerClock()
    monkeypatch.setattr(transport, "time", clock)
    service.answers["steering"] = lambda b: (500, {"error": "boom"})
    handler = ToolgateHandler(
        url=service.url, failure_policy="fail_closed", breaker_threshold=2, breaker_cooldown=30.0
    )
    assert handler.breaker is not None

    async def go() -> list[Any]:
        try:
            out = [await _steer(handler, f"c{i}") for i in range(5)]
            assert len(service.seam_requests("steering")) == 2  # then short-circuited
            assert handler.breaker is not None and handler.breaker.state == "open"
            clock.now += 29.9  # still within the cool-down: short-circuited
            out.append(await _steer(handler, "c5"))
            assert len(service.seam_requests("steering")) == 2
            clock.now += 0.2  # the cool-down is over
            assert handler.breaker.state == "half-open"
            service.answers["steering"] = lambda b: (200, None)
            out.append(await _steer(handler, "probe"))  # the probe reaches the service
            out.append(await _steer(handler, "after"))
            return out
        finally:
            await handler.aclose()

    with caplog.at_level(logging.DEBUG, logger="toolgate_symfonic"):
        answers = run(go())
    refused = {"action": "skip", "content": FAIL_CLOSED_MESSAGE, "is_error": True}
    assert answers == [refused] * 6 + [None, None]
    assert len(service.seam_requests("steering")) == 4
    assert handler.breaker.state == "closed" and handler.breaker.opened == 1
    assert handler.failures == {"steering": 6}
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "circuit open" in errors[0], errors
    # Its closing is a WARNING (docs/failures.md), once.
    closed = [
        r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "circuit closed" in r.getMessage()
    ]
    assert closed == ["toolgate: service answered again; circuit closed"], closed


def test_one_budget_per_tool_call(serve: StartServer, caplog: Any) -> None:
    # The hostile guard spins on `loop` calls far longer than the adapter
    # waits. The rewrite hook of call c1 spends c1's whole budget; the
    # steering hook of c1 then has nothing left and is not sent at all (a
    # budget per hook would send it and wait again); call c2 has its own
    # budget and is answered.
    server = serve({"hostile.wasm": required_guest("hostile")}, slow_ms=SPIN_MS)
    handler = ToolgateHandler(url=server.url, timeout=BUDGET)

    async def go() -> tuple[Any, Any, Any]:
        try:
            dispatch = ToolCallDispatchEvent(
                run_id="r", iteration_index=0, node_name="react", call_id="c1",
                tool_name="loop", args={}, available_tools=("loop",),
            )
            rewrite = await handler.on_tool_call_dispatch(dispatch, {"run_id": "r"})
            steer = await _steer(handler, "c1", tool="loop")
            fresh = await _steer(handler, "c2")  # a new call, a new budget
            return rewrite, steer, fresh
        finally:
            await handler.aclose()

    with caplog.at_level(logging.WARNING, logger="toolgate_symfonic"):
        rewrite, steer, fresh = run(go())
    assert rewrite is None and steer is None and fresh is None
    # Given up on (no guard fault came back), c1's hooks only.
    assert handler.guard_faults == {}
    assert handler.failures == {"rewrite": 1, "steering": 1}
    logged = [r.getMessage() for r in caplog.records if r.name == "toolgate_symfonic"]
    assert len(logged) == 2, logged
    assert "rewrite call" in logged[0] and "no answer within" in logged[0], logged
    assert "steering call" in logged[1] and "budget" in logged[1] and "is spent" in logged[1], logged
    # c2's steering reached the server and was answered there.
    assert decisions(server, "steering") == 1


# ---------------------------------------------------------------------------
# Data through HTTP into a guard and back
# ---------------------------------------------------------------------------

# Keys out of order at every level; integers past 2^53, i64::MIN, u64::MAX.
BIG_ARGS_TEXT = (
    '{"zeta":9007199254740993,'
    '"alpha":{"min":-9223372036854775808,"max":18446744073709551615,"b":0.5},'
    '"mid":[18446744073709551615,-9007199254740993,1,2.5],"sql":"SELECT 1","a":null}'
)


def test_big_integers_and_key_order_reach_a_guard_over_http_and_come_back(serve: StartServer) -> None:
    # The echo test guest hands back the args it read: a rewrite to the same
    # tool with them, and a cancel with them as JSON text.
    server = serve({"echo.wasm": required_guest("echo")})
    handler = ToolgateHandler(url=server.url, timeout=TIMEOUT)
    args = json.loads(BIG_ARGS_TEXT)

    async def go() -> tuple[Any, Any]:
        try:
            dispatch = ToolCallDispatchEvent(
                run_id="r", iteration_index=0, node_name="react", call_id="c1",
                tool_name="run_query", args=json.loads(BIG_ARGS_TEXT), available_tools=("run_query",),
            )
            rewritten = await handler.on_tool_call_dispatch(dispatch, {"run_id": "r"})
            event = BeforeToolCallEvent(run_id="r", tool_name="run_query", call_id="c1", args=args)
            steered = await handler.on_before_tool_call(event, {"run_id": "r"})
            return rewritten, steered
        finally:
            await handler.aclose()

    rewritten, steered = run(go())
    assert handler.failures == {}
    # What the guard read, as it wrote it back: every digit, every key in order.
    assert steered["action"] == "skip" and steered["content"] == BIG_ARGS_TEXT, steered
    # The rewrite's args, as symfonic receives them.
    assert rewritten["tool_name"] == "run_query"
    assert json.dumps(rewritten["args"], separators=(",", ":")) == BIG_ARGS_TEXT
