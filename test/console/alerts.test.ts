import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CLIENT_RULES, evaluateAlerts, SQL_RULES } from '../../src/console/alerts.js';

// The console's alert table is the rule file's (deploy/prometheus/pg-settle.rules.yml): every rule
// there is on the page, judged on settle.metrics or named as one the database cannot see, with
// the file's expression, severity and runbook.

const root = path.resolve(import.meta.dirname, '../..');

interface FileRule {
  readonly name: string;
  readonly expr: string;
  readonly for: string | null;
  readonly severity: string;
  readonly runbook: string | null;
}

function fileRules(): FileRule[] {
  const text = readFileSync(path.join(root, 'deploy/prometheus/pg-settle.rules.yml'), 'utf8');
  return text
    .split(/\n\s+- alert: /)
    .slice(1)
    .map((block) => ({
      name: block.split('\n')[0]?.trim() ?? '',
      expr: /\n\s+expr: (.+)/.exec(block)?.[1]?.trim() ?? '',
      for: /\n\s+for: (\S+)/.exec(block)?.[1] ?? null,
      severity: /severity: (\w+)/.exec(block)?.[1] ?? '',
      runbook: /runbook: "([^"]+)"/.exec(block)?.[1] ?? null,
    }));
}

describe("the console's alert table", () => {
  it('names every rule of deploy/prometheus/pg-settle.rules.yml, with its expression, severity and runbook', () => {
    const rules = fileRules();
    expect(rules.length).toBeGreaterThan(15);
    const judged = new Map(evaluateAlerts(null).map((a) => [a.name, a]));
    const client = new Set<string>(CLIENT_RULES);
    for (const rule of rules) {
      expect(judged.has(rule.name) || client.has(rule.name), rule.name).toBe(true);
      const shown = judged.get(rule.name);
      if (shown === undefined) continue;
      expect(shown.condition, rule.name).toBe(rule.for === null ? rule.expr : `${rule.expr} for ${rule.for}`);
      expect(shown.severity, rule.name).toBe(rule.severity);
      expect(shown.runbook, rule.name).toBe(rule.runbook);
    }
    expect(new Set([...judged.keys(), ...client])).toEqual(new Set(rules.map((r) => r.name)));
  });

  it('judges a gauge rule by its threshold: the horizon held 65 s holds, 60 s does not', () => {
    const held = (seconds: number) =>
      evaluateAlerts({ feed_horizon_age_seconds: seconds }).find((a) => a.name === 'PgSettleFeedHorizonHeld');
    expect(held(65)).toMatchObject({ value: 65, firing: true });
    expect(held(60)).toMatchObject({ value: 60, firing: false });
    const inDoubt = evaluateAlerts({ in_doubt_over_1h: 3 }).find((a) => a.name === 'PgSettleInDoubtNotDeadLettered');
    expect(inDoubt).toMatchObject({ value: 3, firing: true });
    for (const rule of SQL_RULES) {
      if (rule.column === null) continue;
      const file = fileRules().find((r) => r.name === rule.name);
      expect(file?.expr, rule.name).toMatch(new RegExp(`> ${rule.threshold}$`));
    }
  });
});
