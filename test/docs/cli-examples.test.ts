import { readFileSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createSettleClient } from '../../src/client/client.js';
import { quoteIdent, withDatabase } from '../../src/db/database-url.js';
import { createTestDatabase } from '../../src/testing/database.js';
import { fencedBlocks } from './markdown.js';
import { ROOT, type CliRun, runCli } from '../support/cli.js';

// Every `$ pg-settle ...` example of docs/cli.md runs, through the real binary, and its whole
// documented output must match what the command prints (stdout; stderr for an example whose
// output starts with `pg-settle: <error>`, which must fail; any other must succeed). Numbers and
// runs of spaces are compared as placeholders (counts, times and column widths differ from run
// to run); every word, line and line order must match. The examples of one fenced block run in
// order against one database seeded the way the examples assume (tenant acme, dead letters
// refund-17 and refund-18, the simulator tenants `stats` shows): a block is a session. Skipped,
// with the reason: the ones that need Citus. Compared by their first line only, with the reason:
// the ones that show a simulator run's history or a live system.
const doc = readFileSync(path.join(ROOT, 'docs/cli.md'), 'utf8');

interface Example {
  readonly line: number;
  readonly args: string[];
  /** The documented output, line by line. */
  readonly output: string[];
  readonly fails: boolean;
  /** The exit code an `$ echo $?` right after the example shows. */
  readonly exitCode?: number;
}

/** The examples of each fenced block, in order. */
function exampleBlocks(): Example[][] {
  const blocks: Example[][] = [];
  for (const block of fencedBlocks(doc)) {
    const lines = block.body.split('\n').map((l) => l.replace(/^ {2}/, ''));
    const found: Example[] = [];
    lines.forEach((text, i) => {
      const match = /^\$ pg-settle (.*)$/.exec(text);
      if (match === null) return;
      const next = lines.findIndex((l, j) => j > i && l.startsWith('$ '));
      const output = lines.slice(i + 1, next < 0 ? undefined : next);
      while (output.length > 0 && output.at(-1)?.trim() === '') output.pop();
      const echoed = next >= 0 && lines[next] === '$ echo $?' ? Number(lines[next + 1]) : undefined;
      found.push({
        line: block.line + i + 1,
        args: (match[1] ?? '').split(/\s+/),
        output,
        fails: (output[0] ?? '').startsWith('pg-settle: '),
        ...(echoed === undefined ? {} : { exitCode: echoed }),
      });
    });
    if (found.length > 0) blocks.push(found);
  }
  return blocks;
}

const SKIP: readonly [RegExp, string][] = [
  [/^distribute\b/, 'needs a Citus coordinator; test/citus runs distribute where Citus is installed'],
];

const FIRST_LINE_ONLY: readonly [RegExp, string][] = [
  [
    /^inspect sim\d+-/,
    "a simulator operation's history (a lease that lapsed, late reports): the seed settles the same key without them",
  ],
  [/^stats --watch\b/, "a live system's gauges and rates; one refresh of a quiet database shows fewer lines"],
  [
    /^feed$/,
    "the horizon's holder is the oldest open transaction of the whole server, which the other test files share",
  ],
];

/** (tenant, key) completed by attempt 2 after attempt 1 lost its lease, like the documented one. */
async function seedSettled(url: string, tenant: string, key: string): Promise<void> {
  const client = createSettleClient({ connectionString: url, poolSize: 1 });
  try {
    const input = {
      tenant,
      key,
      request: { amount_cents: 457924 },
      binding: { principal: 'payer-t1', scopes: ['payouts:write'], generation: 1 },
    };
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

/**
 * A line with every number as `0` and every run of white space as one space; a SHA-1 (a
 * migration's hash) and the migrations directory are placeholders too: they differ by version
 * and install.
 */
const shape = (line: string): string =>
  line
    .replace(/\b[0-9a-f]{40}\b/g, '<sha1>')
    .replace(/\(migrations directory: [^)]*\)/g, '(migrations directory: <dir>)')
    .replace(/\d+/g, '0')
    .replace(/\s+/g, ' ')
    .trim();

/** Output lines as compared: shaped, trailing empty lines dropped. An overdue-upkeep warning is
 * left out: whether a job is overdue depends on how long ago the test's template was migrated.
 * The feed horizon's holder (`stats`) is compared by its label: it is the oldest open transaction
 * of the whole server, which the other test files share. */
function shapeOutput(lines: readonly string[]): string[] {
  const shaped = lines
    .filter((line) => !line.startsWith('WARNING: upkeep job '))
    .map((line) => (line.startsWith('feed horizon held by: ') ? 'feed horizon held by: (any)' : shape(line)));
  while (shaped.length > 0 && shaped.at(-1) === '') shaped.pop();
  return shaped;
}

function run(args: readonly string[], databaseUrl: string): Promise<CliRun> {
  return runCli(args, { env: { DATABASE_URL: databaseUrl } });
}

/** A fresh migrated database with the examples' dead letters and the simulator tenants. */
async function seeded(): Promise<{ url: string; drop(): Promise<void> }> {
  const db = await createTestDatabase('cli_examples');
  const client = createSettleClient({ connectionString: db.url, poolSize: 1 });
  try {
    for (const key of ['refund-17', 'refund-18']) {
      const claimed = await client.claim({
        tenant: 'acme',
        key,
        request: { amount_cents: 1700 },
        binding: { principal: 'svc-refunds', generation: 1 },
        maxAttempts: 1,
      });
      if (claimed.outcome !== 'acquired') throw new Error(`seed: ${claimed.outcome}`);
      await client.fail(claimed.attempt, { code: 'bank_unavailable' }, { retryable: true });
    }
  } finally {
    await client.end();
  }
  // `stats` shows two tenants of a simulator run beside acme.
  for (const tenant of ['sim42-mx2u6c04fffb-t0', 'sim42-mx2u6c04fffb-t1'])
    await seedSettled(db.url, tenant, 'op-000001');
  return db;
}

async function withAdmin(url: string, query: string): Promise<void> {
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await admin.query(query);
  } finally {
    await admin.end();
  }
}

