import { describe, expect, it } from 'vitest';
import { rankOf, statusRank } from '../../src/checker/status-rank.js';
import { withPgClient } from '../../src/db/with-pg-client.js';
import type { Status } from '../../src/client/types.js';
import { useTestDatabase } from '../support/database.js';

// The checkers rank statuses in TypeScript (they judge rows already read); the database is the
// authority, so the table must say what settle.status_rank says for every value of the enum.
const db = useTestDatabase('checker_status_rank');

describe('statusRank', () => {
  it('equals settle.status_rank for every settle.status, in enum order', async () => {
    const rows = await withPgClient(db.url, async (c) => {
      const { rows } = await c.query<{ status: Status; rank: number }>(
        `select s::text as status, settle.status_rank(s) as rank from unnest(enum_range(null::settle.status)) s`,
      );
      return rows;
    });
    expect(rows.length).toBeGreaterThan(0);
    expect(rows.map((r) => [r.status, statusRank(r.status)])).toEqual(rows.map((r) => [r.status, r.rank]));
  });

  it('ranks NULL and non-statuses 0, like the SQL ranks NULL', async () => {
    const nullRank = await withPgClient(
      db.url,
      async (c) => (await c.query<{ rank: number }>('select settle.status_rank(null) as rank')).rows[0]?.rank,
    );
    expect(rankOf(null)).toBe(nullRank);
    expect(rankOf('bogus')).toBe(0);
  });
});
