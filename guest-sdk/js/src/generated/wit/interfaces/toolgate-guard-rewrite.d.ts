// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
/// <reference path="./toolgate-guard-types.d.ts" />
declare module 'toolgate:guard/rewrite@0.3.0' {
  /**
   * Returns a replacement call, or none to pass the call through. A
   * rewrite whose args are not a JSON object is dropped with a warning
   * (the next guard sees the call as it was). The next guard sees this
   * rewrite whatever tool it names; the chain's resulting call is checked
   * once, at the end: if it names a tool outside `available-tools`, every
   * rewrite is dropped with a warning and the original call runs.
   */
  export function dispatch(event: DispatchEvent): Rewrite | undefined;
  export type DispatchEvent = import('toolgate:guard/types@0.3.0').DispatchEvent;
  export type Rewrite = import('toolgate:guard/types@0.3.0').Rewrite;
}
