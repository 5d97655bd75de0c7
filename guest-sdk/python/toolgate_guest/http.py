"""Outbound HTTP, when the operator grants it to the plugin.

The host makes the request with its own client and hands back the whole
response, whatever its status::

    from toolgate_guest import config, http, steer

    def on_before_tool_call(event):
        answer = http.post_json(config()["url"], {"text": event.args.get("body", "")})
        if answer.ok and answer.json().get("pii") is True:
            return steer("Remove the personal data from the email, then send it again.")
        return None

A request the plugin is not granted (host, scheme, port, method, a redirect
off the grant, an address on the host's own network), more requests or bytes
than the call may use, or a network failure **traps the call**: the host
classifies it (``http-denied``, ``http-budget``, ``http-failed``) and the
plugin's ``on_error`` applies, so there is no exception to catch. Time spent
waiting counts against the call's deadline (``docs/http.md``, "Outbound
HTTP").

Outside a component (a guard's unit tests on the build machine's Python)
requests go to the responder set with :func:`respond_with`; with none set,
:func:`send` raises ``RuntimeError`` naming the request, as a real call would
trap. Arguments of the wrong type raise ``TypeError`` in both.

This module imports only the standard library.
"""

from __future__ import annotations

import json as _json
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, List, Mapping, Optional, Tuple, Union

__all__ = ["Headers", "Request", "Response", "get", "post_json", "respond_with", "send"]

Headers = Union[Mapping[str, str], Iterable[Tuple[str, str]]]
"""Headers to send: a mapping, or (name, value) pairs (a name may repeat)."""


@dataclass
class Request:
    """A request as :func:`send` sends it (what a responder receives)."""

    #: The method, upper case (``GET``, ``POST``, ...).
    method: str
    #: The absolute URL, ``http://`` or ``https://``.
    url: str
    #: The headers to send, as (name, value) pairs; the host adds ``host``,
    #: ``content-length`` and, when none is given, ``accept: */*``.
    headers: List[Tuple[str, str]] = field(default_factory=list)
    #: The body (empty for none).
    body: bytes = b""


@dataclass
class Response:
    """What the server answered."""

    #: The HTTP status code.
    status: int
    #: The response headers as (name, value) pairs, names lower case.
    headers: List[Tuple[str, str]] = field(default_factory=list)
    #: The whole body, at most the grant's response size.
    body: bytes = b""

    @property
    def ok(self) -> bool:
        """Whether the status is 2xx."""
        return 200 <= self.status < 300

    def header(self, name: str) -> Optional[str]:
        """The first value of header ``name`` (any case), or None."""
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)

    def text(self) -> str:
        """The body decoded as UTF-8 (invalid bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON (``ValueError`` when it is not JSON)."""
        return _json.loads(self.body)


def send(method: str, url: str, headers: Optional[Headers] = None,
         body: Union[bytes, bytearray, str] = b"") -> Response:
    """Sends a request and waits for the whole response (see the module
    docs: what the plugin is not granted traps the call).

    ``body`` as a ``str`` is sent as UTF-8.
    """
    request = Request(_text(method, "method").upper(), _text(url, "url"), _headers(headers), _body(body))
    return _backend()(request)


def get(url: str, headers: Optional[Headers] = None) -> Response:
    """``GET url``."""
    return send("GET", url, headers)


def post_json(url: str, value: Any, headers: Optional[Headers] = None) -> Response:
    """``POST url`` with ``value`` as a JSON body (``content-type:
    application/json``); a value JSON cannot hold raises ``TypeError`` (a
    NaN or infinity: ``ValueError``)."""
    body = _json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    return send("POST", url, [("content-type", "application/json"), *_headers(headers)], body)


def respond_with(responder: Optional[Callable[[Request], Response]]) -> None:
    """Outside a component: answers this process's requests with
    ``responder`` from now on (None: no responder). Inside one it does
    nothing: the host answers."""
    global _responder
    _responder = responder


# ---------------------------------------------------------------- arguments


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"http {what} must be a str, not {type(value).__name__}")
    return value


def _headers(headers: Optional[Headers]) -> List[Tuple[str, str]]:
    if headers is None:
        return []
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise TypeError(f"http headers must be a mapping or (name, value) pairs, not {pair!r}")
        out.append((_text(pair[0], "header name"), _text(pair[1], f"header {pair[0]!r}")))
    return out


def _body(body: Any) -> bytes:
    if isinstance(body, str):
        return body.encode()
    if not isinstance(body, (bytes, bytearray)):
        raise TypeError(f"http body must be bytes or str, not {type(body).__name__}")
    return bytes(body)


# ----------------------------------------------------------------- backends

_responder: Optional[Callable[[Request], Response]] = None


def _responded(request: Request) -> Response:
    """Outside a component: the responder's answer."""
    if _responder is None:
        raise RuntimeError(f"{request.method} {request.url}: no responder set (toolgate_guest.http.respond_with)")
    return _responder(request)


def _host(wit: Any) -> Callable[[Request], Response]:
    """Inside a component: the host's ``toolgate:guard/http`` import."""

    def send_wit(r: Request) -> Response:
        answer = wit.send(wit.Request(r.method, r.url, r.headers, r.body))
        return Response(answer.status, [tuple(h) for h in answer.headers], bytes(answer.body))

    return send_wit


# Imported once, when this module is (in a component, while componentize-py
# initialises it at build time), as state's import is.
try:
    from wit_world.imports import http as _wit  # only in a component importing http
except ImportError:
    _wit = None

_BACKEND: Optional[Callable[[Request], Response]] = _host(_wit) if _wit is not None else (
    None if sys.platform == "wasi" else _responded)


def _backend() -> Callable[[Request], Response]:
    if _BACKEND is None:
        raise RuntimeError(
            "this guard was built without the toolgate:guard/http import; the build adds it "
            "when the guard file imports toolgate_guest.http, or with --http"
        )
    return _BACKEND
