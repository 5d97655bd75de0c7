"""The JavaScript/TypeScript example guards, run through `toolgate check`.

The components come from `plugins/js/build` (TypeScript, componentize-js via the
`@toolgate/guest` SDK) and `scripts/build-plugins` (Rust); both land in
``$TOOLGATE_PLUGINS/<lang>/``. Every event goes through the JS guard and through
the Rust guard of the same name, each alone in its own plugin directory: the
verdicts must be the same, and the expected ones, and the JS guard's trace must
show the expected outcome and no fault.
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
GUARDS = ("sql-guard", "query-limit")


def steering_event(tool_name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": "run-1", "tool_name": tool_name, "call_id": "call-1", "args": args}


def dispatch_event(tool_name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": "run-1",
        "iteration_index": 2,
        "node_name": "react",
        "call_id": "call-1",
        "tool_name": tool_name,
        "args": args,
        "available_tools": ["run_query", "search"],
    }


@pytest.fixture(scope="module")
def dirs(plugins_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One plugin directory per (language, guard)."""
    tmp = tmp_path_factory.mktemp("js-guards")
    return {
        f"{lang}/{name}": plugin_dir(plugins_root, lang, name, tmp=tmp)
        for lang in ("js", "rust")
        for name in GUARDS
    }


def only_entry(output: dict[str, Any], plugin: str) -> dict[str, Any]:
    """The single trace entry of a one-plugin chain, checked for shape."""
    trace = output["trace"]
    assert len(trace) == 1, trace
    entry = trace[0]
    assert plugin in entry["plugin"], entry
    assert isinstance(entry["micros"], int) and entry["micros"] > 0, entry
    assert isinstance(entry["fuel_used"], int) and entry["fuel_used"] > 0, entry
    return entry


# ----------------------------------------------------------------- sql-guard

SQL_CASES = {
    "no-where": (steering_event("run_query", {"sql": "SELECT * FROM users"}), STEER_WHERE, "skip"),
    "where": (steering_event("run_query", {"sql": "SELECT * FROM users WHERE id = 1"}), None, "proceed"),
    "lowercase-where": (steering_event("run_query", {"sql": "select 1 from t where x"}), None, "proceed"),
    "mixed-case-where": (steering_event("run_query", {"sql": "select 1 wHeRe x"}), None, "proceed"),
    "where-in-other-arg": (
        steering_event("run_query", {"sql": "DELETE FROM t", "note": "WHERE"}),
        STEER_WHERE,
        "skip",
    ),
    "unicode": (steering_event("run_query", {"sql": "SELECT 'é😀' FROM t"}), STEER_WHERE, "skip"),
    "other-tool": (steering_event("search", {"sql": "SELECT * FROM users"}), None, "proceed"),
    "other-tool-no-args": (steering_event("search", {}), None, "proceed"),
    "1mib-no-where": (steering_event("run_query", {"sql": "SELECT " + "x" * MIB}), STEER_WHERE, "skip"),
    "1mib-where": (
        steering_event("run_query", {"sql": "SELECT " + "x" * MIB + " where y"}),
        None,
        "proceed",
    ),
}


@pytest.mark.parametrize("case", SQL_CASES)
def test_sql_guard_matches_rust(case: str, toolgate_bin: Path, dirs: dict[str, Path]) -> None:
    event, expected, outcome = SQL_CASES[case]
    js = check(toolgate_bin, dirs["js/sql-guard"], "steering", event)
    rust = check(toolgate_bin, dirs["rust/sql-guard"], "steering", event)

    assert js["result"] == expected
    assert rust["result"] == js["result"]
    js_entry = only_entry(js, "sql-guard")
    rust_entry = only_entry(rust, "sql-guard")
    assert js_entry["outcome"] == outcome, js_entry
    assert js_entry.get("fault") is None, js_entry
    assert rust_entry["outcome"] == outcome, rust_entry


@pytest.mark.parametrize("args", [{"query": "SELECT 1"}, {"sql": 42}, {"sql": None}])
def test_sql_guard_without_string_sql_faults_and_proceeds_like_rust(
    args: dict[str, Any], toolgate_bin: Path, dirs: dict[str, Path]
) -> None:
    # The seed's handler raises on a run_query call without `sql`: a fault,
    # logged, and the call proceeds.
    event = steering_event("run_query", args)
    js = check(toolgate_bin, dirs["js/sql-guard"], "steering", event)
    rust = check(toolgate_bin, dirs["rust/sql-guard"], "steering", event)

    assert js["result"] is None and rust["result"] is None
    js_entry = only_entry(js, "sql-guard")
    rust_entry = only_entry(rust, "sql-guard")
    assert js_entry["outcome"] == "fault" and js_entry["fault"] is not None, js_entry
    assert rust_entry["outcome"] == "fault", rust_entry


# --------------------------------------------------------------- query-limit

