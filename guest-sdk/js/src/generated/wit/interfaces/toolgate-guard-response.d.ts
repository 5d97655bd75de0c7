// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
/// <reference path="./toolgate-guard-types.d.ts" />
declare module 'toolgate:guard/response@0.3.0' {
  /**
   * Returns the answer to show instead (the next guard sees it as
   * `content`), or none to keep `content` as it is.
   */
  export function render(event: ResponseEvent): string | undefined;
  export type ResponseEvent = import('toolgate:guard/types@0.3.0').ResponseEvent;
}
