import pg from 'pg';
const url = 'postgres://postgres@127.0.0.1:54329/perf_probe';
const admin = new pg.Client({ connectionString: url });
await admin.connect();
await admin.query('select pg_stat_statements_reset()');
const n = Number(process.argv[2] ?? 200);
const conns = await Promise.all(Array.from({ length: 8 }, async () => { const c = new pg.Client({ connectionString: url }); await c.connect(); return c; }));
const CLAIM = { name: 'c', text: `select outcome, attempt, lease_token, fingerprint from settle.claim(tenant => 'bench', key => $1, request => $2::jsonb, principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0, lease => interval '30 seconds', worker => 'node')` };
const COMPLETE = { name: 'd', text: `select outcome from settle.complete(tenant => 'bench', key => $1, attempt => $2, lease_token => $3, fingerprint => $4, principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0, result => $5::jsonb)` };
const t0 = performance.now(); const cpu0 = process.cpuUsage();
await Promise.all(conns.map(async (c, w) => {
  for (let i = 0; i < n / 8; i++) {
    const k = Math.floor(Math.random() * 1e12); const key = `q-${k}-${w}`;
    const cl = (await c.query({ ...CLAIM, values: [key, JSON.stringify({ amount: k % 10000, currency: 'EUR' })] })).rows[0];
    const d = (await c.query({ ...COMPLETE, values: [key, cl.attempt, cl.lease_token, cl.fingerprint, JSON.stringify({ charge: `ch-${k}` })] })).rows[0];
    if (d.outcome !== 'settled') throw new Error(d.outcome);
  }
}));
{ const c = process.cpuUsage(cpu0); console.log('cycles/s', (n / ((performance.now() - t0) / 1000)).toFixed(0), 'node cpu us/cycle', ((c.user + c.system) / n).toFixed(0), 'user', (c.user/n).toFixed(0), 'sys', (c.system/n).toFixed(0)); }
await Promise.all(conns.map((c) => c.end()));
const r = await admin.query(`select calls, round(total_exec_time::numeric,1) ms, left(regexp_replace(query, '\\s+', ' ', 'g'), 90) q from pg_stat_statements where dbid = (select oid from pg_database where datname = current_database()) and toplevel order by calls desc limit 12`);
console.table(r.rows);
await admin.end();
