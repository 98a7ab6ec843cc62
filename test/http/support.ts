import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { createSettleClient, type SettleClient } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';
import { asRole } from '../client/helpers.js';

export interface HttpTestContext {
  readonly db: TestDatabase;
  /** Client as settle_app, the middleware's role. */
  readonly settle: SettleClient;
  /** Client as settle_admin, for views (attempts, audit log). */
  readonly admin: SettleClient;
  readonly su: pg.Client;
  close(): Promise<void>;
}

/** Tables the test apps write besides the engine's: a ledger (transaction mode) and a downstream provider. */
const APP_TABLES = `
  create table http_ledger (id bigint generated always as identity primary key, account text not null, amount numeric not null);
  create table http_downstream_charges (downstream_key text primary key, charged_at timestamptz not null default now());
  grant select, insert on http_ledger, http_downstream_charges to settle_app;
`;

export async function setupHttpTest(name: string): Promise<HttpTestContext> {
  const db = await createTestDatabase(name);
  const su = new pg.Client({ connectionString: db.url });
  su.on('error', () => {});
  await su.connect();
  await su.query(APP_TABLES);
  const settle = createSettleClient({ connectionString: asRole(db.url, 'settle_app'), poolSize: 8 });
  const admin = createSettleClient({ connectionString: asRole(db.url, 'settle_admin'), poolSize: 2 });
  return {
    db,
    settle,
    admin,
    su,
    async close() {
      await Promise.allSettled([settle.end(), admin.end()]);
      await su.end().catch(() => {});
      await db.drop();
    },
  };
}

export const newKey = (): string => `k-${randomUUID()}`;

export interface Sent {
  readonly status: number;
  readonly headers: Headers;
  readonly body: Buffer;
  json<T = Record<string, unknown>>(): T;
}

/** A real HTTP request with Node's fetch; the body as bytes. */
export async function send(
  url: string,
  init: {
    method?: string;
    key?: string | null;
    rawKey?: string;
    json?: unknown;
    text?: string;
    headers?: Record<string, string>;
  } = {},
): Promise<Sent> {
  const headers: Record<string, string> = { ...init.headers };
  if (init.rawKey !== undefined) headers['idempotency-key'] = init.rawKey;
  else if (init.key !== undefined && init.key !== null) headers['idempotency-key'] = `"${init.key}"`;
  let body: string | undefined;
  if (init.json !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(init.json);
  } else if (init.text !== undefined) {
    headers['content-type'] = 'text/plain';
    body = init.text;
  }
  const response = await fetch(url, {
    method: init.method ?? 'POST',
    headers,
    ...(body === undefined ? {} : { body }),
  });
  const bytes = Buffer.from(await response.arrayBuffer());
  return {
    status: response.status,
    headers: response.headers,
    body: bytes,
    json: <T>() => JSON.parse(bytes.toString('utf8')) as T,
  };
}

/** Polls until `probe` is truthy (a barrier on state the test can observe, never a blind sleep). */
export async function until<T>(probe: () => Promise<T | null | undefined | false>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 5; ; delay = Math.min(delay * 2, 100)) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`until: condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
}

/**
 * The same client, counting the claim answers per key and outcome: a barrier on what the
 * middleware was told (e.g. "9 duplicates have been answered in_progress and are waiting").
 */
export function observeClaims(settle: SettleClient): {
  client: SettleClient;
  count(key: string, outcome: string): number;
} {
  const seen = new Map<string, number>();
  const client: SettleClient = {
    ...settle,
    async claim(input, options) {
      const answer = await settle.claim(input, options);
      const id = `${input.key}\u0000${answer.outcome}`;
      seen.set(id, (seen.get(id) ?? 0) + 1);
      return answer;
    },
  };
  return { client, count: (key, outcome) => seen.get(`${key}\u0000${outcome}`) ?? 0 };
}
