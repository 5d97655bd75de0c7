// Outbound HTTP (contract 0.3.0, `http`), when the operator grants it to the plugin.
//
//   import { http } from '@toolgate/guest';
//   const answer = http.postJson(config().url as string, { text });
//   if (answer.ok && answer.json<{ pii?: boolean }>().pii === true) return steer('...');
//
// The host makes the request with its own client and hands back the whole response, any
// status. A request the plugin is not granted (host, scheme, port, method, a redirect off
// the grant, an address on the host's own network), more requests or bytes than the call
// may use, or a network failure traps the call: the host classifies it (`http-denied`,
// `http-budget`, `http-failed`) and the plugin's `on_error` applies, so there is no error
// to catch here. Time spent waiting counts against the call's deadline.
//
// Synchronous, as the contract's `send` is and as hooks are: `http.send` returns the
// response itself. There is no `fetch`: a Promise-returning call could not be awaited in a
// hook, which must return its verdict synchronously.
//
// A guard that uses `http` imports `toolgate:guard/http`; one that does not, does not.
// Off WebAssembly (`@toolgate/guest/testing`), requests go to the test's responder.

import { send as witSend } from 'toolgate:guard/http@0.3.0';
import type { JsonValue } from './generated/types.js';
import { parseJson, stringifyJson } from './json.js';

/** Headers to send: an object of name to value, or a list of [name, value] pairs. */
export type HeadersInit = Readonly<Record<string, string>> | ReadonlyArray<readonly [string, string]>;

/** A request body: text (sent as UTF-8) or bytes. */
export type BodyInit = string | Uint8Array;

/** What `http.get` and `http.postJson` take besides the URL. */
export interface RequestOptions {
  /** Headers to send (the host adds `host`, `content-length` and a default `accept`). */
  headers?: HeadersInit;
}

/** A request to send. */
export interface HttpRequest extends RequestOptions {
  /** The method; `GET` when absent. Upper-cased before sending (`post` is `POST`). */
  method?: string;
  /** The absolute URL, `http://` or `https://`. */
  url: string;
  /** The body; none when absent. */
  body?: BodyInit;
}

/** What the server answered (any status, 4xx and 5xx included). */
export class HttpResponse {
  /**
   * @param status the HTTP status code
   * @param headers the response headers, names lower case, in the order received
   * @param body the body, at most the grant's `http_response_kib`
   */
  constructor(
    readonly status: number,
    readonly headers: ReadonlyArray<readonly [string, string]>,
    readonly body: Uint8Array,
  ) {}

  /** Whether the status is 2xx. */
  get ok(): boolean {
    return this.status >= 200 && this.status < 300;
  }

  /** The first value of header `name` (any case), or `undefined`. */
  header(name: string): string | undefined {
    const lower = name.toLowerCase();
    return this.headers.find(([k]) => k.toLowerCase() === lower)?.[1];
  }

  /** The body as text (UTF-8; invalid sequences replaced with U+FFFD). */
  text(): string {
    return new TextDecoder().decode(this.body);
  }

  /**
   * The body parsed as JSON (integers beyond 2^53 as exact `bigint`s, as `parseJson`);
   * throws a SyntaxError when it is not JSON.
   */
  json<T = JsonValue>(): T {
    return parseJson(this.text()) as T;
  }
}

function fail(what: string): never {
  throw new TypeError(`http.send: ${what}`);
}

function wireHeaders(headers: HeadersInit | undefined): Array<[string, string]> {
  if (headers === undefined) return [];
  if (headers === null || typeof headers !== 'object') fail(`headers must be an object or a list of [name, value], not ${String(headers)}`);
  const pairs = Array.isArray(headers) ? headers : Object.entries(headers);
  return pairs.map((pair) => {
    const [name, value] = Array.isArray(pair) ? pair : [];
    if (typeof name !== 'string' || typeof value !== 'string') {
      fail(`a header must be a [name, value] pair of strings, not ${JSON.stringify(pair)}`);
    }
    return [name, value];
  });
}

function wireBody(body: BodyInit | undefined): Uint8Array {
  if (body === undefined) return new Uint8Array(0);
  if (typeof body === 'string') return new TextEncoder().encode(body);
  if (body instanceof Uint8Array) return body;
  return fail(`body must be a string or a Uint8Array, not ${typeof body}`);
}

/**
 * Outbound HTTP: `send` any request, or `get` and `postJson`. Each returns the whole
 * response; what the plugin is not granted, budgets and network failures trap the call
 * (see the module's comment).
 */
export const http = {
  /** Sends `request` and waits for the whole response. */
  send(request: HttpRequest): HttpResponse {
    if (request === null || typeof request !== 'object') fail('expects a request object: { url, method?, headers?, body? }');
    const { url, method = 'GET' } = request;
    if (typeof url !== 'string') fail(`url must be a string, not ${typeof url}`);
    if (typeof method !== 'string' || method === '') fail(`method must be a non-empty string, not ${JSON.stringify(method)}`);
    const answer = witSend({
      method: method.toUpperCase(),
      url,
      headers: wireHeaders(request.headers),
      body: wireBody(request.body),
    });
    return new HttpResponse(answer.status, answer.headers, answer.body);
  },

  /** `GET url`. */
  get(url: string, options: RequestOptions = {}): HttpResponse {
    return http.send({ method: 'GET', url, headers: options.headers });
  },

  /**
   * `POST url` with `value` as a JSON body (`bigint`s written as their digits), and
   * `content-type: application/json` unless `options.headers` sets a content type.
   */
  postJson(url: string, value: unknown, options: RequestOptions = {}): HttpResponse {
    const body = stringifyJson(value);
    if (body === undefined) throw new TypeError(`http.postJson: ${typeof value} is not JSON`);
    const headers = wireHeaders(options.headers);
    if (!headers.some(([name]) => name.toLowerCase() === 'content-type')) headers.unshift(['content-type', 'application/json']);
    return http.send({ method: 'POST', url, headers, body });
  },
};
