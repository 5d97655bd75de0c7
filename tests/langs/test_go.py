"""The Go example guards, run through `toolgate check`.

The components come from `plugins/go/build` (Go 1.27.3, `guest-sdk/go`) and
`scripts/build-plugins` (Rust); both land in ``$TOOLGATE_PLUGINS/<lang>/``.
Every event goes through the Go guard and through the Rust guard of the same
name, each alone in its own plugin directory: the verdicts must be the same,
and the expected ones, and the Go guard must not fault.

The 1 MiB arguments are the Go SDK's allocator hazard: the host lowers them
through the guest's `cabi_realloc`, where a Go garbage collection would trap.
"""

from __future__ import annotations

import shutil
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
CANCEL_EMAIL = {
    "action": "skip",
    "content": "Sending email is not permitted here; carry on without it.",
    "is_error": False,
}
GUARDS = ("sql-guard", "query-limit", "no-email", "hide-admin-tools", "result-audit")


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


def routing_event(names: list[str], query: str | None = "how many users?") -> dict[str, Any]:
    event: dict[str, Any] = {
        "run_id": "run-1",
        "mode": "enforce",
        "intent_label": "data",
        "total_tools": len(names) + 3,
        "narrowed_tool_names": names,
        "saved_tokens_estimate": 120,
        "tools": [{"name": n, "description": f"the {n} tool"} for n in names],
    }
    if query is not None:
        event["query"] = query
    return event


def result_event(result: Any, is_error: bool = False) -> dict[str, Any]:
    return {
        "run_id": "run-1",
        "tool_name": "run_query",
        "result": result,
        "call_id": "call-7",
        "deferred": False,
        "is_error": is_error,
    }


