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
}

/** Per seam, the event fields that arrive as JSON text and are parsed for its hook. */
export const EVENT_JSON_FIELDS = {
  routing: ["state"],
  rewrite: ["args","state"],
  steering: ["args","state"],
  result: ["result","state"],
  response: ["state"],
} as const;

/** The wire types, for the glue. */
export type { wire };
