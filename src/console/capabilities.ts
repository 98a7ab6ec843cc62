import { z } from 'zod';
import type { ConsoleDatabase } from './database.js';

// What the connected login may do, discovered from the database (never from a role name the
// console assumes): the views it may read (has_table_privilege) and the API functions it may
// execute (has_function_privilege). settle_readonly gets a read-only page; settle_reconciler can
// resolve; settle_admin can also redrive, expire leases and reset feed consumers. A tenant-bound
// login additionally sees only its tenants, which the views enforce.

export interface Capabilities {
  readonly login: string;
  /** The engine roles (settle_*) the login is a member of. */
  readonly roles: readonly string[];
  /** The tenants the login is bound to; null when unbound (or unknown to this login). */
  readonly tenants: readonly string[] | null;
  readonly read: {
    readonly operations: boolean;
    readonly attempts: boolean;
    readonly auditLog: boolean;
    readonly deadLetters: boolean;
    readonly metrics: boolean;
    readonly feedConsumers: boolean;
    readonly feedEvents: boolean;
    readonly feedHorizon: boolean;
    readonly adminLog: boolean;
    readonly upkeep: boolean;
  };
  readonly act: {
    readonly resolve: boolean;
    readonly redrive: boolean;
    readonly expireLeases: boolean;
    readonly resetConsumer: boolean;
  };
}

const row = z.object({
  login: z.string(),
  roles: z.array(z.string()).nullable(),
  can_bind: z.boolean(),
  operations: z.boolean(),
  attempts: z.boolean(),
  audit_log: z.boolean(),
  dead_letters: z.boolean(),
  metrics: z.boolean(),
  feed_consumers: z.boolean(),
  feed_events: z.boolean(),
  feed_horizon: z.boolean(),
  admin_log: z.boolean(),
  upkeep: z.boolean(),
  resolve: z.boolean(),
  redrive: z.boolean(),
  expire_leases: z.boolean(),
  reset_consumer: z.boolean(),
});

const QUERY = `
with f as (
  select p.proname::text as name, bool_or(has_function_privilege(p.oid, 'execute')) as granted
    from pg_catalog.pg_proc p
   where p.pronamespace = 'settle'::regnamespace and p.proname in ('resolve', 'redrive', 'expire_leases', 'reset_consumer')
   group by 1),
v(name) as (values ('operations'), ('attempts'), ('audit_log'), ('dead_letters'), ('metrics'), ('feed_consumers'),
                   ('feed_events'), ('feed_horizon'), ('admin_log'), ('upkeep')),
t as (select v.name, coalesce(to_regclass('settle.' || v.name) is not null
                                and has_table_privilege(to_regclass('settle.' || v.name), 'select'), false) as granted
        from v)
select session_user::text as login,
       (select array_agg(r.rolname::text order by r.rolname) from pg_catalog.pg_roles r
         where r.rolname like 'settle\\_%' and r.rolname <> 'settle_owner' and pg_has_role(session_user, r.oid, 'member')) as roles,
       coalesce((select has_function_privilege(p.oid, 'execute') from pg_catalog.pg_proc p
                  where p.pronamespace = 'settle_private'::regnamespace and p.proname = '_visible_tenants'
                    and has_schema_privilege('settle_private'::regnamespace, 'usage')), false) as can_bind,
       (select granted from t where name = 'operations') as operations,
       (select granted from t where name = 'attempts') as attempts,
       (select granted from t where name = 'audit_log') as audit_log,
       (select granted from t where name = 'dead_letters') as dead_letters,
       (select granted from t where name = 'metrics') as metrics,
       (select granted from t where name = 'feed_consumers') as feed_consumers,
       (select granted from t where name = 'feed_events') as feed_events,
       (select granted from t where name = 'feed_horizon') as feed_horizon,
       (select granted from t where name = 'admin_log') as admin_log,
       (select granted from t where name = 'upkeep') as upkeep,
       coalesce((select granted from f where name = 'resolve'), false) as resolve,
       coalesce((select granted from f where name = 'redrive'), false) as redrive,
       coalesce((select granted from f where name = 'expire_leases'), false) as expire_leases,
       coalesce((select granted from f where name = 'reset_consumer'), false) as reset_consumer`;

export async function discoverCapabilities(db: ConsoleDatabase): Promise<Capabilities> {
  const [r] = await db.rows(row, QUERY);
  if (r === undefined) throw new Error('capabilities: no row');
  let tenants: string[] | null = null;
  if (r.can_bind) {
    const [bound] = await db.rows(
      z.object({ tenants: z.array(z.string()).nullable() }),
      'select settle_private._visible_tenants() as tenants',
    );
    tenants = bound?.tenants ?? null;
  } else if (r.admin_log) {
    // An operator's login may not call that: its last grant or revocation in settle.admin_log
    // names its tenants. A bound login sees only the rows naming its tenants, so its last
    // visible one is the last that changed them; an unbound one sees its unbinding (tenants null).
    const [last] = await db.rows(
      z.object({ tenants: z.array(z.string()).nullable() }),
      `select l.detail->'tenants' as tenants from settle.admin_log l
        where l.event in ('grant_tenant', 'revoke_tenant') and l.detail->>'role' = session_user
        order by l.at desc, l.log_id desc limit 1`,
    );
    tenants = last?.tenants ?? null;
  }
  return {
    login: r.login,
    roles: r.roles ?? [],
    tenants,
    read: {
      operations: r.operations,
      attempts: r.attempts,
      auditLog: r.audit_log,
      deadLetters: r.dead_letters,
      metrics: r.metrics,
      feedConsumers: r.feed_consumers,
      feedEvents: r.feed_events,
      feedHorizon: r.feed_horizon,
      adminLog: r.admin_log,
      upkeep: r.upkeep,
    },
    act: { resolve: r.resolve, redrive: r.redrive, expireLeases: r.expire_leases, resetConsumer: r.reset_consumer },
  };
}
