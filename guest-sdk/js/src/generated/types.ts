// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.

/// <reference path="./wit/guard.d.ts" />

import type * as wire from 'toolgate:guard/types@0.3.0';

/** Any JSON value; an integer beyond 2^53 is a `bigint` (exact). */
export type JsonValue = null | boolean | number | bigint | string | JsonValue[] | JsonObject;
/** A JSON object. */
export type JsonObject = { [key: string]: JsonValue };

/**
 * `on_tool_routing_decision`: which tools are visible this turn
 * (symfonic's `ToolRoutingDecisionEvent`).
 * 
 * Carries every field of symfonic's `ToolRoutingDecisionEvent`, plus the
 * visible tools with their descriptions, the user's query when known and
 * the caller's state.
 *
 * WIT: record `routing-event`.
 */
export interface ToolRoutingDecisionEvent {
  /**
   * The agent run this turn belongs to.
   */
  runId: string;
  /**
   * The routing mode in effect: "observe" or "enforce" (or "off" when
   * the caller consults guards although the framework did not route).
   */
  mode: string;
  /**
   * The intent label the framework's router assigned to the query.
   */
  intentLabel: string;
  /**
   * How many tools the full manifest holds.
   */
  totalTools: number;
  /**
   * The tool names visible so far: the framework's narrowing, further
   * narrowed by every guard earlier in the chain.
   */
  narrowedToolNames: Array<string>;
  /**
   * The framework's rough estimate of prompt tokens saved by narrowing.
   */
  savedTokensEstimate: number;
  /**
   * The visible tools (the same set as `narrowed-tool-names`) with
   * their descriptions.
   */
  tools: Array<ToolInfo>;
  /**
   * The user's query, when the caller knows it.
   */
  query?: string;
  /**
   * The caller's state as a JSON object (`{}` when there is none).
   *
   * (JSON text on the wire; the SDK parses and serialises it.)
   */
  state: JsonObject;
}

/** @deprecated The former name of `ToolRoutingDecisionEvent`, symfonic's name for it. */
export type RoutingEvent = ToolRoutingDecisionEvent;

/**
 * `on_tool_call_dispatch`: a tool call about to be dispatched, which a
 * guard may rewrite (the rewrite seam). Carries every field of
 * `ToolCallDispatchEvent`.
 *
 * WIT: record `dispatch-event`.
 */
export interface ToolCallDispatchEvent {
  /**
   * The agent run this turn belongs to.
   */
  runId: string;
  /**
   * 0-indexed React loop iteration that produced this call.
   */
  iterationIndex: number;
  /**
   * The node that emitted the call (always "react" in symfonic 9).
   */
  nodeName: string;
  /**
   * The LangChain `tool_call` id; the host owns it, a rewrite cannot
   * change it.
   */
  callId: string;
  /**
   * The tool the call names (after any earlier guard's rewrite).
   */
  toolName: string;
  /**
   * The call's arguments, a JSON object (after any earlier rewrite).
   *
   * (JSON text on the wire; the SDK parses and serialises it.)
   */
  args: JsonObject;
  /**
   * The post-routing palette: the only names a rewrite may target.
   */
  availableTools: Array<string>;
  /**
   * The caller's state as a JSON object (the hook's `state`).
   *
   * (JSON text on the wire; the SDK parses and serialises it.)
   */
  state: JsonObject;
}

/** @deprecated The former name of `ToolCallDispatchEvent`, symfonic's name for it. */
export type DispatchEvent = ToolCallDispatchEvent;

/**
 * `on_before_tool_call`: a tool call about to run. Carries every field
 * of `BeforeToolCallEvent`.
 *
 * WIT: record `before-tool-call-event`.
 */
