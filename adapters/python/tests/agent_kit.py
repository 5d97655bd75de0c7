"""A real symfonic agent driven offline by a scripted chat model.

``ScriptedModel`` is LangChain's ``FakeMessagesListChatModel`` (it answers with
the next message of its list on every call) plus a ``bind_tools`` that returns
the model itself and records which tools were bound, and a record of every
message list the model was given. ``ScriptedProvider`` is the smallest object
symfonic accepts as a ``ModelProvider``. Everything between them is the real
``SymfonicAgent``: react node, hooks, LangGraph tool node, real tools.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, tool


@dataclass
class Transcript:
    """What the model saw and which tools actually ran."""

    #: The messages the model was given, one list per model turn.
    turns: list[list[BaseMessage]] = field(default_factory=list)
    #: The tool names bound for each model turn.
    bound: list[list[str]] = field(default_factory=list)
    #: Every tool execution, in order: (tool name, arguments).
    ran: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def tool_messages(self) -> list[ToolMessage]:
        """The ToolMessages of the final conversation seen by the model."""
        last = self.turns[-1] if self.turns else []
        return [m for m in last if isinstance(m, ToolMessage)]

    def tool_message(self, call_id: str) -> ToolMessage:
        """The ToolMessage answering ``call_id`` (fails loudly when absent)."""
        for message in self.tool_messages():
            if message.tool_call_id == call_id:
                return message
        raise AssertionError(
            f"no ToolMessage for call {call_id!r}; got "
            f"{[(m.tool_call_id, m.status, m.content) for m in self.tool_messages()]}"
        )


class ScriptedModel(FakeMessagesListChatModel):
    """Answers with the scripted messages in order; records what it was given."""

    transcript: Any = None

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        self.transcript.bound.append([getattr(t, "name", str(t)) for t in tools])
        return self

    # The async path (``_agenerate``) runs this in an executor: one record
    # per model call.
    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.transcript.turns.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


class ScriptedProvider:
    """A symfonic ``ModelProvider`` that always hands out one scripted model."""

    # symfonic's default model id is a Claude model; declaring the matching
    # content-block dialect keeps it from warning about a custom provider.
    _symfonic_provider_family: ClassVar[str] = "anthropic"

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model

    def get_chat_model(self, config: Any) -> ScriptedModel:
        return self.model

    def supports_thinking(self) -> bool:
        return False

    def supports_streaming(self) -> bool:
        return False

    def supports_forced_tool_choice(self, config: Any) -> bool:
        return False


def call(name: str, call_id: str, **args: Any) -> AIMessage:
    """An AI message with one tool call."""
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def calls(*items: tuple[str, str, dict[str, Any]]) -> AIMessage:
    """An AI message with several tool calls: ``(name, id, args)`` each."""
    return AIMessage(
        content="",
        tool_calls=[{"name": n, "args": a, "id": i} for n, i, a in items],
    )


def say(text: str) -> AIMessage:
    """A final AI message with no tool call."""
    return AIMessage(content=text)


def spent(message: AIMessage, input_tokens: int, output_tokens: int) -> AIMessage:
    """``message`` with the provider's token counts (LangChain's
    ``usage_metadata``), which symfonic reports in ``on_llm_end``'s
    ``usage`` as ``input_tokens`` and ``output_tokens``."""
    return message.model_copy(
        update={
            "usage_metadata": {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            }
        }
    )


def make_tools(transcript: Transcript) -> list[BaseTool]:
    """The tools of the scenarios; each records its execution."""

    # ``sql`` also takes a number so a scenario can hand a guard an argument
    # of the wrong type (sql-guard faults on it) and still see the tool run.
    @tool
    def run_query(sql: str | int) -> str:
        """Run a SQL query against the customer database."""
        transcript.ran.append(("run_query", {"sql": sql}))
        return f"ok: {sql}"

    @tool
    def send_email(to: str, body: str = "") -> str:
        """Send an email to a customer."""
        transcript.ran.append(("send_email", {"to": to, "body": body}))
        return f"sent to {to}"

    @tool
    def delete_user(user_id: str) -> str:
        """Delete a user account."""
        transcript.ran.append(("delete_user", {"user_id": user_id}))
        return f"deleted {user_id}"

    @tool
    def list_tables() -> str:
        """List the database tables."""
        transcript.ran.append(("list_tables", {}))
        return "users, orders"

    @tool
    def loop(n: int = 1) -> str:
        """A harmless tool whose name a hostile guard reacts to."""
        transcript.ran.append(("loop", {"n": n}))
        return f"looped {n}"

    @tool
    def admin_purge(table: str) -> str:
        """Purge a table (administrators only)."""
        transcript.ran.append(("admin_purge", {"table": table}))
        return f"purged {table}"

    return [run_query, send_email, delete_user, list_tables, loop, admin_purge]


def make_agent(
    script: list[AIMessage],
    *,
    tool_routing_mode: str = "off",
    trigger_keywords: dict[str, list[str]] | None = None,
) -> tuple[Any, Transcript]:
    """A real ``SymfonicAgent`` over the scripted model and recording tools."""
    from symfonic.agent import DomainTemplate, FrameworkConfig, SymfonicAgent

    transcript = Transcript()
    model = ScriptedModel(responses=list(script), transcript=transcript)
    config = FrameworkConfig(
        lazy_tooling=False,
        tool_routing_mode=tool_routing_mode,
        always_include_tools=(),
        domain=DomainTemplate(name="toolgate-tests", tool_trigger_keywords=trigger_keywords or {}),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = SymfonicAgent(
            ScriptedProvider(model), tools=make_tools(transcript), config=config
        )
    return agent, transcript


def scope(tenant_id: str) -> Any:
    """A symfonic tenant scope."""
    from symfonic.agent.types import FrameworkTenantScope

    return FrameworkTenantScope.root("tenant", tenant_id)
