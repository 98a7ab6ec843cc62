import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import express from 'express';
import type pg from 'pg';
import { z } from 'zod';

/**
 * The Express example app's POST /payments (examples/http/express-app.ts: the same auth, body
 * validation and handler) with the idempotency written by hand, as a user would without
 * pg-settle: the Stripe pattern (brandur.org/idempotency-keys, bench/scripts/stripe.sql) with
 * node-postgres against the bench's `bench.stripe_keys` table.
 *   tx 1  BEGIN; SELECT the key row FOR UPDATE; INSERT it (locked_at set), or compare the stored
 *         request parameters (422 when they differ), replay a stored response, answer 409 while
 *         another request holds the key, or take the lock; COMMIT;
 *   the handler runs;
 *   tx 2  one UPDATE stores the response and clears the lock (autocommit), then the response is sent.
 * The `http` scenario of npm run bench measures it against the app with pg-settle's middleware
 * on the same database.
 */

/** The example's toy bearer-token auth: "Bearer <tenant>:<user>". */
function caller(req: express.Request): { tenant: string; user: string } {
  const [tenant = '', user = ''] = (req.headers.authorization ?? '').replace(/^Bearer /, '').split(':');
  if (tenant === '' || user === '') throw Object.assign(new Error('unauthenticated'), { status: 401 });
  return { tenant, user };
}

interface StoredKey {
  id: string;
  request_params: unknown;
  locked_at: Date | null;
  response_code: number | null;
  response_body: unknown;
}

export function createStripeApp(pool: pg.Pool): express.Express {
  const app = express();
  app.use(express.json());
  // Stands in for the app's users table: stripe_keys.user_id is a bigint.
  const userIds = new Map<string, number>();
  const provider = new Map<string, { chargeId: string; amount: string }>();

  const stripeKeys: express.RequestHandler = async (req, res, next) => {
    const header = req.get('idempotency-key');
    if (header === undefined) return next();
    const key = /^"([^"\\]{1,255})"$/.exec(header)?.[1];
    if (key === undefined) return void res.status(400).json({ error: 'malformed Idempotency-Key' });
    const { tenant, user } = caller(req);
    const who = `${tenant}:${user}`;
    const userId = userIds.get(who) ?? userIds.set(who, userIds.size + 1).get(who);
    const db = await pool.connect();
    let id: string;
    try {
      await db.query('BEGIN');
      const found = await db.query<StoredKey>(
        `SELECT id, request_params, locked_at, response_code, response_body FROM bench.stripe_keys
          WHERE user_id = $1 AND idempotency_key = $2 FOR UPDATE`,
        [userId, key],
      );
      const row = found.rows[0];
      if (row === undefined) {
        const inserted = await db.query<{ id: string }>(
          `INSERT INTO bench.stripe_keys (idempotency_key, locked_at, request_method, request_params, request_path,
                                          recovery_point, user_id)
           VALUES ($1, now(), $2, $3, $4, 'started', $5) RETURNING id`,
          [key, req.method, JSON.stringify(req.body), req.path, userId],
        );
        id = inserted.rows[0]?.id ?? '';
      } else if (!isDeepStrictEqual(row.request_params, req.body)) {
        await db.query('COMMIT');
        return void res.status(422).json({ error: 'Idempotency-Key reused with other parameters' });
      } else if (row.response_code !== null) {
        await db.query('COMMIT');
        return void res.status(row.response_code).set('idempotent-replayed', 'true').json(row.response_body);
      } else if (row.locked_at !== null) {
        await db.query('COMMIT');
        return void res.status(409).json({ error: 'a request with this Idempotency-Key is in progress' });
      } else {
        await db.query('UPDATE bench.stripe_keys SET last_run_at = now(), locked_at = now() WHERE id = $1', [row.id]);
        id = row.id;
      }
      await db.query('COMMIT');
    } catch (error) {
      await db.query('ROLLBACK').catch(() => {});
      throw error;
    } finally {
      db.release();
    }
    res.locals.downstreamKey = key;
    const send = res.json.bind(res);
    res.json = ((body: unknown) => {
      pool
        .query(
          `UPDATE bench.stripe_keys SET locked_at = NULL, recovery_point = 'finished', response_code = $2, response_body = $3
            WHERE id = $1`,
          [id, res.statusCode, JSON.stringify(body)],
        )
        .then(
          () => send(body),
          (error: unknown) => next(error),
        );
      return res;
    }) as typeof res.json;
    next();
  };

  // The example's handler (lease mode: the provider call carries a key that is the same for every attempt).
  app.post('/payments', stripeKeys, async (req, res) => {
    const { amount } = z.object({ amount: z.string().regex(/^\d+\.\d{2}$/) }).parse(req.body);
    const downstreamKey = (res.locals.downstreamKey as string | undefined) ?? randomUUID();
    let charge = provider.get(downstreamKey);
    if (charge === undefined) provider.set(downstreamKey, (charge = { chargeId: `ch_${provider.size + 1}`, amount }));
    res.status(201).location(`/payments/${charge.chargeId}`).json(charge);
  });
  return app;
}
