"""Shared fixtures for the cross-language guard tests.

These tests drive the real `toolgate` binary (``toolgate check``) over guard
components built from every language's example plugins, and compare their
verdicts. Paths come from the environment so the test script can point them
at a fresh build:

- ``TOOLGATE_BIN``: the toolgate binary (default ``target/release/toolgate``).
- ``TOOLGATE_PLUGINS``: the root of built plugins (default ``build/plugins``),
  holding one directory per language (``rust``, ``js``, ``python``, ``go``).
- ``TOOLGATE_GUESTS``: where ``cargo test --workspace`` builds the Rust test
  guests of ``tests/guests`` (default
  ``target/wasm-guests/wasm32-wasip2/release``).

A missing prerequisite fails the test that needs it; nothing here skips.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import threading
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]


def _path(env: str, default: str) -> Path:
    return Path(os.environ.get(env, REPO / default))


@pytest.fixture(scope="session")
def toolgate_bin() -> Path:
    path = _path("TOOLGATE_BIN", "target/release/toolgate")
    if not path.exists():
        pytest.fail(f"toolgate binary not found at {path}; build it first")
    return path


@pytest.fixture(scope="session")
def plugins_root() -> Path:
    return _path("TOOLGATE_PLUGINS", "build/plugins")


def rust_test_guest(name: str) -> Path:
    """A Rust test guest of ``tests/guests`` (``cargo test --workspace``
    builds them); fails the test when it is missing."""
    path = _path("TOOLGATE_GUESTS", "target/wasm-guests/wasm32-wasip2/release") / f"{name}.wasm"
    if not path.is_file():
        pytest.fail(f"{path} is missing; `cargo test --workspace` builds it, or set TOOLGATE_GUESTS")
    return path


# What a test guard of ``tests/langs/guards`` depends on besides its own source.
SDKS = {
    "js": ["guest-sdk/js/src", "guest-sdk/js/lib", "guest-sdk/js/package-lock.json"],
    "python": ["guest-sdk/python/toolgate_guest"],
    "go": ["guest-sdk/go"],
}


def _digest(source: Path, lang: str) -> str:
    h = hashlib.sha256()
    paths = [source, REPO / "wit/guard.wit", *(REPO / p for p in SDKS[lang])]
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            if "__pycache__" in f.parts or "node_modules" in f.parts:
                continue
            h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def build_test_guards(toolgate_bin: Path, name: str, sources: dict[str, Path]) -> dict[str, Path]:
    """Builds one test guard per language (``sources``: language -> its source
    in ``tests/langs/guards``) with ``toolgate build`` into
    ``build/test-guards/<lang>/<name>.wasm``, in parallel, each only when its
    source, its SDK or the contract changed; returns language -> component."""
    out = REPO / "build/test-guards"
    built: dict[str, Path] = {}
    running: dict[str, tuple[subprocess.Popen[str], str]] = {}
    for lang, source in sources.items():
        wasm, stamp = out / lang / f"{name}.wasm", out / lang / f".{name}.sha256"
        digest = _digest(source, lang)
        built[lang] = wasm
        if wasm.is_file() and stamp.is_file() and stamp.read_text() == digest:
            continue
        wasm.parent.mkdir(parents=True, exist_ok=True)
        stamp.unlink(missing_ok=True)
        proc = subprocess.Popen(
            [str(toolgate_bin), "build", str(source), "-o", str(wasm)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        running[lang] = (proc, digest)
    for lang, (proc, digest) in running.items():
        output, _ = proc.communicate(timeout=1800)
        assert proc.returncode == 0, f"toolgate build of the {lang} {name} guard failed:\n{output}"
        (out / lang / f".{name}.sha256").write_text(digest)
    return built


def plugin_dir(plugins_root: Path, lang: str, *names: str, tmp: Path) -> Path:
    """A plugin directory holding just the named components of one language."""
    out = tmp / f"{lang}-{'-'.join(names)}"
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        src = plugins_root / lang / f"{name}.wasm"
        if not src.exists():
            pytest.fail(f"{src} is missing; build the {lang} example plugins first")
        (out / src.name).write_bytes(src.read_bytes())
    return out


MIB = 1 << 20
STEER_WHERE = {
    "action": "skip",
    "content": "Add a WHERE clause before running this query.",
    "is_error": True,
}
"""What the seed's SqlGuard returns for a query with no WHERE."""


def steering_event(tool_name: str, args: dict[str, Any]) -> dict[str, Any]:
    """A `BeforeToolCallEvent` as JSON."""
    return {"run_id": "run-1", "tool_name": tool_name, "call_id": "call-1", "args": args}


def dispatch_event(tool_name: str, args: dict[str, Any], iteration_index: int = 0) -> dict[str, Any]:
    """A `ToolCallDispatchEvent` as JSON, with `run_query` and `search` available."""
    return {
        "run_id": "run-1",
        "iteration_index": iteration_index,
        "node_name": "react",
        "call_id": "call-1",
        "tool_name": tool_name,
        "args": args,
        "available_tools": ["run_query", "search"],
    }


