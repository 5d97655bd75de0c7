"""End to end: the real symfonic agent, the adapter, real toolgate guards.

Every scenario runs over both transports (``guards`` is parametrised): the
guards in-process (``ToolgateHandler(plugins=dir)``, a ``toolgate.Host``
built from this repository) and in a real ``toolgate serve`` started on a
free loopback port (``ToolgateHandler(url=...)``), over a temporary plugin
directory holding copies of the built example components. A real
``SymfonicAgent`` with a scripted model makes real tool calls; the tests
check what the model was given and which tools actually ran. A missing
binary or component fails the test (it never passes vacuously, nor skips).
"""

from __future__ import annotations

import asyncio
import logging
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
from langchain_core.messages import ToolMessage
from toolgate_server import SetupError, ToolgateServer, plugin_dir, required_guest, rust_plugin

from toolgate_symfonic import FAIL_CLOSED_MESSAGE, STATE_KEYS, ToolgateHandler

WHERE_MESSAGE = "Add a WHERE clause before running this query."
ROUTING_KEYWORDS = {"run_query": ["query"], "send_email": ["email"], "delete_user": ["delete"]}
ROUTED_QUERY = "run the query and email the result"
# Generous, so a slow (loaded) machine shows up as a slow test, not as a
# guard the adapter gave up on.
TIMEOUT = 15.0


class Guards:
    """One plugin directory, reached in-process or through ``toolgate serve``."""

    def __init__(self, transport: str, plugins: Path, server: ToolgateServer | None) -> None:
        self.transport = transport
        self.plugins = plugins
        self.server = server

    @property
    def url(self) -> str:
        assert self.server is not None, "the service transport only"
        return self.server.url

    def handler(self, **kw: Any) -> ToolgateHandler:
        """A handler over these guards (keyword arguments are the handler's)."""
        kw.setdefault("timeout", TIMEOUT)
        if self.server is not None:
            return ToolgateHandler(url=self.server.url, **kw)
        return ToolgateHandler(plugins=self.plugins, watch=False, max_instances=32, **kw)

    def traced(self, seam: str, event: dict[str, Any]) -> dict[str, Any]:
        """One event through the chain with its trace (``?trace=1`` over HTTP)."""
        if self.server is not None:
            response = httpx.post(
                f"{self.server.url}/v1/{seam}?trace=1",
                json={"event": event, "state": {}},
                timeout=30.0,
                trust_env=False,
            )
            assert response.status_code == 200, response.text
            return dict(response.json())
        from toolgate import Host

        host = Host(self.plugins, watch=False, max_instances=8)
        return dict(asyncio.run(host.decide(seam, event, state={}, trace=True)))

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


StartGuards = Callable[..., Guards]


@pytest.fixture(params=["embedded", "http"])
def guards(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StartGuards]:
    """Starts guards over the named Rust example components, per transport.

    ``guards("sql-guard", "no-email", extra={"00-x.wasm": path})``: components
    are copied as ``<name>.wasm`` (the host runs them in file-name order).
    """
    started: list[Guards] = []

    def start(
        *names: str, extra: dict[str, Path] | None = None, args: tuple[str, ...] = ()
    ) -> Guards:
        problem = None
        try:
            components = {f"{n}.wasm": rust_plugin(n) for n in names}
            components.update(extra or {})
            index = len(started)
            plugins = plugin_dir(tmp_path / f"plugins-{index}", components)
            server = None
            if request.param == "http":
                server = ToolgateServer(plugins, tmp_path / f"toolgate-{index}.log", args)
                server.start()
            g = Guards(request.param, plugins, server)
            started.append(g)
            return g
        except SetupError as exc:
            problem = str(exc)
        pytest.fail(problem, pytrace=False)

    yield start
    for g in started:
        g.stop()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., ToolgateServer]]:
    """Starts ``toolgate serve`` (the tests of the service transport alone)."""
    servers: list[ToolgateServer] = []

    def start(*names: str, args: tuple[str, ...] = ()) -> ToolgateServer:
        problem = None
        try:
            components = {f"{n}.wasm": rust_plugin(n) for n in names}
            index = len(servers)
            plugins = plugin_dir(tmp_path / f"svc-plugins-{index}", components)
            server = ToolgateServer(plugins, tmp_path / f"svc-{index}.log", args)
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


