"""The pii-check guard, in Rust and in TypeScript, asking a real classifier.

`plugins/rust/pii-check` and `plugins/js/pii-check.ts` are each put alone in
a plugin directory whose manifest grants them one classifier: an HTTP server
this module starts on a loopback port (loopback is off the public internet,
so the grant names it in `allowed_networks` too). The same events go through
both in one `toolgate replay --json` per directory: the verdicts must be the
same and the expected ones, and the classifier must have been asked exactly
the same questions. With the classifier down each follows its `on_error`
(`skip`: the mail goes; `deny`: the host's fixed refusal), and a URL off the
grant is refused before anything is sent (`http-denied`).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import plugin_dir, replay, steering_event

LANGS = ("rust", "js")
STEER_PII = {
    "action": "skip",
    "content": "This email contains personal data (an address, a phone number, a name with contact "
    "details ...). Remove the personal data from the email, then send it again.",
    "is_error": True,
}
OK = None


class Classifier:
    """A classifier on a loopback port: `POST /classify` answers `{"pii":
    true}` when the JSON body's `text` holds an `@`. Every request is kept as
    (method, path, content type, body). `down()` stops it for a while, on the
    same port."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None, Any]] = []
        self.lock = threading.Lock()
        self.server = self._serve(0)
        self.port = self.server.server_address[1]
        # One URL for every test: a JS guard is snapshotted at load with its config, and
        # the snapshot compiled, once per config (tens of seconds), so one config is one
        # compile for the whole module.
        self.origin = f"http://127.0.0.1:{self.port}"

    def _serve(self, port: int) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        server.daemon_threads = True
        server.classifier = self  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @contextmanager
    def down(self) -> Iterator[None]:
        """Nothing listens on the classifier's port inside the block."""
        self.stop()
        try:
            yield
        finally:
            self.server = self._serve(self.port)

    def asked(self) -> list[tuple[str, str, str | None, Any]]:
        """The requests since the last call, and forgets them."""
        with self.lock:
            seen, self.seen = self.seen, []
        return seen


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        classifier: Classifier = self.server.classifier  # type: ignore[attr-defined]
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        with classifier.lock:
            classifier.seen.append(("POST", self.path, self.headers.get("content-type"), body))
        answer = json.dumps({"pii": "@" in body["text"]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def classifier() -> Iterator[Classifier]:
    c = Classifier()
    yield c
    c.stop()


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def guard_dir(plugins_root: Path, lang: str, tmp: Path, *, url: str, granted: str, on_error: str) -> Path:
    d = plugin_dir(plugins_root, lang, "pii-check", tmp=tmp)
    (d / "toolgate.toml").write_text(
        "[[plugin]]\n"
        'path = "pii-check.wasm"\n'
        f'allowed_hosts = ["{granted}"]\n'
        'allowed_networks = ["127.0.0.1/32"]\n'
        'http_methods = ["POST"]\n'
        # Waiting counts against the call's run time: generous, so a loaded machine's slow
        # answer is still an answer.
        "timeout_ms = 10000\n"
        f'on_error = "{on_error}"\n'
        "[plugin.config]\n"
        f'url = "{url}"\n'
    )
    return d


# Each case: the event, the verdict, and the text the classifier is asked about (None: not asked).
CASES = {
    "pii-in-body": (steering_event("send_email", {"to": "team", "body": "write to jane@example.com"}), STEER_PII, "write to jane@example.com"),
    "clean-body": (steering_event("send_email", {"to": "team", "body": "the report is attached"}), OK, "the report is attached"),
    "no-body": (steering_event("send_email", {"to": "jane@example.com", "cc": ["a", 1]}), STEER_PII, '{"to":"jane@example.com","cc":["a",1]}'),
    "other-tool": (steering_event("search", {"q": "a@b.c"}), OK, None),
}


def run(toolgate_bin: Path, d: Path, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return replay(toolgate_bin, d, [{"seam": "steering", "event": e} for e in events])


def test_rust_and_ts_ask_the_same_questions_and_give_the_same_verdicts(
    toolgate_bin: Path, plugins_root: Path, tmp_path: Path, classifier: Classifier
) -> None:
    url = f"{classifier.origin}/classify"
    classifier.asked()
    expected_asked = [
        ("POST", "/classify", "application/json", {"text": text})
        for _, _, text in CASES.values()
        if text is not None
    ]
    results = {}
    for lang in LANGS:
        d = guard_dir(plugins_root, lang, tmp_path / lang, url=url, granted=classifier.origin, on_error="deny")
        decisions = run(toolgate_bin, d, [event for event, _, _ in CASES.values()])
        results[lang] = [d["result"] for d in decisions]
        assert results[lang] == [verdict for _, verdict, _ in CASES.values()], lang
        for case, decision in zip(CASES, decisions):
            (entry,) = decision["trace"]
            assert entry.get("fault") is None, (lang, case, entry)
        assert classifier.asked() == expected_asked, lang
    assert results["rust"] == results["js"]


@pytest.mark.parametrize("on_error", ["skip", "deny"])
def test_with_the_classifier_down_each_follows_its_on_error(
    on_error: str, toolgate_bin: Path, plugins_root: Path, tmp_path: Path, classifier: Classifier
) -> None:
    event, _, _ = CASES["pii-in-body"]
    url = f"{classifier.origin}/classify"
    with classifier.down():
        for lang in LANGS:
            d = guard_dir(plugins_root, lang, tmp_path / lang, url=url, granted=classifier.origin, on_error=on_error)
            (decision,) = run(toolgate_bin, d, [event])
            (entry,) = decision["trace"]
            assert entry["fault"] == "http-failed", (lang, entry)
            if on_error == "skip":
                assert decision["result"] is None, lang
            else:
                assert decision["result"] == {
                    "action": "skip",
                    "content": "[toolgate] This call was blocked: the guard `pii-check` failed (http-failed) "
                    "and is configured to fail closed.",
                    "is_error": True,
                }, lang


def test_a_classifier_off_the_grant_is_refused_before_anything_is_sent(
    toolgate_bin: Path, plugins_root: Path, tmp_path: Path, classifier: Classifier
) -> None:
    classifier.asked()
    event, _, _ = CASES["pii-in-body"]
    for lang in LANGS:
        # Granted another port of the same address: not the classifier's.
        d = guard_dir(
            plugins_root, lang, tmp_path / lang,
            url=f"{classifier.origin}/classify", granted=f"http://127.0.0.1:{closed_port()}", on_error="skip",
        )
        (decision,) = run(toolgate_bin, d, [event])
        (entry,) = decision["trace"]
        assert entry["fault"] == "http-denied", (lang, entry)
        assert decision["result"] is None, lang
    assert classifier.asked() == []
