//! Lifecycle events: symfonic's thirteen fire-and-forget hooks
//! (`on_agent_start` ... `on_fabrication_detected`), each event typed as
//! its seed class with the seed's snake_case field names. A guard
//! observes them through the `observe` export (`toolgate:guard@0.3.0`,
//! interface `observe`; the WIT records keep the contract's names,
//! `llm-end-event`, ...). Fields the seed types `dict` are JSON objects,
//! `list` JSON arrays, `Any` any JSON value; fields with a default in the
//! seed may be left out.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One lifecycle hook: which event a guard may observe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LifecycleHook {
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

impl LifecycleHook {
    /// Every hook, in the order the seed lists them.
    pub const ALL: [LifecycleHook; 13] = [
        LifecycleHook::AgentStart,
        LifecycleHook::AgentEnd,
        LifecycleHook::NodeStart,
        LifecycleHook::NodeEnd,
        LifecycleHook::NodeError,
        LifecycleHook::LlmStart,
        LifecycleHook::LlmPreCall,
        LifecycleHook::LlmEnd,
        LifecycleHook::TokenComposition,
        LifecycleHook::UserCorrection,
        LifecycleHook::ProcedureSelection,
        LifecycleHook::ReactLoopEnd,
        LifecycleHook::FabricationDetected,
    ];

    /// The hook's name, symfonic's: `on_llm_end`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleHook::AgentStart => "on_agent_start",
            LifecycleHook::AgentEnd => "on_agent_end",
            LifecycleHook::NodeStart => "on_node_start",
            LifecycleHook::NodeEnd => "on_node_end",
            LifecycleHook::NodeError => "on_node_error",
            LifecycleHook::LlmStart => "on_llm_start",
            LifecycleHook::LlmPreCall => "on_llm_pre_call",
            LifecycleHook::LlmEnd => "on_llm_end",
            LifecycleHook::TokenComposition => "on_token_composition",
            LifecycleHook::UserCorrection => "on_user_correction",
            LifecycleHook::ProcedureSelection => "on_procedure_selection",
            LifecycleHook::ReactLoopEnd => "on_react_loop_end",
            LifecycleHook::FabricationDetected => "on_fabrication_detected",
        }
    }

    /// Its bit in a [`Hooks`] set (the WIT `event-kinds` flag's position).
    pub fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

impl fmt::Display for LifecycleHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LifecycleHook {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LifecycleHook::ALL
            .into_iter()
            .find(|hook| hook.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = LifecycleHook::ALL.iter().map(|h| h.as_str()).collect();
                format!(
                    "unknown lifecycle hook `{s}` (expected one of {})",
                    names.join(", ")
                )
            })
    }
}

/// A set of lifecycle hooks: those a guard observes, or those any loaded
/// guard observes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Hooks(u32);

impl Hooks {
    /// No hook.
    pub const NONE: Hooks = Hooks(0);

    /// The set whose bits are `bits` ([`LifecycleHook::bit`]); unknown
    /// bits are dropped.
    pub fn from_bits(bits: u32) -> Hooks {
        Hooks(bits & ((1 << LifecycleHook::ALL.len()) - 1))
    }

    /// Whether `hook` is in the set.
    pub fn contains(self, hook: LifecycleHook) -> bool {
        self.0 & hook.bit() != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The set with `other`'s hooks added.
    pub fn union(self, other: Hooks) -> Hooks {
        Hooks(self.0 | other.0)
    }

    /// The hooks in the set, in [`LifecycleHook::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = LifecycleHook> {
        LifecycleHook::ALL
            .into_iter()
            .filter(move |&h| self.contains(h))
    }

    /// The hooks' names (`on_llm_end`, ...), in order.
    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(LifecycleHook::as_str).collect()
    }
}

impl FromIterator<LifecycleHook> for Hooks {
    fn from_iter<I: IntoIterator<Item = LifecycleHook>>(iter: I) -> Hooks {
        Hooks(iter.into_iter().fold(0, |bits, h| bits | h.bit()))
    }
}

