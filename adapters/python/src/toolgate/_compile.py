"""The compile child of :class:`toolgate.Host`: compiles one component in a
process of its own, under a memory and a time bound.

A hostile component can be a compile bomb (megabytes of code that take
minutes and gigabytes to compile). ``Host`` therefore compiles each new
component in a child process, this interpreter running this file::

    python -P .../toolgate/_compile.py compile --max-memory-bytes=N \\
        --max-wasm-stack=N --data-bytes=N --cpu-secs=N

The child runs exactly what ``toolgate compile`` runs (the Rust library's
``toolgate::compile::child_main``, through ``toolgate._native``): it limits
itself (``RLIMIT_DATA`` to the memory bound, ``RLIMIT_CPU`` as a backstop,
no core dumps), reads the component on standard input, writes its native
code on standard output and exits 0, or 2 with the compiler's message on
standard error. The parent kills it at the time bound.

It imports the ``toolgate`` package beside this file, whatever ``sys.path``
the interpreter builds (``-P`` keeps this file's directory off it), so the
child runs the parent's own extension module; the environment is the
parent's.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Runs the compile child for ``argv`` (``["compile", "--flag=value",
    ...]``, default ``sys.argv[1:]``) and returns its exit code. Call it only
    in a process of its own: the limits stay on the process."""
    from toolgate._native import compile_child

    return compile_child(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
