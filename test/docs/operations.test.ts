// Keeps docs/operations.md honest: every ```sql block runs against a freshly migrated database
// seeded with the operations the runbook names (each block in its own transaction, rolled back,
// as the role its first comment lines give), and every `pg-settle <command> --flag` it shows is
// a real command and flag of the CLI.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMMON_FLAGS } from '../../src/cli/command.js';
import { COMMANDS } from '../../src/cli/commands/index.js';
import { expireLease } from '../../src/testing/clock.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';
import { fencedBlocks, inlineCodeSpans } from './markdown.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const doc = await readFile(path.join(repoRoot, 'docs/operations.md'), 'utf8');

/**
 * A few blocks may be skipped (pg_cron is not installed; the setup steps, which create a database
 * and login roles, run in order in test/docs/setup-steps.test.ts); more means the doc drifted out
 * of the tests.
 */
const MAX_SKIPPED = 5;
const ROLES = ['superuser', 'settle_admin', 'settle_readonly', 'settle_app'] as const;
type Role = (typeof ROLES)[number];

interface Snippet {
  readonly sql: string;
  readonly line: number;
  readonly role: Role;
  readonly skipReason: string | undefined;
  readonly failsWith: string | undefined;
}

/** Reads the directives from a block's leading `--` comment lines. */
function parseSnippet(body: string, line: number): Snippet {
  const leading: string[] = [];
  for (const text of body.split('\n')) {
    if (!text.startsWith('--')) break;
    leading.push(text);
  }
  const skip = /^-- not run by the test: (\S.*)$/.exec(body.split('\n')[0] ?? '');
  const role = leading.map((text) => /^-- as (\S+)$/.exec(text)?.[1]).find((r) => r !== undefined) ?? 'settle_admin';
  if (!ROLES.includes(role as Role)) throw new Error(`docs/operations.md:${line}: unknown role "${role}"`);
  const failsWith = leading
    .map((text) => /^-- fails with SQLSTATE ([0-9A-Z]{5})$/.exec(text)?.[1])
    .find((c) => c !== undefined);
  return { sql: body, line, role: role as Role, skipReason: skip?.[1], failsWith };
}

const snippets = fencedBlocks(doc)
  .filter((block) => block.lang === 'sql')
  .map((block) => parseSnippet(block.body, block.line));
const runnable = snippets.filter((s) => s.skipReason === undefined);

const BINDING = { principal: 'svc-checkout', scopes: ['payments:write'], generation: 7 };

interface Claimed {
  outcome: string;
  attempt: number;
  lease_token: string;
  fingerprint: string;
}

let db: TestDatabase;
let client: pg.Client;
/** What each runnable snippet answered: one result per statement, and its follow-up check. */
const outcomes = new Map<
  Snippet,
  { results: pg.QueryResult[]; error: (Error & { code?: string }) | undefined; after?: pg.QueryResult }
>();

/** Queries run in the same transaction right after the snippet containing the key (before the rollback). */
const FOLLOW_UPS: Record<string, string> = {
  'cross join lateral settle.redrive': 'select key from settle.dead_letters order by key',
};

async function claim(
  key: string,
  request: object,
  opts: { worker?: string; lease?: string; maxAttempts?: number } = {},
): Promise<Claimed> {
  const { rows } = await client.query<Claimed>(
    `select outcome, attempt, lease_token, fingerprint
       from settle.claim(tenant => 'acme', key => $1, request => $2, principal => $3, scopes => $4,
                         binding_generation => $5, lease => $6, worker => $7, max_attempts => $8)`,
    [
      key,
      JSON.stringify(request),
      BINDING.principal,
      BINDING.scopes,
      BINDING.generation,
      opts.lease ?? '30 seconds',
      opts.worker ?? null,
      opts.maxAttempts ?? 5,
    ],
  );
  const row = rows[0];
  if (row?.outcome !== 'acquired') throw new Error(`seed: claim of ${key} answered ${row?.outcome}`);
  return row;
}

