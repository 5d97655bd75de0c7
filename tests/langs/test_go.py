"""The Go example guards, run through `toolgate check`.

The components come from `plugins/go/build` (Go 1.27.3, `guest-sdk/go`) and
`scripts/build-plugins` (Rust); both land in ``$TOOLGATE_PLUGINS/<lang>/``.
Every event goes through the Go guard and through the Rust guard of the same
name, each alone in its own plugin directory: the verdicts must be the same,
and the expected ones, and the Go guard must not fault.

The 1 MiB arguments are the Go SDK's allocator hazard: the host lowers them
through the guest's `cabi_realloc`, where a Go garbage collection would trap.

Compiling a 3 MB Go component takes seconds, so the per-guard cases go through
one `toolgate replay --json` per plugin directory (one compilation, every
event, the same decisions and trace as `toolgate check`); the rest use
`toolgate check`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    MIB,
    STEER_WHERE,
    check,
    dispatch_event,
    guard_dirs,
    only_entry,
    steering_event,
)

CANCEL_EMAIL = {
    "action": "skip",
    "content": "Sending email is not permitted here; carry on without it.",
    "is_error": False,
}
GUARDS = ("sql-guard", "query-limit", "no-email", "hide-admin-tools", "result-audit")


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
    return guard_dirs(plugins_root, tmp, ("go", "rust"), GUARDS)


def replay(
    toolgate_bin: Path, plugins: Path, seam: str, events: list[dict[str, Any]], tmp: Path
) -> list[dict[str, Any]]:
    """Runs every event through `toolgate replay --json`; one decision each,
    in order: {"result": ..., "trace": [...]}."""
    trace = tmp / f"{plugins.name}-{seam}.jsonl"
    trace.write_text("".join(json.dumps({"seam": seam, "event": e}) + "\n" for e in events))
    proc = subprocess.run(
        [str(toolgate_bin), "replay", "--plugins", str(plugins), "--json", str(trace)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"toolgate replay failed ({proc.returncode}): {proc.stderr}"
    decisions = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [d["line"] for d in decisions] == list(range(1, len(events) + 1)), proc.stdout[:2000]
    return decisions


class Parity:
    """The Go and the Rust guard of one name, run over one set of cases."""

    def __init__(
        self,
        toolgate_bin: Path,
        dirs: dict[str, Path],
        guard: str,
        seam: str,
        cases: dict[str, tuple[dict[str, Any], Any]],
        tmp: Path,
    ) -> None:
        self.guard = guard
        events = [event for event, _ in cases.values()]
        go = replay(toolgate_bin, dirs[f"go/{guard}"], seam, events, tmp)
        rust = replay(toolgate_bin, dirs[f"rust/{guard}"], seam, events, tmp)
        self.outputs = {case: (g, r) for case, g, r in zip(cases, go, rust)}

    def check(self, case: str, expected: Any) -> dict[str, Any]:
        """The Go output for case, after checking it is the expected result,
        the same result and outcome as Rust's, and no fault."""
        go, rust = self.outputs[case]
        assert go["result"] == expected
        assert rust["result"] == go["result"]
        go_entry = only_entry(go, self.guard)
        rust_entry = only_entry(rust, self.guard)
        assert go_entry.get("fault") is None, go_entry
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
    # Faults in both languages; checked by its own test below.
    "no-sql": (steering_event("run_query", {"query": "SELECT 1"}), None),
}


@pytest.fixture(scope="module")
def sql_guard(toolgate_bin: Path, dirs: dict[str, Path], tmp_path_factory) -> Parity:
    tmp = tmp_path_factory.mktemp("sql-guard")
    return Parity(toolgate_bin, dirs, "sql-guard", "steering", SQL_CASES, tmp)


@pytest.mark.parametrize("case", [c for c in SQL_CASES if c != "no-sql"])
def test_sql_guard_matches_rust(case: str, sql_guard: Parity) -> None:
    sql_guard.check(case, SQL_CASES[case][1])