# (a) ----------------------------------------------------------------------


def test_steering_guard_corrects_the_model(guards: StartGuards) -> None:
    g = guards("sql-guard")
    agent, t = make_agent(
        [
            call("run_query", "c1", sql="DELETE FROM users"),
            call("run_query", "c2", sql="DELETE FROM users WHERE id = 7"),
            say("deleted user 7"),
        ]
    )
    handler = g.handler()
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


def test_rewrite_guard_changes_the_dispatched_call(guards: StartGuards) -> None:
    g = guards("query-limit", "sql-guard")
    agent, t = make_agent(
        [
            call("run_query", "c1", sql="SELECT name FROM users WHERE active = 1;"),
            call("run_query", "c2", sql="SELECT name FROM users WHERE id = 3 LIMIT 1"),
            call("run_query", "c3", sql="SELECT * FROM users"),
            say("done"),
        ]
    )
    handler = g.handler()
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


def test_cancel_guard_answers_without_running_the_tool(guards: StartGuards) -> None:
    g = guards("no-email", "result-audit")
    agent, t = make_agent(
        [
            calls(("send_email", "e1", {"to": "ceo@example.com", "body": "hi"}),
                  ("list_tables", "l1", {})),
            say("listed the tables; email is not allowed"),
        ]
    )
    handler = g.handler()
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


def test_faulting_guard_is_skipped_and_the_call_proceeds(guards: StartGuards) -> None:
    # sql-guard, like the seed's handler, faults (panics) on a non-string sql.
    g = guards("sql-guard")
    agent, t = make_agent(
        [
            call("run_query", "c1", sql=42),
            call("run_query", "c2", sql="DROP TABLE users"),
            say("done"),
        ]
    )
    handler = g.handler()
    run_agent(agent, handler)

    assert t.ran == [("run_query", {"sql": 42})]
    assert t.tool_message("c1").status == "success"
    # The chain still works after the fault.
    assert t.tool_message("c2").content == WHERE_MESSAGE
    # The fault reached Python (see test_guard_faults_reach_python).
    assert handler.failures == {"steering": 1}

    answer = g.traced(
        "steering",
        {"run_id": "r", "tool_name": "run_query", "call_id": "c1", "args": {"sql": 42}},
    )
    assert answer["result"] is None
    (entry,) = answer["trace"]
    assert "sql-guard" in entry["plugin"]
    assert entry.get("fault"), entry


def test_hostile_guard_is_stopped_and_the_call_proceeds(guards: StartGuards) -> None:
    # File-name order: the hostile guard runs first, sql-guard after it.
    g = guards("sql-guard", extra={"00-hostile.wasm": required_guest("hostile")})
    agent, t = make_agent(
        [
            call("loop", "l1", n=1),
            call("run_query", "c2", sql="DELETE FROM users"),
            say("done"),
        ]
    )
    handler = g.handler(timeout=2 * TIMEOUT)
    run_agent(agent, handler)

    assert t.ran == [("loop", {"n": 1})]
    assert t.tool_message("l1").status == "success"
    assert t.tool_message("c2").content == WHERE_MESSAGE
    # Every failure the handler saw is the hostile guard's fault, reported
    # by the host: none is a hook the handler gave up waiting for (a guard
    # the host did not stop would be one).
    assert set(handler.guard_faults) == {"00-hostile"}
    assert sum(handler.failures.values()) == sum(handler.guard_faults.values()) > 0

    answer = g.traced(
        "steering",
        {"run_id": "r", "tool_name": "loop", "call_id": "l1", "args": {"n": 1}},
    )
    assert answer["result"] is None
    faults = [e for e in answer["trace"] if "hostile" in e["plugin"]]
    assert faults and faults[0].get("fault"), answer["trace"]


# (e) ----------------------------------------------------------------------