/** complete / fail / report_unknown for an acquired attempt; resolves to "outcome/reason". */
async function observe(
  fn: 'complete' | 'fail' | 'report_unknown',
  key: string,
  c: Claimed,
  extra = '',
  params: unknown[] = [],
  generation = BINDING.generation,
): Promise<string> {
  const { rows } = await client.query<{ outcome: string; reason: string | null }>(
    `select outcome, reason from settle.${fn}(tenant => 'acme', key => $1, attempt => $2, lease_token => $3,
       fingerprint => $4, principal => $5, scopes => $6, binding_generation => $7${extra})`,
    [key, c.attempt, c.lease_token, c.fingerprint, BINDING.principal, BINDING.scopes, generation, ...params],
  );
  return `${rows[0]?.outcome}/${rows[0]?.reason}`;
}

/** The operations the runbook's examples name, all under tenant acme, through the API as settle_app. */
async function seed(): Promise<void> {
  await client.query('set role settle_app');
  const order42 = { amount: 1250, currency: 'EUR', to: 'acct_9' };
  // order-42, charged twice: attempt 1 stalls past its lease, attempt 2 settles, then attempt 1's
  // effect completes too (late_result).
  const a1 = await claim('order-42', order42, { worker: 'worker-a' });
  await client.query('reset role');
  expect(await expireLease(client, 'acme', 'order-42')).toBe(true);
  await client.query('set role settle_app');
  const a2 = await claim('order-42', order42, { worker: 'worker-b' });
  expect(await observe('complete', 'order-42', a2, ', result => $8', ['{"payment_id": "pay_2"}'])).toBe(
    'settled/current_attempt',
  );
  expect(await observe('complete', 'order-42', a1, ', result => $8', ['{"payment_id": "pay_1"}'])).toBe(
    'already_settled/late_success',
  );
  // A client reusing the key for another payload: a claim conflict in the audit log.
  const reuse = await client.query<{ outcome: string }>(
    `select outcome from settle.claim(tenant => 'acme', key => 'order-42', request => '{"amount": 9900}', principal => $1, scopes => $2, binding_generation => $3)`,
    [BINDING.principal, BINDING.scopes, BINDING.generation],
  );
  expect(reuse.rows[0]?.outcome).toBe('conflict');

  // refund-17, a dead letter: its only allowed attempt failed retryably.
  const r1 = await claim('refund-17', { amount: 300, currency: 'EUR', to: 'acct_2' }, { maxAttempts: 1 });
  expect(
    await observe('fail', 'refund-17', r1, ', error => $8, retryable => true', ['{"code": "bank_unavailable"}']),
  ).toBe('settled/attempts_exhausted');
  // refund-18, a dead letter with another error (the bulk redrive must leave it alone).
  const r2 = await claim('refund-18', { amount: 400, currency: 'EUR', to: 'acct_2' }, { maxAttempts: 1 });
  expect(await observe('fail', 'refund-18', r2, ', error => $8, retryable => true', ['{"code": "card_expired"}'])).toBe(
    'settled/attempts_exhausted',
  );

  // order-43 in flight (a live lease); order-44 stuck on a dead worker (a lapsed lease).
  await claim('order-43', { amount: 10, currency: 'EUR', to: 'acct_3' }, { worker: 'worker-c', lease: '1 hour' });
  await claim('order-44', { amount: 20, currency: 'EUR', to: 'acct_4' }, { worker: 'worker-d' });
  await client.query('reset role');
  expect(await expireLease(client, 'acme', 'order-44')).toBe(true);
  await client.query('set role settle_app');

  // order-45 unknown (the caller lost the response); order-46 conflict (a success under an old binding).
  const u1 = await claim('order-45', { amount: 45, currency: 'EUR', to: 'acct_5' });
  expect(await observe('report_unknown', 'order-45', u1)).toBe('recorded/outcome_unknown');
  const c1 = await claim('order-46', { amount: 46, currency: 'EUR', to: 'acct_6' });
  expect(
    await observe('complete', 'order-46', c1, ', result => $8', ['{"payment_id": "pay_46"}'], BINDING.generation - 1),
  ).toBe('conflict/lock_mismatch');
  await client.query('reset role');
  // Age the unknown operation past the runbook's 15-minute threshold (test-only, as superuser,
  // like expireLease: no engine call can backdate a row).
  await client.query(
    `update settle_private.operations set updated_at = now() - interval '1 hour' where tenant = 'acme' and key = 'order-45'`,
  );
}

