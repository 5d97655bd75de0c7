// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
declare module 'toolgate:guard/types@0.3.0' {
  /**
   * A JSON document, serialised as UTF-8 text.
   */
  export type Json = string;
  /**
   * One tool the model may be offered this turn.
   */
  export interface ToolInfo {
    /**
     * The LangChain tool `name`.
     */
    name: string,
    /**
     * The tool's description, as the model sees it (empty when unknown).
     */
    description: string,
  }
  /**
   * `on_tool_routing_decision`: which tools are visible this turn
   * (symfonic's `ToolRoutingDecisionEvent`).
   * 
   * Carries every field of symfonic's `ToolRoutingDecisionEvent`, plus the
   * visible tools with their descriptions, the user's query when known and
   * the caller's state.
   */
  export interface RoutingEvent {
    /**
     * The agent run this turn belongs to.
     */
    runId: string,
    /**
     * The routing mode in effect: "observe" or "enforce" (or "off" when
     * the caller consults guards although the framework did not route).
     */
    mode: string,
    /**
     * The intent label the framework's router assigned to the query.
     */
    intentLabel: string,
    /**
     * How many tools the full manifest holds.
     */
    totalTools: number,
    /**
     * The tool names visible so far: the framework's narrowing, further
     * narrowed by every guard earlier in the chain.
     */
    narrowedToolNames: Array<string>,
    /**
     * The framework's rough estimate of prompt tokens saved by narrowing.
     */
    savedTokensEstimate: number,
    /**
     * The visible tools (the same set as `narrowed-tool-names`) with
     * their descriptions.
     */
    tools: Array<ToolInfo>,
    /**
     * The user's query, when the caller knows it.
     */
    query?: string,
    /**
     * The caller's state as a JSON object (`{}` when there is none).
     */
    state: Json,
  }
  /**
   * `on_tool_call_dispatch`: a tool call about to be dispatched, which a
   * guard may rewrite (the rewrite seam). Carries every field of
   * `ToolCallDispatchEvent`.
   */
  export interface DispatchEvent {
    /**
     * The agent run this turn belongs to.
     */
    runId: string,
    /**
     * 0-indexed React loop iteration that produced this call.
     */
    iterationIndex: number,
    /**
     * The node that emitted the call (always "react" in symfonic 9).
     */
    nodeName: string,
    /**
     * The LangChain `tool_call` id; the host owns it, a rewrite cannot
     * change it.
     */
    callId: string,
    /**
     * The tool the call names (after any earlier guard's rewrite).
     */
    toolName: string,
    /**
     * The call's arguments, a JSON object (after any earlier rewrite).
     */
    args: Json,
    /**
     * The post-routing palette: the only names a rewrite may target.
     */
    availableTools: Array<string>,
    /**
     * The caller's state as a JSON object (the hook's `state`).
     */
    state: Json,
  }
  /**
   * `on_before_tool_call`: a tool call about to run. Carries every field
   * of `BeforeToolCallEvent`.
   */
  export interface BeforeToolCallEvent {
    /**
     * The agent run this turn belongs to.
     */
    runId: string,
    /**
     * The (post-rewrite) tool about to run.
     */
    toolName: string,
    /**
     * The LangChain `tool_call` id this decision applies to.
     */
    callId: string,
    /**
     * The (post-rewrite) arguments, a JSON object.
     */
    args: Json,
    /**
     * The caller's state as a JSON object (the hook's `state`).
     */
    state: Json,
  }
  /**
   * `on_tool_result`: what a tool returned. Carries every field of
   * `ToolResultCallbackEvent`.
   */
  export interface ToolResultEvent {
    /**
     * The agent run this turn belongs to.
     */
    runId: string,
    /**
     * The tool that produced the result.
     */
    toolName: string,
    /**
     * The `ToolMessage.content` as JSON (`null` on framework cancellation).
     */
    result: Json,
    /**
     * The `tool_call` id correlating this result to its dispatch.
     */
    callId: string,
    /**
     * True when the result will be supplied later by a resume cycle.
     */
    deferred: boolean,
    /**
     * True when the `ToolMessage` carried `status="error"`.
     */
    isError: boolean,
    /**
     * The caller's state as a JSON object (`{}` when there is none).
     */
    state: Json,
  }
  /**
   * A refusal: the tool does not run and the model sees `content` instead.
   */
  export interface Skip {
    /**
     * What the model sees as the tool's result. Must not be empty (the
     * empty string; whitespace is content): an empty skip is malformed,
     * dropped with a warning, and treated as proceed.
     */
    content: string,
    /**
     * `true` (or none, the default) steers: the model sees an error
     * result and retries. `false` cancels: a benign result the model
     * moves past.
     */
    isError?: boolean,
  }
  /**
   * What a steering guard decides for one call.
   */
  export type Verdict = VerdictProceed | VerdictSkip;
  /**
   * Run the tool normally; later guards are still consulted.
   */
  export interface VerdictProceed {
    tag: 'proceed',
  }
  /**
   * Do not run the tool; the first skip in the chain wins.
   */
  export interface VerdictSkip {
    tag: 'skip',
    val: Skip,
  }
  /**
   * `on_response_render`: the final answer of a run, about to be returned
   * (the response seam, since `0.3.0`). Carries every field of
   * `ResponseRenderEvent`, plus the content as it stands and the caller's
   * state.
   */
  export interface ResponseEvent {
    /**
     * The agent run this turn belongs to.
     */
    runId: string,
    /**
     * 0-indexed React loop iteration that produced the final answer;
     * -1 when the engine, not the React loop, emitted the event (what
     * symfonic sends from `run()`: the engine does not know the loop's
     * counter).
     */
    iterationIndex: number,
    /**
     * The model that produced the final answer.
     */
    model: string,
    /**
     * The node that produced the final answer.
     */
    nodeName: string,
    /**
     * The final answer before any handler rewrote it.
     */
    originalContent: string,
    /**
     * The answer as it stands: the previous guard's output in the chain
     * (the hook's `content`; `original-content` for the first guard).
     */
    content: string,
    /**
     * The caller's state as a JSON object (the hook's `state`).
     */
    state: Json,
  }
  /**
   * A rewritten call. It cannot carry a `call-id`: the host owns it.
   */
  export interface Rewrite {
    /**
     * The tool to call instead. Any name is passed on to the next guard;
     * only the chain's resulting call must be in `available-tools`.
     */
    toolName: string,
    /**
     * The replacement arguments; must be a JSON object.
     */
    args: Json,
  }
}
