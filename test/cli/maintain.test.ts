import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/client/client.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';
import { CLI_BIN, cliEnv, ROOT } from '../support/cli.js';

// `pg-settle maintain`, the fallback when pg_cron is not installed, as a loop (not
// --once): two loops on two "hosts" at once, as a settle_admin login, until SIGTERM. Every run
// either loop reports is recorded once in settle.upkeep (the job row's lock elects one runner),
// the lapsed lease gets expired, and both stop cleanly on SIGTERM (exit 0).

vi.setConfig({ testTimeout: 300_000 });

let db: TestDatabase;
let su: pg.Client;
let app: SettleClient;
let sweeperUrl: string;
const SWEEPER = `sweeper_${randomBytes(4).toString('hex')}`;
const binding = { principal: 'svc', scopes: ['payouts:write'], generation: 1 };

interface Loop {
  readonly child: ChildProcess;
  readonly lines: { job: string; outcome: string }[];
  readonly exited: Promise<number | null>;
}

function startLoop(): Loop {
  const env = cliEnv({ DATABASE_URL: sweeperUrl });
  const child = spawn(process.execPath, [CLI_BIN, 'maintain', '--interval', '1s', '--json'], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: { job: string; outcome: string }[] = [];
  let buffered = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    buffered += chunk.toString();
    const parts = buffered.split('\n');
    buffered = parts.pop() ?? '';
    for (const part of parts) if (part !== '') lines.push(JSON.parse(part) as { job: string; outcome: string });
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, lines, exited };
}

async function until(what: string, probe: () => Promise<boolean> | boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

beforeAll(async () => {
  db = await createTestDatabase('cli_maintain');
  su = new pg.Client({ connectionString: db.url });
  await su.connect();
  await su.query(`create role ${SWEEPER} login in role settle_admin`);
  const url = new URL(db.url);
  url.username = SWEEPER;
  sweeperUrl = url.toString();
  const appUrl = new URL(db.url);
  appUrl.searchParams.set('options', '-c role=settle_app');
  app = createSettleClient({ connectionString: appUrl.toString(), poolSize: 1 });
});

afterAll(async () => {
  await app?.end();
  if (su !== undefined) {
    await su.query(`drop role if exists ${SWEEPER}`).catch(() => {});
    await su.end();
  }
  await db?.drop();
});

describe('pg-settle maintain, the loop', () => {
  it('two loops at once: each run recorded once, the lapsed lease expired, both stop on SIGTERM', async () => {
    for (const job of ['expire_leases', 'dead_letter_in_doubt', 'purge', 'trim_feed']) {
      await su.query(`select settle.set_upkeep_interval(job => $1, every => interval '1 second')`, [job]);
    }
    const claim = await app.claim({ tenant: 'loop', key: 'lapsed', request: { n: 1 }, binding, leaseMs: 60_000 });
    expect(claim.outcome).toBe('acquired');
    await su.query(
      `update settle_private.operations set lease_expires_at = now() - interval '1 minute' where tenant = 'loop' and key = 'lapsed'`,
    );

    const loops = [startLoop(), startLoop()];
    try {
      // Each loop has made at least three calls (one line per job and call with --json).
      await until('three calls of each loop', () => loops.every((l) => l.lines.length >= 12), 240_000);
      const { rows } = await su.query(
        `select status::text from settle.operations where tenant = 'loop' and key = 'lapsed'`,
      );
      expect(rows).toEqual([{ status: 'pending' }]);
    } finally {
      for (const l of loops) l.child.kill('SIGTERM');
    }
    expect(await Promise.all(loops.map((l) => l.exited))).toEqual([0, 0]);

    const all = loops.flatMap((l) => l.lines);
    expect(new Set(all.map((l) => l.outcome))).toSatisfy((outcomes: Set<string>) =>
      [...outcomes].every((o) => ['ran', 'not_due', 'busy'].includes(o)),
    );
    const { rows: upkeep } = await su.query<{ job: string; runs: number; failures: number; last_by: string }>(
      `select job, runs::int, failures::int, last_by from settle.upkeep order by job`,
    );
    for (const job of upkeep) {
      const ran = all.filter((l) => l.job === job.job && l.outcome === 'ran').length;
      expect(ran, `${job.job}: the runs both loops reported are the runs recorded`).toBe(job.runs);
      expect(job.runs, job.job).toBeGreaterThan(0);
      expect(job).toMatchObject({ failures: 0, last_by: SWEEPER });
    }
  });
});