def test_service_stopped_fail_open_and_fail_closed(serve: Callable[..., ToolgateServer]) -> None:
    server = serve("sql-guard")
    script = [call("run_query", "c1", sql="DELETE FROM users"), say("done")]

    # While the service runs, the guard steers.
    agent, t = make_agent(script)
    run_agent(agent, ToolgateHandler(url=server.url, timeout=TIMEOUT))
    assert t.ran == [] and t.tool_message("c1").content == WHERE_MESSAGE

    server.stop()

    agent, t = make_agent(script)
    handler = ToolgateHandler(url=server.url, failure_policy="fail_open", timeout=2.0)
    run_agent(agent, handler)
    assert t.ran == [("run_query", {"sql": "DELETE FROM users"})]
    assert t.tool_message("c1").status == "success"
    assert handler.failures["steering"] == 1

    agent, t = make_agent(script)
    handler = ToolgateHandler(url=server.url, failure_policy="fail_closed", timeout=2.0)
    run_agent(agent, handler)
    assert t.ran == []
    refused = t.tool_message("c1")
    assert (refused.status, refused.content) == ("error", FAIL_CLOSED_MESSAGE)
    assert handler.failures["steering"] == 1


# (f) ----------------------------------------------------------------------


def test_routing_guard_narrows_the_palette(guards: StartGuards) -> None:
    g = guards("hide-admin-tools")

    # enforce: symfonic drops delete_user (no keyword in the query), the
    # guard hides admin_purge; the model sees the rest on every turn.
    agent, t = make_agent(
        [call("list_tables", "l1"), say("done")],
        tool_routing_mode="enforce",
        trigger_keywords=ROUTING_KEYWORDS,
    )
    handler = g.handler()
    handler.install(agent)
    run_agent(agent, handler, ROUTED_QUERY, scope=scope("acme"))
    assert t.bound == [["run_query", "send_email", "list_tables", "loop"]] * 2
    assert handler.calls["routing"] == 1
    assert handler.failures == {}

    # observe: symfonic binds its full manifest; only the guard's hiding applies.
    agent, t = make_agent(
        [say("done")], tool_routing_mode="observe", trigger_keywords=ROUTING_KEYWORDS
    )
    handler = g.handler()
    handler.install(agent)
    run_agent(agent, handler, ROUTED_QUERY)
    assert t.bound[0] == ["run_query", "send_email", "delete_user", "list_tables", "loop"]

    # symfonic's routing off (its default): install() consults the guards
    # anyway, and their narrowing holds on every turn.
    agent, t = make_agent([call("list_tables", "l1"), say("done")])
    handler = g.handler()
    handler.install(agent)
    run_agent(agent, handler, "hello")
    assert t.bound == [["run_query", "send_email", "delete_user", "list_tables", "loop"]] * 2
    assert handler.calls["routing"] == 1


def test_routing_guards_without_install_are_reported(
    guards: StartGuards, caplog: pytest.LogCaptureFixture
) -> None:
    g = guards("hide-admin-tools")
    agent, t = make_agent([call("list_tables", "l1"), say("done")])
    handler = g.handler()
    with caplog.at_level("ERROR", logger="toolgate_symfonic"):
        run_agent(agent, handler, "hello")
    # Not installed: the model got every tool. In-process the handler knows
    # routing guards are loaded and says so, once.
    assert "admin_purge" in t.bound[0]
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    if g.transport == "embedded":
        assert len(errors) == 1 and "handler.install(agent)" in errors[0], errors


def test_hidden_tool_named_anyway_is_refused_when_asked(guards: StartGuards) -> None:
    g = guards("hide-admin-tools", "sql-guard")
    agent, t = make_agent(
        [call("admin_purge", "a1", table="users"), say("done")],
        tool_routing_mode="enforce",
        trigger_keywords=ROUTING_KEYWORDS,
    )
    handler = g.handler(deny_hidden_tools=True)
    handler.install(agent)
    run_agent(agent, handler, ROUTED_QUERY)
    assert t.ran == []
    assert t.tool_message("a1").status == "error"
    assert "admin_purge" in t.tool_message("a1").content


def test_service_lists_the_plugins(serve: Callable[..., ToolgateServer]) -> None:
    server = serve("sql-guard", "query-limit", "hide-admin-tools", "no-email", "result-audit")
    response = httpx.get(f"{server.url}/v1/plugins", timeout=10.0, trust_env=False)
    assert response.status_code == 200
    text = response.text
    for name in ("sql-guard", "query-limit", "hide-admin-tools", "no-email", "result-audit"):
        assert name in text


