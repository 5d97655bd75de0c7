//! Lifecycle events (`toolgate:guard@0.3.0`, interface `observe`): the
//! [`Observer`] trait, one method per symfonic hook, and the events, each
//! named and shaped as its symfonic class. JSON fields (`dict`, `list`,
//! `Any` in the seed) arrive parsed as [`serde_json::Value`].

use serde_json::Value;

use crate::bindings::observe::exports::toolgate::guard::observe as wit;
use crate::parse_json;

/// One lifecycle hook an [`Observer`] may subscribe to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hook {
    /// `on_agent_start`: Agent execution begins.
    AgentStart,
    /// `on_agent_end`: Agent execution completed.
    AgentEnd,
    /// `on_node_start`: A graph node is about to run.
    NodeStart,
    /// `on_node_end`: A graph node completed.
    NodeEnd,
    /// `on_node_error`: A graph node raised.
    NodeError,
    /// `on_llm_start`: The LLM is invoked (the engine-view prompt).
    LlmStart,
    /// `on_llm_pre_call`: Right before the provider call (the wire-accurate payload).
    LlmPreCall,
    /// `on_llm_end`: The LLM returned.
    LlmEnd,
    /// `on_token_composition`: Input tokens by prompt section.
    TokenComposition,
    /// `on_user_correction`: The user corrected a previous answer.
    UserCorrection,
    /// `on_procedure_selection`: The force-resolver picked a procedural skill.
    ProcedureSelection,
    /// `on_react_loop_end`: The React loop ended with an empty final response.
    ReactLoopEnd,
    /// `on_fabrication_detected`: The fabrication check found suspect content.
    FabricationDetected,
}

impl Hook {
    /// The hook's symfonic name (`on_llm_end`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Hook::AgentStart => "on_agent_start",
            Hook::AgentEnd => "on_agent_end",
            Hook::NodeStart => "on_node_start",
            Hook::NodeEnd => "on_node_end",
            Hook::NodeError => "on_node_error",
            Hook::LlmStart => "on_llm_start",
            Hook::LlmPreCall => "on_llm_pre_call",
            Hook::LlmEnd => "on_llm_end",
            Hook::TokenComposition => "on_token_composition",
            Hook::UserCorrection => "on_user_correction",
            Hook::ProcedureSelection => "on_procedure_selection",
            Hook::ReactLoopEnd => "on_react_loop_end",
            Hook::FabricationDetected => "on_fabrication_detected",
        }
    }

    fn kind(self) -> wit::EventKinds {
        match self {
            Hook::AgentStart => wit::EventKinds::AGENT_START,
            Hook::AgentEnd => wit::EventKinds::AGENT_END,
            Hook::NodeStart => wit::EventKinds::NODE_START,
            Hook::NodeEnd => wit::EventKinds::NODE_END,
            Hook::NodeError => wit::EventKinds::NODE_ERROR,
            Hook::LlmStart => wit::EventKinds::LLM_START,
            Hook::LlmPreCall => wit::EventKinds::LLM_PRE_CALL,
            Hook::LlmEnd => wit::EventKinds::LLM_END,
            Hook::TokenComposition => wit::EventKinds::TOKEN_COMPOSITION,
            Hook::UserCorrection => wit::EventKinds::USER_CORRECTION,
            Hook::ProcedureSelection => wit::EventKinds::PROCEDURE_SELECTION,
            Hook::ReactLoopEnd => wit::EventKinds::REACT_LOOP_END,
            Hook::FabricationDetected => wit::EventKinds::FABRICATION_DETECTED,
        }
    }
}

/// `on_agent_start`: symfonic's `AgentStartEvent`. Agent execution begins.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentStartEvent {
    /// `query`: The user's query.
    pub query: String,
    /// `run_id`: The agent run.
    pub run_id: String,
}

impl From<wit::AgentStartEvent> for AgentStartEvent {
    fn from(e: wit::AgentStartEvent) -> Self {
        Self {
            query: e.query,
            run_id: e.run_id,
        }
    }
}

