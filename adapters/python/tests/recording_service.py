"""A loopback HTTP server that records what the adapter sends.

Used by the adapter's own tests where a real ``toolgate serve`` cannot do
what they need (``test_adapter.py`` says which and why): what goes on the
wire, answers a real server never gives. It answers with scripted values; it
is not toolgate and runs no guard (a ``?trace=1`` request gets its answer
with an empty trace).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[dict[str, Any]], tuple[int, Any]]


def _default_answer(seam: str) -> Answer:
    def answer(body: dict[str, Any]) -> tuple[int, Any]:
        if seam == "routing":
            return 200, body["event"]["narrowed_tool_names"]
        if seam == "response":
            # No guard: the answer as the hook received it.
            event = body["event"]
            return 200, event.get("content", event["original_content"])
        return 200, None

    return answer


class RecordingService:
    """Records every request; answers per seam with ``answers[seam](body)``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: dict[str, Answer] = {
            s: _default_answer(s) for s in ("steering", "rewrite", "routing", "result", "response")
        }
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes; without this, Nagle's
            # algorithm and the client's delayed ACK add ~40 ms per request.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                seam = self.path.split("?")[0].rsplit("/", 1)[-1]
                with service._lock:
                    body = json.loads(raw)
                    service.requests.append(
                        {"path": self.path, "seam": seam, "headers": dict(self.headers), "body": body}
                    )
                    answer = service.answers.get(seam)
                status, value = (404, {"error": "unknown seam"}) if answer is None else answer(body)
                if status == 200 and not isinstance(value, bytes) and "trace=1" in self.path:
                    # What toolgate serve answers to ``?trace=1``: no guard ran here.
                    value = {"result": value, "trace": []}
                payload = value if isinstance(value, bytes) else json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def seam_requests(self, seam: str) -> list[dict[str, Any]]:
        """The recorded request bodies sent to one seam."""
        with self._lock:
            return [r["body"] for r in self.requests if r["seam"] == seam]

    def __enter__(self) -> RecordingService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
