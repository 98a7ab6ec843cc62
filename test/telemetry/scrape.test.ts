import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type * as otel from '@opentelemetry/api';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { configFromFlags } from '../../src/simulator/config.js';
import { startMetricsEndpoint } from '../../src/simulator/prometheus.js';
import { runSimulation } from '../../src/simulator/run.js';
import { INSTRUMENTATION_SCOPE } from '../../src/client/telemetry.js';
import { CLI_BIN, cliEnv, ROOT } from '../support/cli.js';
import { parseCollector } from '../support/collector.js';
import { useTestDatabase } from '../support/database.js';
import { type Exposition, scrapeExposition as scrape } from '../support/exposition.js';

// The scrape works: the simulator's client records into the SDK, @opentelemetry/exporter-prometheus
// serves it over HTTP on 127.0.0.1, and what a scraper reads matches what the database holds.

const sum = (e: Exposition, name: string, match: Record<string, string> = {}): number =>
  e.samples
    .filter((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v))
    .reduce((a, s) => a + s.value, 0);

const db = useTestDatabase('telemetry_scrape');

describe('Prometheus /metrics of the simulator', () => {
  it('names and types as documented; counts equal the database', async () => {
    const endpoint = await startMetricsEndpoint({ port: 0 });
    try {
      expect(endpoint.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
      const report = await runSimulation({
        config: configFromFlags({ seed: '11', workers: '4', operations: '120', faults: '0.1' }),
        connectionString: db.url,
        telemetry: { meterProvider: endpoint.meterProvider },
      });
      expect(report.ok).toBe(true);
      const { contentType, exposition: e } = await scrape(endpoint.url);
      expect(contentType).toMatch(/^text\/plain/);

      expect(e.types.get('db_client_operation_duration_seconds')).toBe('histogram');
      expect(e.types.get('pg_settle_outcomes_total')).toBe('counter');
      // Histogram series: _bucket with le, _sum, _count; base unit seconds.
      expect(
        e.samples.some((s) => s.name === 'db_client_operation_duration_seconds_bucket' && s.labels.le === '+Inf'),
      ).toBe(true);
      // No high-cardinality label: no tenant, key, token or principal anywhere.
      const labelNames = new Set(e.samples.flatMap((s) => Object.keys(s.labels)));
      expect([...labelNames].filter((l) => /tenant|key|token|principal|worker/.test(l))).toEqual([]);

      const su = new pg.Client({ connectionString: db.url });
      await su.connect();
      const { rows } = await su
        .query<{ attempts: string; completed: string }>(
          // A resolution (settle.resolve, run by the simulator's reconciler) opens and settles an
          // attempt of its own, worker 'resolve:<login>', without a claim or a complete call.
          `select (select count(*) from settle.attempts
                  where tenant like $1 || '%' and coalesce(worker, '') not like 'resolve:%') as attempts,
                (select count(*) from settle_private.operations o
                   join settle.attempts a
                     on a.tenant = o.tenant and a.key = o.key and a.attempt = o.settled_attempt
                  where o.tenant like $1 || '%' and o.status = 'completed'
                    and coalesce(a.worker, '') not like 'resolve:%') as completed`,
          [report.tenantPrefix],
        )
        .finally(() => su.end());
      const db0 = rows[0];
      expect(db0).toBeDefined();
      // Every attempt a claim opened was opened by one claim answered `acquired`.
      expect(
        sum(e, 'pg_settle_outcomes_total', { pg_settle_operation: 'settle.claim', pg_settle_outcome: 'acquired' }),
      ).toBe(Number(db0?.attempts));
      // Every operation completed by a worker was settled by exactly one complete() answered `settled`.
      expect(
        sum(e, 'pg_settle_outcomes_total', { pg_settle_operation: 'settle.complete', pg_settle_outcome: 'settled' }),
      ).toBe(Number(db0?.completed));
      // The sweeper's calls, as the simulator's report counts them.
      expect(
        sum(e, 'pg_settle_outcomes_total', { pg_settle_operation: 'settle.expire_leases', pg_settle_outcome: 'ok' }),
      ).toBe(report.sweeper.runs);
      // The histogram counts the same calls as the outcome counter.
      expect(sum(e, 'db_client_operation_duration_seconds_count', { db_operation_name: 'settle.claim' })).toBe(
        sum(e, 'pg_settle_outcomes_total', { pg_settle_operation: 'settle.claim' }),
      );
      expect(
        e.samples.find((s) => s.name === 'db_client_operation_duration_seconds_count')?.labels.db_system_name,
      ).toBe('postgresql');
    } finally {
      await endpoint.stop();
    }
  }, 240_000);

  it("every metric of docs/observability.md's table is served under its documented name, none under an exporter gauge's", async () => {
    const doc = await readFile(path.join(ROOT, 'docs/observability.md'), 'utf8');
    const table = doc.slice(doc.indexOf('### Metrics'), doc.indexOf('### Spans'));
    const rows = [...table.matchAll(/^\| `([a-z_.]+)` \| `([a-z_]+)`[^|]*\| (histogram|counter) \| ([^|]+) \|/gm)].map(
      (m) => ({ otel: m[1] ?? '', prometheus: m[2] ?? '', type: m[3] ?? '', unit: (m[4] ?? '').trim() }),
    );
    expect(rows.length).toBeGreaterThan(10);
    const endpoint = await startMetricsEndpoint({ port: 0 });
    try {
      // Each instrument made as the client makes it (name, kind, unit), one point each.
      const meter = endpoint.meterProvider.getMeter(INSTRUMENTATION_SCOPE) as otel.Meter;
      for (const row of rows) {
        if (row.type === 'histogram') meter.createHistogram(row.otel, { unit: row.unit }).record(0.01);
        else meter.createCounter(row.otel, { unit: row.unit }).add(1);
      }
      const { exposition } = await scrape(endpoint.url);
      for (const row of rows) {
        const family = row.type === 'counter' ? row.prometheus.replace(/_total$/, '') : row.prometheus;
        const served = [...exposition.types].find(([name]) => name === family || name === row.prometheus);
        expect(served, `${row.otel} as ${row.prometheus}`).toEqual([expect.any(String), row.type]);
      }
      // Prometheus scrapes the apps and sql_exporter into one namespace: no name means two things.
      const collector = parseCollector(
        await readFile(path.join(ROOT, 'deploy/sql_exporter/pg-settle.collector.yml'), 'utf8'),
      );
      const gauges = new Set(collector.metrics.map((m) => m.name));
      expect(rows.filter((r) => gauges.has(r.prometheus)).map((r) => r.prometheus)).toEqual([]);
    } finally {
      await endpoint.stop();
    }
  });

  it('`pg-settle simulate --metrics-port` serves /metrics while the simulator runs', async () => {
    const child = spawn(
      process.execPath,
      [
        CLI_BIN,
        'simulate',
        '--metrics-port',
        '0',
        '--database-url',
        db.url,
        '--write-to-database',
        '--skip-baseline',
        '--operations',
        '100000',
        '--duration',
        '60s',
        '--workers',
        '2',
        '--json',
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: cliEnv() },
    );
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    child.stdout.resume();
    try {
      // The port is announced on stderr; then scrape until the first outcomes are counted.
      // Generous: on a loaded 2-core machine the CLI's start from source (tsx) alone can take tens of seconds.
      const deadline = Date.now() + 150_000;
      let url: string | undefined;
      let seen: Exposition | undefined;
      while (Date.now() < deadline && seen === undefined) {
        url ??= /serving metrics at (\S+)/.exec(stderr)?.[1];
        if (url !== undefined) {
          const { exposition } = await scrape(url);
          if (sum(exposition, 'pg_settle_outcomes_total', { pg_settle_operation: 'settle.claim' }) > 0)
            seen = exposition;
        }
        if (seen === undefined) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(url, stderr).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
      expect(seen?.types.get('pg_settle_outcomes_total')).toBe('counter');
      expect(seen?.types.get('db_client_operation_duration_seconds')).toBe('histogram');
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
  }, 240_000);
});
