// @toolgate/guest: write a toolgate guard as a plain object of hooks.
//
//   import { defineGuard, proceed, steer } from '@toolgate/guest';
//   export default defineGuard({
//     onBeforeToolCall(event) {
//       return /where/i.test(String(event.args.sql)) ? proceed() : steer('Add a WHERE clause.');
//     },
//   });
//
// The build (`toolgate-js build`) exports exactly the seams whose hooks the guard implements.
//
// Hooks and events carry symfonic's names (camelCase): onToolRoutingDecision
// (ToolRoutingDecisionEvent), onToolCallDispatch (ToolCallDispatchEvent), onBeforeToolCall
// (BeforeToolCallEvent), onToolResult (ToolResultCallbackEvent), onResponseRender
// (ResponseRenderEvent: return the final answer to give, or nothing). The former names (narrow,
// dispatch, beforeToolCall, onResult; RoutingEvent, DispatchEvent, ToolResultEvent) are
// deprecated aliases.
//
// Lifecycle events (symfonic's thirteen fire-and-forget hooks) are hooks too, named the same
// way: onAgentStart, onAgentEnd, onNodeStart, onNodeEnd, onNodeError, onLlmStart,
// onLlmPreCall, onLlmEnd, onTokenComposition, onUserCorrection, onProcedureSelection,
// onReactLoopEnd, onFabricationDetected, each given its event (symfonic's class: LLMEndEvent,
// ...; JSON fields such as `usage` parsed) and returning nothing. A guard implementing any of
// them exports `observe`, subscribed to exactly those hooks: the host calls it for nothing
// else. What an observer learns it keeps in `state` (the run scope is the event's `runId`),
// where the guard's decisions read it:
//
//   export default defineGuard({
//     onLlmEnd(event) { state.add('run', 'tokens', Number(event.usage.total_tokens ?? 0)); },
//     onBeforeToolCall() { return Number(state.get('run', 'tokens') ?? 0) > 1000 ? cancel('...') : proceed(); },
//   });

/// <reference path="./env.d.ts" />

import { config as hostConfig, log as hostLog } from 'toolgate:guard/host@0.3.0';
import { LIFECYCLE_EVENTS } from './generated/types.js';
import type { Hooks, JsonObject, JsonValue, Level, Rewrite, Verdict } from './generated/types.js';
import { parseJson } from './json.js';

export { parseJson, stringifyJson } from './json.js';
export { state } from './state.js';
export type { Scope, TtlOptions } from './state.js';
export { http, HttpResponse } from './http.js';
export type { BodyInit, HeadersInit, HttpRequest, RequestOptions } from './http.js';

export type {
  AgentEndEvent,
  AgentStartEvent,
  FabricationDetectedEvent,
  LLMEndEvent,
  LLMPreCallEvent,
  LLMStartEvent,
  NodeEndEvent,
  NodeErrorEvent,
  NodeStartEvent,
  ProcedureSelectionEvent,
  ReactLoopEndEvent,
  TokenCompositionEvent,
  UserCorrectionEvent,
} from './generated/types.js';
export { LIFECYCLE_EVENTS } from './generated/types.js';

export type {
  BeforeToolCallEvent,
  DispatchEvent,
  Hooks,
  JsonObject,
  JsonValue,
  Level,
  ResponseRenderEvent,
  Rewrite,
  RoutingEvent,
  Skip,
  ToolCallDispatchEvent,
  ToolInfo,
  ToolResultCallbackEvent,
  ToolResultEvent,
  ToolRoutingDecisionEvent,
  Verdict,
  VerdictProceed,
  VerdictSkip,
} from './generated/types.js';

/** The names of the hooks a guard may implement, one per seam (symfonic's, in camelCase). */
export const HOOK_NAMES = [
  'onToolRoutingDecision',
  'onToolCallDispatch',
  'onBeforeToolCall',
  'onToolResult',
  'onResponseRender',
] as const;

/** The lifecycle hooks a guard may implement (symfonic's, in camelCase: `onLlmEnd`, ...). */
export const LIFECYCLE_HOOKS = LIFECYCLE_EVENTS.map((l) => l.hook);

/**
 * Deprecated: the hooks' former names (the WIT functions'), in the order of `HOOK_NAMES`
 * (the response seam's hook never had another).
 */
export const DEPRECATED_HOOK_NAMES = ['narrow', 'dispatch', 'beforeToolCall', 'onResult'] as const;

