"""Compiles in a child process: ``toolgate.Host`` compiles each new
component in a child interpreter (``toolgate/_compile.py``) under a time and
a memory bound, as ``toolgate serve`` does with ``toolgate compile``.

Real components (the Rust example guards, built by ``scripts/build-plugins``,
and a compile bomb written by ``compile_bomb.py``) in temporary plugin
directories, compiled with no cache; no mocks.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from compile_bomb import component as compile_bomb
from toolgate_server import plugin_dir, rust_plugin

import toolgate
import toolgate._native
from toolgate import Host

WHERE_MESSAGE = "Add a WHERE clause before running this query."
# The time bound's bomb: big enough that compiling it, not starting the
# compile child, is most of its time.
TIME_BOMB_LINES = 40_000
SKIP = {"action": "skip", "content": WHERE_MESSAGE, "is_error": True}


def delete_all() -> dict[str, Any]:
    return {"run_id": "r", "tool_name": "run_query", "call_id": "c1",
            "args": {"sql": "DELETE FROM users"}}


def plugins_with_bomb(tmp_path: Path) -> tuple[Path, Path]:
    plugins = plugin_dir(tmp_path / "plugins", {"sql-guard.wasm": rust_plugin("sql-guard")})
    bomb = plugins / "bomb.wasm"
    bomb.write_bytes(compile_bomb())
    return plugins, bomb


def test_a_compile_bomb_is_refused_at_the_memory_bound_and_the_rest_loads(
    tmp_path: Path,
) -> None:
    plugins, bomb = plugins_with_bomb(tmp_path)
    host = Host(plugins, watch=False, no_cache=True, compile_memory_mib=96)

    loaded = host.plugins()
    assert [p["name"] for p in loaded["global"]] == ["sql-guard"]
    (error,) = loaded["errors"]
    assert error["path"] == str(bomb)
    message = error["message"]
    assert message.startswith(f"{bomb}: compile refused: "), message
    assert "compile memory limit of 96 MiB" in message, message
    # This process is untouched and its guards answer.
    assert asyncio.run(host.steering(delete_all())) == SKIP
    # The refusal is remembered: an unchanged directory compiles nothing.
    report = host.reload()
    assert report["compiled"] == [] and [e["path"] for e in report["errors"]] == [str(bomb)]


def test_a_compile_past_the_time_bound_is_refused(tmp_path: Path) -> None:
    # The bound is a fifth of the time this bomb took to compile in a child,
    # unbounded, measured in this run: it is past the bound on a fast
    # machine and on a slow one alike.
    bomb_bytes = compile_bomb(TIME_BOMB_LINES)
    alone = plugin_dir(tmp_path / "alone", {})
    (alone / "bomb.wasm").write_bytes(bomb_bytes)
    start = time.monotonic()
    unbounded = Host(alone, watch=False, no_cache=True)
    took = time.monotonic() - start
    (measured,) = unbounded.plugins()["errors"]
    # Compiled, then refused for what it is (no guard): no bound was hit.
    assert "compile refused" not in measured["message"], measured
    unbounded.close()
    bound_ms = max(1, round(took * 1000 / 5))

    # The guard is compiled into the cache first: only the bomb compiles
    # under the bound.
    cache = tmp_path / "cache"
    plugins = plugin_dir(tmp_path / "plugins", {"sql-guard.wasm": rust_plugin("sql-guard")})
    Host(plugins, watch=False, cache_dir=cache).close()
    bomb = plugins / "bomb.wasm"
    bomb.write_bytes(bomb_bytes)
    host = Host(plugins, watch=False, cache_dir=cache, compile_timeout_s=bound_ms / 1000)

    (error,) = host.plugins()["errors"]
    assert error["path"] == str(bomb)
    assert f"compile time limit of {bound_ms} ms" in error["message"], (error, took)
    assert asyncio.run(host.steering(delete_all())) == SKIP


SITECUSTOMIZE = '''
import atexit, json, os, sys

def _record():
    native = sys.modules.get("toolgate._native")
    with open({marker!r}, "a") as out:
        out.write(json.dumps({{
            "argv": sys.argv,
            "native": getattr(native, "__file__", None),
        }}) + "\\n")

atexit.register(_record)
'''


@pytest.mark.parametrize("in_process", [False, True])
def test_a_guard_compiles_in_a_child_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process: bool
) -> None:
    # Every interpreter started with this PYTHONPATH records its arguments
    # and the extension module it ran; a `toolgate` package there is a
    # decoy the compile child must not import.
    site = tmp_path / "site"
    (site / "toolgate").mkdir(parents=True)
    (site / "toolgate" / "__init__.py").write_text("raise ImportError('a decoy')\n")
    marker = tmp_path / "children.jsonl"
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(marker=str(marker)))
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.chdir(site)
    plugins = plugin_dir(tmp_path / "plugins", {"sql-guard.wasm": rust_plugin("sql-guard")})

    host = Host(plugins, watch=False, no_cache=True, compile_in_process=in_process)

    assert host.plugins()["errors"] == []
    assert asyncio.run(host.steering(delete_all())) == SKIP
    if in_process:
        assert not marker.exists()
        return
    (child,) = [json.loads(line) for line in marker.read_text().splitlines()]
    script, *args = child["argv"]
    assert Path(script) == Path(toolgate.__file__).parent / "_compile.py"
    assert args[0] == "compile" and f"--data-bytes={2048 << 20}" in args, args
    # The child ran this process's own extension module.
    assert child["native"] == toolgate._native.__file__


@pytest.mark.parametrize(
    "bounds", [{"compile_memory_mib": 16}, {"compile_timeout_s": 0}, {"compile_timeout_s": -1.0}]
)
def test_compile_bounds_out_of_range_are_refused(tmp_path: Path, bounds: dict[str, Any]) -> None:
    plugins = plugin_dir(tmp_path / "plugins", {})
    with pytest.raises(ValueError, match="compile_"):
        Host(plugins, watch=False, **bounds)
