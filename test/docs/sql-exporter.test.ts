import { readFile } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';
import { asRole } from '../client/helpers.js';

// deploy/sql_exporter/pg-settle.collector.yml runs as settle_readonly against a migrated
// database: each query answers, each metric's value and label columns exist in its query's
// answer, every column of settle.metrics is exported, and docs/observability.md lists every metric.
const root = path.resolve(import.meta.dirname, '../..');

interface ExportedMetric {
  name: string;
  type: string;
  values: string[];
  keyLabels: string[];
  queryRef: string;
}

/** The two lists of the collector file (metrics, queries), read line by line: the file keeps to this shape. */
function parseCollector(text: string): { metrics: ExportedMetric[]; queries: Map<string, string> } {
  const list = (line: string): string[] => (/\[(.*)\]/.exec(line)?.[1] ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  const metrics: ExportedMetric[] = [];
  const queries = new Map<string, string>();
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i] ?? '';
    const metric = /^ {2}- metric_name: (\S+)$/.exec(line);
    if (metric !== null) metrics.push({ name: metric[1] ?? '', type: '', values: [], keyLabels: [], queryRef: '' });
    const current = metrics.at(-1);
    if (current !== undefined && /^ {4}type: /.test(line)) current.type = line.split(':')[1]?.trim() ?? '';
    if (current !== undefined && /^ {4}values: /.test(line)) current.values = list(line);
    if (current !== undefined && /^ {4}key_labels: /.test(line)) current.keyLabels = list(line);
    if (current !== undefined && /^ {4}query_ref: /.test(line)) current.queryRef = line.split(':')[1]?.trim() ?? '';
    const query = /^ {2}- query_name: (\S+)$/.exec(line);
    if (query !== null && /^ {4}query: \|$/.test(lines[i + 1] ?? '')) {
      const body: string[] = [];
      for (let j = i + 2; j < lines.length && (lines[j] ?? '').startsWith('      '); j += 1) body.push((lines[j] ?? '').slice(6));
      queries.set(query[1] ?? '', body.join('\n'));
    }
  }
  return { metrics, queries };
}

let db: TestDatabase;
let reader: pg.Client;
beforeAll(async () => {
  db = await createTestDatabase('sql_exporter');
  reader = new pg.Client({ connectionString: asRole(db.url, 'settle_readonly') });
  await reader.connect();
});
afterAll(async () => {
  await reader?.end();
  await db?.drop();
});

describe('deploy/sql_exporter', () => {
  it('every metric reads existing columns of a query that answers as settle_readonly; every view column is exported', async () => {
    const { metrics, queries } = parseCollector(await readFile(path.join(root, 'deploy/sql_exporter/pg-settle.collector.yml'), 'utf8'));
    expect(metrics.length).toBeGreaterThan(5);
    const columnsOf = new Map<string, string[]>();
    for (const [name, text] of queries) {
      const result = await reader.query(text);
      expect(result.rows.length, name).toBeGreaterThan(0);
      columnsOf.set(name, result.fields.map((f) => f.name));
    }
    for (const metric of metrics) {
      expect(metric.name, 'Prometheus naming').toMatch(/^pg_settle_[a-z_]+$/);
      expect(metric.type, metric.name).toBe('gauge');
      expect(columnsOf.get(metric.queryRef), `${metric.name}: query ${metric.queryRef}`).toBeDefined();
      for (const column of [...metric.values, ...metric.keyLabels]) expect(columnsOf.get(metric.queryRef), metric.name).toContain(column);
    }
    const { fields } = await reader.query('select * from settle.metrics');
    const exported = new Set(metrics.flatMap((m) => m.values));
    const viaDeadLetters = ['dead_letters_failed', 'dead_letters_needs_reconciliation'];
    const notExported = fields.map((f) => f.name).filter((c) => !exported.has(c) && !viaDeadLetters.includes(c) && c !== 'recent_window_seconds');
    expect(notExported).toEqual([]);
    const dead = await reader.query<{ reason: string }>(queries.get('settle_dead_letters') ?? '');
    expect(dead.rows.map((r) => r.reason)).toEqual(['failed', 'needs_reconciliation']);

    const doc = await readFile(path.join(root, 'docs/observability.md'), 'utf8');
    for (const metric of metrics) expect(doc, `docs/observability.md lists ${metric.name}`).toContain(`\`${metric.name}\``);
  });
});
