"""Builds a Python guard into a toolgate component.

    toolgate-guest-build guard.py -o guard.wasm [--class NAME] [--seams LIST]
                         [--state] [--http] [--wasi] [--wit PATH] [-p DIR]... [--keep-temp DIR]

1. Imports ``guard.py`` on the build machine to find the guard: the one
   :class:`toolgate_guest.Guard` subclass it defines (or ``--class``), else
   module-level functions named after the hooks (``on_before_tool_call``, ...;
   the deprecated names such as ``before_tool_call`` still count).
   Its seams are the hooks it implements (``--seams`` narrows them); it
   exports ``config`` when it defines ``validate_config``, and imports
   ``state`` (``http``) when the guard file imports ``toolgate_guest.state``
   (``toolgate_guest.http``), or with ``--state`` (``--http``).
2. Writes a build directory: a copy of the WIT, the SDK's runtime modules, the
   guard module and a generated app module that maps each exported interface
   to the guard's methods.
3. Runs componentize-py for a world generated into the build's copy of the
   WIT that imports ``host`` (and ``state``, ``http`` when used) and exports
   only what the guard implements: the host consults a guard only at the
   seams its component exports, and gives a call state (a network) only when
   its component imports it. WASI imports are replaced by trapping stubs unless ``--wasi`` is given.
4. Reads the component back and checks its exports and its imports.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, List, Optional, Sequence

import toolgate_guest
from toolgate_guest import SEAMS, Guard, implemented_seams, observed_hooks, validates_config

#: What a guard may export besides ``config``: its seams, then ``observe``
#: (when it defines a lifecycle hook such as ``on_llm_end``).
EXPORTS = (*SEAMS, "observe")
from toolgate_guest.wasminfo import read_component_file

#: The componentize-py release this SDK is built and tested against.
COMPONENTIZE_PY_VERSION = "0.25.1"

#: The WIT package the SDK targets.
WIT_PACKAGE = "toolgate:guard"
WIT_VERSION = "0.3.0"

_APP_MODULE = "_toolgate_guest_app"
_RUNTIME_FILES = ("__init__.py", "_exports.py", "lifecycle.py", "state.py", "http.py")
_RESERVED_MODULES = {_APP_MODULE, "toolgate_guest", "wit_world", "componentize_py_types",
                     "componentize_py_runtime", "componentize_py_async_support", "poll_loop"}


class BuildError(Exception):
    """A guard that cannot be built, with a message naming the cause."""


@dataclass
class Target:
    """What the build found in the guard module."""

    module: ModuleType
    #: The class name, or None for a guard written as module-level functions.
    class_name: Optional[str]
    seams: List[str]
    #: Whether it defines ``validate_config`` (and so exports ``config``).
    config: bool = False
    #: Whether its component imports ``state``.
    state: bool = False
    #: Whether its component imports ``http``.
    http: bool = False


# ------------------------------------------------------------------ discovery


def load_module(path: Path, extra_paths: Sequence[Path] = ()) -> ModuleType:
    """Imports the guard file under its own module name."""
    name = module_name(path)
    search = [str(path.parent), *map(str, extra_paths)]
    sys.path[:0] = search
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise BuildError(f"{path}: cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise BuildError(f"{path}: importing it raised {type(exc).__name__}: {exc}") from exc
        return module
    finally:
        for entry in search:
            sys.path.remove(entry)


def module_name(path: Path) -> str:
    """The module name a guard file is bundled under (its stem, `-` → `_`)."""
    name = path.stem.replace("-", "_")
    if not name.isidentifier():
        raise BuildError(f"{path}: {path.stem!r} is not a valid Python module name")
    if name in _RESERVED_MODULES:
        raise BuildError(f"{path}: the module name {name!r} is reserved by the build; rename the file")
    return name


def imports_module(source: str, name: str) -> bool:
    """Whether guard source text imports the SDK's module ``name`` (``state``
    or ``http``).

    Any of ``from toolgate_guest import state``, ``from toolgate_guest.state
    import ...``, ``import toolgate_guest.state``, or ``X.state`` where ``X``
    is bound by ``import toolgate_guest [as X]``.
    """
    tree = ast.parse(source)
    module = f"toolgate_guest.{name}"
    package_names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            if node.module == module:
                return True
            if node.module == "toolgate_guest" and any(a.name == name for a in node.names):
                return True
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == module:
                    return True
                if alias.name == "toolgate_guest":
                    package_names.add(alias.asname or alias.name)
    return any(isinstance(node, ast.Attribute) and node.attr == name
               and isinstance(node.value, ast.Name) and node.value.id in package_names
               for node in ast.walk(tree))


def find_target(module: ModuleType, class_name: Optional[str] = None,
                seams: Optional[Sequence[str]] = None, state: bool = False,
                http: bool = False) -> Target:
    """Finds the guard in a module, the seams it implements, whether it
    checks its config and whether it uses state and http (``state``,
    ``http``: it does, whatever its source says)."""
    where = getattr(module, "__file__", module.__name__)
    if class_name is not None:
        cls = getattr(module, class_name, None)
        if not (isinstance(cls, type) and issubclass(cls, Guard)):
            raise BuildError(f"{where}: {class_name!r} is not a toolgate_guest.Guard subclass")
        guard: Any = cls
    else:
        classes = sorted(
            (obj for obj in vars(module).values()
             if isinstance(obj, type) and issubclass(obj, Guard) and obj is not Guard
             and obj.__module__ == module.__name__),
            key=lambda c: c.__name__,
        )
        if len(classes) > 1:
            names = ", ".join(c.__name__ for c in classes)
            raise BuildError(f"{where}: defines several Guard subclasses ({names}); pick one with --class")
        guard = classes[0] if classes else module
        class_name = classes[0].__name__ if classes else None

    try:
        found = implemented_seams(guard) + (["observe"] if observed_hooks(guard) else [])
    except TypeError as e:
        raise BuildError(f"{where}: {e}") from None
    if not found:
        hooks = ", ".join(SEAMS.values())
        raise BuildError(f"{where}: implements no hook; override one of {hooks} "
                         "(or a lifecycle hook such as on_llm_end) "
                         "in a Guard subclass, or define it as a module-level function")
    if seams is not None:
        unknown = [s for s in seams if s not in EXPORTS]
        if unknown:
            raise BuildError(f"unknown seam(s) {', '.join(unknown)}; expected {', '.join(EXPORTS)}")
        missing = [s for s in seams if s not in found]
        if missing:
            raise BuildError(
                f"{where}: --seams asks for {', '.join(missing)} but the guard does not implement "
                + ", ".join(SEAMS.get(s, "a lifecycle hook") for s in missing)
            )
        found = [s for s in EXPORTS if s in seams]
    source = Path(where).read_text() if isinstance(where, str) and Path(where).is_file() else ""
    return Target(module, class_name, found, config=validates_config(guard),
                  state=state or imports_module(source, "state"),
                  http=http or imports_module(source, "http"))


# ---------------------------------------------------------------- generation


def default_wit() -> Path:
    """The WIT to build against: $TOOLGATE_WIT, else the contract shipped in
    the SDK (its current version, ``wit/guard.wit``; earlier ones are frozen
    in ``wit/v<version>/``)."""
    env = os.environ.get("TOOLGATE_WIT")
    if env:
        return Path(env)
    return Path(toolgate_guest.__file__).resolve().parent / "wit" / "guard.wit"


# WIT parsers (componentize-py 0.25.1's included) read `result` as a keyword, so
# a field or interface named `result` must be written `%result` (the name in the
# component is still `result`). The contract does; the build also escapes its own
# copy, so a copy written without the escape still builds.
_KEYWORD_FIXES = [
    (re.compile(r"^(\s*)(?<!%)result(\s*:)", re.M), r"\1%result\2"),
    (re.compile(r"\b(interface\s+)(?<!%)result\b"), r"\1%result"),
    (re.compile(r"\b((?:export|import)\s+)(?<!%)result(\s*;)"), r"\1%result\2"),
]


def escape_wit_keywords(text: str) -> str:
    """Escapes identifiers that componentize-py's WIT parser reads as keywords."""
    for pattern, repl in _KEYWORD_FIXES:
        text = pattern.sub(repl, text)
    return text


