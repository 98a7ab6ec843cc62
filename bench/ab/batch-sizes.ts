// Cost per key of batches of large values against the same keys as single calls, on one migrated
// database: claim_many of requests of REQUEST_BYTES (64,000 by default) and complete_many of
// results of RESULT_BYTES (150,000 by default; smaller where the batch, its first key listed twice,
// would pass the 16 MiB a batch may hold), each at several batch sizes, beside settle.claim /
// settle.complete of the same values one call at a time, both paths of the batches (new keys:
// set-based; a key listed twice sends a batch key by key). Prints milliseconds per key and the
// batch's ratio against the single calls; a flat cost per key keeps the ratio near 1 or below at
// every size. Wall time of one connection, so run it on a quiet machine; values, not pass/fail.
//   npx tsx bench/ab/batch-sizes.ts <url> [sizes = 10,25,100]
import pg from 'pg';

const [url, sizesArg] = process.argv.slice(2);
if (url === undefined) throw new Error('usage: npx tsx bench/ab/batch-sizes.ts <url> [sizes = 10,25,100]');
const sizes = (sizesArg ?? '10,25,100').split(',').map(Number);
const REQUEST_BYTES = Number(process.env.REQUEST_BYTES ?? 64_000);
const RESULT_BYTES = Number(process.env.RESULT_BYTES ?? 150_000);

const client = new pg.Client({ connectionString: url });
await client.connect();
await client.query('set role settle_app');
let serial = 0;
const tenant = `sizes-${process.pid}`;
const request = (i: number) => JSON.stringify({ i, pad: 'r'.repeat(REQUEST_BYTES) });
const MAX_BATCH_BYTES = 16_777_216;
let resultBytes = RESULT_BYTES;
const result = (i: number) => JSON.stringify({ i, pad: 's'.repeat(resultBytes) });

interface Ticket {
  key: string;
  attempt: number;
  lease_token: string;
  fingerprint: string;
}

async function claimMany(keys: string[]): Promise<Ticket[]> {
  const { rows } = await client.query(
    `select key, attempt, lease_token, fingerprint, outcome from settle.claim_many($1, $2::text[], $3::jsonb[], 'p')`,
    [tenant, keys, keys.map((_, i) => request(i))],
  );
  return rows.filter((r) => r.outcome === 'acquired');
}

async function timed(work: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await work();
  return performance.now() - t0;
}

function names(n: number): string[] {
  const prefix = `k${serial++}-`;
  return Array.from({ length: n }, (_, i) => `${prefix}${i}`);
}

const rows: string[][] = [];
for (const n of sizes) {
  resultBytes = Math.min(RESULT_BYTES, Math.floor(MAX_BATCH_BYTES / (n + 1)) - 64);
  // Claims of large requests: singles, a set-based batch, a key-by-key batch (first key twice).
  const single = names(n);
  const claimSingle = await timed(async () => {
    for (const [i, key] of single.entries())
      await client.query(`select settle.claim($1, $2, $3::jsonb, 'p')`, [tenant, key, request(i)]);
  });
  const setBased = names(n);
  let tickets: Ticket[] = [];
  const claimSet = await timed(async () => {
    tickets = await claimMany(setBased);
  });
  const keyed = names(n);
  const claimKeyed = await timed(() =>
    client.query(`select count(*) from settle.claim_many($1, $2::text[], $3::jsonb[], 'p')`, [
      tenant,
      [keyed[0], ...keyed],
      [request(0), ...keyed.map((_, i) => request(i))],
    ]),
  );
  // Completes of large results: singles of the single claims' tickets, a set-based batch of the
  // batch's tickets, a key-by-key batch (first ticket twice) of another batch's tickets.
  const singleTickets = await claimMany(names(n));
  const completeSingle = await timed(async () => {
    for (const [i, t] of singleTickets.entries())
      await client.query(`select settle.complete($1, $2, $3, $4, $5, 'p', '{}', 0, $6::jsonb)`, [
        tenant,
        t.key,
        t.attempt,
        t.lease_token,
        t.fingerprint,
        result(i),
      ]);
  });
  const completeArgs = (ts: Ticket[]) => [
    tenant,
    ts.map((t) => t.key),
    ts.map((t) => t.attempt),
    ts.map((t) => t.lease_token),
    ts.map((t) => t.fingerprint),
    ts.map((_, i) => result(i)),
  ];
  const completeSql = `select count(*) from settle.complete_many($1, $2::text[], $3::int[], $4::uuid[], $5::text[], 'p', '{}', 0, $6::jsonb[])`;
  const completeSet = await timed(() => client.query(completeSql, completeArgs(tickets)));
  const keyedTickets = await claimMany(names(n));
  const completeKeyed = await timed(() =>
    client.query(completeSql, completeArgs([keyedTickets[0] as Ticket, ...keyedTickets])),
  );
  const perKey = (ms: number) => (ms / n).toFixed(2);
  const ratio = (batch: number, single: number) => `${(batch / single).toFixed(2)}x`;
  rows.push(
    [
      `claim ${REQUEST_BYTES} B x ${n}`,
      perKey(claimSingle),
      perKey(claimSet),
      ratio(claimSet, claimSingle),
      perKey(claimKeyed),
      ratio(claimKeyed, claimSingle),
    ],
    [
      `complete ${RESULT_BYTES} B x ${n}`,
      perKey(completeSingle),
      perKey(completeSet),
      ratio(completeSet, completeSingle),
      perKey(completeKeyed),
      ratio(completeKeyed, completeSingle),
    ],
  );
}
console.log('| calls | single ms/key | set-based ms/key | vs single | key by key ms/key | vs single |');
console.log('|---|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.join(' | ')} |`);
await client.end();
