"""Builds a guard that implements all four seams and runs it in the real host.

Each call goes through ``toolgate check`` (the binary is ``$TOOLGATE_BIN``,
default ``target/debug/toolgate``; a missing binary fails the tests) over a
plugin directory holding the component, with its configuration in the
manifest; what the guard logged is read from the host's log. So this checks
the SDK's glue end to end — every seam, every return shape, print/stderr
capture, a raising hook — as a deployed guard runs. Takes one
componentize-py build per guard (~30 s) and one compile of it (cached).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import textwrap
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from toolgate_guest import build
from toolgate_guest.wasminfo import read_component_file

REPO = Path(__file__).resolve().parents[3]

PKG = "toolgate:guard"
VER = "@0.3.0"

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
        if action == "state":  # the build saw no import of toolgate_guest.state
            return steer(str(sys.modules["toolgate_guest"].state.add("n", 1)))
        return None

    def on_result(self, event):
        log(f"result={event.result!r} deferred={event.deferred} error={event.is_error}", "debug")
'''


# A guard's own log line, as the host writes it: level, plugin, message.
GUARD_LOG = re.compile(r"^\S+ +(TRACE|DEBUG|INFO|WARN|ERROR) (?:guard\{[^}]*\}: )?"
                       r"toolgate::sandbox: (.*) plugin=\"guard\"$")


class Trap(Exception):
    """The guard's call faulted; the host skipped it."""


class Host:
    """The real host over one component: ``toolgate check``, one call each."""

    def __init__(self, component_path: Path, work: Path) -> None:
        binary = Path(os.environ.get("TOOLGATE_BIN") or REPO / "target/debug/toolgate")
        if not binary.is_file():
            pytest.fail(f"toolgate binary not found at {binary}: `cargo build --workspace` "
                        "builds it, or set TOOLGATE_BIN", pytrace=False)
        self.binary = binary
        self.plugins = work / "plugins"
        self.plugins.mkdir(parents=True, exist_ok=True)
        (self.plugins / "guard.wasm").write_bytes(component_path.read_bytes())
        self.cache = work / "cache"
        self.logs: list[tuple[str, str]] = []
        self.config = "{}"
        self.state: dict[str, Any] = {}

    def call(self, seam: str, **event: Any) -> Any:
        """Runs one event through the guard; returns the host's answer, or
        raises Trap when the guard faulted (then the host skipped it)."""
        manifest = '[[plugin]]\npath = "guard.wasm"\non_error = "skip"\n'
        for key, value in json.loads(self.config).items():
            manifest += f"[plugin.config]\n{key} = {json.dumps(value)}\n"
        (self.plugins / "toolgate.toml").write_text(manifest)
        state = self.plugins.parent / "state.json"
        state.write_text(json.dumps(self.state))
        proc = subprocess.run(
            [str(self.binary), "check", "--plugins", str(self.plugins), "--seam", seam,
             "--event", "-", "--state", str(state), "--cache-dir", str(self.cache)],
            input=json.dumps(event), capture_output=True, text=True, timeout=600,
            env={**os.environ, "TOOLGATE_LOG": "toolgate::sandbox=trace,warn", "NO_COLOR": "1"},
        )
        assert proc.returncode == 0, proc.stderr
        for line in proc.stderr.splitlines():
            m = GUARD_LOG.match(line)
            if m:
                self.logs.append((m[1].lower(), m[2]))
        out = json.loads(proc.stdout)
        (entry,) = out["trace"]
        if entry.get("fault"):
            raise Trap(entry)
        return out["result"]


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
def compiled(component: Path, tmp_path_factory: pytest.TempPathFactory) -> Host:
    return Host(component, tmp_path_factory.mktemp("host"))  # compiled once, then cached


@pytest.fixture
def host(compiled: Host) -> Host:
    compiled.logs.clear()
    compiled.config = "{}"
    compiled.state = {}
    return compiled


def steering(host: Host, args: dict[str, Any]) -> Any:
    return host.call("steering", run_id="r", tool_name="t", call_id="call-7", args=args)


def test_exports_every_implemented_seam_and_imports_no_wasi(component: Path) -> None:
    info = read_component_file(component)
    seams = sorted(n for n in info.export_names() if n.startswith(PKG))
    assert seams == [f"{PKG}/{s}{VER}" for s in ("result", "rewrite", "routing", "steering")]
    assert sorted(info.import_names()) == [f"{PKG}/host{VER}", f"{PKG}/types{VER}"]


def skip(content: str, is_error: bool) -> dict[str, Any]:
    return {"action": "skip", "content": content, "is_error": is_error}


