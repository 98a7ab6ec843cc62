import type { DatabasePool, QuerySqlToken } from 'slonik';
import type { z } from 'zod';
import type { ResolvedRetryPolicy } from './retry.js';
import type { CallOptions } from './types.js';

/** Internals shared with run() and runInTransaction(). */
export interface ClientCore {
  getPool(): Promise<DatabasePool>;
  readonly retry: ResolvedRetryPolicy;
  /**
   * Runs one settle call (with transparent retries); `tenant` is for opt-in telemetry only; `key`,
   * the call's key, routes it to the node holding the key on Citus (citusRouting).
   */
  rows<S extends z.ZodType>(
    operation: string,
    query: QuerySqlToken<S>,
    options?: CallOptions,
    tenant?: string,
    key?: string,
  ): Promise<z.output<S>[]>;
}
