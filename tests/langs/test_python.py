"""The Python example guards, run through the `toolgate` binary.

The components come from `plugins/python/build` (Python, componentize-py via
the `toolgate-guest` SDK) and `scripts/build-plugins` (Rust); both land in
``$TOOLGATE_PLUGINS/<lang>/``. Every event goes through the Python guard and
through the Rust guard of the same name, each alone in its own plugin
directory: the verdicts must be the same, and the expected ones, and the
Python guard's trace must show the expected outcome and no fault.

Most events go through `toolgate replay --json` (the same chain as
`toolgate check`, one process per plugin directory, so the 19 MB Python
component is loaded once per run, not once per event); `toolgate check` runs
the 1 MiB events again one by one, and a chain of a Python and a Rust guard.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    MIB,
    Runs,
    STEER_WHERE,
    check,
    dispatch_event,
    guard_dirs,
    only_entry,
    plugin_dir,
    steering_event,
)

LANGS = ("python", "rust")


ROUTING_EVENT = {
    "run_id": "run-1",
    "mode": "enforce",
    "intent_label": "db",
    "total_tools": 2,
    "narrowed_tool_names": ["run_query", "search"],
}
RESULT_EVENT = {"run_id": "run-1", "tool_name": "run_query", "result": {"rows": []}, "call_id": "call-1"}


@pytest.fixture(scope="module")
def dirs(plugins_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One plugin directory per (language, guard)."""
    tmp = tmp_path_factory.mktemp("python-guards")
    return guard_dirs(plugins_root, tmp, LANGS, ("sql-guard", "query-limit"))


def assert_same(runs: Runs, case: str, plugin: str, expected: Any, outcome: str) -> dict[str, Any]:
    """The Python decision is `expected` with `outcome` and no fault, as Rust's is."""
    python, rust = runs("python", case), runs("rust", case)
    assert python["result"] == expected
    assert rust["result"] == python["result"]
    py_entry = only_entry(python, plugin)
    rust_entry = only_entry(rust, plugin)
    assert py_entry["outcome"] == outcome, py_entry
    assert py_entry.get("fault") is None, py_entry
    assert rust_entry["outcome"] == outcome, rust_entry
    return py_entry


# ----------------------------------------------------------------- sql-guard

SQL_CASES = {
    "no-where": (steering_event("run_query", {"sql": "SELECT * FROM users"}), STEER_WHERE, "skip"),
    "where": (steering_event("run_query", {"sql": "SELECT * FROM users WHERE id = 1"}), None, "proceed"),
    "lowercase-where": (steering_event("run_query", {"sql": "select 1 from t where x"}), None, "proceed"),
    "mixed-case-where": (steering_event("run_query", {"sql": "select 1 wHeRe x"}), None, "proceed"),
    "where-in-other-arg": (
        steering_event("run_query", {"sql": "DELETE FROM t", "note": "WHERE"}), STEER_WHERE, "skip"),
    "unicode": (steering_event("run_query", {"sql": "SELECT 'é😀' FROM t"}), STEER_WHERE, "skip"),
    "other-tool": (steering_event("search", {"sql": "SELECT * FROM users"}), None, "proceed"),
    "other-tool-no-args": (steering_event("search", {}), None, "proceed"),
    "1mib-no-where": (steering_event("run_query", {"sql": "SELECT " + "x" * MIB}), STEER_WHERE, "skip"),
    "1mib-where": (
        steering_event("run_query", {"sql": "SELECT " + "x" * MIB + " where y"}), None, "proceed"),
}
NO_STRING_SQL = {"missing": {"query": "SELECT 1"}, "number": {"sql": 42}, "null": {"sql": None}}