def guard_dirs(plugins_root: Path, tmp: Path, langs: tuple[str, ...], guards: tuple[str, ...]) -> dict[str, Path]:
    """One plugin directory per (language, guard), keyed ``"<lang>/<guard>"``."""
    return {
        f"{lang}/{name}": plugin_dir(plugins_root, lang, name, tmp=tmp)
        for lang in langs
        for name in guards
    }


def only_entry(output: dict[str, Any], plugin: str) -> dict[str, Any]:
    """The single trace entry of a one-plugin chain, checked for shape."""
    trace = output["trace"]
    assert len(trace) == 1, trace
    entry = trace[0]
    assert plugin in entry["plugin"], entry
    assert isinstance(entry["micros"], int) and entry["micros"] >= 0, entry
    assert isinstance(entry["fuel_used"], int) and entry["fuel_used"] > 0, entry
    return entry


def check(
    toolgate_bin: Path,
    plugins: Path,
    seam: str,
    event: dict[str, Any],
    state: dict[str, Any] | None = None,
    options: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Runs one event through `toolgate check` (with `options`) and returns
    its JSON output."""
    args = [str(toolgate_bin), "check", "--plugins", str(plugins), "--seam", seam, "--event", "-", *options]
    if state is not None:
        state_file = plugins / "state.json"
        state_file.write_text(json.dumps(state))
        args += ["--state", str(state_file)]
    proc = subprocess.run(
        args, input=json.dumps(event), capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, f"toolgate check failed ({proc.returncode}): {proc.stderr}"
    return json.loads(proc.stdout)


def listing(toolgate_bin: Path, plugins: Path) -> dict[str, Any]:
    """What `toolgate list` prints for the directory."""
    proc = subprocess.run(
        [str(toolgate_bin), "list", "--plugins", str(plugins)],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, f"toolgate list failed ({proc.returncode}): {proc.stderr}"
    return json.loads(proc.stdout)


def replay(
    toolgate_bin: Path, plugins: Path, lines: list[dict[str, Any]], *options: str
) -> list[dict[str, Any]]:
    """Runs `{seam, event, state?}` lines through `toolgate replay --json`
    (with `options`); one decision per line."""
    trace = plugins / "events.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    proc = subprocess.run(
        [str(toolgate_bin), "replay", "--plugins", str(plugins), "--json", *options, str(trace)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"toolgate replay failed ({proc.returncode}): {proc.stderr[-4000:]}"
    # A plugin that did not load would make every verdict "no guard": say why.
    unloaded = [text for text in proc.stderr.splitlines() if "plugin not loaded" in text]
    assert not unloaded, unloaded
    decisions = []
    for text in proc.stdout.splitlines():
        if text == "--":  # the summary follows
            break
        decisions.append(json.loads(text))
    assert [d["line"] for d in decisions] == list(range(1, len(lines) + 1)), proc.stdout[-2000:]
    return decisions


class Runs:
    """Every case of one guard, replayed once per language; looked up by case name.

    ``dirs`` maps ``"<lang>/<guard>"`` to a plugin directory holding that guard.
    """

    def __init__(self, toolgate_bin: Path, dirs: dict[str, Path], guard: str,
                 cases: dict[str, dict[str, Any]], langs: tuple[str, ...]) -> None:
        names = list(cases)
        self.by_lang = {
            lang: dict(zip(names, replay(toolgate_bin, dirs[f"{lang}/{guard}"], list(cases.values()))))
            for lang in langs
        }

    def __call__(self, lang: str, case: str) -> dict[str, Any]:
        return self.by_lang[lang][case]


class Serving:
    """`toolgate serve` (with `options`) on a free loopback port; its log kept."""

    def __init__(self, toolgate_bin: Path, dir: Path, *options: str) -> None:
        self.proc = subprocess.Popen(
            [str(toolgate_bin), "serve", "--plugins", str(dir), "--listen", "127.0.0.1:0", *options],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.log: list[str] = []
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            found = re.search(r"serving .* on (http://\S+)", line)
            if found:
                self.url = found.group(1)
                break
        else:
            raise AssertionError(f"toolgate serve stopped before serving:\n{''.join(self.log)}")
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def send(self, path: str, body: Any) -> tuple[int, Any]:
        """POSTs `body` as JSON; the status and the JSON answer."""
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())

    def post(self, path: str, body: Any) -> Any:
        """POSTs `body` as JSON; the JSON answer."""
        return self.send(path, body)[1]

    def text(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=120) as response:
            return response.read().decode()

    def get(self, path: str) -> Any:
        return json.loads(self.text(path))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


@pytest.fixture
def serving(toolgate_bin: Path) -> Iterator[Any]:
    """Starts `toolgate serve` over a plugin directory (`serving(dir,
    *options)`); stops every server the test started."""
    started: list[Serving] = []

    def start(dir: Path, *options: str) -> Serving:
        started.append(Serving(toolgate_bin, dir, *options))
        return started[-1]

    yield start
    for s in started:
        s.stop()
