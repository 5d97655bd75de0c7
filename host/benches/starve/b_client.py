"""Tenant B at a fixed rate: DELETEs without WHERE that B's sql-guard must
steer, each carrying a long SQL string. Prints one RESULT line: how many were
steered (the guard was consulted), approved (answered as if no guard had
spoken: policy silently off), refused with backpressure (429/503), other
errors, and the latency percentiles of the steered ones.

    python3 b_client.py URL RATE SECONDS KIB
"""

import http.client
import json
import sys
import threading
import time
import urllib.parse

url, rate, seconds, kib = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
parts = urllib.parse.urlsplit(url)
sql = "DELETE FROM users /* " + "x" * (kib * 1024) + " */"
body = json.dumps(
    {"tenant": "b", "event": {"run_id": "b", "tool_name": "run_query", "call_id": "c1", "args": {"sql": sql}}}
).encode()
counts = {"steered": 0, "approved": 0, "backpressure": 0, "other": 0}
latencies = []
lock = threading.Lock()


def one() -> None:
    start = time.monotonic()
    kind = "other"
    try:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        conn.request("POST", parts.path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status == 200:
            answer = json.loads(data)
            kind = "steered" if answer and answer.get("action") == "skip" else "approved"
        elif resp.status in (429, 503):
            kind = "backpressure"
        conn.close()
    except Exception:  # noqa: BLE001 - any transport error counts as "other"
        pass
    with lock:
        counts[kind] += 1
        if kind == "steered":
            latencies.append(time.monotonic() - start)


threads = []
t0 = time.monotonic()
n = int(rate * seconds)
for i in range(n):
    delay = t0 + i / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    t = threading.Thread(target=one)
    t.start()
    threads.append(t)
for t in threads:
    t.join()
latencies.sort()


def pct(p: float) -> int:
    return int(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1e6) if latencies else -1


print(
    f"RESULT sent={n} steered={counts['steered']} approved={counts['approved']} "
    f"backpressure={counts['backpressure']} other={counts['other']} p50_us={pct(0.5)} p99_us={pct(0.99)}"
)