def test_sql_guard_with_state(toolgate_bin: Path, dirs: dict[str, Path]) -> None:
    # A big state object crosses the boundary too (as a second 1 MiB string).
    event = steering_event("run_query", {"sql": "SELECT 1"})
    state = {"query": "q" * MIB, "allowed_tool_names": ["run_query"]}
    go = check(toolgate_bin, dirs["go/sql-guard"], "steering", event, state)
    assert go["result"] == STEER_WHERE
    assert only_entry(go, "sql-guard").get("fault") is None


def test_sql_guard_without_sql_faults_and_proceeds_like_rust(sql_guard: Parity) -> None:
    # The seed's handler raises on a run_query call without `sql`; the Go
    # guard panics: a fault, logged, and the call proceeds.
    go, rust = sql_guard.outputs["no-sql"]

    assert go["result"] is None and rust["result"] is None
    go_entry = only_entry(go, "sql-guard")
    rust_entry = only_entry(rust, "sql-guard")
    assert go_entry.get("fault") is not None, go_entry
    assert rust_entry.get("fault") is not None, rust_entry
    assert go_entry["outcome"] == rust_entry["outcome"], (go_entry, rust_entry)


@pytest.mark.parametrize(
    ("guard", "seam", "event", "expected"),
    [
        ("sql-guard", "rewrite", dispatch_event("run_query", {"sql": "SELECT 1"}), None),
        ("query-limit", "steering", steering_event("run_query", {"sql": "SELECT 1"}), None),
        ("hide-admin-tools", "steering", steering_event("admin_drop", {}), None),
        (
            "result-audit",
            "routing",
            routing_event(["admin_x", "search"]),
            ["admin_x", "search"],
        ),
    ],
)
def test_guard_is_consulted_only_at_its_seam(
    guard: str,
    seam: str,
    event: dict[str, Any],
    expected: Any,
    toolgate_bin: Path,
    dirs: dict[str, Path],
) -> None:
    # Each component exports only the seam its guard implements, so the host
    # does not consult it anywhere else.
    output = check(toolgate_bin, dirs[f"go/{guard}"], seam, event)
    assert output == {"result": expected, "trace": []}


def test_result_audit_logs_like_rust(toolgate_bin: Path, dirs: dict[str, Path]) -> None:
    # The host's `log` import, through the real host: the same line from the
    # Go and the Rust guard, tagged with the plugin.
    event = result_event({"rows": [[1, "a"]]}, is_error=True)
    lines = {}
    for lang in ("go", "rust"):
        proc = subprocess.run(
            [str(toolgate_bin), "check", "--plugins", str(dirs[f"{lang}/result-audit"]),
             "--seam", "result", "--event", "-"],
            input=json.dumps(event),
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "TOOLGATE_LOG": "info", "NO_COLOR": "1"},
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["result"] is None
        lines[lang] = [line for line in proc.stderr.splitlines() if "tool=run_query" in line]
    expected = f"tool=run_query call=call-7 error=true bytes={len(json.dumps(event['result'], separators=(',', ':')))}"
    assert len(lines["go"]) == 1 and expected in lines["go"][0], lines
    assert len(lines["rust"]) == 1 and expected in lines["rust"][0], lines
    assert "result-audit" in lines["go"][0], lines


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


@pytest.fixture(scope="module")
def query_limit(toolgate_bin: Path, dirs: dict[str, Path], tmp_path_factory) -> Parity:
    tmp = tmp_path_factory.mktemp("query-limit")
    return Parity(toolgate_bin, dirs, "query-limit", "rewrite", LIMIT_CASES, tmp)


@pytest.mark.parametrize("case", LIMIT_CASES)
def test_query_limit_rewrites_like_rust(case: str, query_limit: Parity) -> None:
    query_limit.check(case, LIMIT_CASES[case][1])