/**
 * A guard: the hooks it implements (at least one) and, optionally, a check of its
 * configuration.
 */
export interface Guard extends Hooks {
  /**
   * Checks the plugin's configuration (the manifest's `config` table, parsed; `{}` when
   * none is set) once, when the host loads the plugin: the `config` interface's
   * `validate-config`, exported only by a guard that defines it. Return nothing to accept
   * it; return a message, or throw (the error's `message` is used), to refuse the plugin
   * with that message (`toolgate list` shows it; on a reload the last good version keeps
   * serving). Synchronous, like the hooks.
   */
  validateConfig?(config: JsonObject): string | null | undefined | void;
}

/** Keys of `H` that are not a guard's: a typo such as `beforeToolcall` becomes a type error. */
type NoExtraKeys<H> = { [K in Exclude<keyof H, keyof Guard>]: never };

/**
 * Declares a guard: an object holding the hooks it implements (at least one) and, if it
 * checks its configuration at load, `validateConfig`. Returns the same object; the build
 * reads which hooks it has and exports only those seams (and `config` for `validateConfig`).
 */
export function defineGuard<H extends Guard>(hooks: H & NoExtraKeys<H>): H {
  if (hooks === null || typeof hooks !== 'object') {
    throw new TypeError('defineGuard expects an object of hooks');
  }
  const keys = Object.keys(hooks).filter((key) => key !== 'validateConfig');
  const known: readonly string[] = [...HOOK_NAMES, ...DEPRECATED_HOOK_NAMES, ...LIFECYCLE_HOOKS];
  if ('validateConfig' in hooks && typeof hooks.validateConfig !== 'function') {
    throw new TypeError('validateConfig must be a function');
  }
  for (const key of keys) {
    if (!known.includes(key)) {
      throw new TypeError(`unknown hook "${key}"; a guard implements some of: ${[...HOOK_NAMES, ...LIFECYCLE_HOOKS].join(', ')}`);
    }
    if (typeof (hooks as Record<string, unknown>)[key] !== 'function') {
      throw new TypeError(`hook "${key}" must be a function`);
    }
  }
  if (keys.length === 0) {
    throw new TypeError(`a guard implements at least one hook: ${HOOK_NAMES.join(', ')}`);
  }
  DEPRECATED_HOOK_NAMES.forEach((deprecated, i) => {
    const name = HOOK_NAMES[i];
    if (keys.includes(name) && keys.includes(deprecated)) {
      throw new TypeError(`the guard implements both ${name} and ${deprecated}, its deprecated name; keep ${name}`);
    }
  });
  return hooks;
}

/** Steering: run the tool normally (the same as returning nothing). */
export function proceed(): Verdict {
  return { tag: 'proceed' };
}

/**
 * Steering: do not run the tool; the model sees `content` as its result. `isError` true
 * (the default) steers, false cancels. `content` must not be empty.
 */
export function skip(content: string, isError = true): Verdict {
  return { tag: 'skip', val: { content, isError } };
}

/** Steering: refuse the call with an error result the model corrects itself from. */
export function steer(content: string): Verdict {
  return skip(content, true);
}

/** Steering: refuse the call with a benign result the model moves past. */
export function cancel(content: string): Verdict {
  return skip(content, false);
}

/** Rewrite: call `toolName` with `args` instead (the call id stays the host's). */
export function rewrite(toolName: string, args: JsonObject): Rewrite {
  return { toolName, args };
}

/** Writes one line to the host's log (budgeted per call by the host). */
export const log = Object.assign((level: Level, message: string): void => hostLog(level, message), {
  trace: (message: string) => hostLog('trace', message),
  debug: (message: string) => hostLog('debug', message),
  info: (message: string) => hostLog('info', message),
  warn: (message: string) => hostLog('warn', message),
  error: (message: string) => hostLog('error', message),
});

/**
 * The plugin's configuration (the manifest's `config` table), parsed; `{}` when none.
 *
 * Each call asks the host and parses the answer (nothing is kept between calls, so a
 * snapshotted guard never keeps the configuration of its warm-up); call it once per hook.
 */
export function config<T extends JsonObject = JsonObject>(): T {
  return parseJson(hostConfig()) as T;
}

/** Narrows a JSON value to a string, or `undefined` when it is anything else. */
export function asString(value: JsonValue | undefined): string | undefined {
  return typeof value === 'string' ? value : undefined;
}
