import type pg from 'pg';
import { withPgClient } from '../db/with-pg-client.js';

/**
 * Makes the live lease of (tenant, key) lapse without sleeping: moves `lease_expires_at` one
 * second before the start of this statement's transaction by the database clock (now(), not
 * clock_timestamp(): Citus refuses volatile functions in an UPDATE of a distributed table). Needs a superuser (or the table owner) connection
 * to the database that holds the operation: the application role cannot do this, so tests get
 * controllable time without a hole in production. Resolves to whether a leased row was found.
 *
 * `connection` is a connection string (a client is opened and closed) or a connected client.
 */
export async function expireLease(connection: string | pg.ClientBase, tenant: string, key: string): Promise<boolean> {
  const text = `update settle_private.operations
                   set lease_expires_at = now() - interval '1 second'
                 where tenant = $1 and key = $2 and lease_token is not null`;
  const expire = async (client: pg.ClientBase): Promise<boolean> =>
    ((await client.query(text, [tenant, key])).rowCount ?? 0) > 0;
  return typeof connection === 'string' ? withPgClient(connection, expire) : expire(connection);
}
