"""echo (rewrite, steering): hands back the call's args as the guard read them.

A rewrite names the same tool with ``event.args`` (parsed by the SDK,
serialised again); a steering call cancels with ``event.args`` as JSON text.
Whatever the SDK loses or reorders of the args (big integers, key order)
shows up in what comes back.
"""

import json

from toolgate_guest import BeforeToolCallEvent, Guard, Rewrite, ToolCallDispatchEvent, Verdict, cancel, rewrite


class Echo(Guard):
    def on_tool_call_dispatch(self, event: ToolCallDispatchEvent) -> Rewrite | None:
        return rewrite(event.tool_name, event.args)

    def on_before_tool_call(self, event: BeforeToolCallEvent) -> Verdict | None:
        return cancel(json.dumps(event.args, separators=(",", ":")))
