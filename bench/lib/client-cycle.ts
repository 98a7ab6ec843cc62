import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { sql } from 'slonik';
import { createSettleClient } from '../../src/client/index.js';
import { percentile } from './pgbench-parse.js';
import type { RunLength } from './types.js';

/**
 * The `client` scenario's driver: `clients` concurrent workers looping `client.run()` on fresh
 * keys for a number of seconds or of cycles per worker: the same cycle (claim, effect,
 * complete), keys, request and concurrency as bench/scripts/cycle.sql. The effect is a no-op
 * returning the result, like the script's.
 *
 * `threads` (default 1) spreads the workers over that many event loops, as pgbench's `-j`
 * spreads its clients over threads: thread 0 is this one when `threads` is 1, otherwise each is a
 * worker thread (bench/lib/client-cycle-worker.ts) with a client of its own (pool of its share of
 * the connections). One event loop serializes every worker's JavaScript: once it is busy (a
 * loaded machine gives it a fraction of a CPU), replies wait in its queue, and the ratio to
 * pgbench measures that queue rather than the client's cost. The clock starts when every
 * thread has its connections open. `nodeCpuUs` is the process's CPU (every thread) over the
 * timed window.
 */
export interface ClientCycleResult {
  readonly driver: 'client';
  readonly statements: readonly { readonly command: string; readonly latencyMs: number }[];
  readonly processed: number;
  readonly elapsedS: number;
  readonly tps: number;
  readonly latencyAverageMs: number;
  readonly p50Ms: number | null;
  readonly p99Ms: number | null;
  readonly threads: number;
  readonly nodeCpuUs: number;
}

export interface ClientCycleOptions {
  readonly preparedStatements?: boolean;
  /** Another build's createSettleClient (one thread only; use `clientModule` with threads). */
  readonly createClient?: typeof createSettleClient;
  /** A module exporting createSettleClient (e.g. another build's src/client/index.ts). */
  readonly clientModule?: string;
  readonly threads?: number;
}

/** One event loop's share: a client with `clients` connections open, ready to loop run(). */
export async function openCycle(
  url: string,
  clients: number,
  options: ClientCycleOptions,
): Promise<{ go(length: RunLength): Promise<{ latencies: number[]; elapsedS: number }>; end(): Promise<void> }> {
  const createClient =
    options.createClient ??
    (options.clientModule === undefined
      ? createSettleClient
      : ((await import(options.clientModule)) as { createSettleClient: typeof createSettleClient }).createSettleClient);
  const client = createClient({
    ...(options.preparedStatements === undefined ? {} : { preparedStatements: options.preparedStatements }),
    connectionString: url,
    poolSize: clients,
  });
  // Open the pool's connections before the clock starts, as pgbench does.
  const pool = await client.getPool();
  await Promise.all(Array.from({ length: clients }, () => pool.query(sql.unsafe`select 1`)));
  return {
    async go(length) {
      const latencies: number[] = [];
      const started = performance.now();
      const deadline = length.kind === 'seconds' ? started + length.seconds * 1000 : Number.POSITIVE_INFINITY;
      const cycles = length.kind === 'transactions' ? length.perClient : Number.POSITIVE_INFINITY;
      await Promise.all(
        Array.from({ length: clients }, async (_, worker) => {
          // At least one cycle per worker, so even a starved timed run measures something.
          for (let done = 0; done < cycles && (done === 0 || performance.now() < deadline); done++) {
            const k = 100_000_000_000 + Math.floor(Math.random() * 899_999_999_999);
            const key = `op-${k}-n${worker}`;
            const t0 = performance.now();
            const outcome = await client.run(
              {
                tenant: 'bench',
                key,
                request: { amount: k % 10000, currency: 'EUR' },
                binding: { principal: 'bench-app', scopes: ['payments.write'], generation: 0 },
                leaseMs: 30_000,
                worker: 'node',
              },
              async () => ({ charge: `ch-${k}` }),
            );
            if (outcome.outcome !== 'completed' || outcome.settledBy !== 'this_attempt') {
              throw new Error(`client cycle: run() of fresh key ${key} answered ${JSON.stringify(outcome)}`);
            }
            latencies.push(performance.now() - t0);
          }
        }),
      );
      return { latencies, elapsedS: (performance.now() - started) / 1000 };
    },
    end: () => client.end(),
  };
}

/** A driver whose threads and connections stay open across runs (a warm-up, then the measured run). */
export interface ClientDriver {
  readonly threads: number;
  go(length: RunLength): Promise<ClientCycleResult>;
  end(): Promise<void>;
}

