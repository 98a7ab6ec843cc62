import { execFile } from 'node:child_process';
import module from 'node:module';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMMANDS } from '../../src/cli/commands/index.js';
import { createSettleClient, type SettleClient } from '../../src/client/client.js';
import { withPgClient } from '../../src/db/with-pg-client.js';
import { REPORT_WIDTH, wrapLines } from '../../src/simulator/report.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';
import { CLI_BIN, cliEnv, ROOT } from '../support/cli.js';

// The CLI's papercuts, each through the real binary (stdin a pipe, as in cron).

interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

function cli(
  args: readonly string[],
  nodeArgs: readonly string[] = [],
  extraEnv: Record<string, string> = {},
): Promise<CliRun> {
  const env = cliEnv(extraEnv);
  delete env.DATABASE_URL;
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [...nodeArgs, CLI_BIN, ...args],
      { cwd: ROOT, env, timeout: 110_000, maxBuffer: 16 << 20 },
      (error, stdout, stderr) => {
        resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : -1, stdout, stderr });
      },
    );
  });
}

let db: TestDatabase;
let client: SettleClient;
let scratch: string;
const binding = { principal: 'papercut', generation: 1 };

beforeAll(async () => {
  db = await createTestDatabase('cli_papercuts');
  client = createSettleClient({ connectionString: db.url, poolSize: 2 });
  scratch = await mkdtemp(path.join(os.tmpdir(), 'pg-settle-papercuts-'));
});
afterAll(async () => {
  await client?.end();
  await db?.drop();
  if (scratch !== undefined) await rm(scratch, { recursive: true, force: true });
});

describe('purge --dry-run applies the rules of the real run', () => {
  it('below the minimum retention both refuse with SE014 (exit 1); above it both go ahead', async () => {
    const done = await client.claim({ tenant: 'p', key: 'k1', request: {}, binding });
    if (done.outcome === 'acquired') await client.complete(done.attempt, 'ok');
    await withPgClient(db.url, (c) => c.query(`select settle.set_purge_min_retention(interval '1 day')`));

    const dry = await cli(['purge', '--older-than', '1h', '--dry-run', '--database-url', db.url]);
    const real = await cli(['purge', '--older-than', '1h', '--yes', '--database-url', db.url]);
    for (const refused of [dry, real]) {
      expect(refused, JSON.stringify(refused)).toMatchObject({ code: 1 });
      expect(refused.stdout).toBe('');
      expect(refused.stderr).toContain('sqlstate: SE014');
    }
    expect(dry.stderr).toBe(real.stderr);

    const allowed = await cli(['purge', '--older-than', '2d', '--dry-run', '--json', '--database-url', db.url]);
    expect(allowed.code).toBe(0);
    expect(JSON.parse(allowed.stdout)).toMatchObject({ ok: true, dryRun: true, wouldPurge: { total: 0 } });
    expect(await client.inspect({ tenant: 'p', key: 'k1' })).not.toBeNull(); // the dry run rolled back
  }, 240_000);
});

describe('a mistyped flag', () => {
  it('is one line naming the command and the nearest flag, exit 2, no usage dump', async () => {
    const typo = await cli(['purge', '--older-then', '7d']);
    expect(typo.code).toBe(2);
    expect(typo.stdout).toBe('');
    expect(typo.stderr).toBe('pg-settle: purge has no flag --older-then - did you mean --older-than?\n');
    const far = await cli(['stats', '--frobnicate']);
    expect(far.code).toBe(2);
    expect(far.stderr).toBe('pg-settle: stats has no flag --frobnicate (`pg-settle stats --help` lists its flags)\n');
  }, 240_000);
});

describe('help texts', () => {
  it('list every flag once, and every flag the parser accepts', () => {
    for (const command of COMMANDS) {
      const listed = [...command.help.matchAll(/^\s+(?:-[a-z], )?--([a-z][a-z-]*)/gm)].map((m) => m[1]);
      const duplicates = listed.filter((flag, i) => listed.indexOf(flag) !== i);
      expect(duplicates, `${command.name} --help`).toEqual([]);
      for (const flag of Object.keys(command.flags)) {
        if (command.name === 'simulate' && flag.startsWith('fault-')) continue; // listed as --fault-NAME=RATE
        expect(listed, `${command.name} --help lists --${flag}`).toContain(flag);
      }
    }
  });
});

describe('the simulator report', () => {
  it(`wraps at ${REPORT_WIDTH} columns under the line's column gap`, () => {
    const row = `  PASS  single-settlement                    40 checked  ${'word '.repeat(40)}`.trimEnd();
    const wrapped = wrapLines(`short\n${row}`, REPORT_WIDTH).split('\n');
    expect(wrapped[0]).toBe('short');
    expect(wrapped.every((l) => l.length <= REPORT_WIDTH)).toBe(true);
    expect(wrapped.slice(2).every((l) => l.startsWith(' '.repeat(57)) && l[57] !== ' ')).toBe(true);
    expect(wrapped.join(' ').replace(/\s+/g, ' ')).toBe(`short ${row}`.replace(/\s+/g, ' '));
  });

  it(`a real run prints no line over ${REPORT_WIDTH} columns`, async () => {
    const run = await cli([
      'simulate',
      '--operations',
      '40',
      '--workers',
      '4',
      '--database-url',
      db.url,
      '--write-to-database',
    ]);
    expect(run.code).toBe(0);
    const lines = run.stdout.split('\n');
    expect(lines.length).toBeGreaterThan(30);
    expect(lines.filter((l) => l.length > REPORT_WIDTH)).toEqual([]);
  }, 240_000);
});

describe('pg-settle --version starts fast', () => {
  // Start-up time is dominated by what is imported: --version must import nothing from
  // node_modules (slonik, zod and pg take most of a second to load) and none of the commands.
  // Module resolution is recorded with synchronous module hooks (Node 22.15 and later).
  const registerHooks = (module as unknown as { registerHooks?: unknown }).registerHooks;
  it.skipIf(typeof registerHooks !== 'function')(
    'loads only the version modules (needs node:module registerHooks, Node >= 22.15)',
    async () => {
      const hook = path.join(scratch, 'record-imports.mjs');
      await writeFile(
        hook,
        `import { registerHooks } from 'node:module';
const seen = new Set();
registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); if (context.parentURL?.includes('/src/')) seen.add(r.url); return r; } });
process.on('exit', () => process.stderr.write('IMPORTS ' + JSON.stringify([...seen]) + '\\n'));
`,
      );
      // The sources whatever PG_SETTLE_TEST_CLI says: the test names their modules.
      const run = await cli(['--version'], ['--import', hook], { PG_SETTLE_CLI_FROM_SOURCE: '1' });
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(/^pg-settle \d+\.\d+\.\d+\n$/);
      const imports = JSON.parse(/^IMPORTS (.*)$/m.exec(run.stderr)?.[1] ?? '[]') as string[];
      const local = imports
        .filter((url) => url.startsWith('file:'))
        .map((url) => path.relative(ROOT, new URL(url).pathname))
        .sort();
      expect(local).toEqual(['src/cli/exit-codes.ts', 'src/cli/output.ts', 'src/cli/version.ts']);
    },
  );
});
