import { type Interceptor, sql } from 'slonik';
import * as rows from './rows.js';

export const SESSION_RESET_INTERCEPTOR = 'pg-settle/session-reset';

/**
 * The row schemas of the client's own statements (src/client/queries.ts): one `select` of a
 * settle.* function or view each. Those leave no session state behind (the functions' own
 * `SET search_path` clauses end with the call, nothing calls set_config, takes advisory locks,
 * LISTENs or creates temporary tables), so a connection that ran only them needs no reset.
 * The schemas are not exported from the package: no other statement can carry them.
 */
export const CLIENT_ROW_SCHEMAS: ReadonlySet<unknown> = new Set([
  rows.claimRow,
  rows.heartbeatRow,
  rows.observationRow,
  rows.operationRow,
  rows.getRow,
  rows.expireRow,
  rows.purgeRow,
  rows.statsRow,
  rows.deadLetterRow,
  rows.attemptRow,
  rows.auditRow,
]);

/**
 * `DISCARD ALL` minus its `DEALLOCATE ALL` and `DISCARD PLANS`, in one round trip. Like
 * `DISCARD ALL`, it refuses to run inside a transaction block (a transaction left open by the
 * borrower: its start time is not this statement's), so slonik closes that connection instead
 * of handing an open transaction to the next borrower. Then cursors,
 * session authorization and role, every setting, LISTEN channels, advisory locks, temporary
 * tables and sequence state are reset, as slonik's default reset does. Prepared statements
 * stay: node-pg remembers per connection which named statements it has parsed and would send a
 * bare Bind for a statement the server had dropped (26000); the client's own prepared
 * statements (src/client/prepared-statements.ts) rely on that. Cached plans are no session
 * state another borrower can observe; keeping them spares the engine's functions a re-plan.
 */
export const RESET_SESSION = sql.unsafe`DO $reset$ BEGIN
  IF now() <> statement_timestamp() THEN
    RAISE EXCEPTION 'a transaction was left open on this connection: it is closed, not reset'
      USING ERRCODE = 'active_sql_transaction';
  END IF;
  EXECUTE 'CLOSE ALL';
  EXECUTE 'SET SESSION AUTHORIZATION DEFAULT';
  EXECUTE 'RESET ALL';
  EXECUTE 'UNLISTEN *';
  PERFORM pg_advisory_unlock_all();
  EXECUTE 'DISCARD TEMP';
  EXECUTE 'DISCARD SEQUENCES';
END $reset$`;

/** Above this many tracked checkouts (connections destroyed mid-query), forget them all. */
const MAX_TRACKED = 10_000;

/**
 * slonik resets every connection it takes back with `DISCARD ALL`, a round trip per query that
 * also throws away the plans PL/pgSQL cached for the engine's functions, so that every claim and
 * complete re-plans each statement inside them, and the prepared statements node-pg believes
 * parsed. The client's own pool disables that reset and carries this interceptor instead, which
 * sends RESET_SESSION before a connection goes back to the pool unless the connection was
 * checked out for one query of the client itself (an implicit single-query checkout whose every
 * statement is one of CLIENT_ROW_SCHEMAS').
 * Your own queries on getPool(), transactions (runInTransaction included) and explicit
 * connections are reset exactly as before. A failed reset makes slonik destroy the connection.
 */
export function createSessionResetInterceptor(): Interceptor {
  // Connection ids of the checkouts that have run only the client's own statements so far.
  const clean = new Set<string>();
  return {
    name: SESSION_RESET_INTERCEPTOR,
    afterPoolConnection: (context) => {
      if (clean.size > MAX_TRACKED) clean.clear(); // forgetting only costs a reset
      if (context.connectionType === 'IMPLICIT_QUERY') clean.add(context.connectionId);
      else clean.delete(context.connectionId);
      return null;
    },
    // transformQuery, not beforeQueryExecution: slonik calls it synchronously, where it awaits
    // every beforeQueryExecution hook (a promise turn per query). It also sees streamed queries.
    transformQuery: (context, query) => {
      if (!CLIENT_ROW_SCHEMAS.has(context.resultParser)) clean.delete(context.connectionId);
      return query;
    },
    // Synchronous for a clean connection (the common case): no promise per query.
    beforePoolConnectionRelease: (context, connection) => {
      if (clean.delete(context.connectionId)) return null;
      return connection.query(RESET_SESSION).then(() => null);
    },
  };
}
