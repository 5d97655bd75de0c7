"""loop-breaker: a call that keeps failing is not made again in the same run.

Two seams, one count per identical call, kept in the run's state:

- **result** (``on_tool_result``): a result with ``is_error`` true (the
  ``ToolMessage`` carried ``status="error"``) counts one failure of its call.
  A call is its tool name and its arguments, the same call when both are
  equal: the arguments as canonical JSON (keys sorted, no whitespace), hashed
  with the tool name (SHA-256). A success counts nothing (nor does it reset
  the count); a deferred result counts when its resumed result arrives.
  A result event carries no arguments, so the steering seam remembers each
  call's key under its call id; a result of a call this guard did not let
  through (never seen, or steered) counts nothing.
- **steering** (``on_before_tool_call``): a call whose identical call has
  already failed ``max_failures`` times in this run is steered
  (``is_error`` true): the tool does not run, and the model reads that this
  exact call has failed N times and to try something else. Every other call
  proceeds.

With the default ``max_failures = 2``, the first two identical calls run; once
both have failed, the third is steered, and so is every later one in the run
(a steered call is not a failure: N stays 2). Another run, or the same tool
with other arguments, starts from 0.

```toml
[[plugin]]
path = "loop-breaker.wasm"
[plugin.config]
max_failures = 2   # failures of one identical call before it is steered; 1 or more
```

A config with another key, or a ``max_failures`` that is not an integer of 1
or more, is refused at load (``validate_config``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, Optional

from toolgate_guest import (BeforeToolCallEvent, Guard, Skip, ToolResultCallbackEvent, config,
                            state, steer)

#: Failures of one identical call before it is steered, when the config does
#: not say.
DEFAULT_MAX_FAILURES = 2


def max_failures(config: Dict[str, Any]) -> int:
    """The threshold in ``config``; raises ValueError for a config it refuses."""
    unknown = sorted(set(config) - {"max_failures"})
    if unknown:
        raise ValueError(f"config: unknown key {', '.join(map(repr, unknown))}; the only key is max_failures")
    n = config.get("max_failures", DEFAULT_MAX_FAILURES)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"config: max_failures must be an integer of 1 or more, not {n!r}")
    return n


def call_key(tool_name: str, args: Dict[str, Any]) -> str:
    """The identity of a call: its tool and canonical arguments, hashed."""
    canonical = json.dumps([tool_name, args], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class LoopBreaker(Guard):
    def validate_config(self, config: Dict[str, Any]) -> None:
        max_failures(config)

    def on_before_tool_call(self, event: BeforeToolCallEvent) -> Optional[Skip]:
        key = call_key(event.tool_name, event.args)
        failures = int(state.get(f"fails:{key}") or 0)
        if failures >= max_failures(config()):
            times = "once" if failures == 1 else f"{failures} times"
            return steer(
                f"This exact call ({event.tool_name} with these same arguments) has failed {times} "
                "in this run. Do not repeat it: try something else (other arguments, another tool, "
                "or ask the user)."
            )
        state.set(f"call:{event.call_id}", key)
        return None

    def on_tool_result(self, event: ToolResultCallbackEvent) -> None:
        if event.deferred:  # the real result comes later, under the same call id
            return
        pending = f"call:{event.call_id}"
        key = state.get(pending)
        if key is None:
            return
        state.delete(pending)
        if event.is_error:
            state.add(f"fails:{key}", 1)
