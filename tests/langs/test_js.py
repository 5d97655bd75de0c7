"""The JavaScript/TypeScript example guards, run through the `toolgate` CLI.

The components come from `plugins/js/build` (TypeScript, componentize-js via the
`@toolgate/guest` SDK) and `scripts/build-plugins` (Rust); both land in
``$TOOLGATE_PLUGINS/<lang>/``. Every event goes through the JS guard and through
the Rust guard of the same name, each alone in its own plugin directory: the
verdicts must be the same, and the expected ones, and the JS guard's trace must
show the expected outcome and no fault.

A JS component embeds a whole JS engine (~12 MB): compiling it takes the host
tens of seconds, once per process. So the bulk of the events go through one
`toolgate replay --json` per plugin directory (the same chain as `toolgate
check`, one compile for all events), and `toolgate check` itself runs once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import (
    MIB,
    Runs,
    STEER_WHERE,
    check,
    dispatch_event,
    guard_dirs,
    only_entry,
    replay,
    steering_event,
)

GUARDS = ("sql-guard", "query-limit")


@pytest.fixture(scope="module")
def dirs(plugins_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One plugin directory per (language, guard)."""
    tmp = tmp_path_factory.mktemp("js-guards")
    return guard_dirs(plugins_root, tmp, ("js", "rust"), GUARDS)


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
    # U+1E98 upper-cases to W + U+030A: no WHERE in the upper-cased text either.
    "w-ring-here": (steering_event("run_query", {"sql": "SELECT 1 \u1e98here x"}), STEER_WHERE, "skip"),
    "other-tool": (steering_event("search", {"sql": "SELECT * FROM users"}), None, "proceed"),
    "other-tool-no-args": (steering_event("search", {}), None, "proceed"),
    "1mib-no-where": (steering_event("run_query", {"sql": "SELECT " + "x" * MIB}), STEER_WHERE, "skip"),
    "1mib-where": (
        steering_event("run_query", {"sql": "SELECT " + "x" * MIB + " where y"}),
        None,
        "proceed",
    ),
}


NO_STRING_SQL = {"missing": {"query": "SELECT 1"}, "number": {"sql": 42}, "null": {"sql": None}}

OTHER_SEAMS = {
    "rewrite": dispatch_event("run_query", {"sql": "SELECT 1"}),
    "result": {"run_id": "r", "tool_name": "run_query", "result": "ok", "call_id": "c"},
    "routing": {
        "run_id": "r",
        "mode": "enforce",
        "intent_label": "db",
        "total_tools": 2,
        "narrowed_tool_names": ["run_query", "search"],
    },
    "steering": steering_event("run_query", {"sql": "SELECT 1"}),
}


@pytest.fixture(scope="module")
def sql_runs(toolgate_bin: Path, dirs: dict[str, Path]) -> Runs:
    cases = {case: {"seam": "steering", "event": event} for case, (event, _, _) in SQL_CASES.items()}
    for case, args in NO_STRING_SQL.items():
        cases[f"no-string-sql-{case}"] = {"seam": "steering", "event": steering_event("run_query", args)}
    for seam in ("rewrite", "result", "routing"):
        cases[f"seam-{seam}"] = {"seam": seam, "event": OTHER_SEAMS[seam]}
    cases["with-state"] = {
        "seam": "steering",
        "event": steering_event("run_query", {"sql": "SELECT 1"}),
        "state": {"tenant_id": "t", "n": [1]},
    }
    return Runs(toolgate_bin, dirs, "sql-guard", cases, ("js", "rust"))


@pytest.mark.parametrize("case", SQL_CASES)
def test_sql_guard_matches_rust(case: str, sql_runs: Runs) -> None:
    _, expected, outcome = SQL_CASES[case]
    js = sql_runs("js", case)
    rust = sql_runs("rust", case)

    assert js["result"] == expected
    assert rust["result"] == js["result"]
    js_entry = only_entry(js, "sql-guard")
    rust_entry = only_entry(rust, "sql-guard")
    assert js_entry["outcome"] == outcome, js_entry
    assert js_entry.get("fault") is None, js_entry
    assert rust_entry["outcome"] == outcome, rust_entry


