import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BENCH_DIR } from '../../bench/lib/database.js';
import { renderStep } from '../../bench/lib/ladder-render.js';
import { verifyPrototypeCycles } from '../../bench/lib/prototype.js';
import { FEATURES, ladderFeatures, ladderSteps, selectSteps } from '../../bench/lib/ladder-steps.js';
import { parseScript, runScript } from '../../bench/lib/script-runner.js';
import { withPgClient } from '../../src/db/with-pg-client.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';

// The ladder (bench/lib/ladder-*.ts): step s0 is the prototype of perf-anchors as it is, every
// step adds one engine property to the one it is measured against, and every step loads into a
// real PostgreSQL and settles the cycles its own script drives, with the rows its property adds.

const steps = ladderSteps();
const features = ladderFeatures();
const rendered = new Map(steps.map((s) => [s.id, renderStep(features.get(s.id) ?? ({} as never))]));
const sqlOf = (id: string): string => rendered.get(id)?.sql ?? '';

/** The SQL without comments and without any white space: the same statements, token for token. */
const tokens = (sql: string): string => sql.replace(/--[^\n]*/g, '').replace(/\s+/g, '');

describe('the ladder steps', () => {
  it('s0 is the prototype (bench/sql/prototype.sql, a copy of perf-anchors/proto-engine.sql) token for token', async () => {
    const prototype = await readFile(path.join(BENCH_DIR, 'sql', 'prototype.sql'), 'utf8');
    expect(tokens(sqlOf('s0'))).toBe(tokens(prototype));
    // The comparison sees a change of one token.
    expect(tokens(sqlOf('s0').replace('unique(tenant, key)', 'unique(key, tenant)'))).not.toBe(tokens(prototype));
  });

  it('every step adds exactly one feature to the step it is measured against, and every feature is added once', () => {
    const added: string[] = [];
    for (const step of steps) {
      const mine = features.get(step.id);
      expect(mine).toBeDefined();
      if (step.base === null) {
        expect(step.id).toBe('s0');
        expect(Object.values(mine ?? {}).every((on) => !on)).toBe(true);
        continue;
      }
      const base = features.get(step.base);
      const diff = FEATURES.filter((f) => mine?.[f] !== base?.[f]);
      expect(diff).toEqual([step.feature]);
      expect(mine?.[diff[0] ?? 'rls']).toBe(true);
      added.push(diff[0] ?? '');
    }
    expect([...added].sort()).toEqual([...FEATURES].sort());
    // The chain: a non-side step is measured against the one before it; the side step against its base.
    const chain = steps.filter((s) => !s.side);
    chain.slice(1).forEach((s, i) => expect(s.base).toBe(chain[i]?.id));
    expect(steps.filter((s) => s.side).map((s) => [s.id, s.base])).toEqual([['s7w', 's7c']]);
  });

  it("changes each step's SQL or script against its base", () => {
    for (const step of steps.filter((s) => s.base !== null)) {
      const mine = rendered.get(step.id);
      const base = rendered.get(step.base ?? '');
      expect(`${mine?.sql}${mine?.script}`).not.toBe(`${base?.sql}${base?.script}`);
    }
  });

  it("bench/scripts/proto-cycle.sql (npm run bench's proto) sends the statements of s0's script", async () => {
    const committed = parseScript(await readFile(path.join(BENCH_DIR, 'scripts', 'proto-cycle.sql'), 'utf8'), 'x');
    expect(committed).toEqual(parseScript(rendered.get('s0')?.script ?? '', 'x'));
    expect(committed.statements.map((s) => s.gset)).toEqual([true, true]);
  });

  it('selects steps by id in ladder order and refuses an unknown one', () => {
    expect(selectSteps(['s5', 's0']).map((s) => s.id)).toEqual(['s0', 's5']);
    expect(() => selectSteps(['s0', 's99'])).toThrow(/unknown ladder step s99/);
  });
});