export interface BeforeToolCallEvent {
  /**
   * The agent run this turn belongs to.
   */
  runId: string;
  /**
   * The (post-rewrite) tool about to run.
   */
  toolName: string;
  /**
   * The LangChain `tool_call` id this decision applies to.
   */
  callId: string;
  /**
   * The (post-rewrite) arguments, a JSON object.
   *
   * (JSON text on the wire; the SDK parses and serialises it.)
   */
  args: JsonObject;
  /**
   * The caller's state as a JSON object (the hook's `state`).
   *
   * (JSON text on the wire; the SDK parses and serialises it.)
   */
  state: JsonObject;
}

/**
 * `on_tool_result`: what a tool returned. Carries every field of
 * `ToolResultCallbackEvent`.
 *
 * WIT: record `tool-result-event`.
 */
export interface ToolResultCallbackEvent {
  /**
   * The agent run this turn belongs to.
   */
  runId: string;
  /**
   * The tool that produced the result.
   */
  toolName: string;
  /**
   * The `ToolMessage.content` as JSON (`null` on framework cancellation).
   *
   * (JSON text on the wire; the SDK parses and serialises it.)
   */
  result: JsonValue;
  /**
   * The `tool_call` id correlating this result to its dispatch.
   */
  callId: string;
  /**
   * True when the result will be supplied later by a resume cycle.
   */
  deferred: boolean;
  /**
   * True when the `ToolMessage` carried `status="error"`.
   */
  isError: boolean;
  /**
   * The caller's state as a JSON object (`{}` when there is none).
   *
   * (JSON text on the wire; the SDK parses and serialises it.)
   */
  state: JsonObject;
}

/** @deprecated The former name of `ToolResultCallbackEvent`, symfonic's name for it. */
export type ToolResultEvent = ToolResultCallbackEvent;

/**
 * `on_response_render`: the final answer of a run, about to be returned
 * (the response seam, since `0.3.0`). Carries every field of
 * `ResponseRenderEvent`, plus the content as it stands and the caller's
 * state.
 *
 * WIT: record `response-event`.
 */
export interface ResponseRenderEvent {
  /**
   * The agent run this turn belongs to.
   */
  runId: string;
  /**
   * 0-indexed React loop iteration that produced the final answer;
   * -1 when the engine, not the React loop, emitted the event (what
   * symfonic sends from `run()`: the engine does not know the loop's
   * counter).
   */
  iterationIndex: number;
  /**
   * The model that produced the final answer.
   */
  model: string;
  /**
   * The node that produced the final answer.
   */
  nodeName: string;
  /**
   * The final answer before any handler rewrote it.
   */
  originalContent: string;
  /**
   * The answer as it stands: the previous guard's output in the chain
   * (the hook's `content`; `original-content` for the first guard).
   */
  content: string;
  /**
   * The caller's state as a JSON object (the hook's `state`).
   *
   * (JSON text on the wire; the SDK parses and serialises it.)
   */
  state: JsonObject;
}

/**
 * A rewritten call. It cannot carry a `call-id`: the host owns it.
 *
 * WIT: record `rewrite`.
 */
export interface Rewrite {
  /**
   * The tool to call instead. Any name is passed on to the next guard;
   * only the chain's resulting call must be in `available-tools`.
   */
  toolName: string;
  /**
   * The replacement arguments; must be a JSON object.
   *
   * (JSON text on the wire; the SDK parses and serialises it.)
   */
  args: JsonObject;
}

export type { Skip, ToolInfo, Verdict, VerdictProceed, VerdictSkip } from 'toolgate:guard/types@0.3.0';
import type { Skip, ToolInfo, Verdict, VerdictProceed, VerdictSkip } from 'toolgate:guard/types@0.3.0';
export type { Level } from 'toolgate:guard/host@0.3.0';

/**
 * The hooks a guard may implement: one per seam it subscribes to, named as symfonic
 * names its callback hooks. Each also has a deprecated former name (the WIT function's).
 */
