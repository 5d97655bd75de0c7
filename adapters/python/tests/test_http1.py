"""The handler's own HTTP/1.1 client (``toolgate_symfonic._http1``) against
a loopback server that answers scripted bytes: keep-alive reuse, answers
that close or chunk, a connection the server closed while idle, garbage,
and the proxy fallback to httpx."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from toolgate_symfonic._http1 import Pool, ProtocolError
from toolgate_symfonic._transport import CircuitBreaker, HttpTransport, ServiceError

OK = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"a": true}'


class Scripted:
    """A loopback server: ``answer(request_head)`` gives the bytes to send
    back, or None to close the connection without answering; counts
    connections and keeps every request head."""

    def __init__(self, answer: Callable[[bytes], bytes | None]) -> None:
        self.answer = answer
        self.connections = 0
        self.heads: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for w in self.writers:
            w.close()
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                self.heads.append(head)
                out = self.answer(head)
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_keep_alive_connection_carries_every_request() -> None:
    async def go() -> None:
        async with Scripted(lambda _: OK) as srv:
            pool = Pool(srv.url, {"Authorization": "Bearer t"})
            for _ in range(3):
                assert await pool.request("POST", "/v1/steering", b"{}") == (200, b'{"a": true}')
            assert srv.connections == 1
            assert b"Authorization: Bearer t" in srv.heads[0]
            assert srv.heads[0].startswith(b"POST /v1/steering HTTP/1.1\r\n")
            pool.close()

    run(go())


def test_a_chunked_answer_with_trailers_is_joined() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b"4\r\n{\"a\"\r\n5;ext=1\r\n: 1}\n\r\n0\r\nx-trailer: y\r\n\r\n"
    )

    async def go() -> None:
        async with Scripted(lambda _: chunked) as srv:
            pool = Pool(srv.url, {})
            assert await pool.request("GET", "/v1/hooks") == (200, b'{"a": 1}\n')
            assert await pool.request("GET", "/v1/hooks") == (200, b'{"a": 1}\n')
            assert srv.connections == 1

    run(go())


def test_connection_close_and_an_answer_without_length_are_not_reused() -> None:
    answers = iter([
        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\n\r\n[1]",
        OK,
    ])

    def answer(_: bytes) -> bytes | None:
        return next(answers)

    async def go() -> None:
        async with Scripted(answer) as srv:
            pool = Pool(srv.url, {})
            assert await pool.request("POST", "/x", b"{}") == (200, b"{}")
            # The server must end the body-to-EOF answer by closing: it does
            # after its next read fails, so close from our side is the end.
            task = asyncio.create_task(pool.request("POST", "/x", b"{}"))
            await asyncio.sleep(0.2)
            for w in srv.writers:
                w.close()
            assert await task == (200, b"[1]")
            assert await pool.request("POST", "/x", b"{}") == (200, b'{"a": true}')
            assert srv.connections == 3

    run(go())


def test_a_connection_the_service_closed_while_idle_is_replaced() -> None:
    async def go() -> None:
        async with Scripted(lambda _: OK) as srv:
            pool = Pool(srv.url, {})
            await pool.request("POST", "/x", b"{}")
            for w in srv.writers:
                w.close()
            await asyncio.sleep(0.1)  # the close reaches this side
            assert await pool.request("POST", "/x", b"{}") == (200, b'{"a": true}')
            assert srv.connections == 2
            # The request went once: nothing is re-sent.
            assert len(srv.heads) == 2

    run(go())


@pytest.mark.parametrize(
    "garbage",
    [b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
     b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
     b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"],
)
def test_garbage_is_a_protocol_error_and_a_service_failure(garbage: bytes) -> None:
    async def go() -> None:
        async with Scripted(lambda _: garbage) as srv:
            with pytest.raises(ProtocolError):
                await Pool(srv.url, {}).request("GET", "/")
            breaker = CircuitBreaker(1, 60.0)
            transport = HttpTransport(
                srv.url, token=None, client=None, trust_env=False, breaker=breaker, policy="fail_open"
            )
            with pytest.raises(ServiceError, match="ProtocolError"):
                await transport.call("steering", {"event": {}}, 5.0)
            assert breaker.state == "open"
            await transport.aclose()

    run(go())


def test_a_silent_service_times_out_and_its_connection_is_dropped() -> None:
    async def go() -> None:
        async with Scripted(lambda _: b"") as srv:
            breaker = CircuitBreaker(3, 60.0)
            transport = HttpTransport(
                srv.url, token=None, client=None, trust_env=False, breaker=breaker, policy="fail_open"
            )
            with pytest.raises(ServiceError, match="no answer within 0.2s"):
                await transport.call("steering", {"event": {}}, 0.2)
            pool = transport._pool()
            assert pool is not None and not pool.idle
            await transport.aclose()

    run(go())


def test_with_trust_env_a_proxy_from_the_environment_gets_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = json.dumps({"result": None, "trace": []}).encode()
    reply = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(answer), answer)

    async def go() -> None:
        async with Scripted(lambda _: reply) as proxy:
            monkeypatch.setenv("HTTP_PROXY", proxy.url)
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            transport = HttpTransport(
                "http://guards.example:8080", token=None, client=None, trust_env=True,
                breaker=CircuitBreaker(3, 1.0), policy="fail_open",
            )
            assert await transport.call("steering", {"event": {}}, 5.0) == (None, [])
            # httpx sent it to the proxy, in absolute form.
            assert proxy.heads[0].startswith(b"POST http://guards.example:8080/v1/steering?trace=1 ")
            await transport.aclose()

    run(go())


def test_a_connection_idle_past_keep_idle_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolgate_symfonic import _http1

    async def go() -> None:
        async with Scripted(lambda _: OK) as srv:
            pool = Pool(srv.url, {})
            await pool.request("POST", "/x", b"{}")
            monkeypatch.setattr(_http1, "KEEP_IDLE", 0.0)
            await pool.request("POST", "/x", b"{}")
            assert srv.connections == 2

    run(go())