beforeAll(async () => {
  db = await createTestDatabase('operations_docs');
  client = new pg.Client({ connectionString: db.url });
  await client.connect();
  await seed();
  for (const snippet of runnable) {
    await client.query(`begin; set local statement_timeout = '20s'`);
    if (snippet.role !== 'superuser') await client.query(`set local role ${snippet.role}`);
    try {
      const answer = (await client.query(snippet.sql)) as pg.QueryResult | pg.QueryResult[];
      const followUp = Object.entries(FOLLOW_UPS).find(([text]) => snippet.sql.includes(text))?.[1];
      const after = followUp === undefined ? undefined : await client.query(followUp);
      outcomes.set(snippet, {
        results: Array.isArray(answer) ? answer : [answer],
        error: undefined,
        ...(after && { after }),
      });
    } catch (error) {
      outcomes.set(snippet, { results: [], error: error as Error & { code?: string } });
    } finally {
      await client.query('rollback');
    }
  }
});

afterAll(async () => {
  await client?.end();
  await db?.drop();
});

/** The outcome of the one runnable snippet containing `text` (fails unless exactly one matches). */
function answerOf(text: string): pg.QueryResult[] {
  const matching = runnable.filter((s) => s.sql.includes(text));
  expect(matching, `exactly one SQL block of docs/operations.md contains ${JSON.stringify(text)}`).toHaveLength(1);
  const outcome = outcomes.get(matching[0] as Snippet);
  expect(outcome?.error, `the block at line ${matching[0]?.line}`).toBeUndefined();
  return outcome?.results ?? [];
}

