import { readFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import express from 'express';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdempotency } from '../../src/http/express.js';
import { createSettleClient, type SettleClient } from '../../src/index.js';
import { type MetricsEndpoint, startMetricsEndpoint } from '../../src/simulator/prometheus.js';
import { asRole, binding, gate, uniqueKey } from '../client/helpers.js';
import { parseCollector } from '../support/collector.js';
import { useTestDatabase } from '../support/database.js';
import { scrapeExposition } from '../support/exposition.js';
import {
  evaluate,
  groupingsOf,
  type Series,
  type Snapshot,
  select,
  selectorsOf,
  syntaxErrors,
} from '../support/promql.js';

// deploy/grafana/pg-settle.dashboard.json and deploy/prometheus/pg-settle.rules.yml against what
// the three ways of using the client expose: an Express app behind pg-settle/express, a batch
// worker on runMany() and a worker on run(), each with its own client and its own Prometheus
// /metrics (@opentelemetry/exporter-prometheus), against the real engine; and the sql_exporter
// collector's queries run as settle_readonly (sql_exporter itself is a Go binary, not installed
// here). Each is scraped as Prometheus would (a `job` label per target) around rounds of real
// traffic; every query is parsed by Prometheus' own grammar and evaluated over two scrapes.
const root = path.resolve(import.meta.dirname, '../..');
const tenant = 'acme';

interface Target {
  readonly refId: string;
  readonly expr: string;
}
interface Panel {
  readonly id: number;
  readonly title: string;
  readonly type: string;
  readonly gridPos: { readonly x: number; readonly y: number; readonly w: number; readonly h: number };
  readonly targets?: readonly Target[];
  readonly datasource?: { readonly uid: string };
  readonly fieldConfig?: { readonly defaults: { readonly unit?: string }; readonly overrides: readonly unknown[] };
}
interface Dashboard {
  readonly title: string;
  readonly uid: string;
  readonly schemaVersion: number;
  readonly panels: readonly Panel[];
  readonly templating: { readonly list: readonly { readonly name: string; readonly type: string }[] };
}
interface Rule {
  readonly alert: string;
  readonly expr: string;
}

/** The alert rules of the rules file (one `expr:` line per rule: the file keeps to that shape). */
function parseRules(text: string): Rule[] {
  return [...text.matchAll(/^ {6}- alert: (\S+)\n {8}expr: (.+)$/gm)].map((m) => ({
    alert: m[1] ?? '',
    expr: m[2] ?? '',
  }));
}

