import path from 'node:path';
import pg from 'pg';
import type { BenchServer } from './database.js';
import { scriptPath } from './measure.js';
import { runPgbench } from './pgbench.js';

/**
 * What the benchmark's backends wait on: pg_stat_activity sampled every `intervalMs` while
 * pgbench runs a script (after a CHECKPOINT and an unmeasured warm-up). A sample counts each
 * pgbench backend once: `CPU` when active without a wait event, `Client:ClientRead` when idle
 * (waiting for pgbench's next statement), else `wait_event_type:wait_event`.
 */
export interface WaitEventProfile {
  readonly script: string;
  readonly clients: number;
  readonly tps: number;
  readonly samples: number;
  /** Share of backend-samples per wait, largest first. */
  readonly shares: readonly { readonly wait: string; readonly share: number }[];
}

export async function profileWaitEvents(
  server: BenchServer,
  pgbench: string,
  opts: {
    /** A script of bench/scripts without `.sql`, or the absolute path of a script file. */
    script: string;
    clients: number;
    seconds: number;
    intervalMs?: number;
    /** Run on the fresh database before the script (the ladder loads a step's schema). */
    prepare?: (url: string) => Promise<void>;
    defines?: Readonly<Record<string, string | number>>;
  },
): Promise<WaitEventProfile> {
  const db = await server.createRunDatabase(`waits_${path.basename(opts.script, '.sql')}`);
  const sampler = new pg.Client({ connectionString: db.url });
  await sampler.connect();
  try {
    await opts.prepare?.(db.url);
    await sampler.query('checkpoint');
    const script = path.isAbsolute(opts.script) ? opts.script : scriptPath(`${opts.script}.sql`);
    const base = {
      pgbench,
      url: db.url,
      script,
      clients: opts.clients,
      threads: 2,
      ...(opts.defines === undefined ? {} : { defines: opts.defines }),
    };
    await runPgbench({ ...base, durationS: 2 });
    const counts = new Map<string, number>();
    let samples = 0;
    let running = true;
    const sampling = (async () => {
      while (running) {
        const rows = await sampler.query<{ wait: string }>(
          `select case when state = 'idle' then 'Client:ClientRead'
                       when wait_event is null then 'CPU'
                       else wait_event_type || ':' || wait_event end as wait
             from pg_stat_activity
            where datname = current_database() and application_name = 'pg-settle-bench' and pid <> pg_backend_pid()`,
        );
        for (const row of rows.rows) counts.set(row.wait, (counts.get(row.wait) ?? 0) + 1);
        samples += rows.rows.length;
        await new Promise((resolve) => setTimeout(resolve, opts.intervalMs ?? 10));
      }
    })();
    const run = await runPgbench({ ...base, durationS: opts.seconds }).finally(() => {
      running = false;
    });
    await sampling;
    const shares = [...counts.entries()]
      .map(([wait, n]) => ({ wait, share: n / Math.max(1, samples) }))
      .sort((a, b) => b.share - a.share);
    return { script: opts.script, clients: opts.clients, tps: run.output.tps ?? 0, samples, shares };
  } finally {
    await sampler.end();
    await db.drop();
  }
}

/** Markdown section: wait-event shares of cycle and floor2 at the same client count. */
export async function sampleWaitEvents(
  server: BenchServer,
  pgbench: string,
  clients: number,
  seconds: number,
): Promise<string> {
  const profiles: WaitEventProfile[] = [];
  for (const script of ['cycle', 'floor2'])
    profiles.push(await profileWaitEvents(server, pgbench, { script, clients, seconds }));
  const lines = [
    `\n## Wait events: ${clients} pgbench clients, ${seconds} s per script (pg_stat_activity every 10 ms)\n`,
    '| script | tps | backend-samples | wait: share of samples |',
    '|---|---|---|---|',
  ];
  for (const p of profiles) {
    const top = p.shares
      .slice(0, 8)
      .map((s) => `${s.wait} ${(s.share * 100).toFixed(1)}%`)
      .join('<br>');
    lines.push(`| ${p.script} | ${p.tps.toFixed(0)} | ${p.samples} | ${top} |`);
  }
  return lines.join('\n');
}
