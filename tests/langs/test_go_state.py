"""Go guards on `toolgate:guard@0.2.0`: state and the config check at load.

The components come from `plugins/go/build` (`tool-call-limit`,
`query-limit`, `sql-guard`) and `scripts/build-plugins rust`
(`tool-call-limit`), in ``$TOOLGATE_PLUGINS/<lang>/``. Each runs alone in a
plugin directory of its own with a manifest giving it a config.

- `tool-call-limit` keeps its counts in the host's state: one
  `toolgate replay --json` decides a whole trace in one process, so the
  counts of a run persist from line to line and a new `run_id` starts from
  zero. The Go and the Rust guard decide the same trace: the verdicts must be
  the expected ones, and the same.
- A config the guard refuses keeps the plugin from loading: `toolgate list`
  names it among the errors with the guard's own message, and loads nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import listing, replay, steering_event

CANCEL_EMAIL = {
    "action": "skip",
    "content": "Tool call limit exceeded. Do not call 'send_email' again.",
    "is_error": False,
}
CANCEL_ANY = {
    "action": "skip",
    "content": "Tool call limit exceeded. Do not make additional tool calls.",
    "is_error": False,
}


def manifest_dir(plugins_root: Path, tmp: Path, lang: str, guard: str, plugins: dict[str, str]) -> Path:
    """A plugin directory holding the guard once, as every plugin of
    `plugins` (name -> its `[plugin.config]`, TOML lines), in that order."""
    src = plugins_root / lang / f"{guard}.wasm"
    if not src.is_file():
        pytest.fail(f"{src} is missing; build the {lang} example plugins first")
    out = tmp / f"{lang}-{guard}-{len(list(tmp.iterdir()))}"
    out.mkdir(parents=True)
    (out / f"{guard}.wasm").write_bytes(src.read_bytes())
    (out / "toolgate.toml").write_text("".join(
        f'[[plugin]]\nname = "{name}"\npath = "{guard}.wasm"\n[plugin.config]\n{config}\n'
        for name, config in plugins.items()
    ))
    return out


def call(run: str, tool: str, state: dict[str, Any] | None = None) -> dict[str, Any]:
    """One steering line of a trace: `tool` called in run `run`."""
    event = {**steering_event(tool, {"to": "a@example.com"}), "run_id": run}
    line: dict[str, Any] = {"seam": "steering", "event": event}
    if state is not None:
        line["state"] = state
    return line


def decisions(toolgate_bin: Path, plugins: Path, lines: list[dict[str, Any]]) -> list[Any]:
    """The trace's results, in order, after checking no call faulted."""
    out = replay(toolgate_bin, plugins, lines)
    for d in out:
        assert len(d["trace"]) <= 1, d
        assert all(e.get("fault") is None for e in d["trace"]), d
    return [d["result"] for d in out]


# ----------------------------------------------------------- tool-call-limit

THREAD = {"thread_id": "conversation-1"}

# (line, expected result): the host test's trace, through the CLI.
LIMIT_TRACE = [
    (call("r1", "send_email", THREAD), None),
    (call("r1", "search", THREAD), None),  # another tool: not counted
    (call("r1", "send_email", THREAD), None),
    (call("r1", "send_email", THREAD), CANCEL_EMAIL),  # the run's third
    (call("r1", "send_email", THREAD), CANCEL_EMAIL),  # not counted, still over
    (call("r2", "send_email", THREAD), None),  # a new run: the thread's third
    (call("r2", "send_email", THREAD), CANCEL_EMAIL),  # the thread's fourth
    (call("r2", "send_email", {}), None),  # no thread id: no thread limit
    (call("r2", "send_email", {"thread_id": None}), CANCEL_EMAIL),  # null: none; the run's third
    (call("r3", "send_email", {"thread_id": 7}), None),  # a number id: its own thread
]
LIMIT_CONFIG = 'tool = "send_email"\nrun_limit = 2\nthread_limit = 3'

# Every tool, per run only: state persists through a run, not across runs.
ANY_TRACE = [
    (call("a", "search"), None),
    (call("a", "run_query"), None),
    (call("a", "send_email"), CANCEL_ANY),
    (call("b", "send_email"), None),
    (call("a", "search"), CANCEL_ANY),
    (call("b", "search"), None),
    (call("b", "search"), CANCEL_ANY),
    (call("c", "search"), None),
]
ANY_CONFIG = "run_limit = 2"


@pytest.mark.parametrize(
    ("config", "trace"),
    [(LIMIT_CONFIG, LIMIT_TRACE), (ANY_CONFIG, ANY_TRACE)],
    ids=["one-tool-run-and-thread", "every-tool-per-run"],
)
def test_tool_call_limit_decides_as_rust(
    config: str, trace: list[tuple[dict[str, Any], Any]],
    toolgate_bin: Path, plugins_root: Path, tmp_path: Path,
) -> None:
    lines = [line for line, _ in trace]
    expected = [want for _, want in trace]
    go, rust = (
        decisions(toolgate_bin, manifest_dir(plugins_root, tmp_path, lang, "tool-call-limit", {"limit": config}), lines)
        for lang in ("go", "rust")
    )
    assert go == expected
    assert rust == go