/** A query's unit, from what it computes: a quantile of a seconds histogram, a rate, or a gauge. */
function unitOf(expr: string): 'seconds' | 'rate' | 'count' {
  const metrics = selectorsOf(expr).map((s) => s.metric ?? '');
  if (expr.includes('histogram_quantile(')) {
    expect(
      metrics.every((m) => m.endsWith('_seconds_bucket')),
      expr,
    ).toBe(true);
    return 'seconds';
  }
  if (/\b(?:rate|irate)\(/.test(expr)) return 'rate';
  if (metrics.every((m) => m.endsWith('_seconds'))) return 'seconds';
  expect(
    metrics.some((m) => m.endsWith('_seconds')),
    `${expr} mixes seconds with counts`,
  ).toBe(false);
  return 'count';
}
const GRAFANA_UNITS: Readonly<Record<ReturnType<typeof unitOf>, readonly string[]>> = {
  seconds: ['s'],
  rate: ['ops', 'reqps'],
  count: ['short', 'none'],
};

/** The Express app: pg-settle/express on three routes. */
async function startExpressApp(settle: SettleClient, onErrorAfterResponse: () => void) {
  const app = express();
  app.use(express.json());
  const idempotency = createIdempotency({
    settle,
    binding: () => ({ tenant, ...binding }),
    onErrorAfterResponse,
  });
  app.post('/orders', idempotency(), (req, res) => {
    res.status(201).json({ order: req.idempotency?.attempt ?? null });
  });
  // A downstream gateway timed out: the default response policy records the outcome unknown.
  app.post('/gateway', idempotency(), (_req, res) => {
    res.status(504).json({ gateway: 'timed out' });
  });
  app.post('/throws-after', idempotency(), (_req, res) => {
    res.status(201).json({ audited: false });
    throw new Error('the audit write failed after the response');
  });
  const server: Server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    async post(route: string, key: string, body: unknown = {}): Promise<number> {
      const response = await fetch(`${url}${route}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify(body),
      });
      await response.arrayBuffer();
      return response.status;
    },
    async close(): Promise<void> {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

const db = useTestDatabase('grafana_dashboard');

interface App {
  readonly job: 'express' | 'batch' | 'run';
  readonly endpoint: MetricsEndpoint;
  readonly settle: SettleClient;
}
let apps: App[] = [];
let web: Awaited<ReturnType<typeof startExpressApp>>;
/** The run() worker's second client, whose settle calls give up on a lock after 200 ms (and retry). */
let impatient: SettleClient;
let reader: pg.Client;
let su: pg.Client;
let afterResponse: (() => void) | undefined;
let retried: (() => void) | undefined;

beforeAll(async () => {
  for (const job of ['express', 'batch', 'run'] as const) {
    const endpoint = await startMetricsEndpoint({ port: 0 });
    const settle = createSettleClient({
      connectionString: asRole(db.url, 'settle_app'),
      telemetry: { meterProvider: endpoint.meterProvider },
    });
    apps.push({ job, endpoint, settle });
  }
  const [expressApp, , runApp] = apps as [App, App, App];
  web = await startExpressApp(expressApp.settle, () => afterResponse?.());
  const url = new URL(asRole(db.url, 'settle_app'));
  url.searchParams.set('options', '-c role=settle_app -c lock_timeout=200');
  impatient = createSettleClient({
    connectionString: url.toString(),
    telemetry: { meterProvider: runApp.endpoint.meterProvider },
    onRetry: () => retried?.(),
  });
  // Connected before any lock is held: only its settle calls are to wait on one.
  await impatient.run({ tenant, key: uniqueKey('warm'), request: {}, binding }, async () => 'warm');
  reader = new pg.Client({ connectionString: asRole(db.url, 'settle_readonly') });
  su = new pg.Client({ connectionString: db.url });
  await reader.connect();
  await su.connect();
});

afterAll(async () => {
  await web?.close();
  await impatient?.end();
  for (const app of apps) {
    await app.settle.end();
    await app.endpoint.stop();
  }
  apps = [];
  await reader?.end();
  await su?.end();
});

const app = (job: App['job']): App => {
  const found = apps.find((a) => a.job === job);
  if (found === undefined) throw new Error(job);
  return found;
};

/**
 * A transparent retry in the run() worker: every private table locked by another session, a
 * run() on the impatient client gives up waiting after lock_timeout (55P03) and is retried; the
 * lock is released when the retry is reported.
 */
async function provokeRetry(): Promise<void> {
  const released = gate();
  retried = () => released.open();
  await su.query('begin');
  try {
    const { rows } = await su.query<{ name: string }>(
      `select format('%I.%I', n.nspname, c.relname) as name
         from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'settle_private' and c.relkind in ('r', 'p')`,
    );
    await su.query(`lock table ${rows.map((r) => r.name).join(', ')} in access exclusive mode`);
    const outcome = impatient.run({ tenant, key: uniqueKey('retry'), request: {}, binding }, async () => 'ok');
    await released.promise;
    await su.query('commit');
    expect(await outcome).toMatchObject({ outcome: 'completed' });
  } finally {
    retried = undefined;
    await su.query('rollback').catch(() => {});
  }
}

/** A round of ordinary traffic in every app: every series the dashboard reads moves. */
async function traffic(): Promise<void> {
  const key = uniqueKey('http');
  expect(await web.post('/orders', key, { n: 1 })).toBe(201);
  expect(await web.post('/orders', key, { n: 1 })).toBe(201); // a replay
  expect(await web.post('/orders', key, { n: 2 })).toBe(422); // the key reused with another request
  const erred = gate();
  afterResponse = () => erred.open();
  expect(await web.post('/throws-after', uniqueKey('http'))).toBe(201);
  await erred.promise;

  const items = [1, 2, 3].map((n) => ({ key: uniqueKey('batch'), request: { n } }));
  const ran = await app('batch').settle.runMany({ tenant, binding, items }, async ({ items: acquired }) =>
    acquired.map((item) => ({ status: 'fulfilled' as const, value: { paid: item.key } })),
  );
  expect(ran.map((o) => o.outcome)).toEqual(['completed', 'completed', 'completed']);
  const again = await app('batch').settle.runMany({ tenant, binding, items }, async () => []);
  expect(again.map((o) => o.outcome)).toEqual(['replay', 'replay', 'replay']);

  const runKey = uniqueKey('run');
  const run = app('run').settle;
  expect(await run.run({ tenant, key: runKey, request: {}, binding }, async () => 'paid')).toMatchObject({
    outcome: 'completed',
  });
  expect(await run.run({ tenant, key: runKey, request: {}, binding }, async () => 'paid')).toMatchObject({
    outcome: 'replay',
  });
  await provokeRetry();
}

/** One unknown outcome in each app, the way each meets one. */
async function provokeUnknowns(): Promise<void> {
  // HTTP: the handler answered 504 (a downstream gateway timed out).
  expect(await web.post('/gateway', uniqueKey('http'))).toBe(504);
  // runMany: one item's call to the downstream timed out.
  const items = [1, 2].map((n) => ({ key: uniqueKey('batch'), request: { n } }));
  const batch = await app('batch').settle.runMany(
    { tenant, binding, items, classify: () => 'unknown' },
    async ({ items: acquired }) =>
      acquired.map((item, i) =>
        i === 0
          ? { status: 'rejected' as const, reason: new Error('the provider timed out') }
          : { status: 'fulfilled' as const, value: { paid: item.key } },
      ),
  );
  expect(batch.map((o) => o.outcome)).toEqual(['unknown', 'completed']);
  // run(): the effect's call timed out.
  const run = await app('run').settle.run(
    { tenant, key: uniqueKey('run'), request: {}, binding, classify: () => 'unknown' },
    async () => {
      throw new Error('the provider timed out');
    },
  );
  expect(run).toMatchObject({ outcome: 'unknown', reason: 'effect_outcome_unknown' });
}

/** Every target scraped once: each app's /metrics and the collector's queries, a job label each. */
async function scrapeAll(collector: ReturnType<typeof parseCollector>): Promise<Snapshot> {
  const at = Date.now() / 1000;
  const series: Series[] = [];
  for (const a of apps) {
    const { exposition } = await scrapeExposition(a.endpoint.url);
    for (const s of exposition.samples)
      series.push({ labels: { ...s.labels, __name__: s.name, job: a.job }, value: s.value });
  }
  const answers = new Map<string, pg.QueryResult>();
  for (const [name, query] of collector.queries) answers.set(name, await reader.query(query));
  for (const metric of collector.metrics) {
    for (const row of answers.get(metric.queryRef)?.rows ?? []) {
      const value = row[metric.values[0] ?? ''] as unknown;
      if (value === null || value === undefined) continue; // sql_exporter exports no sample for NULL
      const labels = Object.fromEntries(metric.keyLabels.map((l) => [l, String(row[l])]));
      series.push({ labels: { ...labels, __name__: metric.name, job: 'sql_exporter' }, value: Number(value) });
    }
  }
  return { at, series };
}

const only = (snapshot: Snapshot, job: string): Snapshot => ({
  at: snapshot.at,
  series: snapshot.series.filter((s) => s.labels.job === job),
});

/** Every selector of `expr` selects series with data in `snapshot`, carrying the labels it matches and groups by. */
function expectSelected(where: string, expr: string, snapshot: Snapshot): void {
  expect(syntaxErrors(expr), `${where}: ${expr}`).toEqual([]);
  const labelsOf = (metric: string | undefined): Set<string> =>
    new Set(
      snapshot.series
        .filter((s) => metric === undefined || s.labels.__name__ === metric)
        .flatMap((s) => Object.keys(s.labels)),
    );
  for (const selector of selectorsOf(expr)) {
    const bare = { ...selector, matchers: selector.matchers.filter((m) => m.label === '__name__') };
    const series = select(bare, snapshot);
    expect(series.length, `${where}: ${selector.text} selects no series`).toBeGreaterThan(0);
    expect(
      series.some((s) => Number.isFinite(s.value)),
      `${where}: ${selector.text} has data`,
    ).toBe(true);
    for (const matcher of selector.matchers)
      expect(labelsOf(selector.metric), `${where}: ${selector.text} matches ${matcher.label}`).toContain(matcher.label);
  }
  for (const grouping of groupingsOf(expr))
    for (const label of grouping.labels)
      for (const selector of grouping.selectors)
        expect(labelsOf(selector.metric), `${where}: ${selector.text} carries ${label} (grouped by)`).toContain(label);
}

describe('deploy/grafana dashboard and deploy/prometheus rules, scraped from an Express app, a runMany() worker and a run() worker', () => {
  it('every panel and rule selects metrics with data and the labels it uses; every panel shows data in one unit; PgSettleUnknownOutcomes fires for each way', {
    timeout: 180_000,
  }, async () => {
    const dashboard = JSON.parse(
      await readFile(path.join(root, 'deploy/grafana/pg-settle.dashboard.json'), 'utf8'),
    ) as Dashboard;
    expect(dashboard).toMatchObject({ title: 'pg-settle', uid: 'pg-settle' });
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    expect(dashboard.templating.list).toContainEqual(
      expect.objectContaining({ name: 'datasource', type: 'datasource' }),
    );
    expect(new Set(dashboard.panels.map((p) => p.title)).size).toBe(dashboard.panels.length);
    expect(new Set(dashboard.panels.map((p) => p.id)).size).toBe(dashboard.panels.length);
    // Laid out on Grafana's 24-column grid without overlaps.
    const boxes = dashboard.panels.map((p) => ({ title: p.title, ...p.gridPos }));
    for (const [n, a] of boxes.entries()) {
      expect(a.x + a.w, a.title).toBeLessThanOrEqual(24);
      for (const b of boxes.slice(n + 1)) {
        const overlap = a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
        expect(overlap, `${a.title} overlaps ${b.title}`).toBe(false);
      }
    }
    const panels = dashboard.panels.filter((p) => p.type !== 'row');
    const rules = parseRules(await readFile(path.join(root, 'deploy/prometheus/pg-settle.rules.yml'), 'utf8'));
    expect(rules.length).toBeGreaterThan(15);
    const unknownRule = rules.find((r) => r.alert === 'PgSettleUnknownOutcomes');
    expect(unknownRule).toBeDefined();
    const collector = parseCollector(
      await readFile(path.join(root, 'deploy/sql_exporter/pg-settle.collector.yml'), 'utf8'),
    );

    // Prometheus scrapes continuously: a first round makes every series, the scrapes after it are
    // the two samples each range selector reads.
    await traffic();
    const first = await scrapeAll(collector);
    await traffic();
    const quiet = await scrapeAll(collector);
    // No unknown outcome yet: the alert is empty, though every source's series exist (at 0).
    for (const job of ['express', 'batch', 'run']) {
      expect(evaluate(unknownRule?.expr ?? '', only(first, job), only(quiet, job)), job).toEqual([]);
      expect(
        select({ text: '', metric: 'pg_settle_unknown_outcomes_total', matchers: [] }, only(quiet, job)).length,
        job,
      ).toBeGreaterThan(0);
    }

    await provokeUnknowns();
    await traffic();
    const last = await scrapeAll(collector);

    // PgSettleUnknownOutcomes fires in each app, naming its source.
    const sources = { express: 'http', batch: 'run_many', run: 'run' } as const;
    for (const job of ['express', 'batch', 'run'] as const) {
      const firing = evaluate(unknownRule?.expr ?? '', only(quiet, job), only(last, job));
      expect(
        firing.map((s) => s.labels),
        job,
      ).toEqual([{ pg_settle_source: sources[job] }]);
      expect(firing[0]?.value, job).toBeGreaterThan(0);
    }
    const reasons = evaluate(
      'sum by (job, pg_settle_source, pg_settle_reason) (increase(pg_settle_unknown_outcomes_total[5m])) > 0',
      quiet,
      last,
    );
    expect(reasons.map((s) => s.labels).sort((a, b) => String(a.job).localeCompare(String(b.job)))).toEqual([
      { job: 'batch', pg_settle_source: 'run_many', pg_settle_reason: 'effect_outcome_unknown' },
      { job: 'express', pg_settle_source: 'http', pg_settle_reason: 'response_policy' },
      { job: 'run', pg_settle_source: 'run', pg_settle_reason: 'effect_outcome_unknown' },
    ]);

    // Every panel: its queries select data with the labels they use, evaluate to data over the
    // last two scrapes, and share one unit, the panel's.
    let queries = 0;
    for (const panel of panels) {
      expect(panel.datasource?.uid, panel.title).toBe('${datasource}');
      expect(panel.targets?.length ?? 0, panel.title).toBeGreaterThan(0);
      expect(panel.fieldConfig?.overrides ?? [], `${panel.title}: no per-series unit`).toEqual([]);
      const units = new Set<string>();
      for (const target of panel.targets ?? []) {
        queries += 1;
        expectSelected(panel.title, target.expr, last);
        const values = evaluate(target.expr, quiet, last);
        expect(
          values.some((s) => Number.isFinite(s.value)),
          `${panel.title}: ${target.expr} shows data`,
        ).toBe(true);
        units.add(unitOf(target.expr));
      }
      expect([...units], `${panel.title}: one unit`).toHaveLength(1);
      const [unit] = [...units] as [ReturnType<typeof unitOf>];
      expect(GRAFANA_UNITS[unit], `${panel.title}: unit`).toContain(panel.fieldConfig?.defaults.unit);
    }
    expect(queries).toBeGreaterThan(25);

    // One panel serves every way: the effect durations of run(), runMany() and the middleware's handler.
    const effects = panels.find((p) => p.title === 'Effect duration p99')?.targets?.[0]?.expr ?? '';
    expect(
      evaluate(effects, quiet, last)
        .filter((s) => Number.isFinite(s.value))
        .map((s) => s.labels.pg_settle_operation)
        .sort(),
    ).toEqual(['pg_settle.http', 'pg_settle.run', 'pg_settle.run_many']);
    const http = panels.find((p) => p.title === 'Requests by result')?.targets?.[0]?.expr ?? '';
    expect(new Set(evaluate(http, quiet, last).map((s) => s.labels.pg_settle_http_result))).toEqual(
      new Set(['first', 'replay', '422']),
    );
    const items = panels.find((p) => p.title === 'Batch items by outcome')?.targets?.[0]?.expr ?? '';
    expect(
      new Set(evaluate(items, quiet, last).map((s) => `${s.labels.pg_settle_operation} ${s.labels.pg_settle_outcome}`)),
    ).toEqual(new Set(['settle.claim_many acquired', 'settle.claim_many replay', 'settle.complete_many settled']));

    // Every rule: its metrics have data and the labels it matches and groups by; it evaluates.
    for (const rule of rules) {
      expectSelected(rule.alert, rule.expr, last);
      expect(() => evaluate(rule.expr, quiet, last), rule.alert).not.toThrow();
    }

    // Every gauge sql_exporter exports is on the dashboard.
    const used = JSON.stringify(panels);
    for (const metric of collector.metrics) expect(used, metric.name).toContain(metric.name);
  });
});