def test_steering_verdicts(host: Host) -> None:
    assert steering(host, {}) is None
    assert steering(host, {"do": "steer"}) == skip("no: call-7", True)
    assert steering(host, {"do": "cancel"}) == skip("skipped politely", False)
    # The seed's dict shape with no is_error: the host's default, an error.
    assert steering(host, {"do": "seed"}) == skip("seed shape", True)
    assert host.logs == []


def test_a_raising_hook_is_logged_then_traps(host: Host) -> None:
    with pytest.raises(Trap):
        steering(host, {"do": "raise", "sql": "SELECT 1"})
    errors = [m for level, m in host.logs if level == "error"]
    assert len(errors) == 1, host.logs
    assert errors[0].startswith("guard raised ValueError: bad sql SELECT 1 (at ")
    assert "in before_tool_call" in errors[0]


def test_a_wrong_return_type_traps_with_a_message(host: Host) -> None:
    with pytest.raises(Trap):
        steering(host, {"do": "bad"})
    assert [level for level, _ in host.logs] == ["error"], host.logs
    assert host.logs[0][1].startswith(
        "guard raised TypeError: before_tool_call returned int; expected steer(...)")


def test_state_in_a_guard_built_without_it_traps_with_a_message(host: Host) -> None:
    with pytest.raises(Trap):
        steering(host, {"do": "state"})
    (error,) = [m for level, m in host.logs if level == "error"]
    assert error.startswith("guard raised RuntimeError: this guard was built without the "
                            "toolgate:guard/state import; the build adds it when the guard file imports "
                            "toolgate_guest.state, or with --state"), error


def test_stderr_goes_to_the_log_as_warn(host: Host) -> None:
    assert steering(host, {"do": "stderr"}) is None
    assert host.logs == [("warn", "careful")]


def test_rewrite(host: Host) -> None:
    def dispatch(tool: str, args: dict[str, Any], state: dict[str, Any]) -> Any:
        host.state = state
        return host.call("rewrite", run_id="r", iteration_index=4, node_name="react", call_id="c",
                         tool_name=tool, args=args, available_tools=["search"])

    assert dispatch("other", {"q": 1}, {}) is None
    assert dispatch("as_dict", {"q": "x"}, {"tenant": "acme"}) == {
        "tool_name": "search", "args": {"q": "x", "tenant": "acme"}}
    host.config = '{"target": "search"}'
    assert dispatch("from_config", {}, {}) == {"tool_name": "search", "args": {"n": 4}}


def routing_event(names: list[str], query: str | None, label: str = "sql") -> dict[str, Any]:
    return {"run_id": "r", "mode": "enforce", "intent_label": label, "total_tools": 5,
            "narrowed_tool_names": names, "saved_tokens_estimate": 0,
            "tools": [{"name": n, "description": ""} for n in names], "query": query}


def test_routing_and_print(host: Host) -> None:
    assert host.call("routing", **routing_event(["search", "admin_drop"], "find it")) == ["search"]
    # No narrowing: the names offered stay visible.
    assert host.call("routing", **routing_event(["search", "admin_drop"], None)) == ["search", "admin_drop"]
    assert host.logs == [("info", "narrowing 2 tools for sql")] * 2


def test_result_seam_logs(host: Host) -> None:
    assert host.call("result", run_id="r", tool_name="t", result={"rows": 3}, call_id="c",
                     deferred=False, is_error=True) is None
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

    def on_response_render(self, event):
        if event.content == "keep":
            return None
        if event.content == "bad":
            return b"bytes"
        return f"{event.content}|{event.original_content}|{event.model}|{event.iteration_index}|{event.state}"
