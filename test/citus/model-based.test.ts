import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ModelRun, type Violation } from '../reliability/harness/model-driver.js';
import { REGRESSIONS } from '../reliability/harness/model-regressions.js';
import { citusUrl, describeCitus, useCitus } from './support/cluster.js';

// The model-based test (test/reliability/model-based.test.ts) against the
// distributed engine, shorter. Every model operation has key 'k' (the tenants differ), so they
// all live on one shard: the run connects its three settle_app logins, its settle_admin login and
// its observer to the worker holding that shard, where Citus runs each call in the calling
// backend exactly as it runs a call delegated there (the functions made STRICT, settle.claim
// through settle._claim, every statement planned by Citus against the local shard, the guards
// firing on the shard, maintenance and revocations as distributed statements from a worker).
// Row-lock waits are then visible in that worker's pg_stat_activity, as the driver needs. Every
// answer must be one the reference model allows and the global invariants must hold after
// every step; the regression cases the model found run too.
//
// MODEL_SEED fixes the seed; CITUS_MODEL_RUNS (default 6) and CITUS_MODEL_STEPS (default 20).
const seed = Number(process.env.MODEL_SEED ?? Math.floor(Math.random() * 2 ** 31));
const runs = Number(process.env.CITUS_MODEL_RUNS ?? 6);
const length = Number(process.env.CITUS_MODEL_STEPS ?? 20);
const ROLES = { app: 'settle_citus_model_app', admin: 'settle_citus_model_ops' } as const;

/** As test/reliability/model-based.test.ts prints a violation (with its regression case). */
function describeViolation(v: Violation): string {
  return (
    `sequence ${v.sequence}, step ${v.step}: ${v.kind}\n${v.detail}\n` +
    `regression case: { maxAttempts: ${JSON.stringify(v.maxAttempts)}, steps: ${JSON.stringify(v.steps)} }`
  );
}

/**
 * The observer, with one Citus difference absorbed: Citus refuses a non-IMMUTABLE expression in
 * the RETURNING clause of an UPDATE on a distributed table (extract(epoch from timestamptz) and
 * clock_timestamp() are STABLE / VOLATILE), so the driver's lease lapse (`update ... returning
 * <lease in microseconds>, <clock reading>`) returns the row's key, then reads the lease it
 * wrote and the clock in a statement of its own right after the update (a later reading: the
 * driver only ever raises its clock).
 */
function citusObserver(client: pg.Client): pg.Client {
  const lapse =
    /returning \(extract\(epoch from lease_expires_at\) \* 1000000\)::bigint::text as lease_us,\s*(\(extract\(epoch from clock_timestamp\(\)\) \* 1000000\)::bigint::text as now_us)\s*$/;
  return new Proxy(client, {
    get(target, prop, receiver) {
      if (prop !== 'query') return Reflect.get(target, prop, receiver) as unknown;
      return async (text: unknown, values?: unknown[]) => {
        const m = typeof text === 'string' && /^\s*update /i.test(text) ? lapse.exec(text) : null;
        if (m === null || typeof text !== 'string') return target.query(text as string, values);
        const updated = await target.query<{ tenant: string; key: string }>(
          `${text.slice(0, m.index)}returning tenant, key`,
          values,
        );
        const rows = [];
        for (const r of updated.rows) {
          rows.push(
            (
              await target.query(
                `select (extract(epoch from lease_expires_at) * 1000000)::bigint::text as lease_us, ${m[1]}
               from settle_private.operations where tenant = $1 and key = $2`,
                [r.tenant, r.key],
              )
            ).rows[0],
          );
        }
        return { ...updated, rows };
      };
    },
  });
}

const citus = useCitus();
const open: pg.Client[] = [];
let run: ModelRun;
let worker: number;

describeCitus('the distributed engine against the reference model', () => {
  beforeAll(async () => {
    const su = await citus.coordinator();
    for (const [login, role] of [
      [ROLES.app, 'settle_app'],
      [ROLES.admin, 'settle_admin'],
    ] as const) {
      await su.query(`do $$ begin
          if not exists (select 1 from pg_roles where rolname = '${login}') then
            create role ${login} login in role ${role};
          end if;
        end $$`);
    }
    worker = (await citus.placementOf('k')).worker;
    const connect = async (user: string | undefined, name: string): Promise<pg.Client> => {
      const client = new pg.Client({ connectionString: citusUrl(worker, user), application_name: name });
      client.on('error', () => {});
      open.push(client);
      await client.connect();
      return client;
    };
    const observer = citusObserver(await connect(undefined, 'model-observer'));
    const app = [
      await connect(ROLES.app, 'model-app-0'),
      await connect(ROLES.app, 'model-app-1'),
      await connect(ROLES.app, 'model-app-2'),
    ];
    const admin = await connect(ROLES.admin, 'model-admin');
    run = new ModelRun({ app, admin, observer }, `citus${randomBytes(3).toString('hex')}`);
    await run.init();
  });
  afterAll(async () => {
    await Promise.all(open.splice(0).map((c) => c.end().catch(() => {})));
  });

  it(`${runs} random sequences of ${length} steps (seed ${seed}) and the regression cases answer as the model allows, on the key's worker`, async () => {
    // The calls run on a worker: the coordinator holds no shard of key 'k'.
    expect(citus.nodes).toContain(worker);
    const started = Date.now();
    for (let i = 0; i < runs; i++) {
      if (!(await run.randomSequence(seed, i, length))) break;
    }
    for (const [i, r] of REGRESSIONS.entries()) await run.script(100_000 + i, r.maxAttempts, r.steps);
    const f = run.figures;
    console.log(JSON.stringify({ model: 'citus', seed, worker, ...f, seconds: (Date.now() - started) / 1000 }));
    expect(run.violations.map(describeViolation)).toEqual([]);
    expect(f.calls).toBeGreaterThan(runs * 5);
  }, 1_200_000);
});
