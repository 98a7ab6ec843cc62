import { readFileSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createSettleClient } from '../../src/client/client.js';
import { quoteIdent, withDatabase } from '../../src/db/database-url.js';
import { createTestDatabase } from '../../src/testing/database.js';
import { fencedBlocks } from './markdown.js';
import { ROOT, type CliRun, runCli } from '../support/cli.js';

// Every `$ pg-settle ...` example of docs/cli.md runs, through the real binary, against a fresh
// database seeded the way the examples assume (tenant acme, dead letters refund-17 and
// refund-18), and must exit as documented (an example followed by `pg-settle: <error>` fails,
// any other succeeds) with a first line that starts like the documented one (up to its first
// digit: counts and times differ from run to run). Skipped, with the reason: the ones that need
// Citus or the simulator's own data.
const doc = readFileSync(path.join(ROOT, 'docs/cli.md'), 'utf8');

interface Example {
  readonly line: number;
  readonly args: string[];
  /** The documented first line of output. */
  readonly first: string;
  readonly fails: boolean;
}

function examples(): Example[] {
  const found: Example[] = [];
  for (const block of fencedBlocks(doc)) {
    const lines = block.body.split('\n').map((l) => l.replace(/^ {2}/, ''));
    lines.forEach((text, i) => {
      const match = /^\$ pg-settle (.*)$/.exec(text);
      if (match === null) return;
      const first = lines[i + 1] ?? '';
      found.push({ line: block.line + i + 1, args: (match[1] ?? '').split(/\s+/), first, fails: first.startsWith('pg-settle: ') });
    });
  }
  return found;
}

const SKIP: readonly [RegExp, string][] = [
  [/^distribute\b/, 'needs a Citus coordinator; test/citus runs distribute where Citus is installed'],
];

/** (tenant, key) completed by attempt 2 after attempt 1 lost its lease, like the documented one. */
async function seedSettled(url: string, tenant: string, key: string): Promise<void> {
  const client = createSettleClient({ connectionString: url, poolSize: 1 });
  try {
    const input = { tenant, key, request: { amount_cents: 457924 }, binding: { principal: 'payer-t1', scopes: ['payouts:write'], generation: 1 } };
    const first = await client.claim(input);
    if (first.outcome !== 'acquired') throw new Error(`seed: ${first.outcome}`);
    await client.fail(first.attempt, { code: 'timeout' }, { retryable: true });
    const second = await client.claim(input);
    if (second.outcome !== 'acquired') throw new Error(`seed: ${second.outcome}`);
    const done = await client.complete(second.attempt, { payout_id: '749' });
    if (done.outcome !== 'settled') throw new Error(`seed: ${done.outcome}`);
  } finally {
    await client.end();
  }
}

const prefix = (line: string): string => (line.split(/\d/)[0] ?? '').replace(/\s+/g, ' ');

function run(args: readonly string[], databaseUrl: string): Promise<CliRun> {
  return runCli(args, { env: { DATABASE_URL: databaseUrl } });
}

/** A fresh migrated database with the examples' dead letters. */
async function seeded(): Promise<{ url: string; drop(): Promise<void> }> {
  const db = await createTestDatabase('cli_examples');
  const client = createSettleClient({ connectionString: db.url, poolSize: 1 });
  try {
    for (const key of ['refund-17', 'refund-18']) {
      const claimed = await client.claim({ tenant: 'acme', key, request: { amount_cents: 1700 }, binding: { principal: 'svc-refunds', generation: 1 }, maxAttempts: 1 });
      if (claimed.outcome !== 'acquired') throw new Error(`seed: ${claimed.outcome}`);
      await client.fail(claimed.attempt, { code: 'bank_unavailable' }, { retryable: true });
    }
  } finally {
    await client.end();
  }
  return db;
}

describe('docs/cli.md examples', { timeout: 240_000 }, () => {
  const all = examples();

  it('finds the examples', () => {
    expect(all.length).toBeGreaterThanOrEqual(10);
  });

  // Examples that cannot run here are reported as skipped (with the capability they need), never passed.
  const skipped = all.map((e) => [e, SKIP.find(([pattern]) => pattern.test(e.args.join(' ')))] as const);
  for (const [example, skip] of skipped) {
    if (skip !== undefined) it.skip(`line ${example.line}: pg-settle ${example.args.join(' ')} (${skip[1]})`, () => {});
  }
  const runnable = skipped.filter(([, skip]) => skip === undefined).map(([example]) => example);

  it.each(runnable.map((e) => [`line ${e.line}: pg-settle ${e.args.join(' ')}`, e] as const))('%s', async (_label, example) => {
    const db = await seeded();
    // The inspect example shows an operation of a simulator run: the same tenant and key,
    // settled by its second attempt, are seeded here.
    if (example.args[0] === 'inspect' && /^sim\d+-/.test(example.args[1] ?? '')) await seedSettled(db.url, example.args[1] ?? '', example.args[2] ?? '');
    const extra: string[] = [];
    let empty: string | undefined;
    try {
      let args = [...example.args];
      // The error example of "Errors" shows a redrive of an operation that is not a dead letter.
      if (example.fails && args[0] === 'redrive') {
        const first = await run(['redrive', 'acme', 'refund-17'], db.url);
        expect(first.code).toBe(0);
      }
      // migrate's examples run against an empty database (the URL in the doc stands for it).
      const urlAt = args.indexOf('--database-url');
      if (urlAt >= 0) {
        empty = `${new URL(db.url).pathname.slice(1)}_empty`;
        const admin = new pg.Client({ connectionString: db.url });
        await admin.connect();
        await admin.query(`create database ${quoteIdent(empty)} template template0`);
        await admin.end();
        args[urlAt + 1] = withDatabase(db.url, empty);
      }
      if (args[0] === 'stats' && args.includes('--watch')) extra.push('--count', '1');
      args = [...args, ...extra];
      const result = await run(args, db.url);
      const output = (example.fails ? result.stderr : result.stdout).split('\n')[0] ?? '';
      if (example.fails) expect(result.code, result.stderr).not.toBe(0);
      else expect(result.code, result.stderr).toBe(0);
      expect(prefix(output), `first line: ${output}`).toBe(prefix(example.first));
    } finally {
      if (empty !== undefined) {
        const admin = new pg.Client({ connectionString: db.url });
        await admin.connect();
        await admin.query(`drop database if exists ${quoteIdent(empty)} with (force)`);
        await admin.end();
      }
      await db.drop();
    }
  });
});
