"""render (response): answers what it saw,
``content|original|model|node|iteration|run|state.k``, so a test reads every
field of the event off the answer; a content of "keep" keeps it (None),
"bad" answers a non-string (a fault)."""

from toolgate_guest import Guard, ResponseRenderEvent


class Render(Guard):
    def on_response_render(self, event: ResponseRenderEvent) -> str | None:
        if event.content == "keep":
            return None
        if event.content == "bad":
            return 42  # type: ignore[return-value]
        k = event.state.get("k")
        return "|".join([event.content, event.original_content, event.model, event.node_name,
                         str(event.iteration_index), event.run_id, k if isinstance(k, str) else ""])
