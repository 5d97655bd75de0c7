// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
/// <reference path="./toolgate-guard-types.d.ts" />
declare module 'toolgate:guard/host@0.3.0' {
  /**
   * Writes one line to the host's log, tagged with the plugin's name.
   * Calls and bytes per hook call are budgeted: going over the budget
   * traps the call (counted as a `host-budget` fault).
   */
  export function log(level: Level, message: string): void;
  /**
   * The plugin's own configuration (the manifest's `config` table) as a
   * JSON object; `{}` when none is set.
   */
  export function config(): Json;
  export type Json = import('toolgate:guard/types@0.3.0').Json;
  /**
   * Severity of a log line.
   * # Variants
   * 
   * ## `"trace"`
   * 
   * Very fine detail.
   * ## `"debug"`
   * 
   * Diagnostic detail.
   * ## `"info"`
   * 
   * Normal operation.
   * ## `"warn"`
   * 
   * Something unexpected that the guard handled.
   * ## `"error"`
   * 
   * Something failed.
   */
  export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
}
