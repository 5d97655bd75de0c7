"""hostile-observe: every lifecycle event it observes raises (on_llm_end,
on_agent_start); its steering hook still answers, steering calls to
``forbidden``."""

from typing import Any, Optional

from toolgate_guest import AgentStartEvent, Guard, LLMEndEvent, Verdict, steer


class HostileObserve(Guard):
    def on_llm_end(self, event: LLMEndEvent) -> None:
        raise RuntimeError(f"on_llm_end exploded on {event.run_id}")

    def on_agent_start(self, event: AgentStartEvent) -> None:
        raise RuntimeError("on_agent_start exploded")

    def on_before_tool_call(self, event: Any) -> Optional[Verdict]:
        return steer("no") if event.tool_name == "forbidden" else None
