"""A small HTTP/1.1 client for the handler's calls to ``toolgate serve``.

Why not httpx for these: a hook's request is a few hundred bytes of JSON to
a service usually on the same host, and httpx's machinery (its request and
response models, httpcore's pool, anyio) cost about 900 µs of Python per
request on the reference machine, four times the round trip itself
(BENCHMARKS.md, "HTTP per hook"). This client does only what those calls
need: keep-alive connections per event loop, ``Content-Length`` and chunked
answers, TLS through :mod:`ssl`. Anything else — a proxy from the
environment, an injected ``httpx.AsyncClient`` — goes through httpx as
before (see ``HttpTransport``).

A pooled connection is reused only while the service has not closed it
(checked before each use, as httpcore does); a request is never re-sent,
since a decision may have moved a guard's state.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from urllib.parse import urlsplit

#: The longest status line plus headers accepted (the service's are ~200 bytes).
MAX_HEAD = 64 * 1024

#: How long an idle connection is kept (httpx's default): well under the
#: service's idle timeout (`toolgate serve --idle-timeout-ms`, 30 s), so
#: the service never closes a connection just as it is reused.
KEEP_IDLE = 5.0


class ProtocolError(Exception):
    """The service's answer is not HTTP/1.1 this client can read."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def usable(self, now: float) -> bool:
        """Idle for less than KEEP_IDLE and still open on both sides, with
        nothing unread (a closed or chattering connection is dropped, never
        reused)."""
        return now - self.idle_since < KEEP_IDLE and not (
            self.writer.is_closing() or self.reader.at_eof() or self.reader._buffer  # noqa: SLF001
        )

    def close(self) -> None:
        self.writer.close()


class Pool:
    """Keep-alive connections to one service (``http://`` or ``https://``),
    for the event loop that made them."""

    def __init__(self, url: str, headers: dict[str, str], max_idle: int = 16) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        authority = parts.netloc.rsplit("@", 1)[-1]
        self.head = f"Host: {authority}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.idle: deque[_Connection] = deque()
        self.max_idle = max_idle

    async def _connection(self) -> _Connection:
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()
            if conn.usable(now):
                return conn
            conn.close()
        reader, writer = await asyncio.open_connection(
            self.host, self.port, ssl=self.ssl, limit=MAX_HEAD
        )
        return _Connection(reader, writer)

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """Sends one request; returns the status and the body. Raises
        OSError, ``asyncio.IncompleteReadError`` or ProtocolError when no
        answer could be read (the connection is then closed). A caller's
        timeout (cancellation) closes it too."""
        conn = await self._connection()
        keep = False
        try:
            head = f"{method} {self.prefix}{path} HTTP/1.1\r\n{self.head}"
            if body is not None:
                head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            conn.writer.write(head.encode("latin-1") + b"\r\n" + (body or b""))
            status, keep, payload = await _read_response(conn.reader)
            return status, payload
        finally:
            if keep and len(self.idle) < self.max_idle:
                conn.idle_since = time.monotonic()
                self.idle.append(conn)
            else:
                conn.close()

    def close(self) -> None:
        """Closes every idle connection."""
        while self.idle:
            self.idle.pop().close()


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool, bytes]:
    """Status, whether the connection may be reused, and the body."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as exc:
        raise ProtocolError(f"answer head longer than {MAX_HEAD} bytes") from exc
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:100]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise ProtocolError(f"malformed header line: {line[:100]!r}")
            headers[name.strip().lower()] = value.strip()
    keep = parts[0] == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return status, keep, await _read_chunked(reader)
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise ProtocolError(f"bad Content-Length: {length[:40]!r}")
        return status, keep, await reader.readexactly(int(length))
    if status in (204, 304) or 100 <= status < 200:
        return status, keep, b""
    # No length: the body runs to the end of the connection.
    return status, False, await reader.read()


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size_text = size_line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError as exc:
            raise ProtocolError(f"bad chunk size: {size_text[:40]!r}") from exc
        if size == 0:
            # Trailers, if any, end with an empty line.
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass
            return b"".join(chunks)
        chunks.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise ProtocolError("chunk not followed by CRLF")
