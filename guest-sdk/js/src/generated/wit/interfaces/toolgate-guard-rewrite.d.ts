// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
/// <reference path="./toolgate-guard-types.d.ts" />
declare module 'toolgate:guard/rewrite@0.1.0' {
  /**
   * Returns a replacement call, or none to pass the call through. A
   * rewrite naming a tool outside `available-tools`, or whose args are not
   * a JSON object, is dropped with a warning.
   */
  export function dispatch(event: DispatchEvent): Rewrite | undefined;
  export type DispatchEvent = import('toolgate:guard/types@0.1.0').DispatchEvent;
  export type Rewrite = import('toolgate:guard/types@0.1.0').Rewrite;
}
