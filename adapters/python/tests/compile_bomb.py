"""A compile bomb written in Python: a WebAssembly component whose one core
module holds a function of straight-line arithmetic on many live locals,
cheap to write and costly to compile (as ``compile_bomb`` in the Rust tests,
``host/tests/all/tenant_files.rs``). It is no guard: compiled with no bound
it loads and is refused for its missing exports; under a small compile
memory bound it is refused at the compile."""

from __future__ import annotations


def _uleb(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _sleb(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        done = (n == 0 and not byte & 0x40) or (n == -1 and byte & 0x40)
        out.append(byte if done else byte | 0x80)
        if done:
            return bytes(out)


def _section(section_id: int, payload: bytes) -> bytes:
    return bytes([section_id]) + _uleb(len(payload)) + payload


def _vec(items: list[bytes]) -> bytes:
    return _uleb(len(items)) + b"".join(items)


I64, I32_CONST, LOCAL_GET, LOCAL_SET = 0x7E, 0x41, 0x20, 0x21
I64_LOAD, I64_STORE, I64_ADD, I64_XOR, I64_ROTL, END = 0x29, 0x37, 0x7C, 0x85, 0x89, 0x0B
LOCALS = 60


def core_module(lines: int) -> bytes:
    """A core module exporting ``bomb(i64) -> i64``: ``lines`` pairs of a
    load-add and a rotate-store over 61 live i64 locals, each feeding the
    result (nothing folds away or is dead)."""
    body = bytearray(_uleb(1) + _uleb(LOCALS) + bytes([I64]))
    for i in range(lines):
        a, b, c = i % 61, (i * 7 + 3) % 61, (i * 13 + 5) % 61
        load, store = 8 * ((i * 7) % 8000), 8 * (i % 8000)
        body += bytes([LOCAL_GET]) + _uleb(b)
        body += bytes([I32_CONST]) + _sleb(load) + bytes([I64_LOAD, 3, 0, I64_ADD])
        body += bytes([LOCAL_SET]) + _uleb(a)
        body += bytes([I32_CONST]) + _sleb(store)
        body += bytes([LOCAL_GET]) + _uleb(a) + bytes([LOCAL_GET]) + _uleb(c)
        body += bytes([I64_ROTL, I64_STORE, 3, 0])
    for local in range(1, LOCALS + 1):
        body += bytes([LOCAL_GET, 0, LOCAL_GET]) + _uleb(local) + bytes([I64_XOR, LOCAL_SET, 0])
    body += bytes([LOCAL_GET, 0, END])
    return (
        b"\0asm\x01\0\0\0"
        + _section(1, _vec([bytes([0x60, 1, I64, 1, I64])]))  # type: (i64) -> i64
        + _section(3, _vec([_uleb(0)]))  # one function of type 0
        + _section(5, _vec([bytes([0x00, 1])]))  # one memory, one page
        + _section(7, _vec([_uleb(4) + b"bomb" + bytes([0x00]) + _uleb(0)]))
        + _section(10, _vec([_uleb(len(body)) + bytes(body)]))
    )


def component(lines: int = 40_000) -> bytes:
    """The component: the core module embedded (a component's core module
    section), nothing instantiated. Every core module of a component is
    compiled when the component is."""
    return b"\0asm\x0d\0\x01\0" + _section(1, core_module(lines))
