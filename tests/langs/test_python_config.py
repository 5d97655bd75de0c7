"""The Python query-limit checks its config at load (`validate_config`).

Its `limit` (default 100) is the row cap it appends; a config it refuses keeps
it from loading, as `toolgate list` shows, and one it accepts is what it
rewrites with. The component comes from `plugins/python/build`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import dispatch_event, only_entry, plugin_dir, replay


def configured(plugins_root: Path, tmp: Path, config: str) -> Path:
    d = plugin_dir(plugins_root, "python", "query-limit", tmp=tmp)
    (d / "toolgate.toml").write_text(f'[[plugin]]\npath = "query-limit.wasm"\n[plugin.config]\n{config}\n')
    return d


@pytest.mark.parametrize("config, message", [
    ("limit = 0", "config: limit must be a positive integer, not 0"),
    ('limit = "10"', "config: limit must be a positive integer, not '10'"),
    ("limit = true", "config: limit must be a positive integer, not True"),
    ("rows = 10", "config: unknown key 'rows'; the only key is limit"),
])
def test_a_bad_config_is_refused_at_load(
    config: str, message: str, toolgate_bin: Path, plugins_root: Path, tmp_path: Path
) -> None:
    plugins = configured(plugins_root, tmp_path, config)
    proc = subprocess.run([str(toolgate_bin), "list", "--plugins", str(plugins)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["global"] == []
    assert out["errors"] == [
        f"{plugins}/toolgate.toml:3 ({plugins}/query-limit.wasm): plugin `query-limit` refuses its config: {message}"
    ]


def test_the_configured_limit_is_the_one_appended(toolgate_bin: Path, plugins_root: Path, tmp_path: Path) -> None:
    plugins = configured(plugins_root, tmp_path, "limit = 5")
    (decision,) = replay(toolgate_bin, plugins, [
        {"seam": "rewrite", "event": dispatch_event("run_query", {"sql": "SELECT * FROM t;", "db": "main"})}])
    assert decision["result"] == {"tool_name": "run_query", "args": {"sql": "SELECT * FROM t LIMIT 5", "db": "main"}}
    assert only_entry(decision, "query-limit")["outcome"] == "rewrite"
