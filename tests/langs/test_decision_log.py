"""The decision log's lines match the published schema, on every seam.

`docs/decision-log.schema.json` is what an operator's pipeline parses the
log with; every line `toolgate replay` and `toolgate check` write must
match it (checked with Python's `jsonschema`, the reference validator).
The plugin directory holds the Rust examples — one per seam, enforced,
and `sql-guard` in shadow mode — and a tenant `acme` whose own
`sql-guard` is enforced, so lines come with and without a tenant, with a
shadow run that agrees and one that does not. `[decision_log]` includes
the input and masks `args.password`: the password is in no line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conftest import REPO, replay, steering_event

SCHEMA = json.loads((REPO / "docs/decision-log.schema.json").read_text())
PASSWORD = "hunter2-correct-horse"
GUARDS = ("hide-admin-tools", "no-email", "query-limit", "result-audit", "sql-guard")


@pytest.fixture(scope="module")
def plugins(plugins_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("decision-log")
    d = root / "plugins"
    (d / "tenants" / "acme").mkdir(parents=True)
    for name in GUARDS:
        shutil.copy(plugins_root / "rust" / f"{name}.wasm", d / f"{name}.wasm")
    shutil.copy(plugins_root / "rust" / "sql-guard.wasm", d / "tenants" / "acme" / "sql-guard.wasm")
    entries = "".join(
        f'[[plugin]]\npath = "{name}.wasm"\n' + ('mode = "shadow"\n' if name == "sql-guard" else "") + "\n"
        for name in GUARDS
    )
    (d / "toolgate.toml").write_text(
        '[decision_log]\npath = "../decisions.jsonl"\ninclude = ["args", "content", "state"]\n'
        'mask = ["args.password"]\n\n' + entries
    )
    (d / "tenants" / "acme" / "toolgate.toml").write_text('[[plugin]]\npath = "sql-guard.wasm"\n')
    return d


def trace() -> list[dict[str, Any]]:
    """The bundled trace (every seam), once for the global chain and once
    for `acme`, and a call carrying a password."""
    lines = [json.loads(l) for l in (REPO / "examples/trace.jsonl").read_text().splitlines() if l.strip()]
    # Its decisions: the log records no lifecycle observation.
    lines = [l for l in lines if "seam" in l]
    secret = {"seam": "steering", "event": steering_event("run_query", {"sql": "SELECT 1", "password": PASSWORD})}
    return lines + [dict(l, tenant="acme") for l in lines] + [secret]


def logged(plugins: Path) -> list[dict[str, Any]]:
    text = (plugins.parent / "decisions.jsonl").read_text()
    assert PASSWORD not in text
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture(scope="module")
def lines(toolgate_bin: Path, plugins: Path) -> list[dict[str, Any]]:
    events = trace()
    decisions = replay(toolgate_bin, plugins, events)
    assert len(decisions) == len(events)
    out = logged(plugins)
    # `check` writes its line too, before it exits.
    proc = subprocess.run(
        [str(toolgate_bin), "check", "--plugins", str(plugins), "--seam", "steering", "--event", "-"],
        input=json.dumps(steering_event("send_email", {"to": "x", "password": PASSWORD})),
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    after = logged(plugins)
    assert after[: len(out)] == out and len(after) == len(out) + 1, after[len(out):]
    return after


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_every_line_matches_the_schema(lines: list[dict[str, Any]]) -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for line in lines:
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(line)]
        assert not errors, (line, errors)


def test_one_line_per_decision_on_every_seam_global_and_tenant(lines: list[dict[str, Any]]) -> None:
    events = trace()
    replayed = lines[: len(events)]
    assert [(l["seam"], l["tenant"]) for l in replayed] == [(e["seam"], e.get("tenant")) for e in events]
    assert {l["seam"] for l in replayed} == {"routing", "rewrite", "steering", "result", "response"}
    assert lines[-1]["tool_name"] == "send_email" and lines[-1]["verdict"] == "skip"
    for line in lines:
        assert all(g["mode"] == "enforce" and len(g["digest"]) == 64 for g in line["guards"]), line


def test_the_shadow_run_is_logged_beside_the_enforced_one(lines: list[dict[str, Any]]) -> None:
    steering = [l for l in lines if l["seam"] == "steering"]
    assert steering and all(
        [g["plugin"] for g in l["shadow"]] == ["sql-guard"] and l["shadow"][0]["mode"] == "shadow" for l in steering
    )
    for line in lines:
        if line["seam"] != "steering":
            assert "shadow" not in line and "agrees" not in line, line
    # A DELETE without WHERE: the shadow sql-guard would refuse it. Globally
    # nothing enforced does (they disagree); for acme its own sql-guard does
    # (they agree). Neither answer is the shadow guard's doing.
    delete = [l for l in steering if l["args"].get("sql") == "DELETE FROM users LIMIT 100"]
    assert [(l["tenant"], l["verdict"], l["shadow_verdict"], l["agrees"]) for l in delete] == [
        (None, "proceed", "skip", False),
        ("acme", "skip", "skip", True),
    ]


def test_a_masked_argument_is_in_no_line(lines: list[dict[str, Any]]) -> None:
    masked = [l for l in lines if "password" in l.get("args", {})]
    assert len(masked) == 2 and all(l["args"]["password"] == "[masked]" for l in masked)
