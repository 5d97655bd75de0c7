"""Fixtures shared by the adapter tests and the end-to-end tests."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from recording_service import RecordingService


@pytest.fixture
def service() -> Iterator[RecordingService]:
    """A recording HTTP service on a free loopback port."""
    with RecordingService() as svc:
        yield svc


@pytest.fixture
def dead_url() -> str:
    """A loopback URL on which nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real ``redis-server`` on a free loopback port (Debian's package;
    ``.ci/run`` installs it). Missing, the tests that need it fail saying so."""
    import shutil
    import subprocess
    import time

    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (Debian: apt-get install redis-server)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(400):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            time.sleep(0.025)
        else:
            pytest.fail(f"redis-server on port {port} did not answer PING")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait()


@pytest.fixture(autouse=True, scope="session")
def _compiled_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One compiled-component cache for the whole test run (not the user's own)."""
    import os

    saved = os.environ.get("TOOLGATE_CACHE_DIR")
    if saved is None:
        os.environ["TOOLGATE_CACHE_DIR"] = str(tmp_path_factory.mktemp("toolgate-cache"))
    yield
    if saved is None:
        os.environ.pop("TOOLGATE_CACHE_DIR", None)
