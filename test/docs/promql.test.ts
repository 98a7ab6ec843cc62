import { describe, expect, it } from 'vitest';
import { evaluate, groupingsOf, type Series, selectorsOf, syntaxErrors } from '../support/promql.js';

// test/support/promql.ts, the evaluator test/docs/grafana.test.ts judges the dashboard and the
// alert rules with, against Prometheus' documented semantics on small hand-made scrapes.
const series = (name: string, labels: Record<string, string>, value: number): Series => ({
  labels: { __name__: name, ...labels },
  value,
});

const before = {
  at: 100,
  series: [
    series('jobs_total', { kind: 'a', job: 'x' }, 10),
    series('jobs_total', { kind: 'b', job: 'x' }, 4),
    series('jobs_total', { kind: 'a', job: 'y' }, 7),
    series('depth', { queue: 'q' }, 5),
    series('wait_seconds_bucket', { le: '0.1' }, 2),
    series('wait_seconds_bucket', { le: '1' }, 2),
    series('wait_seconds_bucket', { le: '+Inf' }, 2),
  ],
};
const after = {
  at: 110,
  series: [
    series('jobs_total', { kind: 'a', job: 'x' }, 30),
    series('jobs_total', { kind: 'b', job: 'x' }, 4),
    series('jobs_total', { kind: 'a', job: 'y' }, 3), // reset: counted from 0
    series('jobs_total', { kind: 'c', job: 'x' }, 50), // new: one sample, no rate yet
    series('depth', { queue: 'q' }, 2),
    series('wait_seconds_bucket', { le: '0.1' }, 2),
    series('wait_seconds_bucket', { le: '1' }, 12),
    series('wait_seconds_bucket', { le: '+Inf' }, 12),
  ],
};
/** Rows in one order whatever the order of their keys: compared as sets. */
const sorted = (rows: Record<string, string | number>[]) =>
  rows
    .map((row) => Object.fromEntries(Object.entries(row).sort(([a], [b]) => a.localeCompare(b))))
    .sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)));
const run = (expr: string) =>
  sorted(evaluate(expr, before, after).map((s) => ({ ...s.labels, value: Number(s.value.toFixed(6)) })));

describe('test/support/promql.ts', () => {
  it("parses with Prometheus' grammar: errors are reported, selectors and groupings read", () => {
    expect(syntaxErrors('sum(rate(jobs_total[5m])')).not.toEqual([]);
    expect(syntaxErrors('sum by (kind) (rate(jobs_total{job=~"x|y"}[5m])) > 0')).toEqual([]);
    expect(selectorsOf('rate(jobs_total{job="x",kind!~"b"}[5m]) or depth')).toEqual([
      {
        text: 'jobs_total{job="x",kind!~"b"}',
        metric: 'jobs_total',
        matchers: [
          { label: 'job', op: '=', value: 'x' },
          { label: 'kind', op: '!~', value: 'b' },
        ],
      },
      { text: 'depth', metric: 'depth', matchers: [] },
    ]);
    expect(groupingsOf('sum by (le, kind) (rate(wait_seconds_bucket[5m]))')).toEqual([
      {
        labels: ['le', 'kind'],
        selectors: [{ text: 'wait_seconds_bucket', metric: 'wait_seconds_bucket', matchers: [] }],
      },
    ]);
  });

  it('rate and increase read the two scrapes as two samples: a reset counts from 0, a new series has no rate yet', () => {
    expect(run('increase(jobs_total[5m])')).toEqual(
      sorted([
        { job: 'x', kind: 'a', value: 20 },
        { job: 'x', kind: 'b', value: 0 },
        { job: 'y', kind: 'a', value: 3 },
      ]),
    );
    expect(run('sum by (kind) (rate(jobs_total[5m]))')).toEqual(
      sorted([
        { kind: 'a', value: 2.3 },
        { kind: 'b', value: 0 },
      ]),
    );
    expect(run('sum without (kind) (rate(jobs_total[5m]))')).toEqual(
      sorted([
        { job: 'x', value: 2 },
        { job: 'y', value: 0.3 },
      ]),
    );
  });

  it('gauges: instant value, delta, deriv, min_over_time', () => {
    expect(run('depth')).toEqual(sorted([{ __name__: 'depth', queue: 'q', value: 2 }]));
    expect(run('delta(depth[30m])')).toEqual(sorted([{ queue: 'q', value: -3 }]));
    expect(run('deriv(depth[30m])')).toEqual(sorted([{ queue: 'q', value: -0.3 }]));
    expect(run('min_over_time(depth[10m]) > 1')).toEqual(sorted([{ queue: 'q', value: 2 }]));
  });

  it('comparisons filter (or answer 0/1 with bool); or keeps the left side and what it lacks of the right', () => {
    expect(run('sum by (kind) (increase(jobs_total[5m])) > 0')).toEqual(sorted([{ kind: 'a', value: 23 }]));
    expect(run('sum by (kind) (increase(jobs_total[5m])) > bool 0')).toEqual(
      sorted([
        { kind: 'a', value: 1 },
        { kind: 'b', value: 0 },
      ]),
    );
    expect(run('sum(increase(jobs_total{kind="b"}[5m]) or increase(jobs_total{kind="a"}[5m]))')).toEqual(
      sorted([{ value: 23 }]),
    );
  });

  it('histogram_quantile interpolates linearly within the bucket, and answers the highest finite bound past it', () => {
    // Over the window 10 observations, all in (0.1, 1]: the 0.99 quantile is 0.1 + 0.9 * 0.99.
    expect(run('histogram_quantile(0.99, sum by (le) (rate(wait_seconds_bucket[5m])))')).toEqual(
      sorted([{ value: 0.991 }]),
    );
    const past = {
      at: 120,
      series: [
        series('wait_seconds_bucket', { le: '0.1' }, 2),
        series('wait_seconds_bucket', { le: '1' }, 12),
        series('wait_seconds_bucket', { le: '+Inf' }, 22),
      ],
    };
    expect(evaluate('histogram_quantile(0.99, rate(wait_seconds_bucket[5m]))', after, past)).toEqual([
      { labels: {}, value: 1 },
    ]);
    // Nothing observed in the window: NaN, which a panel does not draw.
    const [idle] = evaluate('histogram_quantile(0.5, rate(wait_seconds_bucket[5m]))', after, { ...after, at: 111 });
    expect(Number.isNaN(idle?.value)).toBe(true);
  });

  it('throws on what it does not evaluate, rather than guess', () => {
    expect(() => evaluate('absent(jobs_total)', before, after)).toThrow(/absent is not supported/);
    expect(() => evaluate('jobs_total + on (kind) depth', before, after)).toThrow(/on\/ignoring/);
    expect(() => evaluate('topk(1, jobs_total)', before, after)).toThrow(/topk is not supported/);
  });
});