export interface Hooks {
  /**
   * Seam `routing` (`toolgate:guard/routing@0.3.0`, function `narrow`).
   *
   * Returns the tool names to keep visible, or none to leave the palette
   * as it is. Names that are not visible already are ignored: a guard can
   * hide tools, never add one.
   */
  onToolRoutingDecision?(event: ToolRoutingDecisionEvent): Array<string> | null | undefined | void;
  /** @deprecated The former name of `onToolRoutingDecision`. */
  narrow?(event: ToolRoutingDecisionEvent): Array<string> | null | undefined | void;
  /**
   * Seam `rewrite` (`toolgate:guard/rewrite@0.3.0`, function `dispatch`).
   *
   * Returns a replacement call, or none to pass the call through. A
   * rewrite whose args are not a JSON object is dropped with a warning
   * (the next guard sees the call as it was). The next guard sees this
   * rewrite whatever tool it names; the chain's resulting call is checked
   * once, at the end: if it names a tool outside `available-tools`, every
   * rewrite is dropped with a warning and the original call runs.
   */
  onToolCallDispatch?(event: ToolCallDispatchEvent): Rewrite | null | undefined | void;
  /** @deprecated The former name of `onToolCallDispatch`. */
  dispatch?(event: ToolCallDispatchEvent): Rewrite | null | undefined | void;
  /**
   * Seam `steering` (`toolgate:guard/steering@0.3.0`, function `before-tool-call`).
   *
   * Decides whether this one call runs.
   */
  onBeforeToolCall?(event: BeforeToolCallEvent): Verdict | null | undefined | void;
  /** @deprecated The former name of `onBeforeToolCall`. */
  beforeToolCall?(event: BeforeToolCallEvent): Verdict | null | undefined | void;
  /**
   * Seam `result` (`toolgate:guard/result@0.3.0`, function `on-result`).
   *
   * Observes what a tool returned; nothing to return.
   */
  onToolResult?(event: ToolResultCallbackEvent): void;
  /** @deprecated The former name of `onToolResult`. */
  onResult?(event: ToolResultCallbackEvent): void;
  /**
   * Seam `response` (`toolgate:guard/response@0.3.0`, function `render`).
   *
   * Returns the answer to show instead (the next guard sees it as
   * `content`), or none to keep `content` as it is.
   */
  onResponseRender?(event: ResponseRenderEvent): string | null | undefined | void;
  /**
   * Lifecycle hook `on_agent_start` (`toolgate:guard/observe@0.3.0`, case `agent-start`): AgentStartEvent.
   * Observes the event; nothing to return. A guard implementing any lifecycle hook
   * exports `observe`, subscribed to exactly the hooks it implements.
   */
  onAgentStart?(event: AgentStartEvent): void;
  /**
   * Lifecycle hook `on_agent_end` (`toolgate:guard/observe@0.3.0`, case `agent-end`): AgentEndEvent.
   * Observes the event; nothing to return. A guard implementing any lifecycle hook
   * exports `observe`, subscribed to exactly the hooks it implements.
   */
  onAgentEnd?(event: AgentEndEvent): void;
  /**
   * Lifecycle hook `on_node_start` (`toolgate:guard/observe@0.3.0`, case `node-start`): NodeStartEvent.
   * Observes the event; nothing to return. A guard implementing any lifecycle hook
   * exports `observe`, subscribed to exactly the hooks it implements.
   */
  onNodeStart?(event: NodeStartEvent): void;
  /**
   * Lifecycle hook `on_node_end` (`toolgate:guard/observe@0.3.0`, case `node-end`): NodeEndEvent.
   * Observes the event; nothing to return. A guard implementing any lifecycle hook
   * exports `observe`, subscribed to exactly the hooks it implements.
   */
  onNodeEnd?(event: NodeEndEvent): void;
  /**
   * Lifecycle hook `on_node_error` (`toolgate:guard/observe@0.3.0`, case `node-error`): NodeErrorEvent.
   * Observes the event; nothing to return. A guard implementing any lifecycle hook
   * exports `observe`, subscribed to exactly the hooks it implements.
   */
  onNodeError?(event: NodeErrorEvent): void;
  /**
   * Lifecycle hook `on_llm_start` (`toolgate:guard/observe@0.3.0`, case `llm-start`): LLMStartEvent.
   * Observes the event; nothing to return. A guard implementing any lifecycle hook
   * exports `observe`, subscribed to exactly the hooks it implements.
   */
  onLlmStart?(event: LLMStartEvent): void;
  /**
   * Lifecycle hook `on_llm_pre_call` (`toolgate:guard/observe@0.3.0`, case `llm-pre-call`): LLMPreCallEvent.
   * Observes the event; nothing to return. A guard implementing any lifecycle hook
   * exports `observe`, subscribed to exactly the hooks it implements.
   */
  onLlmPreCall?(event: LLMPreCallEvent): void;
  /**
   * Lifecycle hook `on_llm_end` (`toolgate:guard/observe@0.3.0`, case `llm-end`): LLMEndEvent.
   * Observes the event; nothing to return. A guard implementing any lifecycle hook
   * exports `observe`, subscribed to exactly the hooks it implements.
   */
  onLlmEnd?(event: LLMEndEvent): void;
  /**
   * Lifecycle hook `on_token_composition` (`toolgate:guard/observe@0.3.0`, case `token-composition`): TokenCompositionEvent.
   * Observes the event; nothing to return. A guard implementing any lifecycle hook
   * exports `observe`, subscribed to exactly the hooks it implements.
   */
  onTokenComposition?(event: TokenCompositionEvent): void;
  /**
   * Lifecycle hook `on_user_correction` (`toolgate:guard/observe@0.3.0`, case `user-correction`): UserCorrectionEvent.
   * Observes the event; nothing to return. A guard implementing any lifecycle hook
   * exports `observe`, subscribed to exactly the hooks it implements.
   */
  onUserCorrection?(event: UserCorrectionEvent): void;
  /**
   * Lifecycle hook `on_procedure_selection` (`toolgate:guard/observe@0.3.0`, case `procedure-selection`): ProcedureSelectionEvent.
   * Observes the event; nothing to return. A guard implementing any lifecycle hook
   * exports `observe`, subscribed to exactly the hooks it implements.
   */
  onProcedureSelection?(event: ProcedureSelectionEvent): void;
  /**
   * Lifecycle hook `on_react_loop_end` (`toolgate:guard/observe@0.3.0`, case `react-loop-end`): ReactLoopEndEvent.
   * Observes the event; nothing to return. A guard implementing any lifecycle hook
   * exports `observe`, subscribed to exactly the hooks it implements.
   */
  onReactLoopEnd?(event: ReactLoopEndEvent): void;
  /**
   * Lifecycle hook `on_fabrication_detected` (`toolgate:guard/observe@0.3.0`, case `fabrication-detected`): FabricationDetectedEvent.
   * Observes the event; nothing to return. A guard implementing any lifecycle hook
   * exports `observe`, subscribed to exactly the hooks it implements.
   */
  onFabricationDetected?(event: FabricationDetectedEvent): void;
}