@pytest.fixture(scope="module")
def dirs(plugins_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One plugin directory per (language, guard)."""
    tmp = tmp_path_factory.mktemp("go-guards")
    return {
        f"{lang}/{name}": plugin_dir(plugins_root, lang, name, tmp=tmp)
        for lang in ("go", "rust")
        for name in GUARDS
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


def same_as_rust(
    toolgate_bin: Path, dirs: dict[str, Path], guard: str, seam: str, event: dict[str, Any]
) -> dict[str, Any]:
    """Runs event through the Go and the Rust guard; returns the Go output
    after checking both gave the same result and outcome, and Go no fault."""
    go = check(toolgate_bin, dirs[f"go/{guard}"], seam, event)
    rust = check(toolgate_bin, dirs[f"rust/{guard}"], seam, event)
    assert go["result"] == rust["result"]
    go_entry = only_entry(go, guard)
    rust_entry = only_entry(rust, guard)
    assert go_entry["fault"] is None, go_entry
    assert go_entry["outcome"] == rust_entry["outcome"], (go_entry, rust_entry)
    return go


# ----------------------------------------------------------------- sql-guard

SQL_CASES = {
    "no-where": (steering_event("run_query", {"sql": "SELECT * FROM users"}), STEER_WHERE),
    "where": (steering_event("run_query", {"sql": "SELECT * FROM users WHERE id = 1"}), None),
    "lowercase-where": (steering_event("run_query", {"sql": "select 1 from t where x"}), None),
    "mixed-case-where": (steering_event("run_query", {"sql": "select 1 from t WhErE x"}), None),
    "unicode-sql": (steering_event("run_query", {"sql": "SELECT 'é☃' FROM t"}), STEER_WHERE),
    "other-tool": (steering_event("search", {"sql": "SELECT * FROM users"}), None),
    "1mib-no-where": (steering_event("run_query", {"sql": "SELECT " + "x" * MIB}), STEER_WHERE),
    "1mib-where": (steering_event("run_query", {"sql": "SELECT " + "x" * MIB + " where y"}), None),
    "1mib-other-args": (
        steering_event("run_query", {"sql": "SELECT 1", "blob": "y" * MIB, "n": 3}),
        STEER_WHERE,
    ),
}


@pytest.mark.parametrize("case", SQL_CASES)
def test_sql_guard_matches_rust(case: str, toolgate_bin: Path, dirs: dict[str, Path]) -> None:
    event, expected = SQL_CASES[case]
    go = same_as_rust(toolgate_bin, dirs, "sql-guard", "steering", event)
    assert go["result"] == expected


def test_sql_guard_with_state(toolgate_bin: Path, dirs: dict[str, Path]) -> None:
    # A big state object crosses the boundary too (as a second 1 MiB string).
    event = steering_event("run_query", {"sql": "SELECT 1"})
    state = {"query": "q" * MIB, "allowed_tool_names": ["run_query"]}
    go = check(toolgate_bin, dirs["go/sql-guard"], "steering", event, state)
    assert go["result"] == STEER_WHERE
    assert only_entry(go, "sql-guard")["fault"] is None


def test_sql_guard_without_sql_faults_and_proceeds_like_rust(
    toolgate_bin: Path, dirs: dict[str, Path]
) -> None:
    # The seed's handler raises on a run_query call without `sql`; the Go
    # guard panics: a fault, logged, and the call proceeds.
    event = steering_event("run_query", {"query": "SELECT 1"})
    go = check(toolgate_bin, dirs["go/sql-guard"], "steering", event)
    rust = check(toolgate_bin, dirs["rust/sql-guard"], "steering", event)

    assert go["result"] is None and rust["result"] is None
    go_entry = only_entry(go, "sql-guard")
    rust_entry = only_entry(rust, "sql-guard")
    assert go_entry["fault"] is not None, go_entry
    assert rust_entry["fault"] is not None, rust_entry
    assert go_entry["outcome"] == rust_entry["outcome"], (go_entry, rust_entry)


@pytest.mark.parametrize(
    ("guard", "seam", "event"),
    [
        ("sql-guard", "rewrite", dispatch_event("run_query", {"sql": "SELECT 1"})),
        ("query-limit", "steering", steering_event("run_query", {"sql": "SELECT 1"})),
        ("hide-admin-tools", "steering", steering_event("admin_drop", {})),
        ("result-audit", "routing", routing_event(["admin_x", "search"])),
    ],
)
def test_guard_is_consulted_only_at_its_seam(
    guard: str, seam: str, event: dict[str, Any], toolgate_bin: Path, dirs: dict[str, Path]
) -> None:
    # Each component exports only the seam its guard implements, so the host
    # does not consult it anywhere else.
    output = check(toolgate_bin, dirs[f"go/{guard}"], seam, event)
    assert output["trace"] == [], output
    assert output["result"] in (None, ["admin_x", "search"]), output


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
    "keeps-exact-numbers-and-html": (
        dispatch_event("run_query", {"sql": "select '<a&b>'", "big": 9007199254740993, "f": 1.5}),
        {
            "tool_name": "run_query",
            "args": {"sql": "select '<a&b>' LIMIT 100", "big": 9007199254740993, "f": 1.5},
        },
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
    go = same_as_rust(toolgate_bin, dirs, "query-limit", "rewrite", event)
    assert go["result"] == expected


# ------------------------------------------------------------------ no-email


@pytest.mark.parametrize(
    ("tool", "expected"), [("send_email", CANCEL_EMAIL), ("run_query", None), ("send_emails", None)]
)
def test_no_email_cancels_like_rust(
    tool: str, expected: Any, toolgate_bin: Path, dirs: dict[str, Path]
) -> None:
    event = steering_event(tool, {"to": "a@example.com", "sql": "SELECT 1 WHERE x"})
    go = same_as_rust(toolgate_bin, dirs, "no-email", "steering", event)
    assert go["result"] == expected


# ---------------------------------------------------------- hide-admin-tools

ROUTING_CASES = {
    "hides-admin": (
        routing_event(["search", "admin_drop", "run_query", "admin_users"]),
        ["search", "run_query"],
    ),
    "nothing-to-hide": (routing_event(["search", "run_query"]), ["search", "run_query"]),
    "all-admin": (routing_event(["admin_a", "admin_b"], query=None), []),
    "many-tools": (
        routing_event([f"tool_{i}" for i in range(300)] + [f"admin_{i}" for i in range(300)]),
        [f"tool_{i}" for i in range(300)],
    ),
}


@pytest.mark.parametrize("case", ROUTING_CASES)
def test_hide_admin_tools_narrows_like_rust(
    case: str, toolgate_bin: Path, dirs: dict[str, Path]
) -> None:
    event, expected = ROUTING_CASES[case]
    go = same_as_rust(toolgate_bin, dirs, "hide-admin-tools", "routing", event)
    assert go["result"] == expected


# -------------------------------------------------------------- result-audit


@pytest.mark.parametrize(
    "event",
    [
        result_event({"rows": [[1, "a"]]}),
        result_event(None, is_error=True),
        result_event("z" * MIB),
    ],
    ids=["object", "null-error", "1mib-string"],
)
def test_result_audit_observes_like_rust(
    event: dict[str, Any], toolgate_bin: Path, dirs: dict[str, Path]
) -> None:
    go = same_as_rust(toolgate_bin, dirs, "result-audit", "result", event)
    assert go["result"] is None


# ------------------------------------------------------------ mixed chains


def test_go_and_rust_guards_chain(toolgate_bin: Path, plugins_root: Path, tmp_path: Path) -> None:
    # A Go guard and a Rust guard in one directory, in file-name order: the
    # first skip wins and short-circuits the rest.
    chain = tmp_path / "chain"
    chain.mkdir()
    shutil.copy(plugins_root / "go" / "no-email.wasm", chain / "a-go-no-email.wasm")
    shutil.copy(plugins_root / "rust" / "sql-guard.wasm", chain / "b-rust-sql-guard.wasm")
    shutil.copy(plugins_root / "go" / "sql-guard.wasm", chain / "c-go-sql-guard.wasm")

    email = check(toolgate_bin, chain, "steering", steering_event("send_email", {"sql": "x"}))
    assert email["result"] == CANCEL_EMAIL
    assert [e["plugin"] for e in email["trace"]] == ["a-go-no-email"] or len(email["trace"]) == 1

    query = check(toolgate_bin, chain, "steering", steering_event("run_query", {"sql": "SELECT 1"}))
    assert query["result"] == STEER_WHERE
    assert len(query["trace"]) == 2, query["trace"]
    assert all(e["fault"] is None for e in query["trace"]), query["trace"]

    fine = check(
        toolgate_bin, chain, "steering", steering_event("run_query", {"sql": "SELECT 1 WHERE x"})
    )
    assert fine["result"] is None
    assert len(fine["trace"]) == 3, fine["trace"]
    assert all(e["fault"] is None for e in fine["trace"]), fine["trace"]
