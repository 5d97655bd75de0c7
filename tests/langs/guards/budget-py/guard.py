"""budget (lifecycle + steering + routing): plugins/rust/token-budget in
Python, so its case file runs against an observer of each language.
``on_llm_end`` adds each usage's total tokens to the run's state; once a run
has used config ``max_tokens``, every tool call of that run is cancelled and
routing hides every tool."""

from typing import Any, Dict, List, Optional

from toolgate_guest import BeforeToolCallEvent, Guard, LLMEndEvent, Verdict, cancel, config, state


def total(usage: Dict[str, Any]) -> int:
    """``total_tokens``, else input + output, else prompt + completion."""
    def n(key: str) -> int:
        v = usage.get(key)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else 0
    if isinstance(usage.get("total_tokens"), (int, float)):
        return n("total_tokens")
    if "input_tokens" in usage or "output_tokens" in usage:
        return n("input_tokens") + n("output_tokens")
    return n("prompt_tokens") + n("completion_tokens")


def budget(cfg: Dict[str, Any]) -> int:
    """The budget of the config; ValueError names what is wrong."""
    max_tokens = cfg.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise ValueError("max_tokens must be an integer")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, not {max_tokens}")
    return max_tokens


def exceeded() -> Optional[int]:
    """The budget, when this run has used it up."""
    max_tokens = budget(config())
    return max_tokens if int(state.get("tokens") or 0) >= max_tokens else None


class Budget(Guard):
    def on_llm_end(self, event: LLMEndEvent) -> None:
        tokens = total(event.usage)
        if tokens > 0:
            state.add("tokens", tokens)

    def on_before_tool_call(self, event: BeforeToolCallEvent) -> Optional[Verdict]:
        max_tokens = exceeded()
        if max_tokens is None:
            return None
        return cancel(f"Token budget of {max_tokens} exceeded. Answer with what you have.")

    def on_tool_routing_decision(self, event: Any) -> Optional[List[str]]:
        return None if exceeded() is None else []

    def validate_config(self, cfg: Dict[str, Any]) -> None:
        budget(cfg)
