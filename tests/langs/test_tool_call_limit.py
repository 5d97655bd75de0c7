"""The stateful tool-call-limit guard, in Rust and in TypeScript, through the CLI.

The same trace — several runs and conversations, calls of `send_email` and of
other tools, over the run limit and the thread limit — goes through
`plugins/rust/tool-call-limit` and `plugins/js/tool-call-limit.ts`, each alone
in its own plugin directory with the same manifest, in one `toolgate replay
--json` per directory (its state store lives for the whole replay, like a
server's). The verdicts must be the same line for line, and the expected ones.
A bad configuration is refused at load by both, with the same message, and
`toolgate list` shows it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import plugin_dir, replay

LANGS = ("rust", "js")
EMAIL = {
    "action": "skip",
    "content": "Tool call limit exceeded. Do not call 'send_email' again.",
    "is_error": False,
}
ANY = {
    "action": "skip",
    "content": "Tool call limit exceeded. Do not make additional tool calls.",
    "is_error": False,
}
OK = None


def manifest(config: str) -> str:
    return f'[[plugin]]\npath = "tool-call-limit.wasm"\n[plugin.config]\n{config}\n'


def call(run: str, tool: str, state: dict[str, Any] | None) -> dict[str, Any]:
    """One trace line: a `before_tool_call` of `tool` in `run`, with the hook's `state`."""
    line: dict[str, Any] = {
        "seam": "steering",
        "event": {"run_id": run, "tool_name": tool, "call_id": f"{run}-{tool}", "args": {"to": "x@example.com"}},
    }
    if state is not None:
        line["state"] = state
    return line


def thread(t: str) -> dict[str, Any]:
    return {"thread_id": t}


# tool = send_email, run_limit = 2, thread_limit = 3 (thread_key: the default).
# Each line: the call, the expected verdict, and why (the counts after it).
EMAIL_TRACE = [
    (call("r1", "send_email", thread("t1")), OK),      # r1: 1, t1: 1
    (call("r1", "search", thread("t1")), OK),          # another tool: not counted
    (call("r1", "send_email", thread("t1")), OK),      # r1: 2, t1: 2
    (call("r1", "send_email", thread("t1")), EMAIL),   # the third of the run: cancelled, given back
    (call("r2", "send_email", thread("t2")), OK),      # r2: 1, t2: 1 (runs and threads apart)
    (call("r1", "send_email", thread("t1")), EMAIL),   # still over; still not counted
    (call("r3", "send_email", thread("t1")), OK),      # a new run starts from zero; t1: 3
    (call("r3", "send_email", thread("t1")), EMAIL),   # the thread limit holds across runs
    (call("r3", "send_email", None), OK),              # no conversation id: only the run counts (r3: 2)
    (call("r3", "send_email", thread("t2")), EMAIL),   # over the run limit: t2's count given back too
    (call("r4", "send_email", thread("t2")), OK),      # t2: 2
    (call("r4", "send_email", thread("t2")), OK),      # t2: 3 (had line 10 kept its count, 4: cancelled)
    (call("r4", "send_email", thread("t2")), EMAIL),   # t2 over, in a run at 2 of 2 anyway
    (call("r4", "read_inbox", thread("t2")), OK),      # other tools are never limited
    (call("r5", "send_email", thread("t3")), OK),
]

# No tool (every call counts), run_limit = 3, thread_limit = 4, thread_key = "conversation".
ANY_TRACE = [
    (call("r1", "search", {"conversation": "c1"}), OK),       # r1: 1, c1: 1
    (call("r1", "read_inbox", {"conversation": "c1"}), OK),   # r1: 2, c1: 2
    (call("r1", "send_email", {"conversation": "c1"}), OK),   # r1: 3, c1: 3
    (call("r1", "search", {"conversation": "c1"}), ANY),      # the run's fourth call
    (call("r2", "search", {"conversation": "c1"}), OK),       # r2: 1, c1: 4
    (call("r2", "search", {"conversation": "c1"}), ANY),      # c1's fifth, in a new run
    (call("r2", "search", thread("c1")), OK),                 # thread_id is not the key here: r2: 2
    (call("r2", "search", {"conversation": 42}), OK),         # a number is an id too: r2: 3, 42: 1
    (call("r2", "search", {"conversation": 42}), ANY),        # r2's fourth
    (call("r3", "search", {"conversation": None}), OK),       # null: no conversation
]

