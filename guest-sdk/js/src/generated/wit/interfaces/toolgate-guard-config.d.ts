// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
/// <reference path="./toolgate-guard-types.d.ts" />
declare module 'toolgate:guard/config@0.3.0' {
  /**
   * Called once when the plugin loads, with its manifest `config` (a JSON
   * object, `{}` when none is set). An error refuses the plugin at load
   * with this message; on reload the last good version keeps serving.
   */
  export function validateConfig(config: Json): void;
  export type Json = import('toolgate:guard/types@0.3.0').Json;
}