export async function openClientDriver(
  url: string,
  clients: number,
  options: ClientCycleOptions = {},
): Promise<ClientDriver> {
  const threads = Math.max(1, Math.min(options.threads ?? 1, clients));
  const loops =
    threads === 1
      ? await openCycle(url, clients, options).then((cycle) => ({
          go: async (length: RunLength) => [await cycle.go(length)],
          end: cycle.end,
        }))
      : await openThreads(url, clients, threads, options);
  return {
    threads,
    async go(length) {
      const cpu = process.cpuUsage();
      const runs = await loops.go(length);
      const used = process.cpuUsage(cpu);
      const latencies = runs.flatMap((run) => run.latencies);
      const elapsedS = Math.max(...runs.map((run) => run.elapsedS));
      const processed = latencies.length;
      const average = latencies.reduce((a, b) => a + b, 0) / Math.max(1, processed);
      return {
        driver: 'client',
        statements: [{ command: 'client.run (claim + effect + complete)', latencyMs: average }],
        processed,
        elapsedS,
        tps: processed / elapsedS,
        latencyAverageMs: average,
        p50Ms: percentile(latencies, 50),
        p99Ms: percentile(latencies, 99),
        threads,
        nodeCpuUs: used.user + used.system,
      };
    },
    end: loops.end,
  };
}

/** One run on a driver of its own: `warmup` (unmeasured) first, in the same threads, if given. */
export async function runClientCycle(
  url: string,
  clients: number,
  length: RunLength,
  options: ClientCycleOptions & { readonly warmup?: RunLength } = {},
): Promise<ClientCycleResult> {
  const driver = await openClientDriver(url, clients, options);
  try {
    if (options.warmup !== undefined) await driver.go(options.warmup);
    return await driver.go(length);
  } finally {
    await driver.end();
  }
}

type FromWorker =
  | { readonly ready: true }
  | { readonly ended: true }
  | { readonly latencies: number[]; readonly elapsedS: number }
  | { readonly error: string };

/** `threads` worker threads, `clients` spread over them; each run starts on all together. */
async function openThreads(
  url: string,
  clients: number,
  threads: number,
  options: ClientCycleOptions,
): Promise<{ go(length: RunLength): Promise<{ latencies: number[]; elapsedS: number }[]>; end(): Promise<void> }> {
  if (options.createClient !== undefined)
    throw new Error('client cycle: with threads, pass clientModule instead of createClient');
  const entry = new URL('./client-cycle-worker.ts', import.meta.url).href;
  // Worker threads do not inherit tsx's loader: register it, then load the entry.
  const bootstrap = `import('tsx/esm/api').then(({ register }) => { register(); return import(${JSON.stringify(entry)}); })`;
  const workers = Array.from({ length: threads }, (_, thread) => {
    const share = Math.floor(clients / threads) + (thread < clients % threads ? 1 : 0);
    const worker = new Worker(bootstrap, {
      eval: true,
      workerData: {
        url,
        clients: share,
        preparedStatements: options.preparedStatements,
        clientModule: options.clientModule,
      },
    });
    const waiting: ((message: FromWorker) => void)[] = [];
    const failed = new Promise<never>((_, reject) => {
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`client cycle: worker thread ${thread} exited (${code})`)));
    });
    failed.catch(() => {});
    worker.on('message', (message: FromWorker) => waiting.shift()?.(message));
    const next = (): Promise<FromWorker> =>
      Promise.race([
        new Promise<FromWorker>((resolve) => waiting.push(resolve)).then((message) => {
          if ('error' in message) throw new Error(`client cycle: worker thread ${thread}: ${message.error}`);
          return message;
        }),
        failed,
      ]);
    return { worker, next, ready: next() };
  });
  const terminate = async (): Promise<void> => {
    await Promise.all(workers.map((w) => w.worker.terminate()));
  };
  try {
    await Promise.all(workers.map((w) => w.ready));
  } catch (error) {
    await terminate();
    throw error;
  }
  return {
    async go(length) {
      const results = workers.map((w) => w.next());
      for (const w of workers) w.worker.postMessage({ go: length });
      return (await Promise.all(results)) as { latencies: number[]; elapsedS: number }[];
    },
    async end() {
      for (const w of workers) w.worker.postMessage({ end: true });
      await Promise.all(workers.map((w) => w.next().catch(() => null)));
      await terminate();
    },
  };
}