describe('docs/cli.md examples', { timeout: 240_000 }, () => {
  const blocks = exampleBlocks();
  const all = blocks.flat();

  it('finds the examples', () => {
    expect(all.length).toBeGreaterThanOrEqual(10);
  });

  const skipOf = (e: Example) => SKIP.find(([pattern]) => pattern.test(e.args.join(' ')));
  // Examples that cannot run here are reported as skipped (with the capability they need), never passed.
  for (const example of all) {
    const skip = skipOf(example);
    if (skip !== undefined) it.skip(`line ${example.line}: pg-settle ${example.args.join(' ')} (${skip[1]})`, () => {});
  }
  const runnable = blocks
    .map((block) => block.filter((e) => skipOf(e) === undefined))
    .filter((block) => block.length > 0);

  it.each(
    runnable.map(
      (block) => [block.map((e) => `line ${e.line}: pg-settle ${e.args.join(' ')}`).join('; '), block] as const,
    ),
  )('%s', async (_label, block) => {
    const db = await seeded();
    const empties = new Map<string, string>();
    try {
      for (const example of block) {
        // The inspect example shows an operation of a simulator run: the same tenant and key,
        // settled by its second attempt, are seeded here.
        if (example.args[0] === 'inspect' && /^sim\d+-/.test(example.args[1] ?? ''))
          await seedSettled(db.url, example.args[1] ?? '', example.args[2] ?? '');
        let args = [...example.args];
        // The error example of "Errors" shows a redrive of an operation that is not a dead letter.
        if (example.fails && args[0] === 'redrive') {
          const first = await run(['redrive', 'acme', 'refund-17'], db.url);
          expect(first.code).toBe(0);
        }
        // A --database-url in the doc stands for an empty database (migrate's examples), the
        // same one wherever the block names the same URL.
        const urlAt = args.indexOf('--database-url');
        if (urlAt >= 0) {
          const documented = args[urlAt + 1] ?? '';
          let empty = empties.get(documented);
          if (empty === undefined) {
            empty = `${new URL(db.url).pathname.slice(1)}_empty${empties.size}`;
            await withAdmin(db.url, `create database ${quoteIdent(empty)} template template0`);
            empties.set(documented, empty);
          }
          args[urlAt + 1] = withDatabase(db.url, empty);
        }
        // The refused migrate shows a database whose applied file differs from this version's:
        // the empty database is migrated, then the named file's recorded hash is changed.
        if (example.fails && args[0] === 'migrate') {
          const url = args[urlAt + 1] ?? '';
          expect((await run(['migrate', '--database-url', url], db.url)).code).toBe(0);
          const id = Number(/ (\d{5})_\w+\.sql differs/.exec(example.output[0] ?? '')?.[1]);
          expect(id).toBeGreaterThan(0);
          await withAdmin(url, `update migrations set hash = '${'cd'.repeat(20)}' where id = ${id}`);
        }
        if (args[0] === 'stats' && args.includes('--watch')) args = [...args, '--count', '1'];
        const result = await run(args, db.url);
        const printed = (example.fails ? result.stderr : result.stdout).split('\n');
        if (example.exitCode !== undefined) expect(result.code, result.stderr).toBe(example.exitCode);
        if (example.fails) expect(result.code, result.stderr).not.toBe(0);
        else expect(result.code, result.stderr).toBe(0);
        const label = `line ${example.line}: pg-settle ${example.args.join(' ')}`;
        const firstLineOnly = FIRST_LINE_ONLY.some(([pattern]) => pattern.test(example.args.join(' ')));
        if (firstLineOnly) expect(shape(printed[0] ?? ''), label).toBe(shape(example.output[0] ?? ''));
        else expect(shapeOutput(printed), label).toEqual(shapeOutput(example.output));
      }
    } finally {
      for (const empty of empties.values())
        await withAdmin(db.url, `drop database if exists ${quoteIdent(empty)} with (force)`);
      await db.drop();
    }
  });
});
