"""Reads the top-level imports and exports of a WebAssembly component.

A small reader of the component binary format, enough to answer "which
interfaces does this component import and export" without installing
wasm-tools: the host subscribes a guard to a seam iff the component exports
that seam's interface, and refuses a component that imports anything but
`toolgate:guard/host` and WASI. Nested components and core modules are skipped
by their section size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_MAGIC = b"\x00asm"
_COMPONENT_LAYER = b"\x0d\x00\x01\x00"
_IMPORT_SECTION = 10
_EXPORT_SECTION = 11

_SORTS = {0x01: "func", 0x02: "value", 0x03: "type", 0x04: "component", 0x05: "instance"}


class ComponentFormatError(ValueError):
    """The bytes are not a component this reader understands."""


@dataclass(frozen=True)
class Extern:
    """One top-level import or export: its name and its kind."""

    name: str
    kind: str


@dataclass(frozen=True)
class ComponentInfo:
    """The top-level imports and exports of a component, in binary order."""

    imports: tuple[Extern, ...]
    exports: tuple[Extern, ...]

    def import_names(self) -> list[str]:
        return [e.name for e in self.imports]

    def export_names(self) -> list[str]:
        return [e.name for e in self.exports]


class _Reader:
    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def byte(self) -> int:
        if self.pos >= self.end:
            raise ComponentFormatError(f"unexpected end of data at offset {self.pos}")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def leb(self, signed: bool = False, bits: int = 32) -> int:
        result = shift = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
            if shift > bits + 7:
                raise ComponentFormatError(f"LEB128 too long at offset {self.pos}")
        if signed and b & 0x40:
            result -= 1 << shift
        return result

    def bytes(self, n: int) -> bytes:
        if self.pos + n > self.end:
            raise ComponentFormatError(f"unexpected end of data at offset {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def name(self) -> str:
        return self.bytes(self.leb()).decode("utf-8")

    def extern_name(self) -> str:
        # 0x00 plain name; 0x01 the older "interface name" discriminant.
        tag = self.byte()
        if tag not in (0x00, 0x01):
            raise ComponentFormatError(f"unknown extern name tag {tag:#x} at offset {self.pos - 1}")
        return self.name()

    def extern_desc(self) -> str:
        tag = self.byte()
        if tag == 0x00:
            if self.byte() != 0x11:
                raise ComponentFormatError(f"bad core module type at offset {self.pos - 1}")
            self.leb()
            return "core module"
        if tag in (0x01, 0x04, 0x05):
            self.leb()
        elif tag == 0x02:  # value bound: eq index, or a value type
            if self.byte() == 0x00:
                self.leb()
            else:
                self.leb(signed=True, bits=33)
        elif tag == 0x03:  # type bound: eq index, or sub resource
            if self.byte() == 0x00:
                self.leb()
        else:
            raise ComponentFormatError(f"unknown extern kind {tag:#x} at offset {self.pos - 1}")
        return _SORTS[tag]

    def sort(self) -> str:
        tag = self.byte()
        if tag == 0x00:
            self.byte()
            return "core"
        if tag not in _SORTS:
            raise ComponentFormatError(f"unknown sort {tag:#x} at offset {self.pos - 1}")
        return _SORTS[tag]


def read_component(data: bytes) -> ComponentInfo:
    """Parses a component's top-level import and export sections."""
    if data[:4] != _MAGIC:
        raise ComponentFormatError("not a WebAssembly binary (bad magic)")
    if data[4:8] != _COMPONENT_LAYER:
        raise ComponentFormatError("a core WebAssembly module, not a component")
    r = _Reader(data, 8)
    imports: list[Extern] = []
    exports: list[Extern] = []
    while r.pos < r.end:
        section = r.byte()
        size = r.leb()
        body = _Reader(data, r.pos, r.pos + size)
        if body.end > len(data):
            raise ComponentFormatError(f"section {section} runs past the end of the file")
        r.pos += size
        if section == _IMPORT_SECTION:
            for _ in range(body.leb()):
                name = body.extern_name()
                imports.append(Extern(name, body.extern_desc()))
        elif section == _EXPORT_SECTION:
            for _ in range(body.leb()):
                name = body.extern_name()
                kind = body.sort()
                body.leb()
                if body.byte() == 0x01:
                    body.extern_desc()
                exports.append(Extern(name, kind))
    return ComponentInfo(tuple(imports), tuple(exports))


def read_component_file(path: str | Path) -> ComponentInfo:
    """Parses the component at `path`."""
    return read_component(Path(path).read_bytes())
