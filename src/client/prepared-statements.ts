import { createHash } from 'node:crypto';
import type { Interceptor } from 'slonik';
import { CLIENT_ROW_SCHEMAS } from './session-reset.js';

export const PREPARED_STATEMENTS_INTERCEPTOR = 'pg-settle/prepared-statements';

/** The client's statements are a few fixed texts; more than this means something is wrong. */
const MAX_NAMES = 256;

/**
 * Runs the client's own statements (one of CLIENT_ROW_SCHEMAS') as named prepared statements,
 * as pgbench -M prepared does: each connection parses and plans a statement once, then sends
 * only Bind/Execute. The name is a digest of the SQL text, so one name always means one text
 * (node-pg refuses a name reused for another text). Only on the client's own pool: its session
 * reset keeps prepared statements (RESET_SESSION), where slonik's DISCARD ALL would drop them
 * behind node-pg's back. Any other statement passes unchanged.
 */
export function createPreparedStatementsInterceptor(): Interceptor {
  const names = new Map<string, string>();
  return {
    name: PREPARED_STATEMENTS_INTERCEPTOR,
    transformQuery: (context, query) => {
      if (query.name !== undefined || !CLIENT_ROW_SCHEMAS.has(context.resultParser)) return query;
      let name = names.get(query.sql);
      if (name === undefined) {
        if (names.size >= MAX_NAMES) return query;
        name = `pg_settle_${createHash('sha256').update(query.sql).digest('hex').slice(0, 24)}`;
        names.set(query.sql, name);
      }
      return { ...query, name };
    },
  };
}
