"""``toolgate.Host``: the toolgate host in this process (the PyO3 module).

Real components (the Rust example guards, built by ``scripts/build-plugins``)
in temporary plugin directories; no mocks.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from toolgate_server import plugin_dir, required_guest, rust_plugin

from toolgate import BusyError, Host, RequestError, ToolgateError

WHERE_MESSAGE = "Add a WHERE clause before running this query."


def steering_event(sql: Any, tool: str = "run_query") -> dict[str, Any]:
    return {"run_id": "r", "tool_name": tool, "call_id": "c1", "args": {"sql": sql}}


def host_over(tmp_path: Path, components: dict[str, Path], **kw: Any) -> Host:
    kw.setdefault("watch", False)
    kw.setdefault("max_instances", 32)
    return Host(plugin_dir(tmp_path / "plugins", components), **kw)


def test_steering_and_its_trace(tmp_path: Path) -> None:
    host = host_over(tmp_path, {"sql-guard.wasm": rust_plugin("sql-guard")})

    async def go() -> tuple[Any, Any, Any]:
        return (
            await host.steering(steering_event("DELETE FROM users")),
            await host.steering(steering_event("DELETE FROM users WHERE id = 7"), state={"a": 1}),
            await host.decide("steering", steering_event("DROP TABLE x"), trace=True),
        )

    skip, proceed, traced = asyncio.run(go())
    assert skip == {"action": "skip", "content": WHERE_MESSAGE, "is_error": True}
    assert proceed is None
    assert traced["result"] == skip
    (entry,) = traced["trace"]
    assert entry["plugin"] == "sql-guard" and entry["outcome"] == "skip"
    assert entry["fuel_used"] > 0 and entry["micros"] >= 0
    assert host.seams() == ["steering"]
    assert host.plugins()["global"][0]["limits"]["timeout_ms"] == 200


def test_big_integers_and_key_order_survive(tmp_path: Path) -> None:
    # The scripted test guest answers the rewrite seam with the JSON text of
    # its configuration verbatim: what the host parses is what Python gets.
    scripted = required_guest("scripted")
    big = 18446744073709551616123
    raw = f'{{"zeta":{big},"sql":"SELECT 1","alpha":[1,-{big},2.5]}}'
    plugins = plugin_dir(tmp_path / "plugins", {"scripted.wasm": scripted})
    (plugins / "toolgate.toml").write_text(
        '[[plugin]]\npath = "scripted.wasm"\n[plugin.config.rewrite]\n'
        f"raw_args = '{raw}'\n"
    )
    host = Host(plugins, watch=False, max_instances=8)
    event = {
        "run_id": "r", "iteration_index": 0, "node_name": "react", "call_id": "c1",
        "tool_name": "run_query", "args": {"b": big, "a": 1}, "available_tools": ["run_query"],
    }
    answer = asyncio.run(host.rewrite(event))
    assert answer == {
        "tool_name": "run_query",
        "args": {"zeta": big, "sql": "SELECT 1", "alpha": [1, -big, 2.5]},
    }
    assert list(answer["args"]) == ["zeta", "sql", "alpha"]
    assert isinstance(answer["args"]["zeta"], int)


def test_state_reaches_the_guard_as_passed_and_no_call_sees_another(tmp_path: Path) -> None:
    # The memo test guest echoes the state it got, with what it found of
    # earlier calls (a static counter, the previous call id): nothing, on a
    # fresh instance per call.
    import json

    host = host_over(tmp_path, {"memo.wasm": required_guest("memo")})
    big = 18446744073709551616123
    state = {"zeta": big, "alpha": {"y": -big, "b": 0.1}, "tenant": "acme"}
    dispatch = {
        "run_id": "r", "iteration_index": 0, "node_name": "react", "call_id": "d1",
        "tool_name": "run_query", "args": {}, "available_tools": ["run_query"],
    }

    async def go() -> list[Any]:
        answers = []
        for i in range(8):
            event = {**steering_event("SELECT 1"), "call_id": f"c{i}"}
            answers.append(await host.steering(event, state={**state, "turn": i}))
        answers.append(await host.rewrite(dispatch, state=state))
        answers.append(await host.steering(steering_event("SELECT 1")))
        return answers

    *steered, rewritten, bare = asyncio.run(go())
    for i, answer in enumerate(steered):
        assert answer["action"] == "skip" and answer["is_error"] is False, answer
        seen = json.loads(answer["content"])
        assert seen == {"calls": 1, "last": None, "state": {**state, "turn": i}}, i
        assert list(seen["state"]) == ["zeta", "alpha", "tenant", "turn"]
        assert list(seen["state"]["alpha"]) == ["y", "b"]
    assert rewritten == {
        "tool_name": "run_query",
        "args": {"calls": 1, "last": None, "state": state},
    }
    assert list(rewritten["args"]["state"]) == ["zeta", "alpha", "tenant"]
    assert json.loads(bare["content"]) == {"calls": 1, "last": None, "state": {}}


def test_two_hosts_with_state_in_redis_count_one_run_together(tmp_path: Path, redis_url: str) -> None:
    # Two agent processes' embedded hosts (here, two in one): the
    # tool-call-limit guard's run count is theirs together.
    manifest = '[[plugin]]\npath = "tool-call-limit.wasm"\n[plugin.config]\ntool = "send_email"\nrun_limit = 2\n'
    hosts = []
    for name in ["a", "b"]:
        plugins = plugin_dir(tmp_path / name, {"tool-call-limit.wasm": rust_plugin("tool-call-limit")})
        (plugins / "toolgate.toml").write_text(manifest)
        hosts.append(Host(plugins, watch=False, max_instances=8, state=redis_url))
    a, b = hosts

    def email(call: str) -> dict[str, Any]:
        return {"run_id": "r", "tool_name": "send_email", "call_id": call, "args": {"n": call}}

    async def go() -> list[Any]:
        return [
            await a.steering(email("1")),
            await b.steering(email("2")),
            await a.steering(email("3")),
            await b.steering(dict(email("4"), run_id="another run")),
        ]

    cancelled = {
        "action": "skip",
        "content": "Tool call limit exceeded. Do not call 'send_email' again.",
        "is_error": False,
    }
    assert asyncio.run(go()) == [None, None, cancelled, None]


def test_a_state_it_cannot_use_is_a_value_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r'"mongo://x".*redis://'):
        host_over(tmp_path, {}, state="mongo://x")
    with pytest.raises(ValueError, match="MiB"):
        host_over(tmp_path, {}, state="memory:lots")


def test_request_text_reads_back_as_json_dumps_does(tmp_path: Path) -> None:
    # The extension writes plain JSON values itself; the text must read back
    # exactly as json.dumps's does, and everything else is left to
    # json.dumps (None), which then raises what it raises.
    import json
    from collections import OrderedDict

    from toolgate._native import dumps

    plain = [
        None, True, False, 0, -7, 2**63, -(10**39), 10**39, 1.5, -0.0, 1e16, 1e-7, 2.5e300,
        "", "é \" \\ \n \x00 \u2028 😀", [], {}, (1, "two", [3.0]),
        {"z": 1, "a": [1, {"y": None, "x": True}], "": {"nested": (1.25,)}},
    ]
    for value in plain:
        text = dumps(value)
        assert text is not None, value
        reference = json.dumps(value, separators=(",", ":"), allow_nan=False)
        assert json.loads(text) == json.loads(reference), value
        assert text == json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    assert list(json.loads(dumps({"b": 1, "a": 2}))) == ["b", "a"]

    class Text(str):
        pass

    deep: list[Any] = []
    for _ in range(300):
        deep = [deep]
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    for other in (
        float("nan"), float("inf"), {1: "int key"}, {"k": {(1, 2): 3}}, Text("s"), "\ud800",
        OrderedDict(a=1), {1, 2}, object(), b"bytes", deep, cyclic,
    ):
        assert dumps(other) is None, other

    # Through Host: what json.dumps refuses still raises, the rest is decided.
    host = host_over(tmp_path, {"sql-guard.wasm": rust_plugin("sql-guard")})
    with pytest.raises(ValueError):
        asyncio.run(host.steering(steering_event(float("nan"))))
    with pytest.raises(TypeError):
        asyncio.run(host.steering(steering_event(object())))
    text_sql = Text("DELETE FROM users")
    assert asyncio.run(host.steering(steering_event(text_sql), state={1: "x"}))["action"] == "skip"


def test_routing_and_result(tmp_path: Path) -> None:
    host = host_over(
        tmp_path,
        {
            "hide-admin-tools.wasm": rust_plugin("hide-admin-tools"),
            "result-audit.wasm": rust_plugin("result-audit"),
        },
    )
    routing = {
        "run_id": "r", "mode": "off", "intent_label": "", "total_tools": 3,
        "narrowed_tool_names": ["run_query", "admin_purge", "list_tables"],
    }
    result = {"run_id": "r", "tool_name": "run_query", "result": "ok", "call_id": "c1"}

    async def go() -> tuple[Any, Any]:
        return await host.routing(routing), await host.result(result, trace=True)

    visible, observed = asyncio.run(go())
    assert visible == ["run_query", "list_tables"]
    assert observed["result"] is None
    assert [e["outcome"] for e in observed["trace"]] == ["observed"]


def response_event(content: str) -> dict[str, Any]:
    return {
        "run_id": "r", "iteration_index": 0, "model": "m", "node_name": "react",
        "original_content": content,
    }


def test_response_gives_the_final_answer_string(tmp_path: Path) -> None:
    host = host_over(tmp_path, {"pii-redact.wasm": rust_plugin("pii-redact")})
    pii = "Write to ann@example.com or call +1 555 123 4567."

    async def go() -> list[Any]:
        return [
            await host.response(response_event(pii)),
            await host.response(response_event("nothing to hide")),
            await host.response(response_event(pii), trace=True),
            # A handler before toolgate rewrote it: the guards start from `content`.
            await host.response({**response_event("hi"), "content": "hi bob@example.org"}),
        ]

    redacted, clean, traced, rewritten = asyncio.run(go())
    assert redacted == "Write to [redacted] or call [redacted]."
    assert clean == "nothing to hide"
    assert traced["result"] == redacted
    assert [e["outcome"] for e in traced["trace"]] == ["rewrite"]
    assert rewritten == "hi [redacted]"
    assert host.seams() == ["response"]
    with pytest.raises(RequestError, match="original_content"):
        asyncio.run(host.response({"run_id": "r", "iteration_index": 0, "model": "m", "node_name": "n"}))


def test_tenants_run_their_own_guards(tmp_path: Path) -> None:
    host = host_over(tmp_path, {"tenants/acme/sql-guard.wasm": rust_plugin("sql-guard")})

    async def go() -> list[Any]:
        event = steering_event("DELETE FROM users")
        return [
            await host.steering(event, tenant="acme"),
            await host.steering(event, tenant="globex"),
            await host.steering(event),
        ]

    acme, other, none = asyncio.run(go())
    assert acme is not None and acme["content"] == WHERE_MESSAGE
    assert other is None and none is None
    assert list(host.plugins()["tenants"]) == ["acme"]


def test_invalid_requests_raise_request_error(tmp_path: Path) -> None:
    host = host_over(tmp_path, {"sql-guard.wasm": rust_plugin("sql-guard")})

    async def refused(seam: str, event: Any, **kw: Any) -> str:
        with pytest.raises(RequestError) as info:
            await host.decide(seam, event, **kw)
        return str(info.value)

    async def go() -> list[str]:
        return [
            await refused("steering", {"run_id": "r", "tool_name": "t", "call_id": "c"}),
            await refused("steering", steering_event("x"), tenant="../etc"),
            await refused("steering", {**steering_event("x"), "args": "not an object"}),
        ]

    missing, tenant, args = asyncio.run(go())
    assert "args" in missing
    assert "tenant" in tenant
    assert "event.args" in args
    assert issubclass(RequestError, ToolgateError)
    assert RequestError.__module__ == "toolgate"
    with pytest.raises(ValueError, match="unknown seam"):
        asyncio.run(host.decide("nope", steering_event("x")))


def test_a_missing_directory_or_broken_manifest_raises(tmp_path: Path) -> None:
    with pytest.raises(ToolgateError, match="not a directory"):
        Host(tmp_path / "absent", watch=False)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "toolgate.toml").write_text("[[plugin]]\nnope = 1\n")
    with pytest.raises(ToolgateError, match="toolgate.toml"):
        Host(broken, watch=False)


def test_hot_reload(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    host = Host(plugins, watch=True, settle_ms=50, max_instances=32)
    assert host.watching and host.generation == 1
    event = steering_event("DELETE FROM users")
    assert asyncio.run(host.steering(event)) is None
    # The atomic-rename convention: write a dotfile, rename it into place.
    shutil.copyfile(rust_plugin("sql-guard"), plugins / ".sql-guard.wasm")
    os.rename(plugins / ".sql-guard.wasm", plugins / "sql-guard.wasm")
    deadline = time.monotonic() + 30
    while host.generation == 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host.generation == 2
    assert asyncio.run(host.steering(event)) is not None
    (plugins / "sql-guard.wasm").unlink()
    host.close()
    assert not host.watching
    report = host.reload()
    assert report["generation"] == 3 and report["removed"]
    assert asyncio.run(host.steering(event)) is None


def test_metrics(tmp_path: Path) -> None:
    host = host_over(tmp_path, {"sql-guard.wasm": rust_plugin("sql-guard")})
    asyncio.run(host.steering(steering_event("DELETE FROM users")))
    text = host.metrics()
    assert 'toolgate_guard_calls_total{plugin="sql-guard",seam="steering"} 1' in text
    assert 'toolgate_decisions_total{seam="steering",verdict="skip"} 1' in text
    assert "toolgate_plugins_generation 1" in text


# One call at a time: a second concurrent long call of the same account
# runs on the long lane's idle-priority threads, which a machine busy with
# other processes can starve past the call's wall-clock bound (`overloaded`,
# a BusyError), as the host intends; that is not what this test is about.
CALLS = 1


def test_calls_block_neither_the_event_loop_nor_the_gil(tmp_path: Path) -> None:
    hostile = required_guest("hostile")
    # The hostile guard spins on a `loop` call until its deadline: 100 ms of
    # its own run time (CPU time, so as long on a fast machine as on a slow
    # one), unmetered by fuel. (Short: a call starved past its wall-clock
    # bound of timeout + 1 s would be answered `overloaded` instead.)
    plugins = plugin_dir(tmp_path / "plugins", {"hostile.wasm": hostile})
    (plugins / "toolgate.toml").write_text(
        "[ceilings]\ntimeout_ms = 2000\nfuel = 9223372036854775807\n\n"
        '[[plugin]]\npath = "hostile.wasm"\ntimeout_ms = 100\nfuel = 9223372036854775807\n'
    )
    host = Host(plugins, watch=False, max_instances=32)
    counted = 0
    stop = threading.Event()

    def count() -> None:  # pure Python: runs only while nobody holds the GIL
        nonlocal counted
        while not stop.is_set():
            counted += 1

    async def go() -> tuple[list[int], list[Any]]:
        calls = [
            asyncio.ensure_future(
                host.decide(
                    "steering",
                    {**steering_event(None, tool="loop"), "call_id": f"l{i}"},
                    trace=True,
                )
            )
            for i in range(CALLS)
        ]
        # What the loop saw while it ran beside the calls: the counting
        # thread's count at each turn of this loop taken while no call had
        # ended yet. A call that blocked the loop would let no turn happen
        # before it ended; one that held the GIL would stop the count.
        seen: list[int] = []
        while not any(c.done() for c in calls):
            seen.append(counted)
            await asyncio.sleep(0.001)
        return seen, await asyncio.gather(*calls)

    thread = threading.Thread(target=count)
    thread.start()
    try:
        seen, answers = asyncio.run(go())
    finally:
        stop.set()
        thread.join()
    # Each call ran until the host stopped it at its deadline and was
    # skipped: it did take its time.
    assert [a["result"] for a in answers] == [None] * CALLS
    faults = [entry.get("fault") for a in answers for entry in a["trace"]]
    assert faults == ["deadline"] * CALLS, answers
    # The loop turned while every call was in flight, and the Python thread
    # counted meanwhile.
    assert len(seen) >= 2, seen
    assert seen[-1] > seen[0], seen


def test_a_tenant_over_its_requests_in_progress_raises_busy_error(tmp_path: Path) -> None:
    hostile = required_guest("hostile")
    root = plugin_dir(
        tmp_path / "plugins",
        {"tenants/a/hostile.wasm": hostile, "tenants/b/sql-guard.wasm": rust_plugin("sql-guard")},
    )
    (root / "toolgate.toml").write_text(
        "[ceilings]\ntimeout_ms = 2000\nfuel = 9223372036854775807\n\n"
        "[shares]\ntenant_requests = 1\nwait_ms = 50\n\n[quarantine]\nfaults = 0\n"
    )
    (root / "tenants/a/toolgate.toml").write_text(
        '[[plugin]]\npath = "hostile.wasm"\ntimeout_ms = 1000\nfuel = 9223372036854775807\n'
    )
    host = Host(root, watch=False, max_instances=32)
    spin = steering_event(None, tool="loop")

    async def go() -> tuple[Any, Any]:
        first = asyncio.ensure_future(host.steering(spin, tenant="a"))
        await asyncio.sleep(0.2)
        with pytest.raises(BusyError, match="`a` has 1 requests in progress"):
            await host.steering(spin, tenant="a")
        # Another tenant is answered meanwhile.
        other = await host.steering(steering_event("DELETE FROM users"), tenant="b")
        return await first, other

    first, other = asyncio.run(go())
    assert first is None  # the spinner hit its deadline and was skipped
    assert other is not None and other["content"] == WHERE_MESSAGE
    assert issubclass(BusyError, ToolgateError)
    assert "toolgate_share_busy{account=\"a\"} 1" in host.metrics()


def test_a_tenant_over_its_rate_raises_busy_error_and_another_is_answered(tmp_path: Path) -> None:
    root = plugin_dir(
        tmp_path / "plugins",
        {"tenants/a/sql-guard.wasm": rust_plugin("sql-guard"), "tenants/b/sql-guard.wasm": rust_plugin("sql-guard")},
    )
    (root / "toolgate.toml").write_text("[shares]\ntenant_rate = 1\ntenant_burst = 2\nwait_ms = 100\n")
    host = Host(root, watch=False, max_instances=32)
    delete = steering_event("DELETE FROM users")

    async def go() -> list[Any]:
        # a's burst of 2 at once; its next turn is a second away, past the wait.
        answers = [await host.steering(delete, tenant="a") for _ in range(2)]
        with pytest.raises(BusyError, match=r"`a` may start 1 requests a second \(2 at once\)"):
            await host.steering(delete, tenant="a")
        answers.append(await host.steering(delete, tenant="b"))
        return answers

    answers = asyncio.run(go())
    assert [a["content"] for a in answers] == [WHERE_MESSAGE] * 3
    assert "toolgate_share_over_rate{account=\"a\"} 1" in host.metrics()
    assert "toolgate_share_over_rate{account=\"b\"} 0" in host.metrics()


def test_every_decision_is_logged_masked_as_serve_logs_it(tmp_path: Path) -> None:
    import hashlib
    import json

    log = tmp_path / "decisions.jsonl"
    guard = rust_plugin("sql-guard")
    host = host_over(
        tmp_path,
        {"sql-guard.wasm": guard},
        decision_log={"path": str(log), "include": ["args"], "mask": ["args.sql"]},
    )
    skip = asyncio.run(host.steering(steering_event("DELETE FROM users"), tenant=None))
    assert skip == {"action": "skip", "content": WHERE_MESSAGE, "is_error": True}
    # The writer flushes whenever its queue is empty: wait for the line.
    deadline = time.monotonic() + 30
    while not (log.exists() and log.read_text().endswith("\n")) and time.monotonic() < deadline:
        time.sleep(0.01)
    text = log.read_text()
    assert "DELETE FROM users" not in text
    (line,) = [json.loads(t) for t in text.splitlines()]
    assert (line["seam"], line["verdict"], line["tenant"]) == ("steering", "skip", None)
    assert line["decision"] == skip
    assert line["args"] == {"sql": "[masked]"}
    (guard_line,) = line["guards"]
    assert guard_line["plugin"] == "sql-guard" and guard_line["mode"] == "enforce"
    assert guard_line["digest"] == hashlib.sha256(guard.read_bytes()).hexdigest()
    host.close()


def test_a_bad_decision_log_setting_is_a_value_error_naming_its_key(tmp_path: Path) -> None:
    guard = {"sql-guard.wasm": rust_plugin("sql-guard")}
    with pytest.raises(ValueError, match=r"decision_log\.include"):
        host_over(tmp_path, guard, decision_log={"include": ["secrets"]})
    with pytest.raises(ValueError, match=r"decision_log: unknown field `sinks`"):
        host_over(tmp_path, guard, decision_log={"sinks": "stdout"})


# Lifecycle events ------------------------------------------------------------

BUDGET_MANIFEST = '[[plugin]]\npath = "token-budget.wasm"\n[plugin.config]\nmax_tokens = 100\n'
OVER_BUDGET = {
    "action": "skip",
    "content": "Token budget of 100 exceeded. Answer with what you have.",
    "is_error": False,
}


def llm_end(run_id: str, total: int) -> dict[str, Any]:
    return {"model": "m", "output": "o", "usage": {"total_tokens": total}, "run_id": run_id}


def budget_host(tmp_path: Path) -> Host:
    """A host over token-budget with a budget of 100 tokens."""
    plugins = plugin_dir(tmp_path / "plugins", {"token-budget.wasm": rust_plugin("token-budget")})
    (plugins / "toolgate.toml").write_text(BUDGET_MANIFEST)
    return Host(plugins, watch=False, max_instances=32)


def test_observe_returns_at_once_and_the_next_decision_of_the_run_sees_it(tmp_path: Path) -> None:
    host = budget_host(tmp_path)
    call = {"run_id": "r1", "tool_name": "search", "call_id": "c", "args": {}}

    async def go() -> list[Any]:
        answers = [await host.steering(call)]
        assert host.observe("on_llm_end", llm_end("r1", 60)) == "queued"
        answers.append(await host.steering(call))
        assert host.observe("on_llm_end", llm_end("r1", 40)) == "queued"
        answers.append(await host.steering(call))
        # Another run has spent nothing; an event nobody observes does nothing.
        answers.append(await host.steering({**call, "run_id": "r2"}))
        assert host.observe("on_agent_start", {"query": "q", "run_id": "r2"}) == "unobserved"
        return answers

    assert asyncio.run(go()) == [None, None, OVER_BUDGET, None]


def test_observe_refuses_an_unknown_hook_or_a_bad_field_naming_it(tmp_path: Path) -> None:
    host = budget_host(tmp_path)
    with pytest.raises(RequestError, match="field `hook`: unknown lifecycle hook `on_nothing`"):
        host.observe("on_nothing", {"run_id": "r"})
    with pytest.raises(RequestError, match="missing field `usage`"):
        host.observe("on_llm_end", {"model": "m", "output": "o"})
    with pytest.raises(RequestError, match=r"`event\.usage`: invalid type"):
        host.observe("on_llm_end", {"model": "m", "output": "o", "usage": 5})
    with pytest.raises(RequestError, match="field `tenant`"):
        host.observe("on_llm_end", llm_end("r", 1), tenant="../x")
    with pytest.raises(ValueError):
        host.observe("on_llm_end", {**llm_end("r", 1), "duration_ms": float("nan")})
    # The host goes on serving.
    assert host.observe("on_llm_end", llm_end("r", 1)) == "queued"


def test_hooks_follow_what_is_loaded_across_reloads(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    host = Host(plugins, watch=False, max_instances=32)
    assert host.hooks() == {"hooks": [], "response": False, "generation": 1}
    shutil.copyfile(rust_plugin("token-budget"), plugins / "token-budget.wasm")
    (plugins / "toolgate.toml").write_text(BUDGET_MANIFEST)
    host.reload()
    assert host.hooks() == {"hooks": ["on_llm_end"], "response": False, "generation": 2}
    # A tenant's guard counts as much as a global one.
    plugin_dir(plugins, {"tenants/acme/pii-redact.wasm": rust_plugin("pii-redact")})
    host.reload()
    assert host.hooks() == {"hooks": ["on_llm_end"], "response": True, "generation": 3}
    (plugins / "token-budget.wasm").unlink()
    (plugins / "toolgate.toml").unlink()
    host.reload()
    assert host.hooks() == {"hooks": [], "response": True, "generation": 4}
