"""`toolgate snapshot`: a pre-initialised guard answers exactly as the
original, for less fuel (Go skips its runtime's start-up, JS its engine's
first-call work).

Fuel is deterministic for a given component and event, so "less fuel" is a
behaviour, not a timing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, STEER_WHERE, check, dispatch_event, replay, steering_event

CASES = [
    {"seam": "steering", "event": steering_event("run_query", {"sql": "DELETE FROM users"})},
    {"seam": "steering", "event": steering_event("run_query", {"sql": "SELECT 1 FROM t WHERE id = 2"})},
    {"seam": "steering", "event": steering_event("run_query", {"sql": 42})},
    {"seam": "steering", "event": steering_event("search", {"q": "DELETE"})},
    {"seam": "rewrite", "event": dispatch_event("run_query", {"sql": "SELECT 1"})},
]


def toolgate(toolgate_bin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(toolgate_bin), *args], capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("lang", ["go", "js"])
def test_a_snapshot_answers_as_the_original_for_less_fuel(toolgate_bin, plugins_root, tmp_path, lang):
    plain, snap = tmp_path / "plain", tmp_path / "snap"
    plain.mkdir()
    snap.mkdir()
    original = plugins_root / lang / "sql-guard.wasm"
    (plain / "sql-guard.wasm").write_bytes(original.read_bytes())
    # Plain means plain: not snapshotted at load either.
    (plain / "toolgate.toml").write_text('[[plugin]]\npath = "sql-guard.wasm"\nsnapshot = false\n')
    proc = toolgate(toolgate_bin, "snapshot", str(original), "-o", str(snap / "sql-guard.wasm"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"snapshot {snap / 'sql-guard.wasm'} ("), proc.stdout
    before, after = replay(toolgate_bin, plain, CASES), replay(toolgate_bin, snap, CASES)
    for case, a, b in zip(CASES, before, after):
        assert a["result"] == b["result"], case
        assert [t["outcome"] for t in a["trace"]] == [t["outcome"] for t in b["trace"]], case
        fuel_a = sum(t["fuel_used"] for t in a["trace"])
        fuel_b = sum(t["fuel_used"] for t in b["trace"])
        if a["trace"]:  # a seam the guard does not export consults nobody
            assert fuel_b < fuel_a, f"{case}: snapshot {fuel_b} vs plain {fuel_a}"
    assert before[0]["result"] == STEER_WHERE


@pytest.mark.parametrize("lang", ["go", "js"])
def test_auto_snapshots_at_load_and_answers_as_plain(toolgate_bin, plugins_root, tmp_path, lang):
    """`snapshot = "auto"` (the default) pre-initialises Go and JS guards when
    they are loaded: same answers as the plain component, for less fuel."""
    plain, auto = tmp_path / "plain", tmp_path / "auto"
    original = (plugins_root / lang / "sql-guard.wasm").read_bytes()
    for d in (plain, auto):
        d.mkdir()
        (d / "sql-guard.wasm").write_bytes(original)
    (plain / "toolgate.toml").write_text('[[plugin]]\npath = "sql-guard.wasm"\nsnapshot = false\n')
    listed = json.loads(toolgate(toolgate_bin, "list", "--plugins", str(auto)).stdout)
    assert listed["global"][0]["snapshot"] == {"state": "snapshotted"}, listed
    assert listed["errors"] == [], listed
    listed = json.loads(toolgate(toolgate_bin, "list", "--plugins", str(plain)).stdout)
    assert listed["global"][0]["snapshot"] == {"state": "plain"}, listed
    before, after = replay(toolgate_bin, plain, CASES), replay(toolgate_bin, auto, CASES)
    for case, a, b in zip(CASES, before, after):
        assert a["result"] == b["result"], case
        assert [t["outcome"] for t in a["trace"]] == [t["outcome"] for t in b["trace"]], case
        fuel_a = sum(t["fuel_used"] for t in a["trace"])
        fuel_b = sum(t["fuel_used"] for t in b["trace"])
        if a["trace"]:
            assert fuel_b < fuel_a, f"{case}: auto snapshot {fuel_b} vs plain {fuel_a}"


def test_a_prebuilt_snapshot_is_loaded_as_it_is(toolgate_bin, plugins_root, tmp_path):
    snap = tmp_path / "plugins" / "sql-guard.wasm"
    snap.parent.mkdir()
    proc = toolgate(toolgate_bin, "snapshot", str(plugins_root / "go" / "sql-guard.wasm"), "-o", str(snap))
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(toolgate(toolgate_bin, "list", "--plugins", str(snap.parent)).stdout)
    assert listed["global"][0]["snapshot"] == {"state": "prebuilt"}, listed


def test_build_then_snapshot_in_one_command(toolgate_bin, tmp_path):
    out = tmp_path / "plugins" / "sql-guard.wasm"
    proc = toolgate(toolgate_bin, "build", str(REPO / "plugins/go/sql-guard"), "-o", str(out), "--snapshot")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"built {out} (go guard, "), lines
    assert lines[1].startswith(f"snapshot {out} ("), lines
    event = steering_event("run_query", {"sql": "DELETE FROM users"})
    assert check(toolgate_bin, out.parent, "steering", event)["result"] == STEER_WHERE


def test_what_is_no_guard_is_refused_with_exit_2(toolgate_bin, tmp_path):
    junk = tmp_path / "junk.wasm"
    junk.write_bytes(b"not a component")
    proc = toolgate(toolgate_bin, "snapshot", str(junk))
    assert proc.returncode == 2
    assert f"{junk}: cannot snapshot" in proc.stderr
    assert junk.read_bytes() == b"not a component", "a failed snapshot leaves the file alone"
    proc = toolgate(toolgate_bin, "snapshot", str(tmp_path / "missing.wasm"))
    assert proc.returncode == 2
    assert "missing.wasm" in proc.stderr


def test_warm_up_calls_come_from_a_trace_file(toolgate_bin, plugins_root, tmp_path):
    original = plugins_root / "rust" / "sql-guard.wasm"
    snap = tmp_path / "plugins" / "sql-guard.wasm"
    snap.parent.mkdir()
    warm = tmp_path / "warm.jsonl"
    warm.write_text(json.dumps(CASES[0]) + "\n\n" + json.dumps(CASES[3]) + "\n")
    proc = toolgate(toolgate_bin, "snapshot", str(original), "-o", str(snap), "--warm-up", str(warm))
    assert proc.returncode == 0, proc.stderr
    assert check(toolgate_bin, snap.parent, "steering", CASES[0]["event"])["result"] == STEER_WHERE
    # A bad line is refused before anything runs, naming the file and the line.
    warm.write_text(json.dumps(CASES[0]) + "\n" + '{"seam": "steering"}\n')
    proc = toolgate(toolgate_bin, "snapshot", str(original), "-o", str(tmp_path / "x.wasm"), "--warm-up", str(warm))
    assert proc.returncode == 2
    assert f"{warm}:2:" in proc.stderr, proc.stderr
    assert not (tmp_path / "x.wasm").exists()