#: The world the build generates for a guard.
GUEST_WORLD = "toolgate-guest"


def world_for(seams: Sequence[str], *, state: bool = False, http: bool = False,
              config: bool = False) -> tuple[str, str]:
    """The world to build a guard against, and the WIT that declares it.

    A world importing `host` (and `state`, `http` when the guard uses them) and
    exporting just the guard's seams (and `config` when it checks its
    config), added to the build's copy of the WIT: the contract's per-seam
    worlds import `state` and `http` whether a guard uses them or not, and
    componentize-py 0.25.1 panics when asked to merge several `-w` worlds.
    """
    imports = ["host"] + (["state"] if state else []) + (["http"] if http else [])
    exports = [f"%{seam}" for seam in seams] + (["config"] if config else [])
    body = "".join(f"    import {i};\n" for i in imports) + "".join(f"    export {e};\n" for e in exports)
    what = ", ".join(seams) + (" and config" if config else "")
    world = (f"\n/// Generated by toolgate-guest build: the seams {what}.\n"
             f"world {GUEST_WORLD} {{\n{body}}}\n")
    return GUEST_WORLD, world


def copy_wit(src: Path, dest: Path, extra_world: Optional[str] = None) -> None:
    """Copies the WIT file or directory into `dest`, escaping keywords.

    `extra_world` (WIT text) is appended to the file that declares the package.
    """
    files = [src] if src.is_file() else sorted(src.glob("*.wit"))
    if not files:
        raise BuildError(f"{src}: no .wit files found")
    header = f"package {WIT_PACKAGE}@{WIT_VERSION};"
    texts = {f.name: f.read_text() for f in files}
    home = next((name for name, text in texts.items() if header in text), None)
    if home is None:
        raise BuildError(f"{src}: not the {WIT_PACKAGE}@{WIT_VERSION} package this SDK targets")
    dest.mkdir(parents=True)
    for name, text in texts.items():
        text = escape_wit_keywords(text)
        if name == home and extra_world:
            text += extra_world
        (dest / name).write_text(text)