'''


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> Host:
    return Host(build_guard(tmp_path_factory, "named", NAMED_GUARD), tmp_path_factory.mktemp("named-host"))


def test_symfonic_hook_names_reach_every_seam(named: Host) -> None:
    named.logs.clear()
    assert named.call("routing", **routing_event(["a", "b"], None, "x")) == ["a"]
    got = named.call("rewrite", run_id="r", iteration_index=0, node_name="react", call_id="c",
                     tool_name="t", args={}, available_tools=["search"])
    assert got == {"tool_name": "search", "args": {"was": "t"}}
    assert steering(named, {}) == skip("no: t", True)
    assert named.call("result", run_id="r", tool_name="t", result=None, call_id="c",
                      deferred=False, is_error=False) is None
    assert named.logs == [("info", "saw t")]
    with pytest.raises(Trap):
        steering(named, {"do": "bad"})
    assert named.logs[-1][1].startswith("guard raised TypeError: on_before_tool_call returned int")


def test_the_response_hook_answers_a_string_or_keeps_the_content(named: Host) -> None:
    named.logs.clear()
    event = {"run_id": "r", "iteration_index": 2, "model": "m", "node_name": "react",
             "original_content": "orig"}
    assert named.call("response", **event) == "orig|orig|m|2|{}"
    named.state = {"mode": "x"}
    assert named.call("response", **event, content="now") == "now|orig|m|2|{'mode': 'x'}"
    assert named.call("response", **event, content="keep") == "keep"
    with pytest.raises(Trap):
        named.call("response", **event, content="bad")
    assert named.logs[-1][1].startswith("guard raised TypeError: on_response_render returned bytes")
    info = read_component_file(named.plugins / "guard.wasm")
    assert f"{PKG}/response{VER}" in info.export_names()


# A guard that keeps state and checks its config: each steering call runs
# the state operations its args list and steers with their answers as JSON.
STATEFUL_GUARD = '''
import json
from toolgate_guest import Guard, state, steer


class Stateful(Guard):
    def validate_config(self, config):
        if "refuse" in config:
            raise ValueError(f"refused: {config['refuse']}")
        if "crash" in config:
            return config["crash"]["missing"]

    def on_before_tool_call(self, event):
        answers = []
        for op, key, *rest in event.args["ops"]:
            scope = "tenant" if key.startswith("t.") else state.Scope.RUN
            if op == "get":
                answers.append(state.get(key, scope=scope))
            elif op == "set":
                answers.append(state.set(key, rest[0], scope=scope, ttl_ms=rest[1] if rest[1:] else None))
            elif op == "delete":
                answers.append(state.delete(key, scope=scope))
            else:
                answers.append(state.add(key, rest[0], scope=scope, ttl_ms=None))
        return steer(json.dumps(answers))
'''


@pytest.fixture(scope="module")
def stateful(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_guard(tmp_path_factory, "stateful", STATEFUL_GUARD)


def test_a_stateful_guard_imports_state_and_exports_config(stateful: Path) -> None:
    info = read_component_file(stateful)
    assert sorted(n for n in info.export_names() if n.startswith(PKG)) == [
        f"{PKG}/config{VER}", f"{PKG}/steering{VER}"]
    assert sorted(info.import_names()) == [f"{PKG}/{i}{VER}" for i in ("host", "state", "types")]


def replay_ops(binary: Path, plugins: Path, calls: list[tuple[str, list[list[Any]]]]) -> list[dict[str, Any]]:
    """Each (run id, ops) through `toolgate replay --json`, in one process."""
    trace = plugins.parent / "trace.jsonl"
    trace.write_text("".join(json.dumps({"seam": "steering", "event": {
        "run_id": run, "tool_name": "t", "call_id": f"c{i}", "args": {"ops": ops}}}) + "\n"
        for i, (run, ops) in enumerate(calls)))
    proc = subprocess.run([str(binary), "replay", "--plugins", str(plugins), "--json", str(trace)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n--\n")[0].splitlines()
    return [json.loads(line) for line in lines]


def test_state_through_the_host(stateful: Path, tmp_path: Path) -> None:
    host = Host(stateful, tmp_path)
    out = replay_ops(host.binary, host.plugins, [
        ("r1", [["set", "a", "1"], ["get", "a"], ["add", "n", 1], ["add", "n", 2], ["get", "n"],
                ["delete", "a"], ["get", "a"], ["get", "t.n"], ["add", "t.n", 5]]),
        ("r1", [["get", "a"], ["get", "n"], ["get", "t.n"]]),
        ("r2", [["get", "n"], ["add", "t.n", -1]]),
        ("r1", [["set", "s", "x"], ["add", "n", 1], ["add", "s", 1]]),  # traps: s is no integer
        ("r1", [["get", "s"], ["get", "n"], ["set", "k", "v", 0], ["get", "k"]]),
    ])
    answers = [json.loads(d["result"]["content"]) if d["result"] else None for d in out]
    assert answers == [
        [None, "1", 1, 3, "3", None, None, None, 5],  # a call reads its own writes
        [None, "3", "5"],  # what r1's first call wrote, committed
        [None, 4],  # another run: its own run scope, the same tenant scope
        None,  # the fault: the call proceeds, its set undone and its add given back
        [None, "3", None, None],
    ]
    assert out[3]["trace"][0]["fault"] == "state-invalid", out[3]


def test_validate_config_refuses_at_load(stateful: Path, tmp_path: Path) -> None:
    host = Host(stateful, tmp_path)

    def errors(config: str) -> list[str]:
        (host.plugins / "toolgate.toml").write_text(f'[[plugin]]\npath = "guard.wasm"\n[plugin.config]\n{config}\n')
        proc = subprocess.run([str(host.binary), "list", "--plugins", str(host.plugins)],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["errors"]

    assert errors('other = 1') == []
    assert errors('refuse = "no thanks"') == [
        f"{host.plugins}/toolgate.toml:3 ({host.plugins}/guard.wasm): plugin `guard` refuses its config: refused: no thanks"]
    # A check that raises anything but ValueError/TypeError traps: refused too.
    (crashed,) = errors("crash = {}")
    assert crashed.startswith(f"{host.plugins}/toolgate.toml:3 ({host.plugins}/guard.wasm): plugin `guard` refuses its config: "
                              "validate-config faulted ("), crashed


# A guard that sends the request its args describe and steers with what came
# back: the status, the x-* response headers and the body.
FETCH_GUARD = '''
import json
from toolgate_guest import http, steer


