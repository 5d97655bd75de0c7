"""`pii-check` in Rust, TypeScript, Python and Go: outbound HTTP to a real
classifier.

The Rust, TypeScript and Python guards are the examples (`scripts/build-plugins
rust js python`, in ``$TOOLGATE_PLUGINS/<lang>/pii-check.wasm``); the Go one is the
test guard `guards/pii-go`, built here. The test starts a classifier on a
loopback port (`{"text": T}` in, `{"pii": "@" in T}` out, every text it is
sent recorded) and gives each language one plugin directory whose manifest
loads the guard four times, each plugin checking a tool of its own:

- `pii` checks `send_email` against the classifier, granted it;
- `down-skip` / `down-deny` check `mail_down_skip` / `mail_down_deny`
  against a loopback port nothing listens on (granted): `on_error` skip and
  deny;
- `ungranted` checks `mail_ungranted` against the classifier, but its grant
  names another host: `http-denied`, nothing sent.

One `toolgate replay --json` per language decides the same trace; the
verdicts (the result, and each plugin's outcome and fault) must be the
expected ones, and the texts the classifier was sent the same in every
language. A call of another tool reaches no server. The Rust, Python
and TypeScript examples refuse the same bad configs at load with the same
messages.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import REPO, build_test_guards, listing, replay, steering_event

MESSAGE = ("This email contains personal data (an address, a phone number, a name with contact "
           "details ...). Remove the personal data from the email, then send it again.")
STEER = {"action": "skip", "content": MESSAGE, "is_error": True}
LANGS = ("rust", "js", "python", "go")
EXAMPLES = ("rust", "js", "python")
PLUGINS = ("pii", "down-skip", "down-deny", "ungranted")


class Classifier(http.server.BaseHTTPRequestHandler):
    """`POST /classify` with `{"text": T}`: `{"pii": true}` when T holds an `@`."""

    texts: list[str] = []

    def do_POST(self) -> None:
        n = int(self.headers.get("content-length") or 0)
        text = json.loads(self.rfile.read(n))["text"]
        type(self).texts.append(text)
        body = json.dumps({"pii": "@" in text}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def classifier() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Classifier)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manifest(classifier: str) -> str:
    """The four plugins' manifest. Not snapshotted: snapshotting the Go
    guard for each of four plugins at every load took minutes on a busy
    2-core machine, and this test is about HTTP. A long `timeout_ms`: the
    classifier's answer is waited for within it, and a busy machine must
    not turn a slow answer into `http-failed`."""
    down = f"http://127.0.0.1:{closed_port()}"
    plugins = [
        ("pii", "send_email", classifier, classifier, "skip"),
        ("down-skip", "mail_down_skip", down, down, "skip"),
        ("down-deny", "mail_down_deny", down, down, "deny"),
        ("ungranted", "mail_ungranted", classifier, "http://pii.internal.example", "skip"),
    ]
    return "".join(
        f'[[plugin]]\nname = "{name}"\npath = "pii-check.wasm"\non_error = "{on_error}"\nsnapshot = false\ntimeout_ms = 10_000\n'
        f'allowed_hosts = ["{granted}"]\nallowed_networks = ["127.0.0.1"]\nhttp_methods = ["POST"]\n'
        f'[plugin.config]\nurl = "{url}/classify"\ntool = "{tool}"\n\n'
        for name, tool, url, granted, on_error in plugins
    )


@pytest.fixture(scope="module")
def components(toolgate_bin: Path, plugins_root: Path) -> dict[str, Path]:
    built = {lang: plugins_root / lang / "pii-check.wasm" for lang in EXAMPLES}
    for lang, path in built.items():
        if not path.is_file():
            pytest.fail(f"{path} is missing; build the {lang} example plugins first")
    built.update(build_test_guards(toolgate_bin, "pii", {"go": REPO / "tests/langs/guards/pii-go"}))
    return built


CASES: dict[str, dict[str, Any]] = {
    "pii in the body": steering_event("send_email", {"to": "x", "body": "write to ann@example.com"}),
    "clean body": steering_event("send_email", {"to": "x", "body": "See you at 5."}),
    "no body: the args as JSON": steering_event("send_email", {"to": "bo@example.com", "n": 1, "é": [True]}),
    "another tool": steering_event("search", {"body": "ann@example.com"}),
    "classifier down, skip": steering_event("mail_down_skip", {"body": "hi"}),
    "classifier down, deny": steering_event("mail_down_deny", {"body": "hi"}),
    "host not granted": steering_event("mail_ungranted", {"body": "hi"}),
}

# Each case: the result, and the plugin that faulted (and how) if any; every
# other plugin that ran proceeded.
EXPECTED: dict[str, tuple[Any, tuple[str, str] | None]] = {
    "pii in the body": (STEER, None),
    "clean body": (None, None),
    "no body: the args as JSON": (STEER, None),
    "another tool": (None, None),
    "classifier down, skip": (None, ("down-skip", "http-failed")),
    "classifier down, deny": ({
        "action": "skip",
        "content": "[toolgate] This call was blocked: the guard `down-deny` failed (http-failed) "
                   "and is configured to fail closed.",
        "is_error": True,
    }, ("down-deny", "http-failed")),
    "host not granted": (None, ("ungranted", "http-denied")),
}

# What the classifier is sent, in order: the body, or the args as compact
# JSON text in their order.
SENT = ["write to ann@example.com", "See you at 5.", '{"to":"bo@example.com","n":1,"é":[true]}']


@pytest.fixture(scope="module")
def runs(toolgate_bin: Path, components: dict[str, Path], classifier: str,
         tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[dict[str, Any]], list[str]]]:
    """Per language: its decisions of the cases, and the texts the classifier got."""
    out = {}
    for lang in LANGS:
        plugins = tmp_path_factory.mktemp(f"pii-{lang}")
        (plugins / "pii-check.wasm").write_bytes(components[lang].read_bytes())
        (plugins / "toolgate.toml").write_text(manifest(classifier))
        Classifier.texts = []
        lines = [{"seam": "steering", "event": event} for event in CASES.values()]
        out[lang] = (replay(toolgate_bin, plugins, lines), Classifier.texts)
    return out


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("case", CASES)
def test_verdicts(runs: dict[str, Any], lang: str, case: str) -> None:
    decision = runs[lang][0][list(CASES).index(case)]
    result, faulted = EXPECTED[case]
    assert decision["result"] == result, decision
    # The chain runs in manifest order and stops at a skip.
    ran = [e["plugin"] for e in decision["trace"]]
    skipper = PLUGINS.index(faulted[0] if faulted else "pii") + 1 if result else len(PLUGINS)
    assert ran == list(PLUGINS[:skipper]), decision
    faults = {e["plugin"]: e["fault"] for e in decision["trace"] if e.get("fault")}
    assert faults == (dict([faulted]) if faulted else {}), decision


@pytest.mark.parametrize("lang", LANGS)
def test_the_classifier_gets_the_same_texts_and_nothing_else(runs: dict[str, Any], lang: str) -> None:
    # Not for another tool, a closed port or a host off the grant.
    assert runs[lang][1] == SENT


def test_every_language_decides_alike(runs: dict[str, Any]) -> None:
    def verdicts(lang: str) -> list[Any]:
        return [(d["result"], [(e["plugin"], e["outcome"], e.get("fault")) for e in d["trace"]])
                for d in runs[lang][0]]

    for lang in LANGS[1:]:
        assert verdicts(lang) == verdicts("rust"), lang


@pytest.mark.parametrize("config, says", [
    ('url = "ftp://pii.test/v1"', 'config: url must be an http:// or https:// URL, not "ftp://pii.test/v1"'),
    ('tool = "send_email"', "config: missing field `url`"),
    ('url = "https://pii.test"\nmodel = "x"', "config: unknown field `model`, expected `url` or `tool`"),
])
def test_the_examples_refuse_a_bad_config_alike(
    toolgate_bin: Path, components: dict[str, Path], tmp_path: Path, config: str, says: str
) -> None:
    for lang in EXAMPLES:
        plugins = tmp_path / lang
        plugins.mkdir()
        (plugins / "pii-check.wasm").write_bytes(components[lang].read_bytes())
        # Not snapshotted: a JS snapshot is made per config, tens of seconds each.
        (plugins / "toolgate.toml").write_text(
            f'[[plugin]]\npath = "pii-check.wasm"\nsnapshot = false\n[plugin.config]\n{config}\n')
        listed = listing(toolgate_bin, plugins)
        assert listed["errors"] == [
            f"{plugins}/toolgate.toml:4 ({plugins}/pii-check.wasm): plugin `pii-check` refuses its config: {says}"
        ], (lang, listed)
