import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { baselineRoot, option, REPO_ROOT } from '../lib/script-options.js';

/**
 * The HTTP middleware's own per-request work without a database or a socket, A/B between two
 * builds in one process (as bench/ab/client-micro.ts does for the client):
 *
 *   npx tsx bench/ab/http-micro.ts [--baseline <checkout root>] [--rounds 7] [--n 50000]
 *
 * Pieces (process CPU per request, median and minimum of the rounds, builds interleaved):
 * - `key + fingerprint`: parseIdempotencyKey of the header, defaultFingerprint of a JSON body
 *   (its SHA-256) and the downstream key the example handler reads (another SHA-256);
 * - `handler timeout`: withTimeout around a handler that answers at once.
 */
const rounds = Number(option('rounds', '7'));
const n = Number(option('n', '50000'));
const baseline = baselineRoot();
const here = REPO_ROOT;

async function load(root: string): Promise<Record<string, () => unknown>> {
  const mod = async (file: string) => import(pathToFileURL(path.join(root, 'src/http/core', file)).href);
  const [key, fingerprint, context, flow] = await Promise.all([
    mod('key.ts'),
    mod('fingerprint.ts'),
    mod('context.ts'),
    mod('flow-result.ts'),
  ]);
  const headers = {
    'content-type': 'application/json',
    authorization: 'Bearer acme:bench',
    'idempotency-key': '"5f0c3b8e-5b0e-4c8e-9a51-0a1b2c3d4e5f"',
  };
  const view = {
    method: 'POST',
    url: '/payments',
    route: '/payments',
    headers,
    body: { amount: '19.99' },
    hasBody: true,
  };
  return {
    'key + fingerprint': () => {
      const parsed = key.parseIdempotencyKey(headers['idempotency-key'], { strict: false, maxLength: 255 });
      return [fingerprint.defaultFingerprint(view, [], 'url'), context.downstreamKeyOf('acme', parsed.key)];
    },
    'handler timeout': () => flow.withTimeout(Promise.resolve(1), 30_000),
  };
}

const builds: [string, Record<string, () => unknown>][] = [['this build', await load(here)]];
if (baseline !== undefined) builds.push(['baseline', await load(baseline)]);
const cpu: Record<string, Record<string, number[]>> = {};
for (let round = 0; round <= rounds; round += 1) {
  for (const [name, pieces] of round % 2 === 0 ? builds : [...builds].reverse()) {
    for (const [piece, fn] of Object.entries(pieces)) {
      const started = process.cpuUsage();
      for (let i = 0; i < n; i += 1) await fn();
      const used = process.cpuUsage(started);
      if (round > 0) ((cpu[piece] ??= {})[name] ??= []).push(((used.user + used.system) * 1000) / n); // round 0 warms up
    }
  }
}
const median = (xs: readonly number[]): number =>
  [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
console.log(`CPU per request (ns), median / min of ${rounds} rounds of ${n}; node ${process.version}`);
for (const [piece, byBuild] of Object.entries(cpu)) {
  console.log(
    `${piece.padEnd(18)} ${Object.entries(byBuild)
      .map(([b, xs]) => `${b} ${median(xs).toFixed(0)} / ${Math.min(...xs).toFixed(0)}`)
      .join('   ')}`,
  );
}