/// `on_agent_start`: symfonic's `AgentStartEvent`. Agent execution begins.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentStartEvent {
    /// `query`: The user's query.
    pub query: String,
    /// `run_id`: The agent run.
    pub run_id: String,
}

/// `on_agent_end`: symfonic's `AgentEndEvent`. Agent execution completed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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

/// `on_node_start`: symfonic's `NodeStartEvent`. A graph node is about to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeStartEvent {
    /// `node_name`: The node.
    pub node_name: String,
    /// `run_id`: The agent run.
    pub run_id: String,
}

/// `on_node_end`: symfonic's `NodeEndEvent`. A graph node completed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEndEvent {
    /// `node_name`: The node.
    pub node_name: String,
    /// `run_id`: The agent run.
    pub run_id: String,
    /// `duration_ms`: How long it ran, milliseconds.
    pub duration_ms: f64,
}

/// `on_node_error`: symfonic's `NodeErrorEvent`. A graph node raised.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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

/// `on_llm_start`: symfonic's `LLMStartEvent`. The LLM is invoked (the engine-view prompt).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LLMStartEvent {
    /// `model`: The model invoked.
    pub model: String,
    /// `messages`: The conversation as the react node received it.
    pub messages: Vec<Value>,
    /// `run_id`: The agent run.
    #[serde(default)]
    pub run_id: String,
    /// `system_prompt`: The system prompt.
    #[serde(default)]
    pub system_prompt: String,
    /// `node_name`: The calling node.
    #[serde(default)]
    pub node_name: String,
    /// `turn_index`: The turn.
    #[serde(default)]
    pub turn_index: u32,
}

/// `on_llm_pre_call`: symfonic's `LLMPreCallEvent`. Right before the provider call (the wire-accurate payload).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LLMPreCallEvent {
    /// `model`: The model invoked.
    pub model: String,
    /// `messages`: The post-consolidation messages.
    pub messages: Vec<Value>,
    /// `tools`: The bound tools: `{"name", "description", "schema"}` records.
    pub tools: Vec<Value>,
    /// `run_id`: The agent run.
    pub run_id: String,
    /// `invocation_params`: Provider invocation kwargs (`{}` when unknown).
    #[serde(default)]
    pub invocation_params: Map<String, Value>,
    /// `node_name`: The calling node.
    #[serde(default)]
    pub node_name: String,
}

/// `on_llm_end`: symfonic's `LLMEndEvent`. The LLM returned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LLMEndEvent {
    /// `model`: The model invoked.
    pub model: String,
    /// `output`: What it returned.
    pub output: String,
    /// `usage`: The provider's usage dict (token counts).
    pub usage: Map<String, Value>,
    /// `run_id`: The agent run.
    #[serde(default)]
    pub run_id: String,
    /// `node_name`: The calling node (`react`, ...).
    #[serde(default)]
    pub node_name: String,
    /// `pricing_unknown`: The model had no entry in the pricing registry.
    #[serde(default)]
    pub pricing_unknown: bool,
    /// `duration_ms`: The call's latency, milliseconds.
    #[serde(default)]
    pub duration_ms: f64,
    /// `started_at_utc`: When it started, ISO-8601 UTC.
    #[serde(default)]
    pub started_at_utc: String,
    /// `iteration_index`: The React loop iteration.
    #[serde(default)]
    pub iteration_index: u32,
    /// `turn_index`: The turn.
    #[serde(default)]
    pub turn_index: u32,
}

