import { readFile } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';
import { asRole } from '../client/helpers.js';
import { parseCollector } from '../support/collector.js';
import { selectorsOf, syntaxErrors } from '../support/promql.js';

// deploy/sql_exporter/pg-settle.collector.yml runs as settle_readonly against a migrated
// database: each query answers, each metric's value and label columns exist in its query's
// answer, every column of settle.metrics is exported, and docs/observability.md lists every metric.
const root = path.resolve(import.meta.dirname, '../..');

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
    const { metrics, queries } = parseCollector(
      await readFile(path.join(root, 'deploy/sql_exporter/pg-settle.collector.yml'), 'utf8'),
    );
    expect(metrics.length).toBeGreaterThan(5);
    const columnsOf = new Map<string, string[]>();
    for (const [name, text] of queries) {
      const result = await reader.query(text);
      expect(result.rows.length, name).toBeGreaterThan(0);
      columnsOf.set(
        name,
        result.fields.map((f) => f.name),
      );
    }
    for (const metric of metrics) {
      expect(metric.name, 'Prometheus naming').toMatch(/^pg_settle_[a-z_]+$/);
      expect(metric.type, metric.name).toBe('gauge');
      expect(columnsOf.get(metric.queryRef), `${metric.name}: query ${metric.queryRef}`).toBeDefined();
      for (const column of [...metric.values, ...metric.keyLabels])
        expect(columnsOf.get(metric.queryRef), metric.name).toContain(column);
    }
    const { fields } = await reader.query('select * from settle.metrics');
    const exported = new Set(metrics.flatMap((m) => m.values));
    const viaDeadLetters = [
      'dead_letters_failed',
      'dead_letters_needs_reconciliation',
      'in_doubt_under_5m',
      'in_doubt_5m_to_1h',
      'in_doubt_over_1h',
    ];
    const notExported = fields
      .map((f) => f.name)
      .filter((c) => !exported.has(c) && !viaDeadLetters.includes(c) && c !== 'recent_window_seconds');
    expect(notExported).toEqual([]);
    const dead = await reader.query<{ reason: string }>(queries.get('settle_dead_letters') ?? '');
    expect(dead.rows.map((r) => r.reason)).toEqual(['failed', 'needs_reconciliation']);
    const inDoubt = await reader.query<{ age: string }>(queries.get('settle_in_doubt') ?? '');
    expect(inDoubt.rows.map((r) => r.age)).toEqual(['under_5m', '5m_to_1h', 'over_1h']);

    const doc = await readFile(path.join(root, 'docs/observability.md'), 'utf8');
    for (const metric of metrics)
      expect(doc, `docs/observability.md lists ${metric.name}`).toContain(`\`${metric.name}\``);

    // The page's table of settle.metrics has exactly the view's columns, in its order.
    const gauges = section(doc, '## SQL gauges', '### Cost at');
    const documented = [...gauges.matchAll(/^\| `([a-z0-9_]+)` \| (?:bigint|integer|double precision) \|/gm)].map(
      (m) => m[1],
    );
    expect(documented).toEqual(fields.map((f) => f.name));

    // Every alert names metrics the page defines: an exported gauge or a client metric.
    const alerts = section(doc, '## Alerts', '## Live view');
    const clientMetrics = [
      ...section(doc, '### Metrics', '### Spans').matchAll(/`(pg_settle_[a-z_]+|db_client_[a-z_]+)`/g),
    ].map((m) => m[1]);
    const known = new Set([...metrics.map((m) => m.name), ...clientMetrics]);
    const expressions = [...alerts.matchAll(/^\s+expr: (.+)$/gm)].map((m) => m[1] ?? '');
    expect(expressions.length).toBeGreaterThan(10);
    for (const expr of expressions) {
      // The metrics it selects, as Prometheus' grammar reads the expression (a histogram's by its _bucket series).
      expect(syntaxErrors(expr), expr).toEqual([]);
      const names = selectorsOf(expr).map((s) => s.metric?.replace(/_bucket$/, ''));
      expect(names.length, expr).toBeGreaterThan(0);
      for (const name of names) expect(known, `${expr}: ${name ?? ''}`).toContain(name);
    }
    // The reconciliation queue and upkeep have their alerts, the feed lag its own.
    for (const metric of [
      'pg_settle_feed_lag_seconds',
      'pg_settle_oldest_needs_reconciliation_age_seconds',
      'pg_settle_upkeep_jobs_overdue',
    ]) {
      expect(
        expressions.some((e) => e.includes(metric)),
        metric,
      ).toBe(true);
    }
    expect(expressions.some((e) => e.includes('deriv(pg_settle_dead_letters{reason="needs_reconciliation"}'))).toBe(
      true,
    );

    // The rules file an operator loads is this block, after its comment header.
    const block = /```yaml\n([\s\S]*?)```/.exec(alerts)?.[1] ?? '';
    const rules = await readFile(path.join(root, 'deploy/prometheus/pg-settle.rules.yml'), 'utf8');
    expect(rules.replace(/^(#.*\n)+/, '')).toBe(block);
  });
});

/** The text of `doc` from the line starting with `from` to the next line starting with `to`. */
function section(doc: string, from: string, to: string): string {
  const start = doc.indexOf(`\n${from}`);
  expect(start, from).toBeGreaterThanOrEqual(0);
  const end = doc.indexOf(`\n${to}`, start + 1);
  return doc.slice(start, end === -1 ? undefined : end);
}
