import pg from 'pg';
import type { z } from 'zod';

// The console's connection: one small pool logged in as the operator's database login. What the
// page may show and do is what that login may read and execute (capabilities.ts); every read
// goes through the engine's public views, which already filter a tenant-bound login's rows.

export interface ConsoleDatabase {
  /** Rows of a parameterized query, each checked against `schema`. */
  rows<S extends z.ZodType>(schema: S, text: string, values?: readonly unknown[]): Promise<z.output<S>[]>;
  end(): Promise<void>;
}

export function openConsoleDatabase(connectionString: string): ConsoleDatabase {
  // Without statistics for a status behind the views (overview-data.ts), the planner prices each
  // bounded read of the overview like a scan of a quarter of the table, above jit_above_cost, and
  // compiling it costs ~100 ms for a read of a few milliseconds (as for settle.metrics, 00011).
  const pool = new pg.Pool({
    connectionString,
    max: 4,
    idleTimeoutMillis: 30_000,
    application_name: 'pg-settle console',
    options: '-c jit=off',
  });
  pool.on('error', () => {});
  return {
    async rows(schema, text, values = []) {
      const result = await pool.query(text, [...values]);
      return result.rows.map((row: unknown) => schema.parse(row));
    },
    end: () => pool.end(),
  };
}

/** The fields of a database error the page shows (an engine SQLSTATE, message, detail, hint). */
export interface ApiError {
  readonly sqlstate: string | null;
  readonly message: string;
  readonly detail: string | null;
  readonly hint: string | null;
}

export function apiError(error: unknown): ApiError {
  const e = (typeof error === 'object' && error !== null ? error : {}) as Record<string, unknown>;
  const code = typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code) ? e.code : null;
  return {
    sqlstate: code,
    message: error instanceof Error ? error.message : String(error),
    detail: typeof e.detail === 'string' && e.detail !== '' ? e.detail : null,
    hint: typeof e.hint === 'string' && e.hint !== '' ? e.hint : null,
  };
}
