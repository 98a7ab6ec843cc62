import { parseItem, Token } from 'structured-headers';

/** Limits of an Idempotency-Key value (see docs/http.md, "The header"). */
export const KEY_LIMITS = {
  /** The engine's key limit (bytes; every accepted character is one byte). */
  maxLength: 255,
  minLength: 1,
} as const;

export type KeyParse =
  | { readonly kind: 'missing' }
  | { readonly kind: 'malformed'; readonly reason: string }
  | { readonly kind: 'ok'; readonly key: string; readonly form: 'sf-string' | 'token' };

export interface KeyParseOptions {
  /** Accept only an sf-string (`"..."`), as the draft's syntax section says. Default false. */
  readonly strict?: boolean;
  /** Longest accepted key, 1-255 characters. Default 255. */
  readonly maxLength?: number;
}

/** RFC 9110 token characters, plus ':' and '/' (which RFC 8941 tokens allow after the first). */
const BARE_TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z:/]+$/;

/**
 * Parses an Idempotency-Key field value. The draft defines it as an Item Structured Header whose
 * value is an sf-string (RFC 8941/9651). Parameters are ignored (RFC 8941 says unknown parameters
 * are). Unless `strict`, a bare token is accepted too: unquoted UUIDs and base64url keys are
 * common in the wild and are not sf-tokens when they start with a digit. Several field lines
 * (Node joins them with ", ") are malformed: one request, one key.
 */
export function parseIdempotencyKey(
  value: string | readonly string[] | undefined,
  options: KeyParseOptions = {},
): KeyParse {
  if (value === undefined) return { kind: 'missing' };
  if (typeof value !== 'string')
    return value.length === 0
      ? { kind: 'missing' }
      : { kind: 'malformed', reason: 'more than one Idempotency-Key field' };
  const maxLength = Math.min(options.maxLength ?? KEY_LIMITS.maxLength, KEY_LIMITS.maxLength);
  const raw = value.trim();
  if (raw === '') return { kind: 'malformed', reason: 'empty Idempotency-Key' };

  let parsed: ReturnType<typeof parseItem> | undefined;
  try {
    parsed = parseItem(raw);
  } catch {
    parsed = undefined;
  }
  let key: string;
  let form: 'sf-string' | 'token';
  if (parsed !== undefined && typeof parsed[0] === 'string') {
    key = parsed[0];
    form = 'sf-string';
  } else if (options.strict === true) {
    return { kind: 'malformed', reason: 'Idempotency-Key must be an sf-string ("...")' };
  } else if (parsed !== undefined && parsed[0] instanceof Token) {
    key = parsed[0].toString();
    form = 'token';
  } else if (BARE_TOKEN.test(raw)) {
    key = raw;
    form = 'token';
  } else {
    return { kind: 'malformed', reason: 'Idempotency-Key is neither an sf-string nor a bare token' };
  }
  if (key.length < KEY_LIMITS.minLength || key.trim() === '')
    return { kind: 'malformed', reason: 'blank Idempotency-Key' };
  if (key.length > maxLength)
    return { kind: 'malformed', reason: `Idempotency-Key longer than ${maxLength} characters` };
  return { kind: 'ok', key, form };
}
