// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
/// <reference path="./toolgate-guard-types.d.ts" />
declare module 'toolgate:guard/result@0.3.0' {
  /**
   * Observes what a tool returned; nothing to return.
   */
  export function onResult(event: ToolResultEvent): void;
  export type ToolResultEvent = import('toolgate:guard/types@0.3.0').ToolResultEvent;
}