/// `on_agent_end`: symfonic's `AgentEndEvent`. Agent execution completed.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentEndEvent {
    /// `run_id`: The agent run.
    pub run_id: String,
    /// `final_response`: The final answer (`None` when streaming).
    pub final_response: Option<String>,
    /// `duration_ms`: How long the run took, milliseconds.
    pub duration_ms: f64,
    /// `node_count`: Nodes run (`None` when streaming).
    pub node_count: Option<u32>,
}

impl From<wit::AgentEndEvent> for AgentEndEvent {
    fn from(e: wit::AgentEndEvent) -> Self {
        Self {
            run_id: e.run_id,
            final_response: e.final_response,
            duration_ms: e.duration_ms,
            node_count: e.node_count,
        }
    }
}

/// `on_node_start`: symfonic's `NodeStartEvent`. A graph node is about to run.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeStartEvent {
    /// `node_name`: The node.
    pub node_name: String,
    /// `run_id`: The agent run.
    pub run_id: String,
}

impl From<wit::NodeStartEvent> for NodeStartEvent {
    fn from(e: wit::NodeStartEvent) -> Self {
        Self {
            node_name: e.node_name,
            run_id: e.run_id,
        }
    }
}

/// `on_node_end`: symfonic's `NodeEndEvent`. A graph node completed.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeEndEvent {
    /// `node_name`: The node.
    pub node_name: String,
    /// `run_id`: The agent run.
    pub run_id: String,
    /// `duration_ms`: How long it ran, milliseconds.
    pub duration_ms: f64,
}

impl From<wit::NodeEndEvent> for NodeEndEvent {
    fn from(e: wit::NodeEndEvent) -> Self {
        Self {
            node_name: e.node_name,
            run_id: e.run_id,
            duration_ms: e.duration_ms,
        }
    }
}

/// `on_node_error`: symfonic's `NodeErrorEvent`. A graph node raised.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeErrorEvent {
    /// `node_name`: The node.
    pub node_name: String,
    /// `run_id`: The agent run.
    pub run_id: String,
    /// `error`: The exception's message.
    pub error: String,
    /// `error_type`: The exception's class name.
    pub error_type: String,
}

impl From<wit::NodeErrorEvent> for NodeErrorEvent {
    fn from(e: wit::NodeErrorEvent) -> Self {
        Self {
            node_name: e.node_name,
            run_id: e.run_id,
            error: e.error,
            error_type: e.error_type,
        }
    }
}

/// `on_llm_start`: symfonic's `LLMStartEvent`. The LLM is invoked (the engine-view prompt).
#[derive(Debug, Clone, PartialEq)]
pub struct LLMStartEvent {
    /// `model`: The model invoked.
    pub model: String,
    /// `messages`: The conversation as the react node received it.
    pub messages: Value,
    /// `run_id`: The agent run.
    pub run_id: String,
    /// `system_prompt`: The system prompt.
    pub system_prompt: String,
    /// `node_name`: The calling node.
    pub node_name: String,
    /// `turn_index`: The turn.
    pub turn_index: u32,
}

impl From<wit::LlmStartEvent> for LLMStartEvent {
    fn from(e: wit::LlmStartEvent) -> Self {
        Self {
            model: e.model,
            messages: parse_json("messages", &e.messages),
            run_id: e.run_id,
            system_prompt: e.system_prompt,
            node_name: e.node_name,
            turn_index: e.turn_index,
        }
    }
}

/// `on_llm_pre_call`: symfonic's `LLMPreCallEvent`. Right before the provider call (the wire-accurate payload).
#[derive(Debug, Clone, PartialEq)]
pub struct LLMPreCallEvent {
    /// `model`: The model invoked.
    pub model: String,
    /// `messages`: The post-consolidation messages.
    pub messages: Value,
    /// `tools`: The bound tools: `{"name", "description", "schema"}` records.
    pub tools: Value,
    /// `run_id`: The agent run.
    pub run_id: String,
    /// `invocation_params`: Provider invocation kwargs (`{}` when unknown).
    pub invocation_params: Value,
    /// `node_name`: The calling node.
    pub node_name: String,
}

impl From<wit::LlmPreCallEvent> for LLMPreCallEvent {
    fn from(e: wit::LlmPreCallEvent) -> Self {
        Self {
            model: e.model,
            messages: parse_json("messages", &e.messages),
            tools: parse_json("tools", &e.tools),
            run_id: e.run_id,
            invocation_params: parse_json("invocation_params", &e.invocation_params),
            node_name: e.node_name,
        }
    }
}

