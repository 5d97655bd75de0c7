// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
/// <reference path="./toolgate-guard-types.d.ts" />
declare module 'toolgate:guard/steering@0.3.0' {
  /**
   * Decides whether this one call runs.
   */
  export function beforeToolCall(event: BeforeToolCallEvent): Verdict;
  export type BeforeToolCallEvent = import('toolgate:guard/types@0.3.0').BeforeToolCallEvent;
  export type Verdict = import('toolgate:guard/types@0.3.0').Verdict;
}
