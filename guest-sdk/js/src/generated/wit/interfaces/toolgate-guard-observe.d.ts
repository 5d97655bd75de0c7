// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
/// <reference path="./toolgate-guard-types.d.ts" />
declare module 'toolgate:guard/observe@0.3.0' {
  /**
   * The events this guard observes. Called once, when the plugin loads
   * (an instance of its own, no state); the answer holds until the
   * plugin is reloaded. A guard that observes nothing returns no flag.
   */
  export function subscriptions(): EventKinds;
  /**
   * Observes one event the guard subscribed to; nothing to return. Its
   * state scopes are those of any call: the caller's tenant and, for
   * `run`, the event's `run-id` (`user-correction` and
   * `procedure-selection` carry none: their run scope is the empty run).
   */
  export function observe(event: LifecycleEvent): void;
  export type Json = import('toolgate:guard/types@0.3.0').Json;
  /**
   * `on_agent_start`: `AgentStartEvent`, agent execution begins.
   */
  export interface AgentStartEvent {
    /**
     * `query: str`: the user's query.
     */
    query: string,
    /**
     * `run_id: str`: the agent run.
     */
    runId: string,
  }
  /**
   * `on_agent_end`: `AgentEndEvent`, agent execution completed.
   */
  export interface AgentEndEvent {
    /**
     * `run_id: str`: the agent run.
     */
    runId: string,
    /**
     * `final_response: str | None`: the answer (none when streaming).
     */
    finalResponse?: string,
    /**
     * `duration_ms: float`: how long the run took.
     */
    durationMs: number,
    /**
     * `node_count: int | None`: nodes run (none when streaming).
     */
    nodeCount?: number,
  }
  /**
   * `on_node_start`: `NodeStartEvent`, a graph node is about to run.
   */
  export interface NodeStartEvent {
    /**
     * `node_name: str`: the node.
     */
    nodeName: string,
    /**
     * `run_id: str`: the agent run.
     */
    runId: string,
  }
  /**
   * `on_node_end`: `NodeEndEvent`, a graph node completed.
   */
  export interface NodeEndEvent {
    /**
     * `node_name: str`: the node.
     */
    nodeName: string,
    /**
     * `run_id: str`: the agent run.
     */
    runId: string,
    /**
     * `duration_ms: float`: how long it ran.
     */
    durationMs: number,
  }
  /**
   * `on_node_error`: `NodeErrorEvent`, a graph node raised.
   */
  export interface NodeErrorEvent {
    /**
     * `node_name: str`: the node.
     */
    nodeName: string,
    /**
     * `run_id: str`: the agent run.
     */
    runId: string,
    /**
     * `error: str`: the exception's message.
     */
    error: string,
    /**
     * `error_type: str`: the exception's class name.
     */
    errorType: string,
  }
  /**
   * `on_llm_start`: `LLMStartEvent`, the engine-view prompt.
   */
  export interface LlmStartEvent {
    /**
     * `model: str`: the model invoked.
     */
    model: string,
    /**
     * `messages: list`: the conversation, as JSON.
     */
    messages: Json,
    /**
     * `run_id: str = ""`: the agent run.
     */
    runId: string,
    /**
     * `system_prompt: str = ""`: the system prompt.
     */
    systemPrompt: string,
    /**
     * `node_name: str = ""`: the calling node.
     */
    nodeName: string,
    /**
     * `turn_index: int = 0`: the turn.
     */
    turnIndex: number,
  }
  /**
   * `on_llm_pre_call`: `LLMPreCallEvent`, the wire-accurate payload.
   */
  export interface LlmPreCallEvent {
    /**
     * `model: str`: the model invoked.
     */
    model: string,
    /**
     * `messages: list`: the post-consolidation messages, as JSON.
     */
    messages: Json,
    /**
     * `tools: list`: `{"name", "description", "schema"}` records, as JSON.
     */
    tools: Json,
    /**
     * `run_id: str`: the agent run.
     */
    runId: string,
    /**
     * `invocation_params: dict = {}`: provider kwargs, as JSON.
     */
    invocationParams: Json,
    /**
     * `node_name: str = ""`: the calling node.
     */
    nodeName: string,
  }
  /**
   * `on_llm_end`: `LLMEndEvent`, the LLM returned.
   */
  export interface LlmEndEvent {
    /**
     * `model: str`: the model invoked.
     */
    model: string,
    /**
     * `output: str`: what it returned.
     */
    output: string,
    /**
     * `usage: dict`: the provider's usage dict (token counts), as JSON.
     */
    usage: Json,
    /**
     * `run_id: str = ""`: the agent run.
     */
    runId: string,
    /**
     * `node_name: str = ""`: the calling node ("react", ...).
     */
    nodeName: string,
    /**
     * `pricing_unknown: bool = False`: the model had no price.
     */
    pricingUnknown: boolean,
    /**
     * `duration_ms: float = 0.0`: the call's latency.
     */
    durationMs: number,
    /**
     * `started_at_utc: str = ""`: when it started, ISO-8601.
     */
    startedAtUtc: string,
    /**
     * `iteration_index: int = 0`: the React loop iteration.
     */
    iterationIndex: number,
    /**
     * `turn_index: int = 0`: the turn.
     */
    turnIndex: number,
  }
  /**
   * `on_token_composition`: `TokenCompositionEvent`, input tokens by
   * prompt section.
   */
  export interface TokenCompositionEvent {
    /**
     * `system_prompt_tokens: int = 0`.
     */
    systemPromptTokens: bigint,
    /**
     * `tool_definitions_tokens: int = 0`.
     */
    toolDefinitionsTokens: bigint,
    /**
     * `conversation_history_tokens: int = 0`.
     */
    conversationHistoryTokens: bigint,
    /**
     * `memory_context_tokens: int = 0`.
     */
    memoryContextTokens: bigint,
    /**
     * `run_id: str = ""`: the agent run.
     */
    runId: string,
  }
  /**
   * `on_user_correction`: `UserCorrectionEvent`, the user corrected a
   * previous answer.
   */
  export interface UserCorrectionEvent {
    /**
     * `turn_id: str`: the corrected turn.
     */
    turnId: string,
    /**
     * `original_response: str`: the answer corrected.
     */
    originalResponse: string,
    /**
     * `correction_text: str`: the user's correction.
     */
    correctionText: string,
    /**
     * `activation_log: dict`: that turn's activation log, as JSON.
     */
    activationLog: Json,
    /**
     * `tenant_id: str`: symfonic's tenant.
     */
    tenantId: string,
    /**
     * `scope: Any = None`: the `TenantScope`, as JSON (`null`: none).
     */
    scope: Json,
  }
  /**
   * `on_procedure_selection`: `ProcedureSelectionEvent`, the
   * force-resolver picked a procedural skill.
   */
  export interface ProcedureSelectionEvent {
    /**
     * `procedure_id: str | None`: the winning skill's id.
     */
    procedureId?: string,
    /**
     * `action_tool: str | None`: the action tool it resolves to.
     */
    actionTool?: string,
    /**
     * `pre_tool: str`: the tool `tool_choice` is forced to.
     */
    preTool: string,
    /**
     * `force_mode: Literal["off", "soft", "hard"]`.
     */
    forceMode: string,
    /**
     * `candidate_count: int`: candidates considered (at least 1).
     */
    candidateCount: number,
  }
  /**
   * `on_react_loop_end`: `ReactLoopEndEvent`, the loop ended with an
   * empty final response.
   */
  export interface ReactLoopEndEvent {
    /**
     * `run_id: str`: the agent run.
     */
    runId: string,
    /**
     * `iteration_index: int`: the terminating iteration.
     */
    iterationIndex: number,
    /**
     * `content_type: str`: Python type name of the message's content.
     */
    contentType: string,
    /**
     * `has_tool_calls: bool`: the last message carried tool calls.
     */
    hasToolCalls: boolean,
    /**
     * `tool_call_count: int`: how many.
     */
    toolCallCount: number,
    /**
     * `termination_reason: Literal["tool_calls_with_no_text",
     * "no_content_no_tool_calls", "recursion_exhausted"]`.
     */
    terminationReason: string,
  }
  /**
   * `on_fabrication_detected`: `FabricationDetectedEvent`, the
   * fabrication check found suspect content.
   */
  export interface FabricationDetectedEvent {
    /**
     * `run_id: str`: the agent run.
     */
    runId: string,
    /**
     * `mode: Literal["off", "observe", "revise", "refuse"]`.
     */
    mode: string,
    /**
     * `action_taken: Literal["none", "observed", "revise_forced",
     * "refuse_replaced"]`.
     */
    actionTaken: string,
    /**
     * `findings: list[dict[str, Any]]`: the findings, as JSON.
     */
    findings: Json,
    /**
     * `refuse_threshold: float`: the threshold in effect.
     */
    refuseThreshold: number,
    /**
     * `max_finding_confidence: float`: the strongest finding.
     */
    maxFindingConfidence: number,
    /**
     * `original_draft_preview: str`: the draft's first 240 characters.
     */
    originalDraftPreview: string,
    /**
     * `replacement_preview: str | None`: the replacement's (refuse mode).
     */
    replacementPreview?: string,
    /**
     * `preview_truncated: bool`: the draft was longer than 240.
     */
    previewTruncated: boolean,
  }
  /**
   * One lifecycle event: the hook that fired and its event.
   */
  export type LifecycleEvent = LifecycleEventAgentStart | LifecycleEventAgentEnd | LifecycleEventNodeStart | LifecycleEventNodeEnd | LifecycleEventNodeError | LifecycleEventLlmStart | LifecycleEventLlmPreCall | LifecycleEventLlmEnd | LifecycleEventTokenComposition | LifecycleEventUserCorrection | LifecycleEventProcedureSelection | LifecycleEventReactLoopEnd | LifecycleEventFabricationDetected;
  /**
   * `on_agent_start`.
   */
  export interface LifecycleEventAgentStart {
    tag: 'agent-start',
    val: AgentStartEvent,
  }
  /**
   * `on_agent_end`.
   */
  export interface LifecycleEventAgentEnd {
    tag: 'agent-end',
    val: AgentEndEvent,
  }
  /**
   * `on_node_start`.
   */
  export interface LifecycleEventNodeStart {
    tag: 'node-start',
    val: NodeStartEvent,
  }
  /**
   * `on_node_end`.
   */
  export interface LifecycleEventNodeEnd {
    tag: 'node-end',
    val: NodeEndEvent,
  }
  /**
   * `on_node_error`.
   */
  export interface LifecycleEventNodeError {
    tag: 'node-error',
    val: NodeErrorEvent,
  }
  /**
   * `on_llm_start`.
   */
  export interface LifecycleEventLlmStart {
    tag: 'llm-start',
    val: LlmStartEvent,
  }
  /**
   * `on_llm_pre_call`.
   */
  export interface LifecycleEventLlmPreCall {
    tag: 'llm-pre-call',
    val: LlmPreCallEvent,
  }
  /**
   * `on_llm_end`.
   */
  export interface LifecycleEventLlmEnd {
    tag: 'llm-end',
    val: LlmEndEvent,
  }
  /**
   * `on_token_composition`.
   */
  export interface LifecycleEventTokenComposition {
    tag: 'token-composition',
    val: TokenCompositionEvent,
  }
  /**
   * `on_user_correction`.
   */
  export interface LifecycleEventUserCorrection {
    tag: 'user-correction',
    val: UserCorrectionEvent,
  }
  /**
   * `on_procedure_selection`.
   */
  export interface LifecycleEventProcedureSelection {
    tag: 'procedure-selection',
    val: ProcedureSelectionEvent,
  }
  /**
   * `on_react_loop_end`.
   */
  export interface LifecycleEventReactLoopEnd {
    tag: 'react-loop-end',
    val: ReactLoopEndEvent,
  }
  /**
   * `on_fabrication_detected`.
   */
  export interface LifecycleEventFabricationDetected {
    tag: 'fabrication-detected',
    val: FabricationDetectedEvent,
  }
  /**
   * Which lifecycle events a guard observes: one flag per hook.
   */
  export interface EventKinds {
    /**
     * `on_agent_start`.
     */
    agentStart?: boolean,
    /**
     * `on_agent_end`.
     */
    agentEnd?: boolean,
    /**
     * `on_node_start`.
     */
    nodeStart?: boolean,
    /**
     * `on_node_end`.
     */
    nodeEnd?: boolean,
    /**
     * `on_node_error`.
     */
    nodeError?: boolean,
    /**
     * `on_llm_start`.
     */
    llmStart?: boolean,
    /**
     * `on_llm_pre_call`.
     */
    llmPreCall?: boolean,
    /**
     * `on_llm_end`.
     */
    llmEnd?: boolean,
    /**
     * `on_token_composition`.
     */
    tokenComposition?: boolean,
    /**
     * `on_user_correction`.
     */
    userCorrection?: boolean,
    /**
     * `on_procedure_selection`.
     */
    procedureSelection?: boolean,
    /**
     * `on_react_loop_end`.
     */
    reactLoopEnd?: boolean,
    /**
     * `on_fabrication_detected`.
     */
    fabricationDetected?: boolean,
  }
}