/// `on_token_composition`: symfonic's `TokenCompositionEvent`. Input tokens by prompt section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenCompositionEvent {
    /// `system_prompt_tokens`: Tokens of the system prompt.
    #[serde(default)]
    pub system_prompt_tokens: u64,
    /// `tool_definitions_tokens`: Tokens of the tool definitions.
    #[serde(default)]
    pub tool_definitions_tokens: u64,
    /// `conversation_history_tokens`: Tokens of the conversation history.
    #[serde(default)]
    pub conversation_history_tokens: u64,
    /// `memory_context_tokens`: Tokens of the memory context.
    #[serde(default)]
    pub memory_context_tokens: u64,
    /// `run_id`: The agent run.
    #[serde(default)]
    pub run_id: String,
}

/// `on_user_correction`: symfonic's `UserCorrectionEvent`. The user corrected a previous answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserCorrectionEvent {
    /// `turn_id`: The corrected turn.
    pub turn_id: String,
    /// `original_response`: The answer corrected.
    pub original_response: String,
    /// `correction_text`: The user's correction.
    pub correction_text: String,
    /// `activation_log`: That turn's activation log.
    pub activation_log: Map<String, Value>,
    /// `tenant_id`: symfonic's tenant id.
    pub tenant_id: String,
    /// `scope`: The `TenantScope` (`null` when none).
    #[serde(default)]
    pub scope: Value,
}

/// `on_procedure_selection`: symfonic's `ProcedureSelectionEvent`. The force-resolver picked a procedural skill.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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

/// `on_react_loop_end`: symfonic's `ReactLoopEndEvent`. The React loop ended with an empty final response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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

/// `on_fabrication_detected`: symfonic's `FabricationDetectedEvent`. The fabrication check found suspect content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricationDetectedEvent {
    /// `run_id`: The agent run.
    pub run_id: String,
    /// `mode`: `off`, `observe`, `revise` or `refuse`.
    pub mode: String,
    /// `action_taken`: `none`, `observed`, `revise_forced` or `refuse_replaced`.
    pub action_taken: String,
    /// `findings`: The findings (`FabricationFinding.to_event_payload()` dicts).
    pub findings: Vec<Value>,
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

/// One lifecycle event: the hook that fired and its event.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum LifecycleEvent {
    /// `on_agent_start`.
    AgentStart(AgentStartEvent),
    /// `on_agent_end`.
    AgentEnd(AgentEndEvent),
    /// `on_node_start`.
    NodeStart(NodeStartEvent),
    /// `on_node_end`.
    NodeEnd(NodeEndEvent),
    /// `on_node_error`.
    NodeError(NodeErrorEvent),
    /// `on_llm_start`.
    LlmStart(LLMStartEvent),
    /// `on_llm_pre_call`.
    LlmPreCall(LLMPreCallEvent),
    /// `on_llm_end`.
    LlmEnd(LLMEndEvent),
    /// `on_token_composition`.
    TokenComposition(TokenCompositionEvent),
    /// `on_user_correction`.
    UserCorrection(UserCorrectionEvent),
    /// `on_procedure_selection`.
    ProcedureSelection(ProcedureSelectionEvent),
    /// `on_react_loop_end`.
    ReactLoopEnd(ReactLoopEndEvent),
    /// `on_fabrication_detected`.
    FabricationDetected(FabricationDetectedEvent),
}

impl LifecycleEvent {
    /// The hook that fired.
    pub fn hook(&self) -> LifecycleHook {
        match self {
            LifecycleEvent::AgentStart(_) => LifecycleHook::AgentStart,
            LifecycleEvent::AgentEnd(_) => LifecycleHook::AgentEnd,
            LifecycleEvent::NodeStart(_) => LifecycleHook::NodeStart,
            LifecycleEvent::NodeEnd(_) => LifecycleHook::NodeEnd,
            LifecycleEvent::NodeError(_) => LifecycleHook::NodeError,
            LifecycleEvent::LlmStart(_) => LifecycleHook::LlmStart,
            LifecycleEvent::LlmPreCall(_) => LifecycleHook::LlmPreCall,
            LifecycleEvent::LlmEnd(_) => LifecycleHook::LlmEnd,
            LifecycleEvent::TokenComposition(_) => LifecycleHook::TokenComposition,
            LifecycleEvent::UserCorrection(_) => LifecycleHook::UserCorrection,
            LifecycleEvent::ProcedureSelection(_) => LifecycleHook::ProcedureSelection,
            LifecycleEvent::ReactLoopEnd(_) => LifecycleHook::ReactLoopEnd,
            LifecycleEvent::FabricationDetected(_) => LifecycleHook::FabricationDetected,
        }
    }