def on_before_tool_call(event):
    a = event.args
    answer = http.send(a["method"], a["url"], [tuple(h) for h in a.get("headers", [])], a.get("body", ""))
    return steer(json.dumps({"status": answer.status, "ok": answer.ok, "text": answer.text(),
                             "x": [[k, v] for k, v in answer.headers if k.startswith("x-")],
                             "answer": answer.header("X-Answer")}))
'''


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers `/<status>` with that status, an `x-answer` header and, as
    JSON, the method, path, x-* headers and body it was sent."""

    def do_any(self) -> None:
        n = int(self.headers.get("content-length") or 0)
        body = json.dumps({
            "method": self.command, "path": self.path,
            "x": [[k.lower(), v] for k, v in self.headers.items() if k.lower().startswith("x-")],
            "body": self.rfile.read(n).decode(),
        }).encode()
        self.send_response(int(self.path.strip("/") or 200))
        self.send_header("x-answer", "42")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_any

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def echo_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def test_http_through_the_host(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, echo_server: str) -> None:
    component = build_guard(tmp_path_factory, "fetch", FETCH_GUARD)
    assert sorted(read_component_file(component).import_names()) == [
        f"{PKG}/{i}{VER}" for i in ("host", "http", "types")]
    host = Host(component, tmp_path)
    (host.plugins / "toolgate.toml").write_text(
        f'[[plugin]]\npath = "guard.wasm"\nallowed_hosts = ["{echo_server}"]\n'
        'allowed_networks = ["127.0.0.1"]\nhttp_methods = ["GET", "POST"]\n'
        'timeout_ms = 10_000\n')  # waiting counts: a busy machine is no http-failed
    ungranted = echo_server.rsplit(":", 1)[0] + ":9"  # the same address, another port
    calls = [
        {"method": "POST", "url": f"{echo_server}/201", "headers": [["x-one", "1"], ["x-two", "2"]], "body": "hi é"},
        {"method": "get", "url": f"{echo_server}/404"},
        {"method": "PUT", "url": f"{echo_server}/200"},
        {"method": "GET", "url": f"{ungranted}/200"},
    ]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"seam": "steering", "event": {
        "run_id": "r", "tool_name": "t", "call_id": f"c{i}", "args": args}}) + "\n"
        for i, args in enumerate(calls)))
    proc = subprocess.run([str(host.binary), "replay", "--plugins", str(host.plugins), "--json", str(trace)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(line) for line in proc.stdout.split("\n--\n")[0].splitlines()]

    def answered(d: dict[str, Any]) -> dict[str, Any]:
        assert d["trace"][0].get("fault") is None, d
        got = json.loads(d["result"]["content"])
        got["text"] = json.loads(got["text"])
        return got

    assert answered(out[0]) == {"status": 201, "ok": True, "answer": "42", "x": [["x-answer", "42"]], "text": {
        "method": "POST", "path": "/201", "x": [["x-one", "1"], ["x-two", "2"]], "body": "hi é"}}
    assert answered(out[1]) == {"status": 404, "ok": False, "answer": "42", "x": [["x-answer", "42"]], "text": {
        "method": "GET", "path": "/404", "x": [], "body": ""}}
    # Off the grant: the method, then the port. Nothing is sent; the call traps.
    assert [d["trace"][0]["fault"] for d in out[2:]] == ["http-denied", "http-denied"], out[2:]
    assert [d["result"] for d in out[2:]] == [None, None]
