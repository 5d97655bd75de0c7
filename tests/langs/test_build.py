"""`toolgate build`: one command builds a guard of any language.

Each language's SQL guard is built from its source with `toolgate build`
(the language told apart by the files alone) into a fresh directory, and the
component it writes must steer exactly as the seed's SqlGuard does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, STEER_WHERE, check, steering_event

DELETE = steering_event("run_query", {"sql": "DELETE FROM users"})
SELECT = steering_event("run_query", {"sql": "SELECT * FROM users WHERE id = 1"})

# What a user points `toolgate build` at, per language: a crate directory, a
# package directory, a TypeScript file, a directory holding guard.py.
SOURCES = {
    "rust": REPO / "plugins/rust/sql-guard",
    "go": REPO / "plugins/go/sql-guard",
    "js": REPO / "plugins/js/sql-guard.ts",
    "python": REPO / "plugins/python/sql-guard",
}


def build(toolgate_bin: Path, *args: str, cwd: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **extra_env)
    # Reuse the example guards' cargo target directory: no Rust recompile.
    env.setdefault("CARGO_TARGET_DIR", str(REPO / "target/wasm-guests"))
    return subprocess.run(
        [str(toolgate_bin), "build", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
    )


@pytest.mark.parametrize("lang", sorted(SOURCES))
def test_build_detects_the_language_and_the_component_steers(toolgate_bin, tmp_path, lang):
    plugins = tmp_path / "plugins"
    proc = build(toolgate_bin, str(SOURCES[lang]), "-o", "plugins/sql-guard.wasm", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"built plugins/sql-guard.wasm ({lang} guard, "), proc.stdout
    assert check(toolgate_bin, plugins, "steering", DELETE)["result"] == STEER_WHERE
    assert check(toolgate_bin, plugins, "steering", SELECT)["result"] is None


# A guard's source that builds alone (its SDK found above the executable), per
# language whose build is byte-reproducible.
REPRODUCIBLE = {
    "go": REPO / "plugins/go/sql-guard/main.go",
    "js": REPO / "plugins/js/sql-guard.ts",
}


@pytest.mark.parametrize("lang", sorted(REPRODUCIBLE))
def test_the_same_sources_build_the_same_bytes(toolgate_bin, tmp_path, lang):
    """The guard copied into two directories (at different depths) and built
    from each: the same component digest, so an unchanged guard never
    recompiles or re-snapshots (the compiled cache is keyed by it)."""
    digests = []
    for where in ("one", "two/levels"):
        src = tmp_path / where / REPRODUCIBLE[lang].name
        src.parent.mkdir(parents=True)
        shutil.copyfile(REPRODUCIBLE[lang], src)
        proc = build(toolgate_bin, str(src), "-o", "guard.wasm", cwd=src.parent)
        assert proc.returncode == 0, proc.stderr
        digests.append(hashlib.sha256((src.parent / "guard.wasm").read_bytes()).hexdigest())
    assert digests[0] == digests[1], f"two {lang} builds of the same source differ"


def test_a_js_build_makes_the_same_bytes_with_its_caches_and_without(toolgate_bin, tmp_path):
    """A JS build keeps the spliced engine (`js-splice/`) and toolgate
    wizer's compiled engine module (`modules/`) in the compiled cache: the
    build that stores them, the one that reads them and one with the cache
    off write the same component."""
    cache = tmp_path / "cache"
    src = tmp_path / "guard.ts"
    shutil.copyfile(REPRODUCIBLE["js"], src)
    digests = {}
    for run, cache_dir in (("stores", cache), ("reads", cache), ("off", "off")):
        proc = build(toolgate_bin, str(src), "-o", f"{run}.wasm", cwd=tmp_path,
                     TOOLGATE_CACHE_DIR=str(cache_dir))
        assert proc.returncode == 0, proc.stderr
        digests[run] = hashlib.sha256((tmp_path / f"{run}.wasm").read_bytes()).hexdigest()
        if run == "stores":
            kept = {d: sorted(p.name for p in (cache / d).iterdir()) for d in ("js-splice", "modules")}
            assert len(kept["js-splice"]) == 2 and len(kept["modules"]) == 1, kept
    assert digests["stores"] == digests["reads"] == digests["off"], digests


def test_default_output_is_named_after_the_guard(toolgate_bin, tmp_path):
    proc = build(toolgate_bin, str(SOURCES["go"]), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "sql-guard.wasm").stat().st_size > 0


def test_something_that_is_no_guard_is_refused_with_exit_2(toolgate_bin, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    proc = build(toolgate_bin, str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2
    assert "cannot tell the guard's language" in proc.stderr
    proc = build(toolgate_bin, str(tmp_path / "notes.txt"), cwd=tmp_path)
    assert proc.returncode == 2
    assert "notes.txt: not a guard source" in proc.stderr


def test_a_failing_build_names_the_guard_and_exits_1(toolgate_bin, tmp_path):
    guard = tmp_path / "broken"
    guard.mkdir()
    (guard / "main.go").write_text("package main\n\nfunc main() { this is not go }\n")
    proc = build(toolgate_bin, str(guard), "--sdk", str(REPO / "guest-sdk"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"the go build of {guard} failed" in proc.stderr
