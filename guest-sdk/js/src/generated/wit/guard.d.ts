// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
/// <reference path="./interfaces/toolgate-guard-host.d.ts" />
/// <reference path="./interfaces/toolgate-guard-result.d.ts" />
/// <reference path="./interfaces/toolgate-guard-rewrite.d.ts" />
/// <reference path="./interfaces/toolgate-guard-routing.d.ts" />
/// <reference path="./interfaces/toolgate-guard-steering.d.ts" />
/// <reference path="./interfaces/toolgate-guard-types.d.ts" />
declare module 'toolgate:guard/guard@0.1.0' {
  export type * as ToolgateGuardHost010 from 'toolgate:guard/host@0.1.0'; // import toolgate:guard/host@0.1.0
  export type * as ToolgateGuardTypes010 from 'toolgate:guard/types@0.1.0'; // import toolgate:guard/types@0.1.0
  export * as routing from 'toolgate:guard/routing@0.1.0'; // export toolgate:guard/routing@0.1.0
  export * as rewrite from 'toolgate:guard/rewrite@0.1.0'; // export toolgate:guard/rewrite@0.1.0
  export * as steering from 'toolgate:guard/steering@0.1.0'; // export toolgate:guard/steering@0.1.0
  export * as result from 'toolgate:guard/result@0.1.0'; // export toolgate:guard/result@0.1.0
}