/// `on_llm_end`: symfonic's `LLMEndEvent`. The LLM returned.
#[derive(Debug, Clone, PartialEq)]
pub struct LLMEndEvent {
    /// `model`: The model invoked.
    pub model: String,
    /// `output`: What it returned.
    pub output: String,
    /// `usage`: The provider's usage dict (token counts).
    pub usage: Value,
    /// `run_id`: The agent run.
    pub run_id: String,
    /// `node_name`: The calling node (`react`, ...).
    pub node_name: String,
    /// `pricing_unknown`: The model had no entry in the pricing registry.
    pub pricing_unknown: bool,
    /// `duration_ms`: The call's latency, milliseconds.
    pub duration_ms: f64,
    /// `started_at_utc`: When it started, ISO-8601 UTC.
    pub started_at_utc: String,
    /// `iteration_index`: The React loop iteration.
    pub iteration_index: u32,
    /// `turn_index`: The turn.
    pub turn_index: u32,
}

impl From<wit::LlmEndEvent> for LLMEndEvent {
    fn from(e: wit::LlmEndEvent) -> Self {
        Self {
            model: e.model,
            output: e.output,
            usage: parse_json("usage", &e.usage),
            run_id: e.run_id,
            node_name: e.node_name,
            pricing_unknown: e.pricing_unknown,
            duration_ms: e.duration_ms,
            started_at_utc: e.started_at_utc,
            iteration_index: e.iteration_index,
            turn_index: e.turn_index,
        }
    }
}

/// `on_token_composition`: symfonic's `TokenCompositionEvent`. Input tokens by prompt section.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenCompositionEvent {
    /// `system_prompt_tokens`: Tokens of the system prompt.
    pub system_prompt_tokens: u64,
    /// `tool_definitions_tokens`: Tokens of the tool definitions.
    pub tool_definitions_tokens: u64,
    /// `conversation_history_tokens`: Tokens of the conversation history.
    pub conversation_history_tokens: u64,
    /// `memory_context_tokens`: Tokens of the memory context.
    pub memory_context_tokens: u64,
    /// `run_id`: The agent run.
    pub run_id: String,
}

impl From<wit::TokenCompositionEvent> for TokenCompositionEvent {
    fn from(e: wit::TokenCompositionEvent) -> Self {
        Self {
            system_prompt_tokens: e.system_prompt_tokens,
            tool_definitions_tokens: e.tool_definitions_tokens,
            conversation_history_tokens: e.conversation_history_tokens,
            memory_context_tokens: e.memory_context_tokens,
            run_id: e.run_id,
        }
    }
}

/// `on_user_correction`: symfonic's `UserCorrectionEvent`. The user corrected a previous answer.
#[derive(Debug, Clone, PartialEq)]
pub struct UserCorrectionEvent {
    /// `turn_id`: The corrected turn.
    pub turn_id: String,
    /// `original_response`: The answer corrected.
    pub original_response: String,
    /// `correction_text`: The user's correction.
    pub correction_text: String,
    /// `activation_log`: That turn's activation log.
    pub activation_log: Value,
    /// `tenant_id`: symfonic's tenant id.
    pub tenant_id: String,
    /// `scope`: The `TenantScope` (`null` when none).
    pub scope: Value,
}

impl From<wit::UserCorrectionEvent> for UserCorrectionEvent {
    fn from(e: wit::UserCorrectionEvent) -> Self {
        Self {
            turn_id: e.turn_id,
            original_response: e.original_response,
            correction_text: e.correction_text,
            activation_log: parse_json("activation_log", &e.activation_log),
            tenant_id: e.tenant_id,
            scope: parse_json("scope", &e.scope),
        }
    }
}

/// `on_procedure_selection`: symfonic's `ProcedureSelectionEvent`. The force-resolver picked a procedural skill.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcedureSelectionEvent {
    /// `procedure_id`: The winning skill's id.
    pub procedure_id: Option<String>,
    /// `action_tool`: The action tool it resolves to.
    pub action_tool: Option<String>,
    /// `pre_tool`: The tool `tool_choice` is forced to.
    pub pre_tool: String,
    /// `force_mode`: `off`, `soft` or `hard`.
    pub force_mode: String,
    /// `candidate_count`: Candidates considered (at least 1).
    pub candidate_count: u32,
}