/**
 * `on_agent_start`: `AgentStartEvent`, agent execution begins.
 *
 * WIT: record `agent-start-event` (interface `observe`).
 */
export interface AgentStartEvent {
  /**
   * `query: str`: the user's query.
   */
  query: string;
  /**
   * `run_id: str`: the agent run.
   */
  runId: string;
}

/**
 * `on_agent_end`: `AgentEndEvent`, agent execution completed.
 *
 * WIT: record `agent-end-event` (interface `observe`).
 */
export interface AgentEndEvent {
  /**
   * `run_id: str`: the agent run.
   */
  runId: string;
  /**
   * `final_response: str | None`: the answer (none when streaming).
   */
  finalResponse?: string;
  /**
   * `duration_ms: float`: how long the run took.
   */
  durationMs: number;
  /**
   * `node_count: int | None`: nodes run (none when streaming).
   */
  nodeCount?: number;
}

/**
 * `on_node_start`: `NodeStartEvent`, a graph node is about to run.
 *
 * WIT: record `node-start-event` (interface `observe`).
 */
export interface NodeStartEvent {
  /**
   * `node_name: str`: the node.
   */
  nodeName: string;
  /**
   * `run_id: str`: the agent run.
   */
  runId: string;
}

/**
 * `on_node_end`: `NodeEndEvent`, a graph node completed.
 *
 * WIT: record `node-end-event` (interface `observe`).
 */