def test_readme_example_runs(guards: StartGuards, tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    (example,) = [b for b in blocks if "asyncio.run(main())" in b]
    (printed,) = re.findall(r"It prints:\n\n```\n(.*?)```", readme, re.S)
    script = tmp_path / "example.py"
    script.write_text(example)
    g = guards("sql-guard", "hide-admin-tools")
    env = {k: v for k, v in os.environ.items() if k not in ("TOOLGATE_URL", "GUARDS")}
    if g.transport == "http":
        env["TOOLGATE_URL"] = g.url
    else:
        env["GUARDS"] = str(g.plugins)
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    # What the model was given on every turn: admin_purge never.
    assert proc.stdout.splitlines() == printed.splitlines(), proc.stdout + proc.stderr
    assert "model sees: run_query" in printed and "admin_purge" not in printed


def test_bearer_token(serve: Callable[..., ToolgateServer], tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("correct-horse\n")
    server = serve("sql-guard", args=("--token-file", str(token_file)))
    script = [call("run_query", "c1", sql="DELETE FROM users"), say("done")]

    agent, t = make_agent(script)
    handler = ToolgateHandler(url=server.url, token="correct-horse", timeout=TIMEOUT)
    run_agent(agent, handler)
    assert t.ran == [] and t.tool_message("c1").content == WHERE_MESSAGE
    assert handler.failures == {}

    # A wrong token is a failure (401), resolved by the policy.
    agent, t = make_agent(script)
    handler = ToolgateHandler(url=server.url, token="wrong", timeout=TIMEOUT)
    run_agent(agent, handler)
    assert t.ran == [("run_query", {"sql": "DELETE FROM users"})]
    assert handler.failures == {"rewrite": 1, "steering": 1, "result": 1, "response": 1}


# Tenants, refused requests ------------------------------------------------


def test_tenant_id_with_a_colon_reaches_its_guards(guards: StartGuards) -> None:
    # symfonic accepts any tenant id; `acme:eu` lives in tenants/__acme_3Aeu.
    from toolgate_symfonic import tenant_dir

    assert tenant_dir("acme:eu") == "__acme_3Aeu"
    g = guards(extra={"tenants/__acme_3Aeu/sql-guard.wasm": rust_plugin("sql-guard")})
    script = [call("run_query", "c1", sql="DELETE FROM users"), say("done")]

    agent, t = make_agent(script)
    handler = g.handler()
    run_agent(agent, handler, scope=scope("acme:eu"))
    assert t.ran == [] and t.tool_message("c1").content == WHERE_MESSAGE
    assert handler.failures == {} and handler.config_errors == {}

    # Another tenant (and no tenant) never reaches acme:eu's guards.
    for other in (scope("acme"), None):
        agent, t = make_agent(script)
        handler = g.handler()
        run_agent(agent, handler, **({"scope": other} if other else {}))
        assert t.ran == [("run_query", {"sql": "DELETE FROM users"})]
        assert handler.failures == {}


def test_a_refused_request_is_loud(guards: StartGuards, caplog: pytest.LogCaptureFixture) -> None:
    from symfonic.core.contracts.callbacks import ToolCallDispatchEvent

    from toolgate_symfonic import ConfigurationError

    g = guards("query-limit")
    handler = g.handler(failure_policy="fail_open")
    # An iteration index toolgate cannot take (it is unsigned): refused.
    event = ToolCallDispatchEvent(
        run_id="r", iteration_index=-1, node_name="react", call_id="c",
        tool_name="run_query", args={"sql": "SELECT 1"}, available_tools=("run_query",),
    )

    async def go() -> list[Any]:
        try:
            return [await handler.on_tool_call_dispatch(event, {}) for _ in range(3)]
        finally:
            await handler.aclose()

    with caplog.at_level("DEBUG", logger="toolgate_symfonic"):
        answers = asyncio.run(go())
    assert answers == [None, None, None]
    assert handler.config_errors == {"rewrite": 3}
    assert handler.failures == {"rewrite": 3}
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1, errors
    assert "iteration_index" in errors[0] and "configuration error" in errors[0]
    assert not [r for r in caplog.records if r.levelname == "WARNING"]

    if g.transport == "http":
        # check() fails loudly on a wrong URL, before any agent runs.
        wrong = ToolgateHandler(url=g.url + "/wrong-prefix")
        with pytest.raises(ConfigurationError, match="404"):
            asyncio.run(wrong.check())
        asyncio.run(g.handler().check())


# The service killed or hung mid-run ---------------------------------------


class _OnFirstRun(list):  # type: ignore[type-arg]
    """A transcript's ``ran`` list that does something when the first tool runs."""

    def __init__(self, action: Callable[[], None]) -> None:
        super().__init__()
        self.action = action

    def append(self, item: Any) -> None:
        super().append(item)
        if len(self) == 1:
            self.action()


FIVE_CALLS = [
    call("list_tables", "c1"),
    call("run_query", "c2", sql="SELECT 1 WHERE a"),
    call("loop", "c3", n=1),
    call("delete_user", "c4", user_id="u4"),
    call("send_email", "c5", to="x@y.z"),
    say("done"),
]


@pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
@pytest.mark.parametrize("how", ["killed", "hung"])
def test_service_lost_mid_run_is_bounded_by_the_breaker(
    serve: Callable[..., ToolgateServer], policy: str, how: str, caplog: Any
) -> None:
    import signal

    server = serve("sql-guard")
    assert server.proc is not None
    pid = server.proc.pid
    sig = signal.SIGKILL if how == "killed" else signal.SIGSTOP
    agent, t = make_agent(FIVE_CALLS)
    t.ran = _OnFirstRun(lambda: os.kill(pid, sig))
    timeout, threshold = 1.0, 2
    handler = ToolgateHandler(
        url=server.url,
        timeout=timeout,
        failure_policy=policy,  # type: ignore[arg-type]
        breaker_threshold=threshold,
        breaker_cooldown=3600.0,
    )
    try:
        with caplog.at_level(logging.DEBUG, logger="toolgate_symfonic"):
            run_agent(agent, handler)
    finally:
        if how == "hung":
            os.kill(pid, signal.SIGCONT)

    # Without the breaker a hung service would cost every hook its full
    # timeout: 4 calls x 3 hooks x 1 s. With it, exactly `threshold` hooks
    # went to the lost service (and waited, when it hung); every later hook
    # failed at once without a request: short-circuited by the open
    # circuit, or (a later hook of a call that already waited) its call's
    # budget spent.
    logged = [r.getMessage() for r in caplog.records if r.name == "toolgate_symfonic"]
    spent = [m for m in logged if "budget of" in m and "is spent" in m]
    sent = [m for m in logged if " call to " in m and " failed (" in m and m not in spent]
    short_circuited = [m for m in logged if "short-circuited (circuit open" in m]
    assert len(sent) == threshold, sent
    failed = len(sent) + len(spent) + len(short_circuited)
    assert short_circuited and failed == sum(handler.failures.values()), logged
    assert handler.breaker is not None and handler.breaker.opened == 1
    assert handler.breaker.state == "open"
    later = [m.tool_call_id for m in t.tool_messages()][1:]
    assert later == ["c2", "c3", "c4", "c5"]
    if policy == "fail_open":
        assert [name for name, _ in t.ran] == [
            "list_tables", "run_query", "loop", "delete_user", "send_email",
        ]
    else:
        assert [name for name, _ in t.ran] == ["list_tables"]
        for call_id in later:
            assert t.tool_message(call_id).content == FAIL_CLOSED_MESSAGE


# Never silently off ---------------------------------------------------------


def _dispatch_event(run_id: str, call_id: str, **args: Any) -> Any:
    from symfonic.core.contracts.callbacks import ToolCallDispatchEvent

    return ToolCallDispatchEvent(
        run_id=run_id, iteration_index=0, node_name="react", call_id=call_id,
        tool_name="run_query", args=args, available_tools=("run_query",),
    )


@pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
def test_a_call_id_that_recurs_in_every_run_is_always_guarded(
    guards: StartGuards, policy: str, tmp_path: Path
) -> None:
    # Providers and test models reuse call ids (`call_0`) in every run and
    # every turn. Each run here makes the hooks symfonic makes for two turns
    # that both use `call_0`: a DELETE without WHERE (rewrite, steering:
    # steered), then a corrected query (rewrite, steering, result). The time
    # the hooks take over all runs is many times the per-call budget; every
    # DELETE must still be steered by the guard, under either policy.
    from symfonic.core.contracts.callbacks import BeforeToolCallEvent, ToolResultCallbackEvent

    # A deadline far beyond any stall of a busy test machine: this test is
    # about the adapter's bookkeeping, not about the host's scheduling.
    manifest = tmp_path / "toolgate.toml"
    manifest.write_text('[[plugin]]\npath = "sql-guard.wasm"\ntimeout_ms = 20000\n')
    g = guards("sql-guard", extra={"toolgate.toml": manifest})
    # Runs go on until the hooks have taken several times the budget (and
    # at least `least` runs): a busy machine makes them take longer, never
    # makes one call use up its budget.
    budget = 5.0
    least = 10_000 if g.transport == "embedded" else 2_000
    handler = g.handler(timeout=budget, failure_policy=policy)
    steered = "Add a WHERE clause before running this query."
    runs = 0

    async def go() -> list[tuple[int, Any]]:
        nonlocal runs
        wrong = []
        start = time.monotonic()
        try:
            while runs < least or time.monotonic() - start < 3 * budget:
                i, runs = runs, runs + 1
                run_id, state = f"run-{i}", {"run_id": f"run-{i}"}
                for sql in ("DELETE FROM users", "DELETE FROM users WHERE id = 7"):
                    args = {"sql": sql}
                    await handler.on_tool_call_dispatch(_dispatch_event(run_id, "call_0", **args), state)
                    verdict = await handler.on_before_tool_call(
                        BeforeToolCallEvent(run_id=run_id, tool_name="run_query", call_id="call_0", args=args),
                        state,
                    )
                    expected = None if "WHERE" in sql else steered
                    if (verdict or {}).get("content") != expected:
                        wrong.append((i, verdict))
                    if verdict is None:
                        await handler.on_tool_result(
                            ToolResultCallbackEvent(
                                run_id=run_id, tool_name="run_query", result="ok", call_id="call_0"
                            )
                        )
            return wrong
        finally:
            await handler.aclose()

    wrong = asyncio.run(go())
    assert wrong == [], f"{len(wrong)} wrong verdicts in {runs} runs, first: {wrong[:3]}"
    assert handler.failures == {}
    assert handler.calls["steering"] == 2 * runs


def test_check_reports_a_corrupt_component(guards: StartGuards, tmp_path: Path) -> None:
    from toolgate_symfonic import ConfigurationError

    corrupt = tmp_path / "corrupt.wasm"
    corrupt.write_bytes(b"\0asm\x01\0\0\0 this is no component")
    g = guards("sql-guard", extra={"broken.wasm": corrupt})
    with pytest.raises(ConfigurationError, match=r"1 file\(s\) .* failed to load: .*broken\.wasm"):
        asyncio.run(g.handler().check())


def test_an_empty_plugin_directory_is_a_warning(
    guards: StartGuards, caplog: pytest.LogCaptureFixture
) -> None:
    g = guards()
    with caplog.at_level("WARNING", logger="toolgate_symfonic"):
        findings = asyncio.run(g.handler().check())
    assert len(findings) == 1 and "no guard is loaded" in findings[0], findings
    logged = [r.getMessage() for r in caplog.records if r.name == "toolgate_symfonic"]
    assert any("no guard is loaded" in m for m in logged), logged
    if g.server is not None:
        # The host says so too, at load, in its own log.
        assert "no guard loaded" in g.server.log(), g.server.log()
    # A directory with a guard has nothing to report.
    assert asyncio.run(guards("sql-guard").handler().check()) == []


def test_guard_faults_reach_python(guards: StartGuards, caplog: pytest.LogCaptureFixture) -> None:
    # sql-guard faults (panics: `unreachable`) on a non-string sql; the host
    # skips it (on_error = "skip") and the call proceeds. Python sees it.
    g = guards("sql-guard")
    agent, t = make_agent([call("run_query", "c1", sql=42), say("done")])
    handler = g.handler()
    with caplog.at_level("WARNING", logger="toolgate_symfonic"):
        run_agent(agent, handler)
    assert t.ran == [("run_query", {"sql": 42})]
    assert handler.failures == {"steering": 1}
    assert handler.guard_faults == {"sql-guard": 1}
    (record,) = [r for r in caplog.records if getattr(r, "toolgate_plugin", None)]
    assert record.levelname == "WARNING"
    assert (record.toolgate_plugin, record.toolgate_fault, record.toolgate_seam) == (  # type: ignore[attr-defined]
        "sql-guard", "unreachable", "steering",
    )
    assert record.toolgate_detail  # type: ignore[attr-defined]
    message = record.getMessage()
    assert "sql-guard" in message and "unreachable" in message and "c1" in message, message
    if g.server is not None:
        log = g.server.log()
        assert "sql-guard" in log, log
        # Written to a file: plain text, no colour codes.
        assert "\x1b[" not in log, repr(log[:500])


def test_a_rewrite_changes_only_what_the_guard_changed(guards: StartGuards) -> None:
    import datetime

    class Name(str):
        pass

    deep: dict[str, Any] = {"leaf": 1}
    for _ in range(70):
        deep = {"n": deep}
    args = {
        "sql": "SELECT * FROM users WHERE a = 1",
        "filter": deep,
        "when": datetime.datetime(2024, 1, 2, 3, 4, 5),
        "blob": b"\x00\xff",
        "tags": {"x"},
        "pair": (1, "two"),
        "ratio": float("nan"),
        "big": 18446744073709551616123,
        "name": Name("kept"),
        "opts": {"flag": True, "at": datetime.date(2024, 1, 2), "n": [1, (2, 3)]},
    }
    g = guards("query-limit")
    handler = g.handler()

    async def go() -> Any:
        try:
            return await handler.on_tool_call_dispatch(_dispatch_event("r", "c1", **args), {"run_id": "r"})
        finally:
            await handler.aclose()

    verdict = asyncio.run(go())
    assert handler.failures == {}
    assert verdict is not None and verdict["tool_name"] == "run_query"
    out = verdict["args"]
    # What the guard changed is new ...
    assert out["sql"] == "SELECT * FROM users WHERE a = 1 LIMIT 100"
    # ... everything else is the very value symfonic gave the hook.
    for key in args:
        if key != "sql":
            assert out[key] is args[key], (key, out[key])
    assert set(out) == set(args)


def test_the_adapters_state_reaches_the_guard(guards: StartGuards) -> None:
    # The memo test guest cancels every call with the state it got (and
    # what it found of earlier calls: nothing, on a fresh instance).
    import json

    try:
        memo = required_guest("memo")
    except SetupError as exc:
        pytest.fail(str(exc), pytrace=False)
    g = guards(extra={"memo.wasm": memo})
    agent, t = make_agent(
        [
            calls(("run_query", "c1", {"sql": "SELECT 1"}), ("list_tables", "l1", {})),
            say("done"),
        ]
    )
    handler = g.handler()
    run_agent(agent, handler, "find the users", scope=scope("acme"))

    assert t.ran == []
    for call_id in ("c1", "l1"):
        message = t.tool_message(call_id)
        assert message.status == "success", message
        seen = json.loads(message.content)
        assert seen["calls"] == 1 and seen["last"] is None, seen
        state = seen["state"]
        assert list(state) == list(STATE_KEYS), state
        assert state["tenant_id"] == "acme", state
        assert state["query"] == "find the users", state
        assert isinstance(state["run_id"], str) and state["run_id"], state
        # memo rewrote both calls of the turn to what it saw at the rewrite
        # seam, where symfonic's state has no tool calls yet; steering sees
        # the turn's calls as they will run.
        rewritten = {"calls": 1, "last": None, "state": {**state, "tool_calls": []}}
        assert state["tool_calls"] == [
            {"name": "run_query", "args": rewritten, "id": "c1"},
            {"name": "list_tables", "args": rewritten, "id": "l1"},
        ], state
    assert handler.failures == {}



def test_tool_call_limit_cancels_the_third_email_of_a_run_and_the_next_run_starts_afresh(
    guards: StartGuards, tmp_path: Path
) -> None:
    """A stateful guard (plugins/rust/tool-call-limit, run_limit 2) behind the
    real agent: two runs with one handler, so the state is the same host's."""
    manifest = tmp_path / "limit.toml"
    manifest.write_text(
        '[[plugin]]\npath = "tool-call-limit.wasm"\n'
        '[plugin.config]\ntool = "send_email"\nrun_limit = 2\n'
    )
    g = guards(
        extra={"tool-call-limit.wasm": rust_plugin("tool-call-limit"), "toolgate.toml": manifest}
    )
    def email(n: int) -> dict[str, str]:
        return {"to": f"user{n}@example.com", "body": f"note {n}"}

    agent, t = make_agent(
        [
            calls(("send_email", "e1", email(1))),
            calls(("send_email", "e2", email(2))),
            calls(("send_email", "e3", email(3))),
            say("two sent; the third was refused"),
            calls(("send_email", "e4", email(4))),
            calls(("send_email", "e5", email(5))),
            say("a new run sends two again"),
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
    seen = {m.tool_call_id: m for turn in t.turns for m in turn if isinstance(m, ToolMessage)}
    limited = seen["e3"]
    assert limited.content == "Tool call limit exceeded. Do not call 'send_email' again."
    assert limited.status == "success"  # a cancel: the model moves past it
    assert [name for name, _ in t.ran] == ["send_email"] * 4, t.ran
    for sent in ("e1", "e2", "e4", "e5"):
        assert "sent to" in seen[sent].content
    assert handler.failures == {}


# (r) the response seam ------------------------------------------------------

PII_ANSWER = "Write to ann@example.com or call +1 555 123 4567."
REDACTED = "Write to [redacted] or call [redacted]."


class RecordingRenderer:
    """A plain Python ``on_response_render`` handler: appends ``suffix`` to
    what it is given (``None``: answers a non-string, which symfonic drops)
    and records every content it saw."""

    def __init__(self, suffix: str | None) -> None:
        self.suffix = suffix
        self.seen: list[str] = []

    async def on_response_render(self, content: str, state: Any, metadata: Any) -> Any:
        self.seen.append(content)
        return None if self.suffix is None else content + self.suffix


def test_pii_redact_redacts_the_answer_the_caller_receives(guards: StartGuards) -> None:
    g = guards("pii-redact")
    agent, t = make_agent([call("list_tables", "c1"), say(PII_ANSWER)])
    handler = g.handler()
    resp = run_agent(agent, handler, "who do I write to?", scope=scope("acme"))

    assert resp.final_response == REDACTED
    assert t.ran == [("list_tables", {})], "the run's tool calls went on"
    assert handler.calls["response"] == 1, "once per run"
    assert handler.failures == {}


def test_response_guards_take_the_previous_handlers_answer_and_pass_theirs_on(
    guards: StartGuards,
) -> None:
    """symfonic's chain around toolgate: a Python handler registered before
    rewrites the answer, the guards redact what it added, the one after
    receives the redacted answer; a non-string answer of the last one is
    dropped."""
    g = guards("pii-redact")
    agent, _ = make_agent([say("Done.")])
    before = RecordingRenderer(" Mail bob@example.org for more.")
    after = RecordingRenderer(None)
    handler = g.handler()

    async def go() -> Any:
        try:
            return await agent.run("q", callbacks=[before, handler, after])
        finally:
            await handler.aclose()

    resp = asyncio.run(go())
    assert before.seen == ["Done."]
    assert after.seen == ["Done. Mail [redacted] for more."]
    assert resp.final_response == "Done. Mail [redacted] for more."
    assert handler.failures == {}


def test_a_clean_answer_comes_back_unchanged(guards: StartGuards) -> None:
    g = guards("pii-redact")
    agent, _ = make_agent([say("The report is due on 2024-01-15.")])
    handler = g.handler()
    resp = run_agent(agent, handler)
    assert resp.final_response == "The report is due on 2024-01-15."
    assert handler.calls["response"] == 1
    assert handler.failures == {}


def test_the_response_seam_never_fires_from_stream(guards: StartGuards) -> None:
    g = guards("pii-redact")
    agent, _ = make_agent([say(PII_ANSWER)])
    handler = g.handler()

    async def go() -> list[Any]:
        try:
            return [event async for event in agent.stream("q", callbacks=[handler])]
        finally:
            await handler.aclose()

    events = asyncio.run(go())
    assert events, "the stream ran"
    assert handler.calls["response"] == 0


@pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
def test_unreachable_response_guards_resolve_by_the_policy(policy: str) -> None:
    """No service: fail_open delivers the run's answer, fail_closed withholds
    it with the fixed message; the run completes either way."""
    from toolgate_server import free_port

    from toolgate_symfonic import FAIL_CLOSED_ANSWER

    agent, _ = make_agent([say(PII_ANSWER)])
    handler = ToolgateHandler(
        url=f"http://127.0.0.1:{free_port()}", failure_policy=policy, timeout=5.0
    )
    resp = run_agent(agent, handler)
    expected = PII_ANSWER if policy == "fail_open" else FAIL_CLOSED_ANSWER
    assert resp.final_response == expected
    assert handler.failures["response"] == 1