describe('docs/operations.md SQL blocks', () => {
  it('has SQL blocks, and skips only the few marked "not run by the test"', () => {
    expect(snippets.length).toBeGreaterThanOrEqual(15);
    const skipped = snippets.filter((s) => s.skipReason !== undefined);
    expect(
      skipped.length,
      `skipped: ${skipped.map((s) => `line ${s.line} (${s.skipReason})`).join(', ')}`,
    ).toBeLessThanOrEqual(MAX_SKIPPED);
    // The marker must be the first line: anywhere else it is a mistake, not a skip.
    for (const s of snippets.filter((x) => x.skipReason === undefined))
      expect(s.sql, `line ${s.line}`).not.toContain('not run by the test');
  });

  it('runs every block without error, or with exactly the SQLSTATE it says it fails with', () => {
    const problems: string[] = [];
    for (const snippet of runnable) {
      const error = outcomes.get(snippet)?.error;
      const where = `docs/operations.md:${snippet.line} (as ${snippet.role})`;
      if (snippet.failsWith === undefined && error !== undefined)
        problems.push(`${where}: ${error.code} ${error.message}`);
      if (snippet.failsWith !== undefined && error?.code !== snippet.failsWith) {
        problems.push(
          `${where}: expected SQLSTATE ${snippet.failsWith}, got ${error === undefined ? 'no error' : `${error.code} ${error.message}`}`,
        );
      }
    }
    expect(problems).toEqual([]);
  });

  it('shows settle.stats with the seeded counts', () => {
    const [stats] = answerOf('from settle.stats\n');
    expect(stats?.rows).toEqual([
      {
        tenant: 'acme',
        operations: '7',
        pending: '0',
        running: '2',
        unknown: '1',
        conflict: '1',
        failed: '2',
        completed: '1',
        dead_lettered: '2',
        needs_reconciliation: '0',
        in_flight: '1',
        lapsed_leases: '1',
        attempts: '8',
      },
    ]);
  });

  it('finds the dead letter, old unknowns, conflicts and late results', () => {
    const [deadLetters, byCode] = answerOf('from settle.dead_letters\n order by dead_lettered_at');
    expect(deadLetters?.rows.map((r) => r.key)).toEqual(['refund-17', 'refund-18']);
    expect(byCode?.rows.map((r) => `${r.code}=${r.dead_letters}`).sort()).toEqual([
      'bank_unavailable=1',
      'card_expired=1',
    ]);
    expect(answerOf("where status = 'unknown'")[0]?.rows.map((r) => r.key)).toEqual(['order-45']);
    const conflicts = answerOf("detail -> 'conflict_on' as conflict_on")[0]?.rows.map((r) => [r.event, r.conflict_on]);
    expect(conflicts).toEqual(
      expect.arrayContaining([
        ['claim', ['request']],
        ['complete', ['binding_generation']],
      ]),
    );
    const late = answerOf('where late_result is not null')[0]?.rows;
    expect(late?.map((r) => [r.key, r.attempt, r.late_result])).toEqual([['order-42', 1, { payment_id: 'pay_1' }]]);
  });

  it('the charged-twice queries show one settlement and the late result on the other attempt', () => {
    const [operation, attempts, audit, sameRequest] = answerOf(
      "from settle.inspect(tenant => 'acme', key => 'order-42');",
    );
    expect(operation?.rows[0]).toMatchObject({
      status: 'completed',
      settled_attempt: 2,
      result: { payment_id: 'pay_2' },
    });
    expect(attempts?.rows.map((r) => [r.attempt, r.settled, r.late_result])).toEqual([
      [1, false, { payment_id: 'pay_1' }],
      [2, true, null],
    ]);
    expect(audit?.rows.map((r) => `${r.event}/${r.outcome}`)).toContain('complete/already_settled');
    expect(sameRequest?.rows.map((r) => r.key)).toEqual(['order-42']);
  });

  it('the maintenance and repair calls do what the runbook says', () => {
    expect(answerOf('join settle.attempts a on a.tenant')[0]?.rows.map((r) => [r.key, r.in_flight])).toEqual([
      ['order-43', true],
      ['order-44', false],
    ]);
    const sweeps = runnable.filter((s) => s.sql.trim() === 'select * from settle.expire_leases(batch_size => 1000);');
    expect(sweeps.length).toBeGreaterThan(0);
    for (const sweep of sweeps)
      expect(outcomes.get(sweep)?.results[0]?.rows).toEqual([{ expired: 1, dead_lettered: 0 }]);
    const redriven = answerOf('cross join lateral settle.redrive')[0]?.rows;
    expect(redriven).toEqual([
      { tenant: 'acme', key: 'refund-17', status: 'pending', attempt: 1, max_attempts: 4, redrive_count: 1 },
    ]);
    const bulk = runnable.find((s) => s.sql.includes('cross join lateral settle.redrive')) as Snippet;
    expect(outcomes.get(bulk)?.after?.rows, 'the other dead letter is left alone').toEqual([{ key: 'refund-18' }]);
    expect(answerOf('settle.purge(older_than => interval')[1]?.rows).toEqual([{ purge: 0 }]);
  });

  it('the resolutions settle the unknown and the conflicting operation, audited with the reason', () => {
    expect(answerOf("key => 'order-45') op,")[0]?.rows).toEqual([
      {
        outcome: 'resolved',
        status: 'completed',
        status_before: 'unknown',
        settled_attempt: 2,
        result: { payment_id: 'pay_45' },
      },
    ]);
    expect(answerOf("key => 'order-46') op,")[0]?.rows).toEqual([
      { outcome: 'resolved', status: 'failed', status_before: 'conflict', error: { code: 'no_charge' } },
    ]);
    const [jobs, run] = answerOf('from settle.upkeep order by job');
    // Whether a job that never ran is overdue yet depends on how long ago the database was
    // migrated (twice its interval plus a minute): only the jobs listed are checked here.
    expect(jobs?.rows.map((r) => r.job)).toEqual(['dead_letter_in_doubt', 'expire_leases', 'purge', 'trim_feed']);
    expect(run?.rows.map((r) => [r.job, r.outcome])).toEqual([
      ['expire_leases', 'ran'],
      ['dead_letter_in_doubt', 'ran'],
      ['purge', 'ran'],
      ['trim_feed', 'ran'],
    ]);
    expect(answerOf("settle.set_retention(older_than => interval '30 days')")[0]?.rows).toEqual([
      { set_retention: { days: 30 } },
    ]);
  });

  it('a resolution of a key that is already settled changes nothing (already_final)', async () => {
    const resolution = runnable.find((s) => s.sql.includes("key => 'order-45') op,")) as Snippet;
    await client.query('begin');
    try {
      await client.query('set local role settle_admin');
      const { rows } = await client.query(resolution.sql.replace("key => 'order-45'", "key => 'order-42'"));
      expect(rows).toEqual([
        {
          outcome: 'already_final',
          status: 'completed',
          status_before: 'completed',
          settled_attempt: 2,
          result: { payment_id: 'pay_2' },
        },
      ]);
    } finally {
      await client.query('rollback');
    }
  });
});

