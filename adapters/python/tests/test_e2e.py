"""End to end: the real symfonic agent, the adapter, a real ``toolgate serve``.

Each test starts ``toolgate serve`` on a free loopback port over a temporary
plugin directory holding copies of the built example components, drives a real
``SymfonicAgent`` with a scripted model through real tool calls, and checks
what the model saw next and which tools actually ran. A missing binary or
component fails the test (it never passes vacuously); only the hostile-guard
test is skipped, when ``TOOLGATE_HOSTILE`` is unset.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_kit import call, calls, make_agent, say, scope
from toolgate_server import SetupError, ToolgateServer, plugin_dir, rust_plugin

from toolgate_symfonic import FAIL_CLOSED_MESSAGE, ToolgateHandler

WHERE_MESSAGE = "Add a WHERE clause before running this query."
ROUTING_KEYWORDS = {"run_query": ["query"], "send_email": ["email"], "delete_user": ["delete"]}
ROUTED_QUERY = "run the query and email the result"
# Generous, so a slow (loaded) machine shows up as a slow test, not as a
# guard the adapter gave up on.
TIMEOUT = 15.0

Serve = Callable[..., ToolgateServer]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """Starts ``toolgate serve`` over the named Rust example components.

    ``serve("sql-guard", "no-email", extra={"00-x.wasm": path})``: components
    are copied as ``<name>.wasm`` (the host runs them in file-name order).
    """
    servers: list[ToolgateServer] = []

    def start(
        *names: str, extra: dict[str, Path] | None = None, args: tuple[str, ...] = ()
    ) -> ToolgateServer:
        problem = None
        try:
            components = {f"{n}.wasm": rust_plugin(n) for n in names}
            components.update(extra or {})
            index = len(servers)
            plugins = plugin_dir(tmp_path / f"plugins-{index}", components)
            server = ToolgateServer(plugins, tmp_path / f"toolgate-{index}.log", args)
            servers.append(server)
            return server.start()
        except SetupError as exc:
            problem = str(exc)
        pytest.fail(problem, pytrace=False)

    yield start
    for server in servers:
        server.stop()


def run_agent(agent: Any, handler: ToolgateHandler, query: str = "q", **kw: Any) -> Any:
    async def go() -> Any:
        try:
            return await agent.run(query, callbacks=[handler], **kw)
        finally:
            await handler.aclose()

    return asyncio.run(go())


def traced(server: ToolgateServer, seam: str, event: dict[str, Any]) -> dict[str, Any]:
    """One event through ``POST /v1/<seam>?trace=1``."""
    response = httpx.post(
        f"{server.url}/v1/{seam}?trace=1",
        json={"event": event, "state": {}},
        timeout=30.0,
        trust_env=False,
    )
    assert response.status_code == 200, response.text
    return response.json()


# (a) ----------------------------------------------------------------------


def test_steering_guard_corrects_the_model(serve: Serve) -> None:
    server = serve("sql-guard")
    agent, t = make_agent(
        [
            call("run_query", "c1", sql="DELETE FROM users"),
            call("run_query", "c2", sql="DELETE FROM users WHERE id = 7"),
            say("deleted user 7"),
        ]
    )
    handler = ToolgateHandler(server.url, timeout=TIMEOUT)
    resp = run_agent(agent, handler, "delete user 7", scope=scope("acme"))

    assert resp.final_response == "deleted user 7"
    # The second model turn sees the guard's corrective message as an error.
    second_turn = t.turns[1]
    steered = [m for m in second_turn if getattr(m, "tool_call_id", None) == "c1"]
    assert len(steered) == 1
    assert steered[0].status == "error"
    assert steered[0].content == WHERE_MESSAGE
    # Only the corrected call ran.
    assert t.ran == [("run_query", {"sql": "DELETE FROM users WHERE id = 7"})]
    assert t.tool_message("c2").status == "success"
    assert handler.failures == {}
    assert handler.calls["steering"] == 2


# (b) ----------------------------------------------------------------------


def test_rewrite_guard_changes_the_dispatched_call(serve: Serve) -> None:
    server = serve("query-limit", "sql-guard")
    agent, t = make_agent(
        [
            call("run_query", "c1", sql="SELECT name FROM users WHERE active = 1;"),
            call("run_query", "c2", sql="SELECT name FROM users WHERE id = 3 LIMIT 1"),
            call("run_query", "c3", sql="SELECT * FROM users"),
            say("done"),
        ]
    )
    handler = ToolgateHandler(server.url, timeout=TIMEOUT)
    run_agent(agent, handler)

    assert t.ran == [
        ("run_query", {"sql": "SELECT name FROM users WHERE active = 1 LIMIT 100"}),
        ("run_query", {"sql": "SELECT name FROM users WHERE id = 3 LIMIT 1"}),
    ]
    # c3 was rewritten (LIMIT 100), then steered: steering sees the rewrite.
    assert t.tool_message("c3").status == "error"
    assert t.tool_message("c3").content == WHERE_MESSAGE
    assert handler.failures == {}


# (c) ----------------------------------------------------------------------


def test_cancel_guard_answers_without_running_the_tool(serve: Serve) -> None:
    server = serve("no-email", "result-audit")
    agent, t = make_agent(
        [
            calls(("send_email", "e1", {"to": "ceo@example.com", "body": "hi"}),
                  ("list_tables", "l1", {})),
            say("listed the tables; email is not allowed"),
        ]
    )
    handler = ToolgateHandler(server.url, timeout=TIMEOUT)
    run_agent(agent, handler)

    cancelled = t.tool_message("e1")
    assert cancelled.status == "success"
    assert cancelled.content and "sent to" not in cancelled.content
    assert "email" in cancelled.content.lower()
    assert t.ran == [("list_tables", {})]
    assert t.tool_message("l1").content == "users, orders"
    # Only the executed call produced a result event (audited by result-audit).
    assert handler.calls["result"] == 1
    assert handler.failures == {}


# (d) ----------------------------------------------------------------------


def test_faulting_guard_is_skipped_and_the_call_proceeds(serve: Serve) -> None:
    # sql-guard, like the seed's handler, faults (panics) on a non-string sql.
    server = serve("sql-guard")
    agent, t = make_agent(
        [
            call("run_query", "c1", sql=42),
            call("run_query", "c2", sql="DROP TABLE users"),
            say("done"),
        ]
    )
    handler = ToolgateHandler(server.url, timeout=TIMEOUT)
    run_agent(agent, handler)

    assert t.ran == [("run_query", {"sql": 42})]
    assert t.tool_message("c1").status == "success"
    # The chain still works after the fault.
    assert t.tool_message("c2").content == WHERE_MESSAGE
    assert handler.failures == {}

    answer = traced(
        server, "steering",
        {"run_id": "r", "tool_name": "run_query", "call_id": "c1", "args": {"sql": 42}},
    )
    assert answer["result"] is None
    (entry,) = answer["trace"]
    assert "sql-guard" in entry["plugin"]
    assert entry.get("fault"), entry


def test_hostile_guard_is_stopped_and_the_call_proceeds(serve: Serve) -> None:
    hostile = os.environ.get("TOOLGATE_HOSTILE")
    if not hostile:
        pytest.skip("TOOLGATE_HOSTILE is not set (path of the looping guard component)")
    if not Path(hostile).is_file():
        pytest.fail(f"TOOLGATE_HOSTILE={hostile} does not exist", pytrace=False)
    # File-name order: the hostile guard runs first, sql-guard after it.
    server = serve("sql-guard", extra={"00-hostile.wasm": Path(hostile)})
    agent, t = make_agent(
        [
            call("loop", "l1", n=1),
            call("run_query", "c2", sql="DELETE FROM users"),
            say("done"),
        ]
    )
    handler = ToolgateHandler(server.url, timeout=2 * TIMEOUT)
    start = time.monotonic()
    run_agent(agent, handler)
    elapsed = time.monotonic() - start

    assert t.ran == [("loop", {"n": 1})]
    assert t.tool_message("l1").status == "success"
    assert t.tool_message("c2").content == WHERE_MESSAGE
    assert handler.failures == {}
    assert elapsed < 2 * TIMEOUT

    answer = traced(
        server, "steering",
        {"run_id": "r", "tool_name": "loop", "call_id": "l1", "args": {"n": 1}},
    )
    assert answer["result"] is None
    faults = [e for e in answer["trace"] if "hostile" in e["plugin"]]
    assert faults and faults[0].get("fault"), answer["trace"]


# (e) ----------------------------------------------------------------------


def test_service_stopped_fail_open_and_fail_closed(serve: Serve) -> None:
    server = serve("sql-guard")
    script = [call("run_query", "c1", sql="DELETE FROM users"), say("done")]

    # While the service runs, the guard steers.
    agent, t = make_agent(script)
    run_agent(agent, ToolgateHandler(server.url, timeout=TIMEOUT))
    assert t.ran == [] and t.tool_message("c1").content == WHERE_MESSAGE

    server.stop()

    agent, t = make_agent(script)
    handler = ToolgateHandler(server.url, failure_policy="fail_open", timeout=2.0)
    run_agent(agent, handler)
    assert t.ran == [("run_query", {"sql": "DELETE FROM users"})]
    assert t.tool_message("c1").status == "success"
    assert handler.failures["steering"] == 1

    agent, t = make_agent(script)
    handler = ToolgateHandler(server.url, failure_policy="fail_closed", timeout=2.0)
    run_agent(agent, handler)
    assert t.ran == []
    refused = t.tool_message("c1")
    assert (refused.status, refused.content) == ("error", FAIL_CLOSED_MESSAGE)
    assert handler.failures["steering"] == 1


# (f) ----------------------------------------------------------------------


def test_routing_guard_narrows_the_palette(serve: Serve) -> None:
    server = serve("hide-admin-tools")

    # enforce: symfonic drops delete_user (no keyword in the query), the
    # guard hides admin_purge; the model sees the rest on every turn.
    agent, t = make_agent(
        [call("list_tables", "l1"), say("done")],
        tool_routing_mode="enforce",
        trigger_keywords=ROUTING_KEYWORDS,
    )
    handler = ToolgateHandler(server.url, timeout=TIMEOUT)
    handler.install(agent)
    run_agent(agent, handler, ROUTED_QUERY, scope=scope("acme"))
    assert t.bound == [["run_query", "send_email", "list_tables", "loop"]] * 2
    assert handler.calls["routing"] == 1
    assert handler.failures == {}

    # observe: symfonic binds its full manifest; only the guard's hiding applies.
    agent, t = make_agent(
        [say("done")], tool_routing_mode="observe", trigger_keywords=ROUTING_KEYWORDS
    )
    handler = ToolgateHandler(server.url, timeout=TIMEOUT)
    handler.install(agent)
    run_agent(agent, handler, ROUTED_QUERY)
    assert t.bound[0] == ["run_query", "send_email", "delete_user", "list_tables", "loop"]

    # symfonic's routing off: always_route consults the guards anyway.
    agent, t = make_agent([say("done")])
    handler = ToolgateHandler(server.url, timeout=TIMEOUT)
    handler.install(agent, always_route=True)
    run_agent(agent, handler, "hello")
    assert t.bound[0] == ["run_query", "send_email", "delete_user", "list_tables", "loop"]


def test_hidden_tool_named_anyway_is_refused_when_asked(serve: Serve) -> None:
    server = serve("hide-admin-tools", "sql-guard")
    agent, t = make_agent(
        [call("admin_purge", "a1", table="users"), say("done")],
        tool_routing_mode="enforce",
        trigger_keywords=ROUTING_KEYWORDS,
    )
    handler = ToolgateHandler(server.url, timeout=TIMEOUT, deny_hidden_tools=True)
    handler.install(agent)
    run_agent(agent, handler, ROUTED_QUERY)
    assert t.ran == []
    assert t.tool_message("a1").status == "error"
    assert "admin_purge" in t.tool_message("a1").content


def test_service_lists_the_plugins(serve: Serve) -> None:
    server = serve("sql-guard", "query-limit", "hide-admin-tools", "no-email", "result-audit")
    response = httpx.get(f"{server.url}/v1/plugins", timeout=10.0, trust_env=False)
    assert response.status_code == 200
    text = response.text
    for name in ("sql-guard", "query-limit", "hide-admin-tools", "no-email", "result-audit"):
        assert name in text


def test_readme_example_runs(serve: Serve, tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    (example,) = [b for b in blocks if "asyncio.run(main())" in b]
    script = tmp_path / "example.py"
    script.write_text(example)
    server = serve("sql-guard")
    proc = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "TOOLGATE_URL": server.url},
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "tool ran: DELETE FROM users WHERE id = 7",
        "Deleted user 7.",
    ], proc.stdout + proc.stderr


def test_bearer_token(serve: Serve, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("correct-horse\n")
    server = serve("sql-guard", args=("--token-file", str(token_file)))
    script = [call("run_query", "c1", sql="DELETE FROM users"), say("done")]

    agent, t = make_agent(script)
    handler = ToolgateHandler(server.url, token="correct-horse", timeout=TIMEOUT)
    run_agent(agent, handler)
    assert t.ran == [] and t.tool_message("c1").content == WHERE_MESSAGE
    assert handler.failures == {}

    # A wrong token is a failure (401), resolved by the policy.
    agent, t = make_agent(script)
    handler = ToolgateHandler(server.url, token="wrong", timeout=TIMEOUT)
    run_agent(agent, handler)
    assert t.ran == [("run_query", {"sql": "DELETE FROM users"})]
    assert handler.failures == {"rewrite": 1, "steering": 1, "result": 1}