def test_state_is_the_plugins_own(toolgate_bin: Path, plugins_root: Path, tmp_path: Path) -> None:
    # One component as two plugins of one chain, counting the same key
    # (`calls:send_email`): the host keeps each plugin's count apart.
    chain = manifest_dir(plugins_root, tmp_path, "go", "tool-call-limit", {
        "three": 'tool = "send_email"\nrun_limit = 3',
        "one": 'tool = "send_email"\nrun_limit = 1',
    })
    out = replay(toolgate_bin, chain, [call("r", "send_email") for _ in range(4)])
    assert [d["result"] for d in out] == [None, CANCEL_EMAIL, CANCEL_EMAIL, CANCEL_EMAIL]
    assert [[(e["plugin"], e["outcome"]) for e in d["trace"]] for d in out] == [
        [("three", "proceed"), ("one", "proceed")],
        [("three", "proceed"), ("one", "skip")],
        [("three", "proceed"), ("one", "skip")],
        [("three", "skip")],  # its fourth: the first skip short-circuits
    ]


# ------------------------------------------------------ config at load time

# (config, what the refusal says): the guard's own checks word for word,
# the typed reading's by the key or type it names.
TOOL_CALL_LIMIT_REFUSALS = [
    ('tool = "send_email"', "config: set run_limit, thread_limit or both"),
    ("run_limit = -1", "config: run_limit must be 0 or more"),
    ("run_limit = 1\nthread_limit = -2", "config: thread_limit must be 0 or more"),
    ("run_limit = 1\nrunlimit = 2", "runlimit"),
    ('run_limit = "two"', "string"),
]
QUERY_LIMIT_REFUSALS = [
    ("limit = 0", "config: limit must be 1 or more"),
    ("limit = -3", "config: limit must be 1 or more"),
    ("rows = 5", 'config: unknown field "rows"'),
    ('limit = "100"', "config: cannot unmarshal string"),
    ("limit = 2.5", "config: cannot unmarshal number 2.5"),
]


def refusals(toolgate_bin: Path, plugins: Path, names: list[str]) -> dict[str, str]:
    """Each named plugin's load error, in a directory where every one is
    refused for its config (so nothing loads)."""
    listed = listing(toolgate_bin, plugins)
    assert listed["global"] == [], listed["global"]
    errors = listed["errors"]
    assert len(errors) == len(names), errors
    found = {}
    for name in names:
        (error,) = [e for e in errors if f"plugin `{name}` refuses its config: " in e]
        found[name] = error
    return found


def test_go_query_limit_refuses_a_bad_config_at_load(
    toolgate_bin: Path, plugins_root: Path, tmp_path: Path
) -> None:
    configs = {f"ql-{i}": config for i, (config, _) in enumerate(QUERY_LIMIT_REFUSALS)}
    plugins = manifest_dir(plugins_root, tmp_path, "go", "query-limit", configs)
    errors = refusals(toolgate_bin, plugins, list(configs))
    for i, (config, says) in enumerate(QUERY_LIMIT_REFUSALS):
        assert says in errors[f"ql-{i}"], config


def test_go_tool_call_limit_refuses_a_bad_config_as_rust(
    toolgate_bin: Path, plugins_root: Path, tmp_path: Path
) -> None:
    configs = {f"limit-{i}": config for i, (config, _) in enumerate(TOOL_CALL_LIMIT_REFUSALS)}
    for lang in ("go", "rust"):
        plugins = manifest_dir(plugins_root, tmp_path, lang, "tool-call-limit", configs)
        errors = refusals(toolgate_bin, plugins, list(configs))
        for i, (config, says) in enumerate(TOOL_CALL_LIMIT_REFUSALS):
            assert says in errors[f"limit-{i}"], (lang, config)


def test_go_query_limit_uses_a_good_config(toolgate_bin: Path, plugins_root: Path, tmp_path: Path) -> None:
    plugins = manifest_dir(plugins_root, tmp_path, "go", "query-limit", {"ql": "limit = 7"})
    listed = listing(toolgate_bin, plugins)
    assert listed["errors"] == []
    assert [(p["name"], p["seams"]) for p in listed["global"]] == [("ql", ["rewrite"])]
    event = {
        "run_id": "r", "iteration_index": 0, "node_name": "react", "call_id": "c",
        "tool_name": "run_query", "args": {"sql": "SELECT 1;", "db": "main"},
        "available_tools": ["run_query"],
    }
    (out,) = replay(toolgate_bin, plugins, [{"seam": "rewrite", "event": event}])
    assert out["result"] == {"tool_name": "run_query", "args": {"sql": "SELECT 1 LIMIT 7", "db": "main"}}


def test_a_go_guard_without_a_check_loads_whatever_its_config(
    toolgate_bin: Path, plugins_root: Path, tmp_path: Path
) -> None:
    # sql-guard does not import the config package: it exports no check.
    plugins = manifest_dir(plugins_root, tmp_path, "go", "sql-guard", {"sg": 'anything = "at all"'})
    listed = listing(toolgate_bin, plugins)
    assert listed["errors"] == []
    assert [p["name"] for p in listed["global"]] == ["sg"]