# ------------------------------------------------------------------ no-email


EMAIL_CASES = {
    tool: (steering_event(tool, {"to": "a@example.com", "sql": "SELECT 1 WHERE x"}), expected)
    for tool, expected in [("send_email", CANCEL_EMAIL), ("run_query", None), ("send_emails", None)]
}


@pytest.fixture(scope="module")
def no_email(toolgate_bin: Path, dirs: dict[str, Path], tmp_path_factory) -> Parity:
    tmp = tmp_path_factory.mktemp("no-email")
    return Parity(toolgate_bin, dirs, "no-email", "steering", EMAIL_CASES, tmp)


@pytest.mark.parametrize("case", EMAIL_CASES)
def test_no_email_cancels_like_rust(case: str, no_email: Parity) -> None:
    no_email.check(case, EMAIL_CASES[case][1])


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


@pytest.fixture(scope="module")
def hide_admin_tools(toolgate_bin: Path, dirs: dict[str, Path], tmp_path_factory) -> Parity:
    tmp = tmp_path_factory.mktemp("hide-admin-tools")
    return Parity(toolgate_bin, dirs, "hide-admin-tools", "routing", ROUTING_CASES, tmp)


@pytest.mark.parametrize("case", ROUTING_CASES)
def test_hide_admin_tools_narrows_like_rust(case: str, hide_admin_tools: Parity) -> None:
    hide_admin_tools.check(case, ROUTING_CASES[case][1])


# -------------------------------------------------------------- result-audit


RESULT_CASES = {
    "object": (result_event({"rows": [[1, "a"]]}), None),
    "null-error": (result_event(None, is_error=True), None),
    "1mib-string": (result_event("z" * MIB), None),
}


@pytest.fixture(scope="module")
def result_audit(toolgate_bin: Path, dirs: dict[str, Path], tmp_path_factory) -> Parity:
    tmp = tmp_path_factory.mktemp("result-audit")
    return Parity(toolgate_bin, dirs, "result-audit", "result", RESULT_CASES, tmp)


@pytest.mark.parametrize("case", RESULT_CASES)
def test_result_audit_observes_like_rust(case: str, result_audit: Parity) -> None:
    result_audit.check(case, None)


# ------------------------------------------------------------ mixed chains


def test_go_and_rust_guards_chain(toolgate_bin: Path, plugins_root: Path, tmp_path: Path) -> None:
    # Go and Rust guards in one directory, in file-name order: the first skip
    # wins and short-circuits the rest.
    chain = tmp_path / "chain"
    chain.mkdir()
    shutil.copy(plugins_root / "go" / "no-email.wasm", chain / "a-go-no-email.wasm")
    shutil.copy(plugins_root / "rust" / "sql-guard.wasm", chain / "b-rust-sql-guard.wasm")
    shutil.copy(plugins_root / "go" / "sql-guard.wasm", chain / "c-go-sql-guard.wasm")
    events = [
        steering_event("send_email", {"sql": "x"}),
        steering_event("run_query", {"sql": "SELECT 1"}),
        steering_event("run_query", {"sql": "SELECT 1 WHERE x"}),
    ]
    email, query, fine = replay(toolgate_bin, chain, "steering", events, tmp_path)

    assert email["result"] == CANCEL_EMAIL
    assert [(e["plugin"], e["outcome"]) for e in email["trace"]] == [("a-go-no-email", "skip")]

    assert query["result"] == STEER_WHERE
    assert [(e["plugin"], e["outcome"]) for e in query["trace"]] == [
        ("a-go-no-email", "proceed"),
        ("b-rust-sql-guard", "skip"),
    ]

    assert fine["result"] is None
    assert [(e["plugin"], e["outcome"]) for e in fine["trace"]] == [
        ("a-go-no-email", "proceed"),
        ("b-rust-sql-guard", "proceed"),
        ("c-go-sql-guard", "proceed"),
    ]
