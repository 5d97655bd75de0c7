"""``python -m toolgate_guest build|inspect ...``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolgate_guest")
    sub = parser.add_subparsers(dest="command", required=True)

    from toolgate_guest import build

    build.add_arguments(sub.add_parser("build", help="build a guard into a component"))
    inspect = sub.add_parser("inspect", help="list a component's imports and exports")
    inspect.add_argument("component", type=Path)

    args = parser.parse_args(argv)
    if args.command == "build":
        return build.run(args)

    from toolgate_guest.wasminfo import ComponentFormatError, read_component_file

    try:
        info = read_component_file(args.component)
    except (OSError, ComponentFormatError) as exc:
        print(f"{args.component}: {exc}", file=sys.stderr)
        return 1
    for e in info.imports:
        print(f"import {e.kind} {e.name}")
    for e in info.exports:
        print(f"export {e.kind} {e.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
