import type pg from 'pg';
import { expireLease } from '../../../src/testing/clock.js';
import { acquire, type ClaimArgs, type Ticket } from './settle.js';

/**
 * Attempt 1 acquires, "crashes" (its lease is made to lapse by the superuser clock helper),
 * and attempt 2 takes over. Returns both tickets.
 */
export async function supersededPair(
  app: pg.ClientBase,
  admin: pg.ClientBase,
  op: ClaimArgs,
): Promise<[Ticket, Ticket]> {
  const first = await acquire(app, op);
  if (!(await expireLease(admin, first.tenant, first.key))) throw new Error('no lease to expire');
  const second = await acquire(app, op);
  if (second.attempt !== first.attempt + 1)
    throw new Error(`expected attempt ${first.attempt + 1}, got ${second.attempt}`);
  return [first, second];
}

/** The fingerprint settle.claim would compute for `request`. */
export async function fingerprintOf(client: pg.ClientBase, request: unknown): Promise<string> {
  const { rows } = await client.query<{ fp: string }>('select settle.fingerprint($1::jsonb) as fp', [
    JSON.stringify(request),
  ]);
  const fp = rows[0]?.fp;
  if (fp === undefined) throw new Error('settle.fingerprint returned no row');
  return fp;
}