export interface NodeEndEvent {
  /**
   * `node_name: str`: the node.
   */
  nodeName: string;
  /**
   * `run_id: str`: the agent run.
   */
  runId: string;
  /**
   * `duration_ms: float`: how long it ran.
   */
  durationMs: number;
}

/**
 * `on_node_error`: `NodeErrorEvent`, a graph node raised.
 *
 * WIT: record `node-error-event` (interface `observe`).
 */
export interface NodeErrorEvent {
  /**
   * `node_name: str`: the node.
   */
  nodeName: string;
  /**
   * `run_id: str`: the agent run.
   */
  runId: string;
  /**
   * `error: str`: the exception's message.
   */
  error: string;
  /**
   * `error_type: str`: the exception's class name.
   */
  errorType: string;
}

/**
 * `on_llm_start`: `LLMStartEvent`, the engine-view prompt.
 *
 * WIT: record `llm-start-event` (interface `observe`).
 */
export interface LLMStartEvent {
  /**
   * `model: str`: the model invoked.
   */
  model: string;
  /**
   * `messages: list`: the conversation, as JSON.
   *
   * (JSON text on the wire; the SDK parses it.)
   */
  messages: JsonValue[];
  /**
   * `run_id: str = ""`: the agent run.
   */
  runId: string;
  /**
   * `system_prompt: str = ""`: the system prompt.
   */
  systemPrompt: string;
  /**
   * `node_name: str = ""`: the calling node.
   */
  nodeName: string;
  /**
   * `turn_index: int = 0`: the turn.
   */
  turnIndex: number;
}

/**
 * `on_llm_pre_call`: `LLMPreCallEvent`, the wire-accurate payload.
 *
 * WIT: record `llm-pre-call-event` (interface `observe`).
 */
export interface LLMPreCallEvent {
  /**
   * `model: str`: the model invoked.
   */
  model: string;
  /**
   * `messages: list`: the post-consolidation messages, as JSON.
   *
   * (JSON text on the wire; the SDK parses it.)
   */
  messages: JsonValue[];
  /**
   * `tools: list`: `{"name", "description", "schema"}` records, as JSON.
   *
   * (JSON text on the wire; the SDK parses it.)
   */
  tools: JsonValue[];
  /**
   * `run_id: str`: the agent run.
   */
  runId: string;
  /**
   * `invocation_params: dict = {}`: provider kwargs, as JSON.
   *
   * (JSON text on the wire; the SDK parses it.)
   */
  invocationParams: JsonObject;
  /**
   * `node_name: str = ""`: the calling node.
   */
  nodeName: string;
}

/**
 * `on_llm_end`: `LLMEndEvent`, the LLM returned.
 *
 * WIT: record `llm-end-event` (interface `observe`).
 */