@pytest.fixture(scope="module")
def sql_runs(toolgate_bin: Path, dirs: dict[str, Path]) -> Runs:
    cases = {case: {"seam": "steering", "event": event} for case, (event, _, _) in SQL_CASES.items()}
    for case, args in NO_STRING_SQL.items():
        cases[f"no-string-sql-{case}"] = {"seam": "steering", "event": steering_event("run_query", args)}
    cases["seam-rewrite"] = {"seam": "rewrite", "event": dispatch_event("run_query", {"sql": "SELECT 1"})}
    cases["seam-routing"] = {"seam": "routing", "event": ROUTING_EVENT}
    cases["seam-result"] = {"seam": "result", "event": RESULT_EVENT}
    cases["with-state"] = {
        "seam": "steering",
        "event": steering_event("run_query", {"sql": "SELECT 1"}),
        "state": {"tenant_id": "t", "n": [1]},
    }
    return Runs(toolgate_bin, dirs, "sql-guard", cases, LANGS)


@pytest.mark.parametrize("case", SQL_CASES)
def test_sql_guard_matches_rust(case: str, sql_runs: Runs) -> None:
    _, expected, outcome = SQL_CASES[case]
    assert_same(sql_runs, case, "sql-guard", expected, outcome)


def test_sql_guard_reads_no_state(sql_runs: Runs) -> None:
    assert_same(sql_runs, "with-state", "sql-guard", STEER_WHERE, "skip")


@pytest.mark.parametrize("case", NO_STRING_SQL)
def test_sql_guard_without_string_sql_faults_and_proceeds_like_rust(case: str, sql_runs: Runs) -> None:
    # The seed's handler raises on a run_query call without a string `sql`: a
    # fault, logged, and the call proceeds.
    python, rust = sql_runs("python", f"no-string-sql-{case}"), sql_runs("rust", f"no-string-sql-{case}")
    assert python["result"] is None and rust["result"] is None
    py_entry, rust_entry = only_entry(python, "sql-guard"), only_entry(rust, "sql-guard")
    assert py_entry["outcome"] == rust_entry["outcome"] == "fault", (py_entry, rust_entry)
    assert py_entry.get("fault") is not None, py_entry
    assert py_entry.get("fault") == rust_entry.get("fault"), (py_entry, rust_entry)


@pytest.mark.parametrize("seam", ["rewrite", "routing", "result"])
def test_sql_guard_is_consulted_only_at_steering(seam: str, sql_runs: Runs) -> None:
    # The component exports only the steering seam: at the others the host
    # does not consult it at all (no trace entry).
    python, rust = sql_runs("python", f"seam-{seam}"), sql_runs("rust", f"seam-{seam}")
    assert python["trace"] == [] and rust["trace"] == []
    assert python["result"] == rust["result"]


# --------------------------------------------------------------- query-limit


def limited(args: dict[str, Any], sql: str) -> dict[str, Any]:
    return {"tool_name": "run_query", "args": {**args, "sql": sql}}


LIMIT_CASES = {
    "appends-limit": (
        dispatch_event("run_query", {"sql": "SELECT * FROM users ;  \n", "db": "main"}),
        limited({"db": "main"}, "SELECT * FROM users LIMIT 100"),
        "rewrite",
    ),
    "keeps-other-args": (
        dispatch_event("run_query", {"sql": "select 1;;", "timeout": 5, "opts": {"a": [1, None]}}),
        limited({"timeout": 5, "opts": {"a": [1, None]}}, "select 1 LIMIT 100"),
        "rewrite",
    ),
    "unicode-whitespace": (
        dispatch_event("run_query", {"sql": "SELECT 'é'\u3000;\u00a0"}),
        limited({}, "SELECT 'é' LIMIT 100"),
        "rewrite",
    ),
    "has-limit": (dispatch_event("run_query", {"sql": "SELECT * FROM users LIMIT 5"}), None, "proceed"),
    "lowercase-limit": (dispatch_event("run_query", {"sql": "select 1 limit 5"}), None, "proceed"),
    "other-tool": (dispatch_event("search", {"sql": "SELECT * FROM users"}), None, "proceed"),
    "no-sql": (dispatch_event("run_query", {"query": "SELECT 1"}), None, "proceed"),
    "number-sql": (dispatch_event("run_query", {"sql": 42}), None, "proceed"),
    "1mib": (
        dispatch_event("run_query", {"sql": "SELECT " + "x" * MIB + ";"}),
        limited({}, "SELECT " + "x" * MIB + " LIMIT 100"),
        "rewrite",
    ),
    "1mib-has-limit": (dispatch_event("run_query", {"sql": "SELECT " + "x" * MIB + " LIMIT 7"}), None, "proceed"),
}