TRACES = {
    "email": ('tool = "send_email"\nrun_limit = 2\nthread_limit = 3', EMAIL_TRACE),
    "any": ('run_limit = 3\nthread_limit = 4\nthread_key = "conversation"', ANY_TRACE),
}


def guard_dir(plugins_root: Path, lang: str, tmp: Path, config: str) -> Path:
    d = plugin_dir(plugins_root, lang, "tool-call-limit", tmp=tmp)
    (d / "toolgate.toml").write_text(manifest(config))
    return d


@pytest.fixture(scope="module")
def decisions(
    toolgate_bin: Path, plugins_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(trace, language) -> the decisions of one replay of that trace."""
    out = {}
    for name, (config, trace) in TRACES.items():
        for lang in LANGS:
            d = guard_dir(plugins_root, lang, tmp_path_factory.mktemp(f"{name}-{lang}"), config)
            out[(name, lang)] = replay(toolgate_bin, d, [line for line, _ in trace])
    return out


@pytest.mark.parametrize("name", TRACES)
def test_rust_and_ts_give_the_same_verdicts_and_the_expected_ones(
    name: str, decisions: dict[tuple[str, str], list[dict[str, Any]]]
) -> None:
    _, trace = TRACES[name]
    expected = [verdict for _, verdict in trace]
    by_lang = {lang: decisions[(name, lang)] for lang in LANGS}
    for lang, got in by_lang.items():
        assert [d["result"] for d in got] == expected, lang
        for d, verdict in zip(got, expected):
            (entry,) = d["trace"]
            assert entry["outcome"] == ("proceed" if verdict is None else "skip"), (lang, d)
            assert entry.get("fault") is None, (lang, d)
    assert [d["result"] for d in by_lang["rust"]] == [d["result"] for d in by_lang["js"]]


def test_the_third_send_email_of_a_run_is_cancelled_with_the_exact_message(
    decisions: dict[tuple[str, str], list[dict[str, Any]]],
) -> None:
    for lang in LANGS:
        third = decisions[("email", lang)][3]
        assert third["result"] == {
            "action": "skip",
            "content": "Tool call limit exceeded. Do not call 'send_email' again.",
            "is_error": False,
        }, lang


def listed(toolgate_bin: Path, d: Path) -> dict[str, Any]:
    out = subprocess.run(
        [str(toolgate_bin), "list", "--plugins", str(d)], capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout)


BAD_CONFIGS = {
    "no-limit": ('tool = "send_email"', "config: set run_limit, thread_limit or both"),
    "negative": ("run_limit = -1", "config: run_limit must be 0 or more"),
    "unknown-key": (
        "run_limit = 2\nrun_limits = 3",
        "config: unknown field `run_limits`, expected one of `tool`, `run_limit`, `thread_limit`, `thread_key`",
    ),
    "string-limit": ('thread_limit = "3"', 'config: invalid type: string "3", expected i64'),
    "number-key": ("run_limit = 1\nthread_key = 7", "config: invalid type: number, expected a string"),
}


@pytest.mark.parametrize("case", BAD_CONFIGS)
def test_a_bad_config_is_refused_at_load_by_both_with_the_same_message(
    case: str, toolgate_bin: Path, plugins_root: Path, tmp_path: Path
) -> None:
    config, message = BAD_CONFIGS[case]
    errors = {}
    for lang in LANGS:
        out = listed(toolgate_bin, guard_dir(plugins_root, lang, tmp_path / lang, config))
        assert out["global"] == [], (lang, out["global"])
        (error,) = out["errors"]
        assert error.endswith(f"tool-call-limit.wasm): plugin `tool-call-limit` refuses its config: {message}"), (lang, error)
        assert ":3 (" in error, "the manifest's line of the config"
        errors[lang] = error.split("tool-call-limit.wasm): ", 1)[1]
    assert errors["rust"] == errors["js"]


def test_a_good_config_loads_the_ts_guard_with_its_config_check(
    toolgate_bin: Path, plugins_root: Path, tmp_path: Path
) -> None:
    out = listed(toolgate_bin, guard_dir(plugins_root, "js", tmp_path, TRACES["email"][0]))
    assert out["errors"] == [], out["errors"]
    (plugin,) = out["global"]
    assert plugin["name"] == "tool-call-limit"
    assert plugin["seams"] == ["steering"], plugin
