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
