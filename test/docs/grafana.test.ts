import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createSettleClient } from '../../src/index.js';
import { startMetricsEndpoint } from '../../src/simulator/prometheus.js';
import { asRole, binding } from '../client/helpers.js';
import { useTestDatabase } from '../support/database.js';

// deploy/grafana/pg-settle.dashboard.json cannot be loaded into a real Grafana here: every metric
// its queries name must be one that is actually exposed, either by the sql_exporter collector
// (deploy/sql_exporter) or by a client's Prometheus /metrics (scraped here after real calls).
const root = path.resolve(import.meta.dirname, '../..');
const db = useTestDatabase('grafana_dashboard');

interface Panel {
  readonly title: string;
  readonly type: string;
  readonly targets: readonly { readonly expr: string; readonly refId: string }[];
  readonly datasource: { readonly uid: string };
}

const PROMQL_WORDS = new Set([
  'sum',
  'by',
  'rate',
  'histogram_quantile',
  'le',
  'without',
  'increase',
  'max',
  'min',
  'avg',
]);

describe('deploy/grafana dashboard', () => {
  it('is a Grafana dashboard whose every query names exposed metrics, with labels they carry', {
    timeout: 120_000,
  }, async () => {
    const dashboard = JSON.parse(
      await readFile(path.join(root, 'deploy/grafana/pg-settle.dashboard.json'), 'utf8'),
    ) as {
      title: string;
      uid: string;
      schemaVersion: number;
      panels: Panel[];
      templating: { list: { name: string; type: string }[] };
    };
    expect(dashboard).toMatchObject({ title: 'pg-settle', uid: 'pg-settle' });
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    expect(dashboard.templating.list).toContainEqual(
      expect.objectContaining({ name: 'datasource', type: 'datasource' }),
    );
    expect(new Set(dashboard.panels.map((p) => p.title)).size).toBe(dashboard.panels.length);

    // What sql_exporter exposes: the collector's metric names and their key labels.
    const collector = await readFile(path.join(root, 'deploy/sql_exporter/pg-settle.collector.yml'), 'utf8');
    const exposed = new Map<string, Set<string>>();
    for (const [, name, body] of collector.matchAll(/^ {2}- metric_name: (\S+)\n((?: {4}.*\n)+)/gm)) {
      const labels =
        /^ {4}key_labels: \[(.*)\]$/m
          .exec(body ?? '')?.[1]
          ?.split(',')
          .map((s) => s.trim()) ?? [];
      exposed.set(name ?? '', new Set(labels));
    }
    expect(exposed.size).toBeGreaterThan(15);

    // What a client's /metrics exposes after a run() and a few calls.
    const endpoint = await startMetricsEndpoint({ port: 0 });
    try {
      const client = createSettleClient({
        connectionString: asRole(db.url, 'settle_app'),
        telemetry: { meterProvider: endpoint.meterProvider },
      });
      try {
        await client.run({ tenant: 'acme', key: 'grafana-1', request: { n: 1 }, binding }, async () => ({ ok: true }));
        await client.run({ tenant: 'acme', key: 'grafana-1', request: { n: 1 }, binding }, async () => ({ ok: true }));
      } finally {
        await client.end();
      }
      const text = await (await fetch(endpoint.url)).text();
      for (const line of text.split('\n')) {
        const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? /.exec(line);
        if (sample === null || line.startsWith('#')) continue;
        const labels = exposed.get(sample[1] ?? '') ?? new Set<string>();
        for (const [, label] of (sample[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) labels.add(label ?? '');
        exposed.set(sample[1] ?? '', labels);
      }
    } finally {
      await endpoint.stop();
    }

    let queries = 0;
    for (const panel of dashboard.panels) {
      expect(panel.datasource.uid, panel.title).toBe('${datasource}');
      expect(panel.targets.length, panel.title).toBeGreaterThan(0);
      for (const target of panel.targets) {
        queries += 1;
        // Metric names, not the label names of `by (...)` and `{...}` (labels share the prefix).
        const bare = target.expr.replace(/by \([^)]*\)/g, '').replace(/\{[^}]*\}/g, '');
        const names = [...bare.matchAll(/\b((?:pg_settle|db_client)_[a-z0-9_]+)\b/g)].map((m) => m[1] ?? '');
        expect(names.length, `${panel.title}: ${target.expr}`).toBeGreaterThan(0);
        for (const name of names) {
          expect(exposed.has(name), `${panel.title}: ${name} is exposed`).toBe(true);
          // Labels a query groups by must exist on the metric.
          const grouped = [...target.expr.matchAll(/by \(([^)]*)\)/g)].flatMap((m) =>
            (m[1] ?? '').split(',').map((s) => s.trim()),
          );
          for (const label of grouped.filter((l) => l !== '' && !PROMQL_WORDS.has(l))) {
            expect(exposed.get(name), `${panel.title}: ${name} carries ${label}`).toContain(label);
          }
        }
      }
    }
    expect(queries).toBeGreaterThan(15);
    // Every gauge sql_exporter exports is on the dashboard.
    const used = JSON.stringify(dashboard.panels);
    for (const name of exposed.keys())
      if (collector.includes(`metric_name: ${name}\n`)) expect(used, name).toContain(name);
  });
});
