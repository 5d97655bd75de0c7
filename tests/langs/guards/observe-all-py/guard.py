"""observe-all: observes all thirteen lifecycle hooks (module-level
functions), keeping each event as the SDK hands it over (a dataclass, JSON
fields parsed) in tenant state under the hook's name; its steering hook
answers every event kept, as one JSON object, so a test reads each event off
the answer."""

import dataclasses
import json
from typing import Any, Callable

from toolgate_guest import LIFECYCLE, state, steer


def _keep(hook: str) -> Callable[[Any], None]:
    def observe(event: Any) -> None:
        assert type(event) is LIFECYCLE[hook][0], type(event).__name__
        state.set(hook, json.dumps(dataclasses.asdict(event)), scope="tenant")
    return observe


for _hook in LIFECYCLE:
    globals()[_hook] = _keep(_hook)


def on_before_tool_call(event: Any) -> Any:
    seen = {}
    for hook in LIFECYCLE:
        kept = state.get(hook, scope="tenant")
        if kept is not None:
            seen[hook] = json.loads(kept)
    return steer(json.dumps(seen))