impl From<wit::ProcedureSelectionEvent> for ProcedureSelectionEvent {
    fn from(e: wit::ProcedureSelectionEvent) -> Self {
        Self {
            procedure_id: e.procedure_id,
            action_tool: e.action_tool,
            pre_tool: e.pre_tool,
            force_mode: e.force_mode,
            candidate_count: e.candidate_count,
        }
    }
}

/// `on_react_loop_end`: symfonic's `ReactLoopEndEvent`. The React loop ended with an empty final response.
#[derive(Debug, Clone, PartialEq)]
pub struct ReactLoopEndEvent {
    /// `run_id`: The agent run.
    pub run_id: String,
    /// `iteration_index`: The terminating iteration.
    pub iteration_index: u32,
    /// `content_type`: Python type name of the last message's content.
    pub content_type: String,
    /// `has_tool_calls`: The last message carried tool calls.
    pub has_tool_calls: bool,
    /// `tool_call_count`: How many.
    pub tool_call_count: u32,
    /// `termination_reason`: `tool_calls_with_no_text`, `no_content_no_tool_calls` or `recursion_exhausted`.
    pub termination_reason: String,
}

impl From<wit::ReactLoopEndEvent> for ReactLoopEndEvent {
    fn from(e: wit::ReactLoopEndEvent) -> Self {
        Self {
            run_id: e.run_id,
            iteration_index: e.iteration_index,
            content_type: e.content_type,
            has_tool_calls: e.has_tool_calls,
            tool_call_count: e.tool_call_count,
            termination_reason: e.termination_reason,
        }
    }
}

/// `on_fabrication_detected`: symfonic's `FabricationDetectedEvent`. The fabrication check found suspect content.
#[derive(Debug, Clone, PartialEq)]
pub struct FabricationDetectedEvent {
    /// `run_id`: The agent run.
    pub run_id: String,
    /// `mode`: `off`, `observe`, `revise` or `refuse`.
    pub mode: String,
    /// `action_taken`: `none`, `observed`, `revise_forced` or `refuse_replaced`.
    pub action_taken: String,
    /// `findings`: The findings (`FabricationFinding.to_event_payload()` dicts).
    pub findings: Value,
    /// `refuse_threshold`: The refuse threshold in effect.
    pub refuse_threshold: f64,
    /// `max_finding_confidence`: The strongest finding's confidence.
    pub max_finding_confidence: f64,
    /// `original_draft_preview`: The draft's first 240 characters.
    pub original_draft_preview: String,
    /// `replacement_preview`: The replacement's first 240 characters (refuse mode).
    pub replacement_preview: Option<String>,
    /// `preview_truncated`: The draft was longer than 240 characters.
    pub preview_truncated: bool,
}

impl From<wit::FabricationDetectedEvent> for FabricationDetectedEvent {
    fn from(e: wit::FabricationDetectedEvent) -> Self {
        Self {
            run_id: e.run_id,
            mode: e.mode,
            action_taken: e.action_taken,
            findings: parse_json("findings", &e.findings),
            refuse_threshold: e.refuse_threshold,
            max_finding_confidence: e.max_finding_confidence,
            original_draft_preview: e.original_draft_preview,
            replacement_preview: e.replacement_preview,
            preview_truncated: e.preview_truncated,
        }
    }
}

/// Lifecycle events (symfonic's fire-and-forget hooks): observe what a run
/// does and keep what you need in [`state`](crate::state), where your
/// guard's decisions at the other seams read it. Nothing is returned.
///
/// Name the hooks in [`HOOKS`](Observer::HOOKS) (the host calls the guard
/// for those only) and override their methods; the others do nothing.
/// Export it with `toolgate_guest::export!(MyGuard: observe)`.
///
/// ```rust,ignore
/// use toolgate_guest::{Hook, LLMEndEvent, Observer};
///
/// struct Spend;
///
/// impl Observer for Spend {
///     const HOOKS: &'static [Hook] = &[Hook::LlmEnd];
///
///     fn on_llm_end(event: LLMEndEvent) {
///         let tokens = event.usage["total_tokens"].as_i64().unwrap_or(0);
///         toolgate_guest::state::add(toolgate_guest::state::Scope::Run, "tokens", tokens);
///     }
/// }
///
/// toolgate_guest::export!(Spend: observe);
/// ```
pub trait Observer {
    /// The hooks this guard observes; the host calls it for no other.
    const HOOKS: &'static [Hook];

