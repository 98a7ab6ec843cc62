import pg from 'pg';
import { createSettleClient, settleInterceptors, settleTypeParsers } from '../src/client/index.js';
import { createPool } from 'slonik';
const url = 'postgres://postgres@127.0.0.1:54329/perf_probe';
const admin = new pg.Client({ connectionString: url });
await admin.connect();
await admin.query('create extension if not exists pg_stat_statements');
await admin.query('select pg_stat_statements_reset()');
const client = process.env.NORESET ? createSettleClient({ pool: await createPool(url, { maxPoolSize: 8, typeParsers: settleTypeParsers(), interceptors: settleInterceptors(), queryRetryLimit: 0, resetConnection: process.env.NORESET === 'reset' ? async ({query}) => { await query('reset all'); } : async () => {} }) }) : createSettleClient({ connectionString: url, poolSize: 8 });
const n = Number(process.argv[2] ?? 200);
const t0 = performance.now(); const cpu0 = process.cpuUsage();
await Promise.all(Array.from({ length: 8 }, async (_, w) => {
  for (let i = 0; i < n / 8; i++) {
    const k = Math.floor(Math.random() * 1e12);
    const o = await client.run({ tenant: 'bench', key: `p-${k}-${w}`, request: { amount: k % 10000, currency: 'EUR' },
      binding: { principal: 'bench-app', scopes: ['payments.write'], generation: 0 }, leaseMs: 30000, worker: 'node' },
      async () => ({ charge: `ch-${k}` }));
    if (o.outcome !== 'completed') throw new Error(JSON.stringify(o));
  }
}));
{ const c = process.cpuUsage(cpu0); console.log('cycles/s', (n / ((performance.now() - t0) / 1000)).toFixed(0), 'node cpu us/cycle', ((c.user + c.system) / n).toFixed(0), 'user', (c.user/n).toFixed(0), 'sys', (c.system/n).toFixed(0)); }
await client.end();
const r = await admin.query(`select calls, round(total_exec_time::numeric,1) ms, left(regexp_replace(query, '\\s+', ' ', 'g'), 90) q from pg_stat_statements where dbid = (select oid from pg_database where datname = current_database()) and toplevel order by calls desc limit 12`);
console.table(r.rows);
await admin.end();
