// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
declare module 'toolgate:guard/http@0.3.0' {
  /**
   * Sends `request` and waits for the whole response.
   */
  export function send(request: Request): Response;
  /**
   * One header: a name and its value.
   */
  export type Header = [string, string];
  /**
   * A request to send.
   */
  export interface Request {
    /**
     * The method, upper case (`GET`, `POST`, ...).
     */
    method: string,
    /**
     * The absolute URL, `http://` or `https://`.
     */
    url: string,
    /**
     * Headers to send; the host adds `host`, `content-length` and,
     * when none is given, an `accept` header matching any media type.
     */
    headers: Array<Header>,
    /**
     * The body (empty for none).
     */
    body: Uint8Array,
  }
  /**
   * What the server answered (any status, including 4xx and 5xx).
   */
  export interface Response {
    /**
     * The HTTP status code.
     */
    status: number,
    /**
     * The response headers.
     */
    headers: Array<Header>,
    /**
     * The body, at most the grant's response byte limit.
     */
    body: Uint8Array,
  }
}