export interface LLMEndEvent {
  /**
   * `model: str`: the model invoked.
   */
  model: string;
  /**
   * `output: str`: what it returned.
   */
  output: string;
  /**
   * `usage: dict`: the provider's usage dict (token counts), as JSON.
   *
   * (JSON text on the wire; the SDK parses it.)
   */
  usage: JsonObject;
  /**
   * `run_id: str = ""`: the agent run.
   */
  runId: string;
  /**
   * `node_name: str = ""`: the calling node ("react", ...).
   */
  nodeName: string;
  /**
   * `pricing_unknown: bool = False`: the model had no price.
   */
  pricingUnknown: boolean;
  /**
   * `duration_ms: float = 0.0`: the call's latency.
   */
  durationMs: number;
  /**
   * `started_at_utc: str = ""`: when it started, ISO-8601.
   */
  startedAtUtc: string;
  /**
   * `iteration_index: int = 0`: the React loop iteration.
   */
  iterationIndex: number;
  /**
   * `turn_index: int = 0`: the turn.
   */
  turnIndex: number;
}

/**
 * `on_token_composition`: `TokenCompositionEvent`, input tokens by
 * prompt section.
 *
 * WIT: record `token-composition-event` (interface `observe`).
 */
export interface TokenCompositionEvent {
  /**
   * `system_prompt_tokens: int = 0`.
   */
  systemPromptTokens: bigint;
  /**
   * `tool_definitions_tokens: int = 0`.
   */
  toolDefinitionsTokens: bigint;
  /**
   * `conversation_history_tokens: int = 0`.
   */
  conversationHistoryTokens: bigint;
  /**
   * `memory_context_tokens: int = 0`.
   */
  memoryContextTokens: bigint;
  /**
   * `run_id: str = ""`: the agent run.
   */
  runId: string;
}

/**
 * `on_user_correction`: `UserCorrectionEvent`, the user corrected a
 * previous answer.
 *
 * WIT: record `user-correction-event` (interface `observe`).
 */
export interface UserCorrectionEvent {
  /**
   * `turn_id: str`: the corrected turn.
   */
  turnId: string;
  /**
   * `original_response: str`: the answer corrected.
   */
  originalResponse: string;
  /**
   * `correction_text: str`: the user's correction.
   */
  correctionText: string;
  /**
   * `activation_log: dict`: that turn's activation log, as JSON.
   *
   * (JSON text on the wire; the SDK parses it.)
   */
  activationLog: JsonObject;
  /**
   * `tenant_id: str`: symfonic's tenant.
   */
  tenantId: string;
  /**
   * `scope: Any = None`: the `TenantScope`, as JSON (`null`: none).
   *
   * (JSON text on the wire; the SDK parses it.)
   */
  scope: JsonValue;
}

/**
 * `on_procedure_selection`: `ProcedureSelectionEvent`, the
 * force-resolver picked a procedural skill.
 *
 * WIT: record `procedure-selection-event` (interface `observe`).
 */
export interface ProcedureSelectionEvent {
  /**
   * `procedure_id: str | None`: the winning skill's id.
   */
  procedureId?: string;
  /**
   * `action_tool: str | None`: the action tool it resolves to.
   */
  actionTool?: string;
  /**
   * `pre_tool: str`: the tool `tool_choice` is forced to.
   */
  preTool: string;
  /**
   * `force_mode: Literal["off", "soft", "hard"]`.
   */
  forceMode: string;
  /**
   * `candidate_count: int`: candidates considered (at least 1).
   */
  candidateCount: number;
}

/**
 * `on_react_loop_end`: `ReactLoopEndEvent`, the loop ended with an
 * empty final response.
 *
 * WIT: record `react-loop-end-event` (interface `observe`).
 */
export interface ReactLoopEndEvent {
  /**
   * `run_id: str`: the agent run.
   */
  runId: string;
  /**
   * `iteration_index: int`: the terminating iteration.
   */
  iterationIndex: number;
  /**
   * `content_type: str`: Python type name of the message's content.
   */
  contentType: string;
  /**
   * `has_tool_calls: bool`: the last message carried tool calls.
   */
  hasToolCalls: boolean;
  /**
   * `tool_call_count: int`: how many.
   */
  toolCallCount: number;
  /**
   * `termination_reason: Literal["tool_calls_with_no_text",
   * "no_content_no_tool_calls", "recursion_exhausted"]`.
   */
  terminationReason: string;
}

