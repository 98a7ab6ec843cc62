// Server CPU and WAL per key of the batches' two paths on one migrated database: the set-based
// path (settle_private._claim_new_keys / _complete_holders) against the key-by-key path (a
// settle.claim / settle.complete per key), both behind settle.claim_many + settle.complete_many of
// fresh keys. The path is switched by redefining settle_private._set_based_batches() in the
// database (a throwaway one: the definition is put back at the end), in alternating order round
// by round; CPU from the backend's schedstat, WAL from pg_current_wal_lsn(). Medians are printed.
// Needs the server on this machine and a superuser URL.
//   npx tsx bench/ab/batch-paths.ts <url> [batches per round = 10] [rounds = 6] [keys per batch = 100]
import { readFileSync } from 'node:fs';
import pg from 'pg';

const [url, batchesArg, roundsArg, keysArg] = process.argv.slice(2);
if (url === undefined) throw new Error('usage: npx tsx bench/ab/batch-paths.ts <url> [batches] [rounds] [keys]');
const batches = Number(batchesArg ?? 10);
const rounds = Number(roundsArg ?? 6);
const keys = Number(keysArg ?? 100);

const client = new pg.Client({ connectionString: url });
await client.connect();
const pid: number = (await client.query('select pg_backend_pid() as pid')).rows[0].pid;
const cpuNs = (): number => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
const walBytes = async (): Promise<number> =>
  Number((await client.query("select pg_current_wal_lsn() - '0/0'::pg_lsn as b")).rows[0].b);
const original: string = (
  await client.query("select pg_get_functiondef('settle_private._set_based_batches()'::regprocedure) as def")
).rows[0].def;

let serial = 0;
async function batch(): Promise<void> {
  const prefix = `ab-${process.pid}-${serial++}-`;
  const names = Array.from({ length: keys }, (_, i) => `${prefix}${i}`);
  const claimed = await client.query(
    `select attempt, lease_token, fingerprint, outcome
       from settle.claim_many('bench', $1::text[], $2::jsonb[], 'bench-app', array['payments.write'], 0) order by ordinal`,
    [names, names.map((_, i) => JSON.stringify({ amount: i, currency: 'EUR' }))],
  );
  if (claimed.rows.some((r) => r.outcome !== 'acquired')) throw new Error('a key was not acquired');
  const done = await client.query(
    `select outcome from settle.complete_many('bench', $1::text[], $2::int[], $3::uuid[], $4::text[], 'bench-app',
                                               array['payments.write'], 0, $5::jsonb[])`,
    [
      names,
      claimed.rows.map((r) => r.attempt),
      claimed.rows.map((r) => r.lease_token),
      claimed.rows.map((r) => r.fingerprint),
      names.map((n) => JSON.stringify({ charge: n })),
    ],
  );
  if (done.rows.some((r) => r.outcome !== 'settled')) throw new Error('a key was not settled');
}

async function usePath(setBased: boolean): Promise<void> {
  if (setBased) await client.query(original);
  else
    await client.query(
      "create or replace function settle_private._set_based_batches() returns boolean language sql stable as 'select false'",
    );
  await batch(); // warm the session's plans
  await batch();
}

const runs = {
  'set-based': { cpu: [] as number[], wal: [] as number[] },
  'key by key': { cpu: [] as number[], wal: [] as number[] },
};
try {
  for (let round = 0; round < rounds; round += 1) {
    const order = round % 2 === 0 ? (['set-based', 'key by key'] as const) : (['key by key', 'set-based'] as const);
    for (const path of order) {
      await usePath(path === 'set-based');
      const [cpu0, wal0] = [cpuNs(), await walBytes()];
      for (let i = 0; i < batches; i += 1) await batch();
      const [cpu1, wal1] = [cpuNs(), await walBytes()];
      runs[path].cpu.push((cpu1 - cpu0) / batches / keys / 1000);
      runs[path].wal.push((wal1 - wal0) / batches / keys);
      console.log(`${path} round=${round + 1} cpu_us_per_key=${runs[path].cpu.at(-1)?.toFixed(1)}`);
    }
  }
} finally {
  await client.query(original);
  await client.end();
}
const median = (xs: readonly number[]): number =>
  [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
const set = median(runs['set-based'].cpu);
const each = median(runs['key by key'].cpu);
console.log(
  `${keys} keys per batch: server CPU per key (claim + complete) set-based ${set.toFixed(1)} us, key by key ${each.toFixed(1)} us, ratio ${(set / each).toFixed(2)}x; WAL per key ${median(runs['set-based'].wal).toFixed(0)} / ${median(runs['key by key'].wal).toFixed(0)} B`,
);