@pytest.mark.parametrize("case", NO_STRING_SQL)
def test_sql_guard_without_string_sql_faults_and_proceeds_like_rust(case: str, sql_runs: Runs) -> None:
    # The seed's handler raises on a run_query call without `sql`: a fault,
    # logged, and the call proceeds.
    js = sql_runs("js", f"no-string-sql-{case}")
    rust = sql_runs("rust", f"no-string-sql-{case}")

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
    # Upper-cased, these read LIMIT too (ı -> I, ﬂ -> FL, ẗ -> T + U+0308).
    "has-limit-dotless-i": (dispatch_event("run_query", {"sql": "SELECT 1 l\u0131m\u0131t 5"}), None),
    "has-limit-fl-ligature": (dispatch_event("run_query", {"sql": "SELECT 1 \ufb02imit 5"}), None),
    "has-limit-t-diaeresis": (dispatch_event("run_query", {"sql": "SELECT 1 limi\u1e97 5"}), None),
    "other-tool": (dispatch_event("search", {"sql": "SELECT * FROM users"}), None),
    "no-sql": (dispatch_event("run_query", {"query": "SELECT 1"}), None),
    "non-string-sql": (dispatch_event("run_query", {"sql": ["SELECT 1"]}), None),
    "1mib": (
        dispatch_event("run_query", {"sql": "SELECT " + "x" * MIB + " ;\n", "db": "main"}),
        {"tool_name": "run_query", "args": {"sql": "SELECT " + "x" * MIB + " LIMIT 100", "db": "main"}},
    ),
    "1mib-has-limit": (dispatch_event("run_query", {"sql": "SELECT " + "x" * MIB + " LIMIT 7"}), None),
}


@pytest.fixture(scope="module")
def limit_runs(toolgate_bin: Path, dirs: dict[str, Path]) -> Runs:
    cases = {case: {"seam": "rewrite", "event": event} for case, (event, _) in LIMIT_CASES.items()}
    for seam in ("steering", "result", "routing"):
        cases[f"seam-{seam}"] = {"seam": seam, "event": OTHER_SEAMS[seam]}
    return Runs(toolgate_bin, dirs, "query-limit", cases, ("js", "rust"))


@pytest.mark.parametrize("case", LIMIT_CASES)
def test_query_limit_rewrites_like_rust(case: str, limit_runs: Runs) -> None:
    _, expected = LIMIT_CASES[case]
    js = limit_runs("js", case)
    rust = limit_runs("rust", case)

    assert js["result"] == expected
    assert rust["result"] == js["result"]
    js_entry = only_entry(js, "query-limit")
    rust_entry = only_entry(rust, "query-limit")
    assert js_entry["outcome"] == ("proceed" if expected is None else "rewrite"), js_entry
    assert js_entry.get("fault") is None, js_entry
    assert rust_entry["outcome"] == js_entry["outcome"], rust_entry


# ------------------------------------------------------- seams and chaining


@pytest.mark.parametrize(
    ("guard", "seam"),
    [("sql-guard", "rewrite"), ("sql-guard", "result"), ("sql-guard", "routing"),
     ("query-limit", "steering"), ("query-limit", "result"), ("query-limit", "routing")],
)
def test_guards_export_only_their_seam(guard: str, seam: str, sql_runs: Runs, limit_runs: Runs) -> None:
    # The build exports only the seams a guard implements, so the host does
    # not consult it anywhere else (the Rust guards behave the same).
    runs = sql_runs if guard == "sql-guard" else limit_runs
    expected = ["run_query", "search"] if seam == "routing" else None
    for lang in ("js", "rust"):
        decision = runs(lang, f"seam-{seam}")
        assert decision["trace"] == [], (lang, decision)
        assert decision["result"] == expected, (lang, decision)


def test_js_sql_guard_state_is_ignored(sql_runs: Runs) -> None:
    # A state object (JSON text parsed by the SDK) does not change the verdict.
    decision = sql_runs("js", "with-state")
    assert decision["result"] == STEER_WHERE
    assert only_entry(decision, "sql-guard").get("fault") is None


def test_js_guards_chain_with_rust(toolgate_bin: Path, plugins_root: Path, tmp_path: Path) -> None:
    # JS query-limit then Rust sql-guard in one directory: each is consulted
    # only at its own seam.
    both = tmp_path / "mixed"
    both.mkdir()
    (both / "a-query-limit.wasm").write_bytes((plugins_root / "js" / "query-limit.wasm").read_bytes())
    (both / "b-sql-guard.wasm").write_bytes((plugins_root / "rust" / "sql-guard.wasm").read_bytes())

    rewritten, steered = replay(
        toolgate_bin,
        both,
        [
            {"seam": "rewrite", "event": dispatch_event("run_query", {"sql": "SELECT 1;"})},
            {"seam": "steering", "event": steering_event("run_query", {"sql": "SELECT 1"})},
        ],
    )
    assert rewritten["result"] == {"tool_name": "run_query", "args": {"sql": "SELECT 1 LIMIT 100"}}
    assert only_entry(rewritten, "query-limit")["outcome"] == "rewrite"
    assert steered["result"] == STEER_WHERE
    assert only_entry(steered, "sql-guard")["outcome"] == "skip"


def test_check_command_runs_a_js_guard(toolgate_bin: Path, dirs: dict[str, Path]) -> None:
    # `toolgate check` itself, with a state file, on the JS sql-guard.
    output = check(
        toolgate_bin,
        dirs["js/sql-guard"],
        "steering",
        steering_event("run_query", {"sql": "DELETE FROM t"}),
        state={"tenant_id": "t"},
    )
    assert output["result"] == STEER_WHERE
    entry = only_entry(output, "sql-guard")
    assert entry["outcome"] == "skip" and entry.get("fault") is None, entry