LIMIT_CASES = {
    "appends-limit": (
        dispatch_event("run_query", {"sql": "SELECT * FROM users ;  \n", "db": "main"}),
        {"tool_name": "run_query", "args": {"sql": "SELECT * FROM users LIMIT 100", "db": "main"}},
    ),
    "strips-semicolons-keeps-args": (
        dispatch_event("run_query", {"sql": "select 1;;", "timeout": 5, "opts": {"a": [1, None, True]}}),
        {
            "tool_name": "run_query",
            "args": {"sql": "select 1 LIMIT 100", "timeout": 5, "opts": {"a": [1, None, True]}},
        },
    ),
    "unicode-whitespace": (
        dispatch_event("run_query", {"sql": "SELECT 'é' FROM t\u3000;\u00a0\t"}),
        {"tool_name": "run_query", "args": {"sql": "SELECT 'é' FROM t LIMIT 100"}},
    ),
    "inner-semicolon-kept": (
        dispatch_event("run_query", {"sql": "SELECT ';' FROM t"}),
        {"tool_name": "run_query", "args": {"sql": "SELECT ';' FROM t LIMIT 100"}},
    ),
    "has-limit": (dispatch_event("run_query", {"sql": "SELECT * FROM users limit 5"}), None),
    "has-limit-mixed-case": (dispatch_event("run_query", {"sql": "SELECT 1 LiMiT 5"}), None),
    "other-tool": (dispatch_event("search", {"sql": "SELECT * FROM users"}), None),
    "no-sql": (dispatch_event("run_query", {"query": "SELECT 1"}), None),
    "non-string-sql": (dispatch_event("run_query", {"sql": ["SELECT 1"]}), None),
    "1mib": (
        dispatch_event("run_query", {"sql": "SELECT " + "x" * MIB + ";"}),
        {"tool_name": "run_query", "args": {"sql": "SELECT " + "x" * MIB + " LIMIT 100"}},
    ),
    "1mib-has-limit": (dispatch_event("run_query", {"sql": "SELECT " + "x" * MIB + " LIMIT 7"}), None),
}


@pytest.mark.parametrize("case", LIMIT_CASES)
def test_query_limit_rewrites_like_rust(case: str, toolgate_bin: Path, dirs: dict[str, Path]) -> None:
    event, expected = LIMIT_CASES[case]
    js = check(toolgate_bin, dirs["js/query-limit"], "rewrite", event)
    rust = check(toolgate_bin, dirs["rust/query-limit"], "rewrite", event)

    assert js["result"] == expected
    assert rust["result"] == js["result"]
    js_entry = only_entry(js, "query-limit")
    rust_entry = only_entry(rust, "query-limit")
    assert js_entry["outcome"] == ("proceed" if expected is None else "rewrite"), js_entry
    assert js_entry.get("fault") is None, js_entry
    assert rust_entry["outcome"] == js_entry["outcome"], rust_entry


# ------------------------------------------------------- seams and chaining


@pytest.mark.parametrize(
    ("guard", "seam", "event"),
    [
        ("sql-guard", "rewrite", dispatch_event("run_query", {"sql": "SELECT 1"})),
        ("sql-guard", "result", {"run_id": "r", "tool_name": "run_query", "result": "ok", "call_id": "c"}),
        ("query-limit", "steering", steering_event("run_query", {"sql": "SELECT 1"})),
        (
            "query-limit",
            "routing",
            {
                "run_id": "r",
                "mode": "enforce",
                "intent_label": "db",
                "total_tools": 2,
                "narrowed_tool_names": ["run_query", "search"],
            },
        ),
    ],
)
def test_guards_export_only_their_seam(
    guard: str, seam: str, event: dict[str, Any], toolgate_bin: Path, dirs: dict[str, Path]
) -> None:
    # The build exports only the seams a guard implements, so the host does
    # not consult it anywhere else.
    output = check(toolgate_bin, dirs[f"js/{guard}"], seam, event)
    assert output["trace"] == [], output
    expected = ["run_query", "search"] if seam == "routing" else None
    assert output["result"] == expected, output


def test_js_guards_chain_with_rust(toolgate_bin: Path, plugins_root: Path, tmp_path: Path) -> None:
    # JS query-limit then Rust sql-guard in one directory: each is consulted
    # only at its own seam.
    both = tmp_path / "mixed"
    both.mkdir()
    (both / "a-query-limit.wasm").write_bytes((plugins_root / "js" / "query-limit.wasm").read_bytes())
    (both / "b-sql-guard.wasm").write_bytes((plugins_root / "rust" / "sql-guard.wasm").read_bytes())

    rewritten = check(toolgate_bin, both, "rewrite", dispatch_event("run_query", {"sql": "SELECT 1;"}))
    assert rewritten["result"] == {"tool_name": "run_query", "args": {"sql": "SELECT 1 LIMIT 100"}}
    assert only_entry(rewritten, "query-limit")["outcome"] == "rewrite"

    steered = check(toolgate_bin, both, "steering", steering_event("run_query", {"sql": "SELECT 1"}))
    assert steered["result"] == STEER_WHERE
    assert only_entry(steered, "sql-guard")["outcome"] == "skip"


def test_js_sql_guard_state_is_ignored(toolgate_bin: Path, dirs: dict[str, Path]) -> None:
    # A state object (JSON text parsed by the SDK) does not change the verdict.
    event = steering_event("run_query", {"sql": "SELECT 1"})
    output = check(toolgate_bin, dirs["js/sql-guard"], "steering", event, state={"tenant_id": "t", "n": [1]})
    assert output["result"] == STEER_WHERE
    assert only_entry(output, "sql-guard").get("fault") is None
