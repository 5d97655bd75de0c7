"""Starting a real ``toolgate serve`` process for the tests and the benchmark.

Paths come from the environment, relative to the repository root by default:

- ``TOOLGATE_BIN``: the toolgate binary (default ``target/release/toolgate``).
- ``TOOLGATE_PLUGINS``: the root of built plugins (default ``build/plugins``);
  the Rust examples are in its ``rust/`` directory.
- ``TOOLGATE_GUESTS``: where the test guests of ``tests/guests`` are built
  (default ``target/wasm-guests/wasm32-wasip2/release``, where
  ``cargo test --workspace`` builds them).
- ``TOOLGATE_<NAME>``: one test guest by name, over ``TOOLGATE_GUESTS``:
  ``TOOLGATE_HOSTILE`` (spins forever on a call to a tool named ``loop``),
  ``TOOLGATE_SCRIPTED`` (answers as its configuration scripts).

A missing binary, plugin or guest raises :class:`SetupError`: the test that
needs it fails, never skips.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import IO

import httpx

REPO = Path(__file__).resolve().parents[3]


class SetupError(Exception):
    """Something the end-to-end tests need is missing or does not start."""


def env_path(name: str, default: str) -> Path:
    """``$name`` as a path, or ``default`` under the repository root."""
    value = os.environ.get(name)
    return Path(value) if value else REPO / default


def toolgate_bin() -> Path:
    """The toolgate binary; raises SetupError naming what to build."""
    path = env_path("TOOLGATE_BIN", "target/release/toolgate")
    if not path.is_file():
        raise SetupError(
            f"toolgate binary not found at {path}: build it with "
            "`cargo build --release -p toolgate` or set TOOLGATE_BIN"
        )
    return path


def rust_plugin(name: str) -> Path:
    """A built Rust example component, e.g. ``rust_plugin("sql-guard")``."""
    path = env_path("TOOLGATE_PLUGINS", "build/plugins") / "rust" / f"{name}.wasm"
    if not path.is_file():
        raise SetupError(
            f"plugin component {path} is missing: build the Rust example plugins "
            "(scripts/build-plugins) or set TOOLGATE_PLUGINS"
        )
    return path


def required_guest(name: str) -> Path:
    """A built test guest (``tests/guests``), e.g. ``scripted``: the file
    ``$TOOLGATE_<NAME>`` names, else ``<name>.wasm`` under ``TOOLGATE_GUESTS``;
    raises SetupError naming what to build when it is absent (a test that
    needs it fails, never skips)."""
    var = f"TOOLGATE_{name.upper().replace('-', '_')}"
    named = os.environ.get(var)
    if named:
        path, how = Path(named), f"{var} names"
    else:
        where = env_path("TOOLGATE_GUESTS", "target/wasm-guests/wasm32-wasip2/release")
        path, how = where / f"{name}.wasm", f"set {var} or TOOLGATE_GUESTS; looked for"
    if not path.is_file():
        raise SetupError(
            f"test guest {name} is missing ({how} {path}): `cargo test --workspace` builds it"
        )
    return path


def plugin_dir(target: Path, components: dict[str, Path]) -> Path:
    """Copies components into ``target`` under the given file names
    (``tenants/<name>/x.wasm`` makes the tenant's directory)."""
    target.mkdir(parents=True, exist_ok=True)
    for file_name, source in components.items():
        (target / file_name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target / file_name)
    return target


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ToolgateServer:
    """One ``toolgate serve`` process on a free loopback port."""

    def __init__(self, plugins: Path, log_path: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.binary = toolgate_bin()
        self.plugins = plugins
        self.log_path = log_path
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self._log: IO[bytes] | None = None

    def log(self) -> str:
        """Everything the server wrote to stdout and stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def start(self, ready_timeout: float = 120.0) -> ToolgateServer:
        """Starts the server and waits until its global plugins are loaded.

        ``serve`` listens at once and answers every call 503 "not ready"
        while its global plugins load; ``GET /readyz`` says ``starting``
        until they are in (tenants may still be loading after that).
        """
        last_error = ""
        for _attempt in range(3):
            port = free_port()
            self.url = f"http://127.0.0.1:{port}"
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
            self.proc = subprocess.Popen(
                [
                    str(self.binary), "serve",
                    "--plugins", str(self.plugins),
                    "--listen", f"127.0.0.1:{port}",
                    *self.extra_args,
                ],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
            )
            deadline = time.monotonic() + ready_timeout
            while time.monotonic() < deadline:
                code = self.proc.poll()
                if code is not None:
                    last_error = f"toolgate serve exited with status {code}"
                    break
                try:
                    ready = httpx.get(f"{self.url}/readyz", timeout=1.0, trust_env=False)
                    if ready.json().get("status") in ("ready", "loading"):
                        return self
                    last_error = f"/readyz: {ready.text}"
                except (httpx.HTTPError, ValueError) as exc:
                    last_error = f"{type(exc).__name__}: {exc}"
                time.sleep(0.05)
            else:
                self.stop()
                raise SetupError(
                    f"toolgate serve did not become healthy within {ready_timeout:g}s "
                    f"({last_error}); log:\n{self.log()}"
                )
            self.stop()
            if "in use" not in self.log().lower():
                break
        raise SetupError(f"toolgate serve failed to start ({last_error}); log:\n{self.log()}")

    def stop(self) -> None:
        """Stops the server (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ToolgateServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