@pytest.fixture(scope="module")
def limit_runs(toolgate_bin: Path, dirs: dict[str, Path]) -> Runs:
    cases = {case: {"seam": "rewrite", "event": event} for case, (event, _, _) in LIMIT_CASES.items()}
    cases["seam-steering"] = {"seam": "steering", "event": steering_event("run_query", {"sql": "SELECT 1"})}
    return Runs(toolgate_bin, dirs, "query-limit", cases, LANGS)


@pytest.mark.parametrize("case", LIMIT_CASES)
def test_query_limit_rewrites_like_rust(case: str, limit_runs: Runs) -> None:
    _, expected, outcome = LIMIT_CASES[case]
    assert_same(limit_runs, case, "query-limit", expected, outcome)


def test_query_limit_is_consulted_only_at_rewrite(limit_runs: Runs) -> None:
    assert limit_runs("python", "seam-steering") == {**limit_runs("python", "seam-steering"), "trace": []}
    assert limit_runs("python", "seam-steering")["result"] is None


# ------------------------------------------------------------ toolgate check


@pytest.mark.parametrize("case", ["1mib-no-where", "1mib-where"])
def test_check_1mib_sql(case: str, toolgate_bin: Path, dirs: dict[str, Path]) -> None:
    event, expected, outcome = SQL_CASES[case]
    python = check(toolgate_bin, dirs["python/sql-guard"], "steering", event)
    rust = check(toolgate_bin, dirs["rust/sql-guard"], "steering", event)
    assert python["result"] == rust["result"] == expected
    entry = only_entry(python, "sql-guard")
    assert entry["outcome"] == outcome and entry.get("fault") is None, entry


def test_check_python_and_rust_guards_in_one_directory(
    toolgate_bin: Path, plugins_root: Path, tmp_path: Path
) -> None:
    # A chain of the Python sql-guard and the Rust query-limit: each is
    # consulted only at its own seam.
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for lang, name in (("python", "sql-guard"), ("rust", "query-limit")):
        src = plugin_dir(plugins_root, lang, name, tmp=tmp_path) / f"{name}.wasm"
        (mixed / f"{lang}-{name}.wasm").write_bytes(src.read_bytes())

    steered = check(toolgate_bin, mixed, "steering", steering_event("run_query", {"sql": "SELECT 1"}))
    assert steered["result"] == STEER_WHERE
    entry = only_entry(steered, "sql-guard")
    assert entry["outcome"] == "skip" and entry.get("fault") is None, entry

    rewritten = check(toolgate_bin, mixed, "rewrite", dispatch_event("run_query", {"sql": "SELECT 1"}))
    assert rewritten["result"] == limited({}, "SELECT 1 LIMIT 100")
    assert only_entry(rewritten, "query-limit")["outcome"] == "rewrite"


def test_prepared_auto_keeps_instances_of_a_python_guard_and_a_count_overrides_it(
    toolgate_bin: Path, plugins_root: Path, tmp_path: Path
) -> None:
    # Instantiating a componentize-py guard costs far more than
    # `prepared = "auto"`'s threshold (~0.8 ms against 0.1 ms; BENCHMARKS.md):
    # by default it keeps instances ahead of need; `prepared = 0` keeps none.
    def listed(manifest: str | None) -> int:
        d = plugin_dir(plugins_root, "python", "sql-guard", tmp=tmp_path / str(manifest is None))
        if manifest is not None:
            (d / "toolgate.toml").write_text(manifest)
        out = subprocess.run(
            [str(toolgate_bin), "list", "--plugins", str(d)], check=True, capture_output=True, text=True
        ).stdout
        (plugin,) = json.loads(out)["global"]
        return plugin["prepared"]

    assert listed(None) == 2
    assert listed('[[plugin]]\npath = "sql-guard.wasm"\nprepared = 0\n') == 0
