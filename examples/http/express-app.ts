// A complete Express 5 app behind pg-settle's Idempotency-Key middleware. In your code the
// imports are 'pg-settle' and 'pg-settle/express'. Run it: docs/http.md, "Run the examples".
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import express from 'express';
import { sql } from 'slonik';
import { z } from 'zod';
import { createSettleClient, type SettleClient } from '../../src/index.js';
import { createIdempotency } from '../../src/http/express.js';

/** Stands in for a payment provider that honours its own idempotency key (as Stripe's API does). */
const provider = new Map<string, { chargeId: string; amount: string }>();
export const charges = (): number => provider.size;

/** A toy bearer-token auth: "Bearer <tenant>:<user>". Use your real one. */
function caller(req: express.Request): { tenant: string; user: string } {
  const [tenant = '', user = ''] = (req.headers.authorization ?? '').replace(/^Bearer /, '').split(':');
  if (tenant === '' || user === '') throw Object.assign(new Error('unauthenticated'), { status: 401 });
  return { tenant, user };
}

export function createApp(settle: SettleClient, options: { idempotent?: boolean } = {}): express.Express {
  const app = express();
  app.use(express.json());
  const idempotency = createIdempotency({
    settle,
    // The key is reserved for this caller: the same key from someone else never replays.
    binding: (req) => {
      const { tenant, user } = caller(req);
      return { tenant, principal: user, scopes: ['payments:write'], generation: 1 };
    },
  });
  const keyed = options.idempotent === false ? (_req: express.Request, _res: express.Response, next: express.NextFunction) => next() : idempotency();

  // Lease mode: the handler calls a provider with a key that is the same for every attempt.
  app.post('/payments', keyed, async (req, res) => {
    const { amount } = z.object({ amount: z.string().regex(/^\d+\.\d{2}$/) }).parse(req.body);
    const downstreamKey = req.idempotency?.downstreamKey ?? randomUUID();
    let charge = provider.get(downstreamKey);
    if (charge === undefined) provider.set(downstreamKey, (charge = { chargeId: `ch_${provider.size + 1}`, amount }));
    res.status(201).location(`/payments/${charge.chargeId}`).json(charge);
  });

  // Transaction mode: the ledger row and the stored response commit together, or neither does.
  app.post('/transfers', idempotency({ settlement: 'transaction' }), async (req, res) => {
    const { account, amount } = z.object({ account: z.string(), amount: z.string() }).parse(req.body);
    const id = await req.idempotency!.transaction!.oneFirst(sql.type(z.object({ id: z.bigint() }))`
      insert into shop.transfers (account, amount) values (${account}, ${amount}) returning id`);
    res.status(201).json({ transfer: id.toString(), account, amount });
  });

  app.get('/payments', (_req, res) => {
    res.json({ charges: charges() }); // GET is never touched by the middleware
  });
  return app;
}

export async function main(databaseUrl: string): Promise<string[]> {
  const settle = createSettleClient({ connectionString: databaseUrl });
  const pool = await settle.getPool();
  // The app's own table lives in a schema the app's login owns (`shop`), never in public.
  await pool.query(sql.unsafe`
    create table if not exists shop.transfers (id bigint generated always as identity primary key,
                                               account text not null, amount numeric not null)`);
  const server = createApp(settle).listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const post = (path: string, key: string, body: unknown, token = 'acme:alice') =>
    fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, 'idempotency-key': `"${key}"` },
      body: JSON.stringify(body),
    });
  const seen: string[] = [];
  try {
    const key = randomUUID();
    const first = await post('/payments', key, { amount: '19.99' });
    seen.push(`${first.status} ${first.headers.get('location')}`); // 201 /payments/ch_1
    const retry = await post('/payments', key, { amount: '19.99' });
    seen.push(`${retry.status} replayed=${retry.headers.get('idempotent-replayed')}`); // 201 replayed=true
    const changed = await post('/payments', key, { amount: '20.00' });
    seen.push(`${changed.status} ${changed.headers.get('content-type')}`); // 422 application/problem+json
    const stranger = await post('/payments', key, { amount: '19.99' }, 'acme:mallory');
    seen.push(`${stranger.status}`); // 422: the key is bound to alice
    const transfer = await post('/transfers', randomUUID(), { account: 'acct-1', amount: '5.00' });
    seen.push(`${transfer.status}`); // 201
    seen.push(`charges=${charges()}`); // charges=1
    for (const line of seen) console.log(line);
    return seen;
  } finally {
    await new Promise((resolve) => server.close(resolve));
    await settle.end();
  }
}

// Run as a program (not when imported by the tests or the bench).
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.env.DATABASE_URL === undefined) throw new Error('set DATABASE_URL (docs/http.md, "Run the examples")');
  await main(process.env.DATABASE_URL);
}
