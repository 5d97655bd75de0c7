"""The http API natively (requests answered by a responder), what the build
detects, and the pii-check example unit-tested so; a guard using http through
the host is in test_component.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator, List

import pytest

import toolgate_guest as tg
from toolgate_guest import build, http
from toolgate_guest.http import Request, Response


@pytest.fixture(autouse=True)
def no_responder() -> Iterator[None]:
    http.respond_with(None)
    yield
    http.respond_with(None)


def recording(answer: Response) -> List[Request]:
    """Answers every request with `answer`; the list fills with the requests."""
    seen: List[Request] = []

    def respond(request: Request) -> Response:
        seen.append(request)
        return answer

    http.respond_with(respond)
    return seen


def test_post_json_sends_compact_utf8_json_with_its_content_type() -> None:
    seen = recording(Response(200, [("content-type", "application/json")], b'{"pii": true}'))
    answer = http.post_json("http://classifier.test/v1", {"text": "é <b>"}, headers={"x-key": "k"})
    assert seen == [Request("POST", "http://classifier.test/v1",
                            [("content-type", "application/json"), ("x-key", "k")],
                            '{"text":"é <b>"}'.encode())]
    assert answer.ok and answer.json() == {"pii": True} and answer.text() == '{"pii": true}'


def test_send_takes_headers_as_a_mapping_or_pairs_and_a_str_body() -> None:
    seen = recording(Response(204))
    http.send("put", "https://api.test/x", [("a", "1"), ("a", "2")], "é")
    http.send("GET", "https://api.test/y", {"b": "3"})
    http.get("https://api.test/z")
    assert seen == [
        Request("PUT", "https://api.test/x", [("a", "1"), ("a", "2")], "é".encode()),
        Request("GET", "https://api.test/y", [("b", "3")], b""),
        Request("GET", "https://api.test/z", [], b""),
    ]


def test_response_helpers() -> None:
    r = Response(404, [("Content-Type", "text/plain"), ("x-two", "a"), ("x-two", "b")], b"gone \xff")
    assert not r.ok
    assert r.header("content-type") == "text/plain" and r.header("X-TWO") == "a"
    assert r.header("x-none") is None
    assert r.text() == "gone \ufffd"
    with pytest.raises(ValueError):
        r.json()
    assert [Response(s).ok for s in (199, 200, 299, 300, 500)] == [False, True, True, False, False]


def test_no_responder_raises_naming_the_request() -> None:
    with pytest.raises(RuntimeError, match=r"^GET https://api.test/x: no responder set"):
        http.get("https://api.test/x")


@pytest.mark.parametrize("call, says", [
    (lambda: http.send(b"GET", "https://a.test"), "http method must be a str, not bytes"),
    (lambda: http.send("GET", None), "http url must be a str, not NoneType"),
    (lambda: http.send("GET", "https://a.test", [("a",)]), r"\(name, value\) pairs, not \('a',\)"),
    (lambda: http.send("GET", "https://a.test", {"a": 1}), "http header 'a' must be a str, not int"),
    (lambda: http.send("POST", "https://a.test", body=1), "http body must be bytes or str, not int"),
    (lambda: http.post_json("https://a.test", {1, 2}), "not JSON serializable"),
])
def test_bad_arguments_raise_type_error_before_anything_is_sent(call, says: str) -> None:
    seen = recording(Response(200))
    with pytest.raises(TypeError, match=says):
        call()
    assert seen == []


def test_the_http_module_is_reachable_from_the_package() -> None:
    assert tg.http is http


@pytest.mark.parametrize("source, uses", [
    ("from toolgate_guest import http\n", True),
    ("from toolgate_guest import Guard, http as h\n", True),
    ("from toolgate_guest.http import post_json\n", True),
    ("import toolgate_guest.http\n", True),
    ("import toolgate_guest as tg\ndef f(e):\n    return tg.http.get('u')\n", True),
    ("from toolgate_guest import state\n", False),
    ("import http\nimport http.client\n", False),
])
def test_the_build_imports_http_only_for_a_guard_that_uses_it(source: str, uses: bool) -> None:
    assert build.imports_module(source, "http") is uses


# ------------------------------------------------ the pii-check example, natively


@pytest.fixture
def pii_check(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    module = build.load_module(Path(__file__).resolve().parents[3] / "plugins/python/pii-check/guard.py")
    sys.modules.pop("guard", None)
    monkeypatch.setattr(module, "config", lambda: {"url": "https://pii.test/v1"})
    yield module


def mail(module: ModuleType, args: dict, tool: str = "send_email") -> tg.Skip | None:
    return module.on_before_tool_call(tg.BeforeToolCallEvent("run-1", tool, "call-1", args))


def test_pii_check_steers_on_pii_and_asks_only_for_its_tool(pii_check: ModuleType) -> None:
    seen = recording(Response(200, body=b'{"pii": true}'))
    assert mail(pii_check, {"body": "ann@example.com"}) == tg.steer(pii_check.MESSAGE)
    assert mail(pii_check, {"to": "x", "n": 1}) == tg.steer(pii_check.MESSAGE)
    assert mail(pii_check, {"body": "ann@example.com"}, tool="search") is None
    assert [(r.method, r.url, json.loads(r.body)) for r in seen] == [
        ("POST", "https://pii.test/v1", {"text": "ann@example.com"}),
        ("POST", "https://pii.test/v1", {"text": '{"to":"x","n":1}'}),
    ]
    recording(Response(200, body=b'{"pii": false}'))
    assert mail(pii_check, {"body": "hello"}) is None


@pytest.mark.parametrize("answer", [Response(500, body=b'{"pii": true}'), Response(200, body=b"[]"),
                                    Response(200, body=b'{"pii": "yes"}'), Response(200, body=b"<html>")])
def test_pii_check_faults_on_what_is_not_an_answer(pii_check: ModuleType, answer: Response) -> None:
    recording(answer)
    with pytest.raises(RuntimeError, match=r"the classifier at https://pii.test/v1 answered"):
        mail(pii_check, {"body": "hi"})
