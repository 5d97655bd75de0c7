"""memo (steering): tries to carry state from one call to the next and says what it saw.

Each call counts itself in a module-level counter and keeps its call id in a
module-level list, then cancels with ``{"calls": n, "last": <the previous
call's id or None>, "state": <the event's state>}`` as JSON text. On a fresh
instance every call sees calls 1 and last None (snapshotted: what its warm-up
left, the same every call).
"""

import json

from toolgate_guest import BeforeToolCallEvent, Guard, Verdict, skip

CALLS = [0]
SEEN: list = []


class Memo(Guard):
    def on_before_tool_call(self, event: BeforeToolCallEvent) -> Verdict | None:
        CALLS[0] += 1
        last = SEEN[-1] if SEEN else None
        SEEN.append(event.call_id)
        return skip(json.dumps({"calls": CALLS[0], "last": last, "state": event.state}), False)
