import type { OutgoingHttpHeaders } from 'node:http';
import { z } from 'zod';
import type { Json } from '../../client/types.js';

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

/** The stored result: version, status, allowlisted headers in order, body as base64. */
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
