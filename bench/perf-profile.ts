import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { CPU_LOOPS, readCpuLoop } from './lib/cpu.js';
import { seedReplayKeys, startBenchServer } from './lib/database.js';

/**
 * Where one backend's CPU goes: `npx tsx bench/perf-profile.ts [loop]`. For each loop of
 * bench/sql (cycle-cpu-loop.sql: the engine; spec4-cpu-loop.sql: the same rows in plain SQL;
 * a replay loop: claims of completed keys; a batch loop: claim_many + complete_many of 100
 * fresh keys), or the one whose name starts with `loop`, one backend runs it once to warm its
 * caches, then again under `perf record -e cpu-clock -g -p <backend pid>`; prints the top
 * symbols by self time and by inclusive time (perf report --children). Needs `perf` (Debian:
 * linux-perf) and a local server (the throwaway cluster the bench provisions).
 * docs/performance.md quotes it.
 */

const REPLAY_LOOP = {
  name: 'replay (claim of a completed key)',
  prepare: (url: string): Promise<void> => seedReplayKeys(url, 3000),
  sql: `do $$
declare c record;
begin
  for i in 1..3000 loop
    select * into c from settle.claim(tenant => 'bench', key => 'replay-' || i,
      request => jsonb_build_object('amount', i, 'currency', 'EUR'), principal => 'bench-app',
      scopes => array['payments.write'], binding_generation => 0, lease => interval '30 seconds', worker => 'loop');
    if c.outcome <> 'replay' then raise exception 'claim % answered %', i, c.outcome; end if;
  end loop;
end $$`,
};

// 30 batches of 100 fresh keys: settle.claim_many, then settle.complete_many of the lease holders.
const BATCH_LOOP = {
  name: 'batch (claim_many + complete_many of 100 fresh keys)',
  sql: `do $$
declare
  v_keys text[];
  v_requests jsonb[];
  v_attempts integer[];
  v_tokens uuid[];
  v_fingerprints text[];
  v_settled integer;
begin
  for b in 1..30 loop
    select array_agg('batch-' || b || '-' || i || '-' || txid_current()), array_agg(jsonb_build_object('amount', i, 'currency', 'EUR'))
      into v_keys, v_requests from generate_series(1, 100) i;
    select array_agg(c.attempt order by c.ordinal), array_agg(c.lease_token order by c.ordinal),
           array_agg(c.fingerprint order by c.ordinal)
      into v_attempts, v_tokens, v_fingerprints
      from settle.claim_many('bench', v_keys, v_requests, 'bench-app', array['payments.write'], 0) c
     where c.outcome = 'acquired';
    select count(*) into v_settled
      from settle.complete_many('bench', v_keys, v_attempts, v_tokens, v_fingerprints, 'bench-app',
                                array['payments.write'], 0, array_fill('{"charge": "ch"}'::jsonb, array[100])) r
     where r.outcome = 'settled';
    if v_settled <> 100 then raise exception 'batch % settled % keys', b, v_settled; end if;
  end loop;
end $$`,
};

function perfAvailable(): boolean {
  return spawnSync('perf', ['--version'], { stdio: 'ignore' }).status === 0;
}

async function profileLoop(url: string, name: string, sql: string, dir: string): Promise<string> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const pid = Number((await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid);
    await client.query('begin');
    await client.query(sql); // warm-up: plan caches, catalog caches, PL/pgSQL compilation
    await client.query('rollback');
    const data = path.join(dir, `${name.replace(/\W+/g, '_')}.data`);
    const perf = spawn('perf', ['record', '-q', '-e', 'cpu-clock', '-F', '2000', '-g', '-p', String(pid), '-o', data], {
      stdio: 'ignore',
    });
    await new Promise((r) => setTimeout(r, 300)); // perf attaches
    const started = process.hrtime.bigint();
    await client.query(sql);
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    perf.kill('SIGINT');
    await new Promise((r) => perf.once('exit', r));
    const report = (children: boolean): string =>
      spawnSync(
        'perf',
        [
          'report',
          '-i',
          data,
          '--stdio',
          '-g',
          'none',
          '--percent-limit',
          children ? '4' : '1.5',
          children ? '--children' : '--no-children',
          '--sort',
          'symbol',
        ],
        { encoding: 'utf8' },
      )
        .stdout.split('\n')
        .filter((l) => l.trim() !== '' && !l.startsWith('#'))
        .slice(0, children ? 45 : 30)
        .join('\n');
    return `## ${name}: ${ms.toFixed(0)} ms wall\n\nSelf time (--no-children, >= 1.5%):\n\n\`\`\`\n${report(false)}\n\`\`\`\n\nInclusive time (--children, >= 4%):\n\n\`\`\`\n${report(true)}\n\`\`\`\n`;
  } finally {
    await client.end();
  }
}

const only = process.argv[2];

async function main(): Promise<void> {
  if (!perfAvailable()) throw new Error('perf is not installed (apt-get install linux-perf)');
  const server = await startBenchServer(() => {});
  const dir = await mkdtemp(path.join(os.tmpdir(), 'settle-perf-'));
  try {
    console.log(`# perf profile of one backend, PostgreSQL ${server.serverVersion}\n`);
    const loops: { name: string; sql: string; prepare?: (url: string) => Promise<void> }[] = [
      { name: 'cycle (engine: claim + complete)', sql: (await readCpuLoop(CPU_LOOPS.cycle)).sql },
      { name: 'spec4 (the same rows in plain SQL)', sql: (await readCpuLoop(CPU_LOOPS.spec4)).sql },
      REPLAY_LOOP,
      BATCH_LOOP,
    ].filter((loop) => only === undefined || loop.name.startsWith(only));
    for (const loop of loops) {
      const db = await server.createRunDatabase('perf');
      try {
        await loop.prepare?.(db.url);
        console.log(await profileLoop(db.url, loop.name, loop.sql, dir));
      } finally {
        await db.drop();
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
    await server.stop();
  }
}

await main();