def app_source(module: str, class_name: Optional[str], seams: Sequence[str], config: bool = False) -> str:
    """The generated app module: one export class per seam (and ``Config``
    when the guard checks its config), bound to the guard."""
    target = f"{module}.{class_name}" if class_name else module
    lines = [
        "# Generated by toolgate-guest build; maps the exported seams to the guard.",
        f"import {module}",
        "from toolgate_guest import _exports",
        "",
    ]
    for seam in [*seams, *(["config"] if config else [])]:
        lines.append(f"{seam.capitalize()} = _exports.{seam}({target})")
    return "\n".join(lines) + "\n"


def write_build_dir(root: Path, guard_path: Path, target: Target, wit: Path) -> Path:
    """Lays out the WIT copy and the app directory; returns the app directory."""
    copy_wit(wit, root / "wit", world_for(target.seams, state=target.state, http=target.http,
                                          config=target.config)[1])
    app = root / "app"
    sdk = app / "toolgate_guest"
    sdk.mkdir(parents=True)
    here = Path(toolgate_guest.__file__).resolve().parent
    for name in _RUNTIME_FILES:
        shutil.copyfile(here / name, sdk / name)
    shutil.copyfile(guard_path, app / f"{target.module.__name__}.py")
    (app / f"{_APP_MODULE}.py").write_text(
        app_source(target.module.__name__, target.class_name, target.seams, target.config))
    return app


# ---------------------------------------------------------------------- build


def check_componentize_py() -> None:
    from importlib import metadata

    try:
        version = metadata.version("componentize-py")
    except metadata.PackageNotFoundError:
        raise BuildError(
            f"componentize-py is not installed; pip install componentize-py=={COMPONENTIZE_PY_VERSION}"
        ) from None
    if version != COMPONENTIZE_PY_VERSION:
        raise BuildError(f"componentize-py {version} is installed; this SDK needs "
                         f"{COMPONENTIZE_PY_VERSION} (pip install componentize-py=={COMPONENTIZE_PY_VERSION})")


def componentize_command(wit: Path, app: Path, out: Path,
                         wasi: bool, extra_paths: Sequence[Path]) -> List[str]:
    cmd = [sys.executable, "-c",
           "import sys, componentize_py; sys.argv[0] = 'componentize-py'; "
           "sys.exit(componentize_py.script())",
           "-d", str(wit), "-w", GUEST_WORLD,
           "componentize", _APP_MODULE, "-p", str(app)]
    for p in extra_paths:
        cmd += ["-p", str(p)]
    cmd += ["-o", str(out)]
    if not wasi:
        cmd.append("--stub-wasi")
    return cmd


def verify(out: Path, seams: Sequence[str], wasi: bool, *, state: bool = False,
           http: bool = False, config: bool = False) -> List[str]:
    """Checks the component's exports (its seams, and ``config`` when asked)
    and its imports (``host``, ``types``, and ``state``, ``http`` when
    asked); returns its imports."""
    info = read_component_file(out)
    prefix = f"{WIT_PACKAGE}/"
    suffix = f"@{WIT_VERSION}"
    exported = sorted(n[len(prefix):-len(suffix)] for n in info.export_names()
                      if n.startswith(prefix) and n.endswith(suffix))
    expected = sorted([*seams, *(["config"] if config else [])])
    if exported != expected:
        raise BuildError(f"{out}: exports {exported}, expected {expected}")
    used = [name for name, on in (("state", state), ("http", http)) if on]
    allowed = {f"{prefix}{name}{suffix}" for name in ("host", "types", *used)}
    bad = [n for n in info.import_names()
           if n not in allowed and not (wasi and n.startswith("wasi:"))]
    if bad:
        raise BuildError(f"{out}: imports {', '.join(bad)}, which the host refuses")
    return info.import_names()