    /// The run the event belongs to: its `run_id` (`""` for the events
    /// that carry none, `on_user_correction` and `on_procedure_selection`).
    pub fn run_id(&self) -> &str {
        match self {
            LifecycleEvent::AgentStart(e) => &e.run_id,
            LifecycleEvent::AgentEnd(e) => &e.run_id,
            LifecycleEvent::NodeStart(e) => &e.run_id,
            LifecycleEvent::NodeEnd(e) => &e.run_id,
            LifecycleEvent::NodeError(e) => &e.run_id,
            LifecycleEvent::LlmStart(e) => &e.run_id,
            LifecycleEvent::LlmPreCall(e) => &e.run_id,
            LifecycleEvent::LlmEnd(e) => &e.run_id,
            LifecycleEvent::TokenComposition(e) => &e.run_id,
            LifecycleEvent::UserCorrection(_) => "",
            LifecycleEvent::ProcedureSelection(_) => "",
            LifecycleEvent::ReactLoopEnd(e) => &e.run_id,
            LifecycleEvent::FabricationDetected(e) => &e.run_id,
        }
    }

    /// Reads the event of `hook` from `event` (a JSON object, the
    /// seed's field names). The error names the field at fault:
    /// "invalid on_llm_end event: `event.usage`: invalid type: ...".
    pub fn from_value(hook: LifecycleHook, event: Value) -> Result<LifecycleEvent, String> {
        fn typed<T: serde::de::DeserializeOwned>(
            hook: LifecycleHook,
            event: Value,
        ) -> Result<T, String> {
            if !event.is_object() {
                return Err(format!(
                    "field `event` must be a JSON object (an {hook} event)"
                ));
            }
            serde_path_to_error::deserialize(event).map_err(|e| {
                let path = e.path().to_string();
                let at = if path == "." {
                    "event".to_string()
                } else {
                    format!("event.{path}")
                };
                format!("invalid {hook} event: `{at}`: {}", e.inner())
            })
        }
        Ok(match hook {
            LifecycleHook::AgentStart => LifecycleEvent::AgentStart(typed(hook, event)?),
            LifecycleHook::AgentEnd => LifecycleEvent::AgentEnd(typed(hook, event)?),
            LifecycleHook::NodeStart => LifecycleEvent::NodeStart(typed(hook, event)?),
            LifecycleHook::NodeEnd => LifecycleEvent::NodeEnd(typed(hook, event)?),
            LifecycleHook::NodeError => LifecycleEvent::NodeError(typed(hook, event)?),
            LifecycleHook::LlmStart => LifecycleEvent::LlmStart(typed(hook, event)?),
            LifecycleHook::LlmPreCall => LifecycleEvent::LlmPreCall(typed(hook, event)?),
            LifecycleHook::LlmEnd => LifecycleEvent::LlmEnd(typed(hook, event)?),
            LifecycleHook::TokenComposition => {
                LifecycleEvent::TokenComposition(typed(hook, event)?)
            }
            LifecycleHook::UserCorrection => LifecycleEvent::UserCorrection(typed(hook, event)?),
            LifecycleHook::ProcedureSelection => {
                LifecycleEvent::ProcedureSelection(typed(hook, event)?)
            }
            LifecycleHook::ReactLoopEnd => LifecycleEvent::ReactLoopEnd(typed(hook, event)?),
            LifecycleHook::FabricationDetected => {
                LifecycleEvent::FabricationDetected(typed(hook, event)?)
            }
        })
    }
}
