// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
/// <reference path="./toolgate-guard-types.d.ts" />
declare module 'toolgate:guard/routing@0.3.0' {
  /**
   * Returns the tool names to keep visible, or none to leave the palette
   * as it is. Names that are not visible already are ignored: a guard can
   * hide tools, never add one.
   */
  export function narrow(event: RoutingEvent): Array<string> | undefined;
  export type RoutingEvent = import('toolgate:guard/types@0.3.0').RoutingEvent;
}
