/**
 * RFC 9457 problem details (application/problem+json) for every answer the middleware makes
 * itself. The `type` URIs are `urn:pg-settle:problem:<name>` unless you set `problemTypeBase`;
 * docs/http.md, "Problem types", documents each one.
 */
export const PROBLEMS = {
  'idempotency-key-missing': { status: 400, title: 'Idempotency-Key is missing' },
  'idempotency-key-malformed': { status: 400, title: 'Idempotency-Key is malformed' },
  'idempotency-key-reused': { status: 422, title: 'Idempotency-Key was used for a different request' },
  'idempotency-key-bound': { status: 422, title: 'Idempotency-Key belongs to another caller or authorization' },
  'request-in-progress': { status: 409, title: 'A request with this Idempotency-Key is still in progress' },
  'operation-failed': { status: 500, title: 'The operation of this Idempotency-Key failed for good' },
  'response-not-stored': { status: 410, title: 'The response of this Idempotency-Key was too large to store' },
  'outcome-unknown': {
    status: 500,
    title:
      'An earlier request with this Idempotency-Key may have taken effect; it is not run again until it is reconciled',
  },
  'response-broken': { status: 500, title: "The handler's response broke off before its first byte was sent" },
  'handler-timeout': { status: 503, title: 'The handler did not answer in time; its outcome is unknown' },
  'settlement-unavailable': { status: 503, title: 'The idempotency store is unavailable' },
  'idempotency-misconfigured': { status: 500, title: 'The idempotency middleware is misconfigured' },
} as const;

export type ProblemName = keyof typeof PROBLEMS;

export const DEFAULT_PROBLEM_TYPE_BASE = 'urn:pg-settle:problem:';

/** A response the middleware sends itself, framework-neutral. */
export interface HttpAnswer {
  readonly status: number;
  /** Lower-case header names. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
  /** True when this is a stored response (or the canonical one of another attempt). */
  readonly replayed: boolean;
}

export function problem(
  name: ProblemName,
  typeBase: string,
  detail: string,
  extra: Readonly<Record<string, string | number | boolean>> = {},
  headers: Readonly<Record<string, string>> = {},
): HttpAnswer {
  const { status, title } = PROBLEMS[name];
  const body = { type: `${typeBase}${name}`, title, status, detail, ...extra };
  return {
    status,
    headers: { 'content-type': 'application/problem+json', ...headers },
    body: Buffer.from(JSON.stringify(body)),
    replayed: false,
  };
}