interface Invocation {
  readonly command: string;
  readonly flags: string[];
  readonly source: string;
}

const SHELL_OPERATOR = /^(\||\|\||&&|;|&|[0-9]*>>?.*|<.*)$/;

/** `pg-settle <command> ...flags` invocations in a shell line or an inline code span. */
function invocationsIn(text: string): Invocation[] {
  const found: Invocation[] = [];
  const tokens = text
    .replace(/(^|\s)#.*$/, '')
    .trim()
    .split(/\s+/);
  tokens.forEach((token, index) => {
    if (token !== 'pg-settle' && !token.endsWith('/pg-settle')) return;
    const command = tokens[index + 1];
    if (command === undefined || !/^[a-z][a-z-]*$/.test(command)) return;
    const flags: string[] = [];
    for (const arg of tokens.slice(index + 2)) {
      if (SHELL_OPERATOR.test(arg)) break;
      if (arg.startsWith('-')) flags.push(arg.split('=')[0] ?? arg);
    }
    found.push({ command, flags, source: text });
  });
  return found;
}

describe('docs/operations.md CLI invocations', () => {
  const shellLines = fencedBlocks(doc)
    .filter((block) => block.lang === 'sh')
    .flatMap((block) => block.body.split('\n'));
  const invocations = [...shellLines, ...inlineCodeSpans(doc)].flatMap(invocationsIn);

  it('uses only commands and flags the CLI declares (src/cli/commands/*.ts)', () => {
    expect(invocations.length).toBeGreaterThanOrEqual(10);
    const problems: string[] = [];
    for (const { command, flags, source } of invocations) {
      const declared = COMMANDS.find((c) => c.name === command);
      if (declared === undefined) {
        problems.push(`unknown command "${command}" in: ${source}`);
        continue;
      }
      const options = { ...COMMON_FLAGS, ...declared.flags };
      const known = new Set(
        Object.entries(options).flatMap(([name, spec]) => {
          const short = (spec as { short?: string }).short;
          return [`--${name}`, ...(short === undefined ? [] : [`-${short}`])];
        }),
      );
      for (const flag of flags)
        if (!known.has(flag)) problems.push(`${flag} is not a flag of pg-settle ${command}: ${source}`);
    }
    expect(problems).toEqual([]);
  });

  it('names every maintenance command the runbook relies on', () => {
    const used = new Set(invocations.map((i) => i.command));
    for (const name of [
      'migrate',
      'expire-leases',
      'purge',
      'stats',
      'inspect',
      'dead-letters',
      'redrive',
      'resolve',
      'maintain',
      'schedule',
    ])
      expect(used, name).toContain(name);
  });

  it('mentions only flags that some command declares, also outside a full invocation', () => {
    const all = new Set(
      COMMANDS.flatMap((c) => Object.keys({ ...COMMON_FLAGS, ...c.flags }).map((name) => '--' + name)),
    );
    const standalone = inlineCodeSpans(doc).filter((span) => /^--[a-z][a-z-]*$/.test(span));
    for (const flag of standalone) expect(all, flag).toContain(flag);
  });
});
