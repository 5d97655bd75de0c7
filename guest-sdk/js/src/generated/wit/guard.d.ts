// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
/// <reference path="./interfaces/toolgate-guard-config.d.ts" />
/// <reference path="./interfaces/toolgate-guard-host.d.ts" />
/// <reference path="./interfaces/toolgate-guard-http.d.ts" />
/// <reference path="./interfaces/toolgate-guard-observe.d.ts" />
/// <reference path="./interfaces/toolgate-guard-response.d.ts" />
/// <reference path="./interfaces/toolgate-guard-result.d.ts" />
/// <reference path="./interfaces/toolgate-guard-rewrite.d.ts" />
/// <reference path="./interfaces/toolgate-guard-routing.d.ts" />
/// <reference path="./interfaces/toolgate-guard-state.d.ts" />
/// <reference path="./interfaces/toolgate-guard-steering.d.ts" />
/// <reference path="./interfaces/toolgate-guard-types.d.ts" />
declare module 'toolgate:guard/guard@0.3.0' {
  export type * as ToolgateGuardHost030 from 'toolgate:guard/host@0.3.0'; // import toolgate:guard/host@0.3.0
  export type * as ToolgateGuardHttp030 from 'toolgate:guard/http@0.3.0'; // import toolgate:guard/http@0.3.0
  export type * as ToolgateGuardState030 from 'toolgate:guard/state@0.3.0'; // import toolgate:guard/state@0.3.0
  export type * as ToolgateGuardTypes030 from 'toolgate:guard/types@0.3.0'; // import toolgate:guard/types@0.3.0
  export * as routing from 'toolgate:guard/routing@0.3.0'; // export toolgate:guard/routing@0.3.0
  export * as rewrite from 'toolgate:guard/rewrite@0.3.0'; // export toolgate:guard/rewrite@0.3.0
  export * as steering from 'toolgate:guard/steering@0.3.0'; // export toolgate:guard/steering@0.3.0
  export * as result from 'toolgate:guard/result@0.3.0'; // export toolgate:guard/result@0.3.0
  export * as response from 'toolgate:guard/response@0.3.0'; // export toolgate:guard/response@0.3.0
  export * as observe from 'toolgate:guard/observe@0.3.0'; // export toolgate:guard/observe@0.3.0
  export * as config from 'toolgate:guard/config@0.3.0'; // export toolgate:guard/config@0.3.0
}
