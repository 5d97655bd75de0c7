// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
/// <reference path="./interfaces/toolgate-guard-config.d.ts" />
/// <reference path="./interfaces/toolgate-guard-host.d.ts" />
/// <reference path="./interfaces/toolgate-guard-http.d.ts" />
/// <reference path="./interfaces/toolgate-guard-result.d.ts" />
/// <reference path="./interfaces/toolgate-guard-rewrite.d.ts" />
/// <reference path="./interfaces/toolgate-guard-routing.d.ts" />
/// <reference path="./interfaces/toolgate-guard-state.d.ts" />
/// <reference path="./interfaces/toolgate-guard-steering.d.ts" />
/// <reference path="./interfaces/toolgate-guard-types.d.ts" />
declare module 'toolgate:guard/guard@0.2.0' {
  export type * as ToolgateGuardHost020 from 'toolgate:guard/host@0.2.0'; // import toolgate:guard/host@0.2.0
  export type * as ToolgateGuardHttp020 from 'toolgate:guard/http@0.2.0'; // import toolgate:guard/http@0.2.0
  export type * as ToolgateGuardState020 from 'toolgate:guard/state@0.2.0'; // import toolgate:guard/state@0.2.0
  export type * as ToolgateGuardTypes020 from 'toolgate:guard/types@0.2.0'; // import toolgate:guard/types@0.2.0
  export * as routing from 'toolgate:guard/routing@0.2.0'; // export toolgate:guard/routing@0.2.0
  export * as rewrite from 'toolgate:guard/rewrite@0.2.0'; // export toolgate:guard/rewrite@0.2.0
  export * as steering from 'toolgate:guard/steering@0.2.0'; // export toolgate:guard/steering@0.2.0
  export * as result from 'toolgate:guard/result@0.2.0'; // export toolgate:guard/result@0.2.0
  export * as config from 'toolgate:guard/config@0.2.0'; // export toolgate:guard/config@0.2.0
}
