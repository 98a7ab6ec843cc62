import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { baselineRoot, option, REPO_ROOT } from '../lib/script-options.js';

/**
 * The client's own per-cycle work without a database, A/B between two builds in one process:
 * what run() spends around its two statements (the bench's `client` scenario: claim a fresh key,
 * no-op effect, complete), piece by piece, free of the database's and the machine's noise.
 *
 *   npx tsx bench/ab/client-micro.ts [--baseline <checkout>] [--rounds 7] [--n 20000]
 *
 * `--baseline` is another checkout's root (e.g. `git archive <commit> src | tar -x -C /tmp/base`);
 * without it only this build is measured. Pieces (process CPU per cycle, median and minimum of the
 * rounds, builds interleaved per round):
 * - `telemetry`: the hooks of one run() (run, claim, complete) with the default telemetry,
 *   @opentelemetry/api installed and no SDK registered (what most applications run);
 * - `claim input`: parseClaimInput + the claim statement's values;
 * - `rows`: a claim row and an observation row through the row check (validateRow);
 * - `complete input`: parseResult + the complete statement's values.
 */
const rounds = Number(option('rounds', '7'));
const n = Number(option('n', '20000'));
const baseline = baselineRoot();
const here = REPO_ROOT;

interface Build {
  readonly name: string;
  readonly pieces: Record<string, () => Promise<unknown> | unknown>;
}

async function load(name: string, root: string): Promise<Build> {
  const mod = async (file: string) => import(pathToFileURL(path.join(root, 'src/client', file)).href);
  const [telemetry, schemas, queries, rows, interceptors] = await Promise.all([
    mod('telemetry.ts'),
    mod('schemas.ts'),
    mod('queries.ts'),
    mod('rows.ts'),
    mod('interceptors.ts'),
  ]);
  const hooks = telemetry.createClientTelemetry(undefined);
  const claimed = [{ outcome: 'acquired', reason: null }];
  const settled = [{ outcome: 'settled', reason: 'current_attempt' }];
  const binding = { principal: 'bench-app', scopes: ['payments.write'], generation: 0 };
  const leaseExpiresAt = new Date();
  let k = 0;
  return {
    name,
    pieces: {
      telemetry: () =>
        hooks.run(
          'run',
          'bench',
          async (timed: (effect: (context: unknown) => Promise<number>) => (context: unknown) => Promise<number>) => {
            await hooks.call('claim', 'bench', async () => claimed);
            await timed(async () => 1)({ attempt: { attempt: 1 } });
            await hooks.call('complete', 'bench', async () => settled);
            return { outcome: 'completed', attempt: 1 };
          },
        ),
      'claim input': () => {
        k += 1;
        const input = {
          tenant: 'bench',
          key: `op-${k}-n1`,
          request: { amount: k % 10000, currency: 'EUR' },
          binding,
          leaseMs: 30_000,
          worker: 'node',
        };
        return queries.claimQuery(schemas.parseClaimInput(input));
      },
      rows: () => {
        interceptors.validateRow(
          rows.claimRow,
          {
            outcome: 'acquired',
            status: 'running',
            attempt: 1,
            lease_token: 'b6f2f9a4-1c51-4a7e-9f2c-2a0a8d1e1d11',
            lease_expires_at: leaseExpiresAt,
            retry_after_ms: null,
            fingerprint: '9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08',
            result: null,
            settled_attempt: null,
            error: null,
            dead_lettered: null,
            conflict_on: null,
            reason: null,
            dead_letter_reason: null,
          },
          'claim',
        );
        return interceptors.validateRow(
          rows.observationRow,
          {
            outcome: 'settled',
            reason: 'current_attempt',
            status: 'completed',
            attempt: 1,
            settled_attempt: 1,
            result: { charge: 'ch-1' },
            error: null,
            conflict_on: null,
            dead_lettered: false,
            dead_letter_reason: null,
          },
          'complete',
        );
      },
      'complete input': () => {
        k += 1;
        const handle = {
          tenant: 'bench',
          key: `op-${k}-n1`,
          attempt: 1,
          leaseToken: 'b6f2f9a4-1c51-4a7e-9f2c-2a0a8d1e1d11',
          fingerprint: 'ab',
          binding,
        };
        return queries.completeQuery(handle, schemas.parseResult({ charge: `ch-${k}` }));
      },
    },
  };
}

const builds = [await load('this build', here), ...(baseline === undefined ? [] : [await load('baseline', baseline)])];
const cpu: Record<string, Record<string, number[]>> = {};
for (let round = 0; round <= rounds; round += 1) {
  for (const build of round % 2 === 0 ? builds : [...builds].reverse()) {
    for (const [piece, fn] of Object.entries(build.pieces)) {
      const started = process.cpuUsage();
      for (let i = 0; i < n; i += 1) await fn();
      const used = process.cpuUsage(started);
      if (round > 0) ((cpu[piece] ??= {})[build.name] ??= []).push(((used.user + used.system) * 1000) / n); // round 0 warms up
    }
  }
}
const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
console.log(`CPU per cycle (ns), median / min of ${rounds} rounds of ${n}; node ${process.version}`);
for (const [piece, byBuild] of Object.entries(cpu)) {
  console.log(
    `${piece.padEnd(16)} ${Object.entries(byBuild)
      .map(([b, xs]) => `${b} ${median(xs).toFixed(0)} / ${Math.min(...xs).toFixed(0)}`)
      .join('   ')}`,
  );
}
