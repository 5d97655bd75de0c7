"""A fresh instance for every hook call, in every guest language.

The `memo` guard of each language (``tests/langs/guards``) counts its calls
in a module-level counter and keeps the previous call's id in module-level
memory, and cancels with what it found and the event's ``state`` as JSON.
Called many times through the real host — plain instances, prepared
instances behind ``toolgate serve``, snapshots made by ``toolgate snapshot``
and at load — it must never see a call before its own, and each call must
see its own state.

The guards are built with ``toolgate build`` into ``build/test-guards/``,
once per change of their source, the language's SDK or the contract
(``conftest.build_test_guards``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, build_test_guards, check, replay, steering_event

LANGS = ("js", "python", "go")
GUARDS = REPO / "tests/langs/guards"
SOURCES = {"js": GUARDS / "memo.ts", "python": GUARDS / "memo-py", "go": GUARDS / "memo-go"}
CALLS = 12


@pytest.fixture(scope="session")
def memo(toolgate_bin: Path) -> dict[str, Path]:
    """Each language's memo component, built (in parallel) when out of date."""
    return build_test_guards(toolgate_bin, "memo", SOURCES)


def plugins(tmp: Path, wasm: Path, manifest: str | None) -> Path:
    """A plugin directory holding `memo.wasm` and, when given, its `[[plugin]]` lines."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "memo.wasm").write_bytes(wasm.read_bytes())
    if manifest is not None:
        (tmp / "toolgate.toml").write_text(f'[[plugin]]\npath = "memo.wasm"\n{manifest}\n')
    return tmp


def call(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Call ``i``: a steering event with its own call id, and its own state."""
    event = steering_event("run_query", {"sql": "SELECT 1"})
    event["call_id"] = f"call-{i}"
    return event, {"turn": i, "user": {"id": i, "tags": ["a", "b"]}}


def said(result: Any) -> dict[str, Any]:
    """What memo found, from its verdict (a cancel with JSON content)."""
    assert isinstance(result, dict) and result.get("action") == "skip", result
    assert result["is_error"] is False, result
    return json.loads(result["content"])


# A warm-up at load that outlasts the load probe's cap (1 s by default; a
# busy machine) loads the plain component: these tests are about what the
# snapshot starts from, so its warm-up gets all the time it needs.
PATIENT = ("--probe-timeout-ms", "600000")


def replayed(toolgate_bin: Path, dir: Path) -> list[dict[str, Any]]:
    """What memo found on each of CALLS calls replayed through `dir`."""
    lines = []
    for i in range(CALLS):
        event, state = call(i)
        lines.append({"seam": "steering", "event": event, "state": state})
    decisions = replay(toolgate_bin, dir, lines, *PATIENT)
    for d in decisions:
        assert [t["outcome"] for t in d["trace"]] == ["skip"], d
    return [said(d["result"]) for d in decisions]


def snapshot_status(toolgate_bin: Path, dir: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [str(toolgate_bin), "list", "--plugins", str(dir), *PATIENT],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    assert listed["errors"] == [], listed
    return listed["global"][0]["snapshot"]


def each_from_the_same_start(seen: list[dict[str, Any]], calls: int, last: str) -> None:
    """Every call saw the start its snapshot froze (`calls` made, the last
    `last`), then its own call and state; never an earlier call of these."""
    for i, found in enumerate(seen):
        assert found == {"calls": calls + 1, "last": last, "state": call(i)[1]}, f"call {i}"


@pytest.mark.parametrize("lang", LANGS)
def test_a_plain_instance_sees_no_earlier_call(toolgate_bin, memo, tmp_path, lang):
    dir = plugins(tmp_path, memo[lang], "snapshot = false\nprepared = 0")
    assert snapshot_status(toolgate_bin, dir) == {"state": "plain"}
    seen = replayed(toolgate_bin, dir)
    each_from_the_same_start(seen, 0, None)
    # `check`: one call, its state.
    event, state = call(7)
    assert said(check(toolgate_bin, dir, "steering", event, state)["result"]) == {
        "calls": 1, "last": None, "state": state,
    }


@pytest.mark.parametrize("lang", LANGS)
def test_a_prepared_instance_behind_serve_sees_no_earlier_call(memo, serving, tmp_path, lang):
    server = serving(plugins(tmp_path, memo[lang], "snapshot = false\nprepared = 2"))
    listed = server.get("/v1/plugins")
    assert listed["global"][0]["prepared"] == 2, listed
    for i in range(CALLS):
        event, state = call(i)
        answer = server.post("/v1/steering", {"event": event, "state": state})
        assert said(answer) == {"calls": 1, "last": None, "state": state}, f"call {i}"


@pytest.mark.parametrize("lang", LANGS)
def test_a_snapshot_starts_every_call_from_its_warm_up(toolgate_bin, memo, tmp_path, lang):
    """`toolgate snapshot --warm-up`: three warm-up calls are in every later
    call's start, and nothing of any later call is."""
    warm = tmp_path / "warm-up.jsonl"
    lines = []
    for i in (1, 2, 3):
        event = steering_event("run_query", {"sql": "SELECT 1"})
        event["call_id"] = f"warm-{i}"
        lines.append(json.dumps({"seam": "steering", "event": event}) + "\n")
    warm.write_text("".join(lines))
    dir = tmp_path / "snap"
    dir.mkdir()
    proc = subprocess.run(
        [str(toolgate_bin), "snapshot", str(memo[lang]), "-o", str(dir / "memo.wasm"),
         "--warm-up", str(warm)],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    assert snapshot_status(toolgate_bin, dir) == {"state": "prebuilt"}
    each_from_the_same_start(replayed(toolgate_bin, dir), 3, "warm-3")


@pytest.mark.parametrize("lang", ["js", "go"])
def test_a_snapshot_made_at_load_starts_every_call_from_its_warm_up(toolgate_bin, memo, tmp_path, lang):
    """`snapshot = "auto"` snapshots Go and JS guards at load after the
    default warm-up (one call of each exported seam, call id `warm-up`)."""
    dir = plugins(tmp_path, memo[lang], None)
    assert snapshot_status(toolgate_bin, dir) == {"state": "snapshotted"}
    each_from_the_same_start(replayed(toolgate_bin, dir), 1, "warm-up")
