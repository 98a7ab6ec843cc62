// Server CPU of the cycle with and without the feed trigger (_990_feed), same database, same
// session, alternating: bench/sql/cycle-cpu-loop.sql (1000 claim + complete, no commits) timed
// from the backend's schedstat. A throwaway server; prints each run and the minimum per mode.
//   npx tsx bench/ab-feed-trigger.mts
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { quoteIdent, withDatabase } from '../src/db/database-url.js';
import { migrate } from '../src/db/migrate.js';
import { provisionPostgres } from '../src/dev-server/provision.js';
import { withPgClient } from '../src/db/with-pg-client.js';
const server = await provisionPostgres();
const dbName = `feed_ab_${process.pid}`;
await withPgClient(server.adminUrl, (c) => c.query(`create database ${quoteIdent(dbName)} template template0 encoding 'UTF8'`));
const url = withDatabase(server.adminUrl, dbName);
await migrate(url);
const loop = readFileSync('bench/sql/cycle-cpu-loop.sql', 'utf8').replace(/^\\timing on$/m, '').replaceAll('3000', '1000');
const c = new pg.Client({ connectionString: url });
await c.connect();
const pid = (await c.query('select pg_backend_pid() as pid')).rows[0].pid;
const cpu = () => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
await c.query(loop);
const res: { on: number[]; off: number[] } = { on: [], off: [] };
for (let r = 0; r < 4; r++) {
  for (const mode of ["off", "on"] as const) {
    await c.query(`alter table settle_private.operations ${mode === 'on' ? 'enable always' : 'disable'} trigger _990_feed`);
    await c.query(loop);
    const before = cpu();
    await c.query(loop);
    res[mode].push((cpu() - before) / 1000 / 1000);
  }
}
console.log(JSON.stringify(res));
for (const k of ["on", "off"] as const) console.log(k, "min us/cycle", Math.min(...res[k]).toFixed(1));
await c.end();
await withPgClient(server.adminUrl, (cl) => cl.query(`drop database ${quoteIdent(dbName)} with (force)`));
process.exit(0);
