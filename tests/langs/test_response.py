"""The response seam (``on_response_render``) in a guard of every language.

The ``render`` guard of each language (``tests/langs/guards``) answers
``content|original_content|model|node_name|iteration_index|run_id|state.k``:
every field of the event, read off the answer. Through ``toolgate check``
and ``toolgate replay``, each must answer the same; a content of ``keep``
keeps the answer (none), and ``bad`` faults (a non-string answer in JS and
Python, a panic in Go) and leaves the answer as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, build_test_guards, check, replay

GUARDS = REPO / "tests/langs/guards"
SOURCES = {"js": GUARDS / "render.ts", "python": GUARDS / "render-py", "go": GUARDS / "render-go"}
LANGS = ("js", "python", "go")
# A JS or Python component's first instantiation on a busy machine can
# outlast the load probe's default cap: these tests are about the answers.
PATIENT = ("--probe-timeout-ms", "600000")


def event(content: str | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {
        "run_id": "run-1", "iteration_index": 3, "model": "m-1", "node_name": "react",
        "original_content": "Hé \U0001f600 answer",
    }
    if content is not None:
        e["content"] = content
    return e


@pytest.fixture(scope="session")
def render(toolgate_bin: Path) -> dict[str, Path]:
    return build_test_guards(toolgate_bin, "render", SOURCES)


def plugins(tmp: Path, wasm: Path) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "render.wasm").write_bytes(wasm.read_bytes())
    return tmp


@pytest.mark.parametrize("lang", LANGS)
def test_every_field_reaches_the_guard_and_its_answer_is_the_result(toolgate_bin, render, tmp_path, lang):
    dir = plugins(tmp_path, render[lang])
    out = check(toolgate_bin, dir, "response", event(), state={"k": "v"}, options=PATIENT)
    assert out["result"] == "Hé \U0001f600 answer|Hé \U0001f600 answer|m-1|react|3|run-1|v"
    assert [t["outcome"] for t in out["trace"]] == ["rewrite"]


@pytest.mark.parametrize("lang", LANGS)
def test_none_keeps_the_content_and_a_fault_leaves_it(toolgate_bin, render, tmp_path, lang):
    dir = plugins(tmp_path, render[lang])
    lines = [
        {"seam": "response", "event": event("now")},
        {"seam": "response", "event": event("keep")},
        {"seam": "response", "event": event("bad")},
        # symfonic's run() sends -1: "emitted by the engine, not the loop".
        {"seam": "response", "event": {**event("now"), "iteration_index": -1}},
    ]
    now, keep, bad, engine = replay(toolgate_bin, dir, lines, *PATIENT)
    assert now["result"] == "now|Hé \U0001f600 answer|m-1|react|3|run-1|"
    assert keep["result"] == "keep"
    assert [t["outcome"] for t in keep["trace"]] == ["proceed"]
    assert bad["result"] == "bad"
    assert [t["outcome"] for t in bad["trace"]] == ["fault"]
    assert engine["result"] == "now|Hé \U0001f600 answer|m-1|react|-1|run-1|"
