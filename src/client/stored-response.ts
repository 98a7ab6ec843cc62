import type { OutgoingHttpHeaders } from 'node:http';
import { z } from 'zod';
import type { Json } from './types.js';

/** A response as the handler produced it (status, every header it set, the body bytes). */
export interface CapturedResponse {
  readonly status: number;
  readonly headers: OutgoingHttpHeaders;
  /** The body, or its first `maxBodyBytes` + 1 bytes when `overflowed`. */
  readonly body: Buffer;
  /** The body grew past `maxBodyBytes`: it is streamed to the first caller, never stored. */
  readonly overflowed: boolean;
}

/** Headers always replayed (with the configured extra ones); set-cookie never is. */
export const DEFAULT_REPLAY_HEADERS = ['content-type', 'location', 'etag'] as const;
export const NEVER_REPLAYED = new Set(['set-cookie', 'set-cookie2']);

/**
 * The stored result (docs/http.md, "The stored response"): the JSON the middleware settles a key
 * with and replays to every retry. `v` 1; `stored` true: `status`, `headers` (allowlisted, names
 * lower-cased, in the order set, as [name, value] pairs) and `body` (the bytes, base64); `stored`
 * false (a body larger than maxBodyBytes, streamed once and never stored): `status`, `headers` and
 * `bytes` (how many were seen). Any other result under a key the middleware owns answers 500
 * `idempotency-misconfigured` to every retry: resolve such keys with storedResponseOf().
 */
const storedSchema = z.discriminatedUnion('stored', [
  z.object({
    v: z.literal(1),
    stored: z.literal(true),
    status: z.number().int().min(100).max(599),
    headers: z.array(z.tuple([z.string(), z.string()])),
    body: z.string(),
  }),
  z.object({
    v: z.literal(1),
    stored: z.literal(false),
    status: z.number().int().min(100).max(599),
    headers: z.array(z.tuple([z.string(), z.string()])),
    bytes: z.number().int().nonnegative(),
  }),
]);

/** The middleware's stored result of a key (docs/http.md, "The stored response"): what storedResponseOf() builds. */
export type StoredResponse = z.infer<typeof storedSchema>;

export function allowlistedHeaders(headers: OutgoingHttpHeaders, allow: ReadonlySet<string>): [string, string][] {
  const out: [string, string][] = [];
  for (const [name, value] of Object.entries(headers)) {
    const lower = name.toLowerCase();
    if (!allow.has(lower) || NEVER_REPLAYED.has(lower) || value === undefined) continue;
    for (const one of Array.isArray(value) ? value : [value]) out.push([lower, String(one)]);
  }
  return out;
}

/** The JSON stored as the operation's result. Oversized bodies keep status and headers only. */
export function toStored(captured: CapturedResponse, allow: ReadonlySet<string>): StoredResponse {
  const headers = allowlistedHeaders(captured.headers, allow);
  return captured.overflowed
    ? { v: 1, stored: false, status: captured.status, headers, bytes: captured.body.length }
    : { v: 1, stored: true, status: captured.status, headers, body: captured.body.toString('base64') };
}

/** Parses a stored result; null when it is not one of ours (another writer used the key). */
export function fromStored(result: Json): StoredResponse | null {
  const parsed = storedSchema.safeParse(result);
  return parsed.success ? parsed.data : null;
}

/**
 * Whether a reservation's request is the middleware's default request description (src/http/core
 * fingerprint.ts: `{ v: 2, method, url | path | route, body: 'json:…' | 'raw:…' | 'none', headers }`):
 * the key is one the middleware claimed, and its result must be a stored response. A route with
 * its own `fingerprint` option describes requests its own way and is not recognised.
 */
export function isMiddlewareRequest(request: unknown): boolean {
  if (typeof request !== 'object' || request === null || Array.isArray(request)) return false;
  const r = request as Record<string, unknown>;
  const targets = ['url', 'path', 'route'].filter((t) => typeof r[t] === 'string');
  return (
    r.v === 2 &&
    typeof r.method === 'string' &&
    targets.length === 1 &&
    typeof r.body === 'string' &&
    /^(none|json:[0-9a-f]{64}|raw:[0-9a-f]{64})$/.test(r.body) &&
    typeof r.headers === 'object' &&
    r.headers !== null &&
    !Array.isArray(r.headers) &&
    Object.keys(r).length === 5
  );
}

/** The response an operator or a reconciler records for an HTTP key: what the retry replays. */
export interface HttpResolution {
  /** The status the handler would have answered (100-599), e.g. 201. */
  readonly status: number;
  /** The body bytes (a string is taken as UTF-8; an object or array as its JSON text). */
  readonly body: Buffer | string | Json;
  /**
   * Headers replayed with it (name -> value; set-cookie never is). Default: content-type
   * `application/json` for an object or array body, else none.
   */
  readonly headers?: Readonly<Record<string, string>>;
}

/** The largest body an HTTP-aware resolution stores (as the middleware's own limit). */
export const MAX_RESOLVED_BODY_BYTES = 700 * 1024;

/**
 * The stored result of an HTTP-aware resolution: the middleware's own format (version 1,
 * `stored: true`, status, headers lower-cased in order, body as base64), so a retry of the key
 * replays it like a response the handler produced. RangeError on a bad status, header or size.
 */
export function storedResponseOf(resolution: HttpResolution): StoredResponse {
  const { status } = resolution;
  if (!Number.isInteger(status) || status < 100 || status > 599)
    throw new RangeError(`HTTP status must be an integer 100-599 (got ${String(status)})`);
  const structured = !Buffer.isBuffer(resolution.body) && typeof resolution.body !== 'string';
  const bytes = Buffer.isBuffer(resolution.body)
    ? resolution.body
    : typeof resolution.body === 'string'
      ? Buffer.from(resolution.body, 'utf8')
      : Buffer.from(JSON.stringify(resolution.body), 'utf8');
  if (bytes.length > MAX_RESOLVED_BODY_BYTES)
    throw new RangeError(`HTTP body is ${bytes.length} bytes, more than ${MAX_RESOLVED_BODY_BYTES}`);
  const given = resolution.headers ?? (structured ? { 'content-type': 'application/json' } : {});
  const headers: [string, string][] = [];
  for (const [name, value] of Object.entries(given)) {
    const lower = name.toLowerCase();
    if (!/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(lower)) throw new RangeError(`not a header name: ${JSON.stringify(name)}`);
    if (/[\r\n\0]/.test(value)) throw new RangeError(`header ${lower} has a line break or NUL in its value`);
    if (NEVER_REPLAYED.has(lower)) throw new RangeError(`header ${lower} is never replayed: do not store it`);
    headers.push([lower, value]);
  }
  return { v: 1, stored: true, status, headers, body: bytes.toString('base64') };
}