def build(guard_path: Path, out: Path, *, class_name: Optional[str] = None,
          seams: Optional[Sequence[str]] = None, state: bool = False, http: bool = False,
          wasi: bool = False,
          wit: Optional[Path] = None, extra_paths: Sequence[Path] = (),
          keep_temp: Optional[Path] = None, quiet: bool = False) -> Target:
    """Builds `guard_path` into the component `out`; returns what it built."""
    guard_path = guard_path.resolve()
    out = out.resolve()
    if not guard_path.is_file():
        raise BuildError(f"{guard_path}: no such file")
    wit = (wit or default_wit()).resolve()
    if not wit.exists():
        raise BuildError(f"{wit}: WIT not found; pass --wit or set TOOLGATE_WIT")
    extra = [p.resolve() for p in extra_paths]
    check_componentize_py()
    target = find_target(load_module(guard_path, extra), class_name, seams, state, http)

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="toolgate-guest-") as tmp:
        root = keep_temp.resolve() if keep_temp else Path(tmp)
        if keep_temp:
            shutil.rmtree(root, ignore_errors=True)
        app = write_build_dir(root, guard_path, target, wit)
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        cmd = componentize_command(root / "wit", app, partial, wasi, extra)
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        if proc.returncode != 0:
            partial.unlink(missing_ok=True)
            detail = (proc.stderr or proc.stdout).strip()
            # Drop componentize-py's Rust backtrace: the cause is above it.
            detail = detail.split("\nStack backtrace:")[0]
            raise BuildError(f"componentize-py failed for {guard_path.name}:\n{detail}")
        try:
            imports = verify(partial, target.seams, wasi, state=target.state, http=target.http,
                             config=target.config)
        except BuildError:
            partial.unlink(missing_ok=True)
            raise
        os.replace(partial, out)
    elapsed = time.monotonic() - started
    if not quiet:
        what = target.class_name or "module functions"
        print(f"built {out} ({out.stat().st_size / 1e6:.1f} MB, {elapsed:.1f} s): "
              f"{what}; seams {', '.join(target.seams)}"
              f"{'; validate_config' if target.config else ''}; "
              f"imports {', '.join(imports) or 'nothing'}", file=sys.stderr)
    return target


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("guard", type=Path, help="the guard's Python file")
    p.add_argument("-o", "--output", type=Path,
                   help="the component to write (default: the guard's name with .wasm)")
    p.add_argument("--class", dest="class_name", metavar="NAME",
                   help="the Guard subclass to build, when the file defines several")
    p.add_argument("--seams", metavar="LIST",
                   help="comma-separated seams to export, observe among them (default: every hook "
                   "the guard implements)")
    p.add_argument("--state", action="store_true",
                   help="import the host's state interface even if the guard file does not import "
                   "toolgate_guest.state (say, a module bundled with -p uses it)")
    p.add_argument("--http", action="store_true",
                   help="import the host's http interface even if the guard file does not import "
                   "toolgate_guest.http")
    p.add_argument("--wasi", action="store_true",
                   help="keep the WASI imports (default: stubbed; a stub traps if called)")
    p.add_argument("--wit", type=Path, help="the WIT file or directory (default: $TOOLGATE_WIT, "
                   "else the one shipped with the SDK)")
    p.add_argument("-p", "--python-path", dest="paths", type=Path, action="append", default=[],
                   metavar="DIR", help="an extra directory of modules to bundle (repeatable)")
    p.add_argument("--keep-temp", type=Path, metavar="DIR",
                   help="lay out the build directory here and keep it (for debugging)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")


def run(args: argparse.Namespace) -> int:
    out = args.output or args.guard.with_suffix(".wasm")
    seams = [s.strip() for s in args.seams.split(",") if s.strip()] if args.seams else None
    try:
        build(args.guard, out, class_name=args.class_name, seams=seams, state=args.state, http=args.http,
              wasi=args.wasi,
              wit=args.wit, extra_paths=args.paths, keep_temp=args.keep_temp, quiet=args.quiet)
    except BuildError as exc:
        print(f"toolgate-guest-build: error: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="toolgate-guest-build",
                                     description="Build a Python guard into a toolgate component.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
