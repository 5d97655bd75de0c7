"""The Python example guards, run through `toolgate check`.

The components come from `plugins/python/build` (Python, componentize-py) and
`scripts/build-plugins` (Rust); both land in ``$TOOLGATE_PLUGINS/<lang>/``.
Every event goes through the Python guard and through the Rust guard of the
same name, alone in its own plugin directory; the verdicts must be the same,
and the expected ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import check, plugin_dir

MIB = 1 << 20
STEER_WHERE = {
    "action": "skip",
    "content": "Add a WHERE clause before running this query.",
    "is_error": True,
}


def steering_event(tool_name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": "run-1", "tool_name": tool_name, "call_id": "call-1", "args": args}


def dispatch_event(tool_name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": "run-1",
        "iteration_index": 0,
        "node_name": "react",
        "call_id": "call-1",
        "tool_name": tool_name,
        "args": args,
        "available_tools": ["run_query", "search"],
    }


@pytest.fixture(scope="module")
def dirs(plugins_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One plugin directory per (language, guard)."""
    tmp = tmp_path_factory.mktemp("python-guards")
    return {
        f"{lang}/{name}": plugin_dir(plugins_root, lang, name, tmp=tmp)
        for lang in ("python", "rust")
        for name in ("sql-guard", "query-limit")
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


# ----------------------------------------------------------------- sql-guard

SQL_CASES = {
    "no-where": (steering_event("run_query", {"sql": "SELECT * FROM users"}), STEER_WHERE),
    "where": (steering_event("run_query", {"sql": "SELECT * FROM users WHERE id = 1"}), None),
    "lowercase-where": (steering_event("run_query", {"sql": "select 1 from t where x"}), None),
    "other-tool": (steering_event("search", {"sql": "SELECT * FROM users"}), None),
    "1mib-no-where": (steering_event("run_query", {"sql": "SELECT " + "x" * MIB}), STEER_WHERE),
    "1mib-where": (steering_event("run_query", {"sql": "SELECT " + "x" * MIB + " where y"}), None),
}


@pytest.mark.parametrize("case", SQL_CASES)
def test_sql_guard_matches_rust(case: str, toolgate_bin: Path, dirs: dict[str, Path]) -> None:
    event, expected = SQL_CASES[case]
    python = check(toolgate_bin, dirs["python/sql-guard"], "steering", event)
    rust = check(toolgate_bin, dirs["rust/sql-guard"], "steering", event)

    assert python["result"] == expected
    assert rust["result"] == python["result"]
    py_entry = only_entry(python, "sql-guard")
    rust_entry = only_entry(rust, "sql-guard")
    assert py_entry["fault"] is None, py_entry
    assert py_entry["outcome"] == rust_entry["outcome"], (py_entry, rust_entry)


def test_sql_guard_without_sql_faults_and_proceeds_like_rust(
    toolgate_bin: Path, dirs: dict[str, Path]
) -> None:
    # The seed's handler raises on a run_query call without `sql`: a fault,
    # logged, and the call proceeds.
    event = steering_event("run_query", {"query": "SELECT 1"})
    python = check(toolgate_bin, dirs["python/sql-guard"], "steering", event)
    rust = check(toolgate_bin, dirs["rust/sql-guard"], "steering", event)

    assert python["result"] is None and rust["result"] is None
    py_entry = only_entry(python, "sql-guard")
    rust_entry = only_entry(rust, "sql-guard")
    assert py_entry["fault"] is not None, py_entry
    assert rust_entry["fault"] is not None, rust_entry
    assert py_entry["outcome"] == rust_entry["outcome"], (py_entry, rust_entry)


def test_sql_guard_is_steering_only(toolgate_bin: Path, dirs: dict[str, Path]) -> None:
    # The component exports only the steering seam, so the host does not
    # consult it at the rewrite seam at all.
    event = dispatch_event("run_query", {"sql": "SELECT * FROM users"})
    output = check(toolgate_bin, dirs["python/sql-guard"], "rewrite", event)
    assert output == {"result": None, "trace": []}


# --------------------------------------------------------------- query-limit

LIMIT_CASES = {
    "appends-limit": (
        dispatch_event("run_query", {"sql": "SELECT * FROM users ;  \n", "db": "main"}),
        {"tool_name": "run_query", "args": {"sql": "SELECT * FROM users LIMIT 100", "db": "main"}},
    ),
    "strips-semicolons": (
        dispatch_event("run_query", {"sql": "select 1;;", "timeout": 5, "opts": {"a": [1]}}),
        {"tool_name": "run_query", "args": {"sql": "select 1 LIMIT 100", "timeout": 5, "opts": {"a": [1]}}},
    ),
    "has-limit": (dispatch_event("run_query", {"sql": "SELECT * FROM users limit 5"}), None),
    "other-tool": (dispatch_event("search", {"sql": "SELECT * FROM users"}), None),
    "no-sql": (dispatch_event("run_query", {"query": "SELECT 1"}), None),
    "1mib": (
        dispatch_event("run_query", {"sql": "SELECT " + "x" * MIB + ";"}),
        {"tool_name": "run_query", "args": {"sql": "SELECT " + "x" * MIB + " LIMIT 100"}},
    ),
    "1mib-has-limit": (dispatch_event("run_query", {"sql": "SELECT " + "x" * MIB + " LIMIT 7"}), None),
}


@pytest.mark.parametrize("case", LIMIT_CASES)
def test_query_limit_rewrites_like_rust(case: str, toolgate_bin: Path, dirs: dict[str, Path]) -> None:
    event, expected = LIMIT_CASES[case]
    python = check(toolgate_bin, dirs["python/query-limit"], "rewrite", event)
    rust = check(toolgate_bin, dirs["rust/query-limit"], "rewrite", event)

    assert python["result"] == expected
    assert rust["result"] == python["result"]
    py_entry = only_entry(python, "query-limit")
    rust_entry = only_entry(rust, "query-limit")
    assert py_entry["fault"] is None, py_entry
    assert py_entry["outcome"] == rust_entry["outcome"], (py_entry, rust_entry)


def test_query_limit_is_rewrite_only(toolgate_bin: Path, dirs: dict[str, Path]) -> None:
    event = steering_event("run_query", {"sql": "SELECT * FROM users"})
    output = check(toolgate_bin, dirs["python/query-limit"], "steering", event)
    assert output == {"result": None, "trace": []}


def test_python_guards_chain(toolgate_bin: Path, plugins_root: Path, tmp_path: Path) -> None:
    # Both Python guards in one directory: each is consulted only at its seam.
    both = plugin_dir(plugins_root, "python", "query-limit", "sql-guard", tmp=tmp_path)
    event = steering_event("run_query", {"sql": "SELECT 1"})
    output = check(toolgate_bin, both, "steering", event)
    assert output["result"] == STEER_WHERE
    assert only_entry(output, "sql-guard")["fault"] is None

    rewritten = check(toolgate_bin, both, "rewrite", dispatch_event("run_query", {"sql": "SELECT 1"}))
    assert rewritten["result"] == {"tool_name": "run_query", "args": {"sql": "SELECT 1 LIMIT 100"}}
    assert only_entry(rewritten, "query-limit")["fault"] is None