describe('the ladder steps in PostgreSQL', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase('bench_ladder');
  });
  afterAll(async () => {
    await db?.drop();
  });

  /** Loads the step's schema and runs `cycles` of its script on one connection, as pgbench does. */
  async function settle(c: pg.Client, id: string, cycles: number): Promise<void> {
    await c.query(sqlOf(id));
    await runScript(c, parseScript(rendered.get(id)?.script ?? '', `ladder_${id}`), cycles);
  }

  const count = async (c: pg.Client, sql: string): Promise<number> =>
    Number((await c.query<{ n: string }>(sql)).rows[0]?.n ?? -1);

  it.each(steps.map((s) => s.id))('%s loads and its script settles fresh keys, one attempt each', async (id) => {
    await withPgClient(db.url, async (c) => {
      await settle(c, id, 4);
      expect(
        await count(c, `select count(*)::text as n from p.operations where status = 'completed' and tenant = 'bench'`),
      ).toBe(4);
      expect(await count(c, `select count(*)::text as n from p.operations where status <> 'completed'`)).toBe(0);
      expect(await count(c, 'select count(*)::text as n from p.attempts')).toBe(4);
    });
  });

  it("the runner's correctness check passes a step's cycles and fails an operation left unsettled", async () => {
    await withPgClient(db.url, async (c) => {
      await settle(c, 's6', 4);
      const ok = await verifyPrototypeCycles(c, { processed: 4, maxInFlight: 0 });
      expect(ok.checks.filter((check) => !check.ok)).toEqual([]);
      expect(ok.checks.map((check) => check.name)).toContain('one feed event per settlement');
      expect(ok.counters).toEqual({ completed: 4, unfinished: 0, attempts: 4 });
      await c.query(`select * from p.claim('bench', 'left-running', '{}', 'bench-app', array['payments.write'], 0)`);
      const broken = await verifyPrototypeCycles(c, { processed: 5, maxInFlight: 0 });
      expect(broken.checks.filter((check) => !check.ok).map((check) => check.name)).toEqual([
        'every transaction completed its operations',
        'at most one transaction in flight per client and run',
      ]);
    });
  });

  it('from s5 the attempt row logs the claim and the settlement; from s10 at their places in the key history', async () => {
    await withPgClient(db.url, async (c) => {
      await settle(c, 's5', 3);
      const fixed = await c.query(
        `select distinct claim_seq::text, settled_seq::text, claimed_by = session_user as by_login, settled, settled_as::text,
                claim_status_after::text, settled_status_before::text, settled_reason from p.attempts`,
      );
      expect(fixed.rows).toEqual([
        {
          claim_seq: '1',
          settled_seq: '2',
          by_login: true,
          settled: true,
          settled_as: '1',
          claim_status_after: 'running',
          settled_status_before: 'running',
          settled_reason: 'current_attempt',
        },
      ]);
      await settle(c, 's10', 3);
      const history = await c.query(
        `select distinct claim_seq::text, settled_seq::text, settled_audit_id > claim_audit_id as ordered from p.attempts`,
      );
      expect(history.rows).toEqual([{ claim_seq: '1', settled_seq: '2', ordered: true }]);
      expect(await count(c, 'select count(distinct claim_audit_id)::text as n from p.attempts')).toBe(3);
    });
  });

  it('from s6 a settlement writes one feed event with its result and a claim writes no event row', async () => {
    await withPgClient(db.url, async (c) => {
      await settle(c, 's5b', 2);
      expect(await count(c, `select count(*)::text as n from p.events where kind in ('claimed', 'completed')`)).toBe(4);
      for (const id of ['s6', 's7b', 's7w']) {
        await settle(c, id, 2);
        expect(await count(c, 'select count(*)::text as n from p.events')).toBe(0);
        const events = await c.query(
          `select e.status::text, e.result = o.result as copied from p.feed_events e join p.operations o using (tenant, key)`,
        );
        expect(events.rows).toEqual([
          { status: 'completed', copied: true },
          { status: 'completed', copied: true },
        ]);
      }
    });
  });

  it("s7c's guards run on every cycle and s7w's WHEN clauses keep them off it; both refuse a move down the lattice", async () => {
    await withPgClient(db.url, async (c) => {
      await c.query(`set track_functions = 'all'`);
      const guardCalls = async (id: string): Promise<Record<string, number>> => {
        await c.query(sqlOf(id));
        await runScript(c, parseScript(rendered.get(id)?.script ?? '', `guards_${id}`), 3);
        await c.query('select pg_stat_force_next_flush()');
        const rows = await c.query<{ funcname: string; calls: string }>(
          `select funcname, calls::text from pg_stat_user_functions where schemaname = 'p' and funcname like 'tg\\_%' order by 1`,
        );
        return Object.fromEntries(rows.rows.map((r) => [r.funcname, Number(r.calls)]));
      };
      // Each step's schema is new, so its functions' counters start at zero.
      expect(await guardCalls('s7c')).toEqual({ tg_attempts__guard_settlement: 6, tg_operations__guard: 6 });
      await expect(c.query(`update p.operations set status = 'pending', lease_token = null`)).rejects.toThrow(
        /may not move down the lattice/,
      );
      expect(await guardCalls('s7w')).toEqual({});
      await expect(c.query(`update p.operations set status = 'pending', lease_token = null`)).rejects.toThrow(
        /may not move down the lattice/,
      );
      await expect(c.query(`update p.attempts set settled_by = 'someone else'`)).rejects.toThrow(
        /the identity, end and log of an attempt are immutable/,
      );
    });
  });

  it('s12 runs claim and complete as a role that is not a superuser, held to forced row-level security', async () => {
    await withPgClient(db.url, async (c) => {
      await settle(c, 's12', 2);
      const owners = await c.query(
        `select distinct pg_get_userbyid(c.relowner) as owner, c.relrowsecurity, c.relforcerowsecurity, r.rolsuper
           from pg_class c join pg_roles r on r.oid = c.relowner
          where c.relnamespace = 'p'::regnamespace and c.relkind = 'r'`,
      );
      expect(owners.rows).toEqual([
        { owner: 'ladder_owner', relrowsecurity: true, relforcerowsecurity: true, rolsuper: false },
      ]);
      const definer = await c.query(
        `select proname, prosecdef, pg_get_userbyid(proowner) as owner, proconfig from pg_proc
          where pronamespace = 'p'::regnamespace and proname in ('claim', 'complete') order by 1`,
      );
      expect(definer.rows).toEqual(
        ['claim', 'complete'].map((proname) => ({
          proname,
          prosecdef: true,
          owner: 'ladder_owner',
          proconfig: ['search_path=pg_catalog, pg_temp'],
        })),
      );
    });
  });
});