    /// `on_agent_start`: Agent execution begins.
    fn on_agent_start(event: AgentStartEvent) {
        let _ = event;
    }

    /// `on_agent_end`: Agent execution completed.
    fn on_agent_end(event: AgentEndEvent) {
        let _ = event;
    }

    /// `on_node_start`: A graph node is about to run.
    fn on_node_start(event: NodeStartEvent) {
        let _ = event;
    }

    /// `on_node_end`: A graph node completed.
    fn on_node_end(event: NodeEndEvent) {
        let _ = event;
    }

    /// `on_node_error`: A graph node raised.
    fn on_node_error(event: NodeErrorEvent) {
        let _ = event;
    }

    /// `on_llm_start`: The LLM is invoked (the engine-view prompt).
    fn on_llm_start(event: LLMStartEvent) {
        let _ = event;
    }

    /// `on_llm_pre_call`: Right before the provider call (the wire-accurate payload).
    fn on_llm_pre_call(event: LLMPreCallEvent) {
        let _ = event;
    }

    /// `on_llm_end`: The LLM returned.
    fn on_llm_end(event: LLMEndEvent) {
        let _ = event;
    }

    /// `on_token_composition`: Input tokens by prompt section.
    fn on_token_composition(event: TokenCompositionEvent) {
        let _ = event;
    }

    /// `on_user_correction`: The user corrected a previous answer.
    fn on_user_correction(event: UserCorrectionEvent) {
        let _ = event;
    }

    /// `on_procedure_selection`: The force-resolver picked a procedural skill.
    fn on_procedure_selection(event: ProcedureSelectionEvent) {
        let _ = event;
    }

    /// `on_react_loop_end`: The React loop ended with an empty final response.
    fn on_react_loop_end(event: ReactLoopEndEvent) {
        let _ = event;
    }

    /// `on_fabrication_detected`: The fabrication check found suspect content.
    fn on_fabrication_detected(event: FabricationDetectedEvent) {
        let _ = event;
    }
}

/// The `subscriptions` answer for `hooks`.
pub(crate) fn kinds(hooks: &[Hook]) -> wit::EventKinds {
    hooks
        .iter()
        .fold(wit::EventKinds::empty(), |kinds, hook| kinds | hook.kind())
}

/// Calls `T`'s method for `event`.
pub(crate) fn dispatch<T: Observer + ?Sized>(event: wit::LifecycleEvent) {
    match event {
        wit::LifecycleEvent::AgentStart(e) => T::on_agent_start(e.into()),
        wit::LifecycleEvent::AgentEnd(e) => T::on_agent_end(e.into()),
        wit::LifecycleEvent::NodeStart(e) => T::on_node_start(e.into()),
        wit::LifecycleEvent::NodeEnd(e) => T::on_node_end(e.into()),
        wit::LifecycleEvent::NodeError(e) => T::on_node_error(e.into()),
        wit::LifecycleEvent::LlmStart(e) => T::on_llm_start(e.into()),
        wit::LifecycleEvent::LlmPreCall(e) => T::on_llm_pre_call(e.into()),
        wit::LifecycleEvent::LlmEnd(e) => T::on_llm_end(e.into()),
        wit::LifecycleEvent::TokenComposition(e) => T::on_token_composition(e.into()),
        wit::LifecycleEvent::UserCorrection(e) => T::on_user_correction(e.into()),
        wit::LifecycleEvent::ProcedureSelection(e) => T::on_procedure_selection(e.into()),
        wit::LifecycleEvent::ReactLoopEnd(e) => T::on_react_loop_end(e.into()),
        wit::LifecycleEvent::FabricationDetected(e) => T::on_fabrication_detected(e.into()),
    }
}