/**
 * `on_fabrication_detected`: `FabricationDetectedEvent`, the
 * fabrication check found suspect content.
 *
 * WIT: record `fabrication-detected-event` (interface `observe`).
 */
export interface FabricationDetectedEvent {
  /**
   * `run_id: str`: the agent run.
   */
  runId: string;
  /**
   * `mode: Literal["off", "observe", "revise", "refuse"]`.
   */
  mode: string;
  /**
   * `action_taken: Literal["none", "observed", "revise_forced",
   * "refuse_replaced"]`.
   */
  actionTaken: string;
  /**
   * `findings: list[dict[str, Any]]`: the findings, as JSON.
   *
   * (JSON text on the wire; the SDK parses it.)
   */
  findings: JsonValue[];
  /**
   * `refuse_threshold: float`: the threshold in effect.
   */
  refuseThreshold: number;
  /**
   * `max_finding_confidence: float`: the strongest finding.
   */
  maxFindingConfidence: number;
  /**
   * `original_draft_preview: str`: the draft's first 240 characters.
   */
  originalDraftPreview: string;
  /**
   * `replacement_preview: str | None`: the replacement's (refuse mode).
   */
  replacementPreview?: string;
  /**
   * `preview_truncated: bool`: the draft was longer than 240.
   */
  previewTruncated: boolean;
}

/** Per seam, the event fields that arrive as JSON text and are parsed for its hook. */
export const EVENT_JSON_FIELDS = {
  routing: ["state"],
  rewrite: ["args","state"],
  steering: ["args","state"],
  result: ["result","state"],
  response: ["state"],
} as const;

/**
 * Per lifecycle event (the `observe` variant's case, in order): its hook, symfonic's name,
 * its `event-kinds` flag and the fields that arrive as JSON text.
 */
export const LIFECYCLE_EVENTS = [
  { tag: 'agent-start', hook: 'onAgentStart', symfonic: 'on_agent_start', flag: 'agentStart', json: [] },
  { tag: 'agent-end', hook: 'onAgentEnd', symfonic: 'on_agent_end', flag: 'agentEnd', json: [] },
  { tag: 'node-start', hook: 'onNodeStart', symfonic: 'on_node_start', flag: 'nodeStart', json: [] },
  { tag: 'node-end', hook: 'onNodeEnd', symfonic: 'on_node_end', flag: 'nodeEnd', json: [] },
  { tag: 'node-error', hook: 'onNodeError', symfonic: 'on_node_error', flag: 'nodeError', json: [] },
  { tag: 'llm-start', hook: 'onLlmStart', symfonic: 'on_llm_start', flag: 'llmStart', json: ["messages"] },
  { tag: 'llm-pre-call', hook: 'onLlmPreCall', symfonic: 'on_llm_pre_call', flag: 'llmPreCall', json: ["messages","tools","invocationParams"] },
  { tag: 'llm-end', hook: 'onLlmEnd', symfonic: 'on_llm_end', flag: 'llmEnd', json: ["usage"] },
  { tag: 'token-composition', hook: 'onTokenComposition', symfonic: 'on_token_composition', flag: 'tokenComposition', json: [] },
  { tag: 'user-correction', hook: 'onUserCorrection', symfonic: 'on_user_correction', flag: 'userCorrection', json: ["activationLog","scope"] },
  { tag: 'procedure-selection', hook: 'onProcedureSelection', symfonic: 'on_procedure_selection', flag: 'procedureSelection', json: [] },
  { tag: 'react-loop-end', hook: 'onReactLoopEnd', symfonic: 'on_react_loop_end', flag: 'reactLoopEnd', json: [] },
  { tag: 'fabrication-detected', hook: 'onFabricationDetected', symfonic: 'on_fabrication_detected', flag: 'fabricationDetected', json: ["findings"] },
] as const;

/** The wire types, for the glue. */
export type { wire };
