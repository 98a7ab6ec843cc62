import pg from 'pg';
// postgres-migrations is CommonJS: a default import is its module.exports under NodeNext, tsx
// and vitest alike (named imports depend on cjs-module-lexer spotting the re-exports).
import postgresMigrations from 'postgres-migrations';
import { quoteIdent } from './database-url.js';
import { type DatabaseErrorFields, MigrationError, MigrationHistoryError } from './migration-errors.js';
import { checkMigrationHistory, MIGRATION_LOCK_KEY } from './migration-history.js';
import { defaultMigrationsDir } from './migrations-dir.js';

export {
  MigrationError,
  MigrationHistoryError,
  type MigrationHistoryMismatch,
  type MigrationHistoryProblem,
} from './migration-errors.js';

/** Options of migrate(). */
export interface MigrateOptions {
  /** Receives one line per step (default: silent). */
  readonly log?: (msg: string) => void;
  /** Directory of `NNNNN_name.sql` files; defaults to the package's `sql/migrations`. */
  readonly dir?: string;
}

/** What migrate() did: the migration files it applied. */
export interface MigrateResult {
  /**
   * File names applied by this call, in order (empty when the database was up to date).
   * On a fresh database the first is postgres-migrations' own `0_create-migrations-table.sql`.
   */
  readonly applied: string[];
  /**
   * Login roles other than superusers that are still members of `settle_owner` after this call
   * (directly or through other roles), each with the statement a superuser runs to drop it.
   * Empty in the recommended deployment: migrate revokes the membership it needed from the
   * migrating login itself (docs/operations.md, "Migrations").
   */
  readonly ownerMembers: readonly OwnerMember[];
}

/** A login that can act as settle_owner (disable the guard triggers, rewrite any row). */
export interface OwnerMember {
  readonly role: string;
  /** What drops it, e.g. `REVOKE settle_owner FROM "deploy";` (for an indirect member: the role it goes through). */
  readonly revoke: string;
}

const isDatabaseError = (error: unknown): error is Error & DatabaseErrorFields => {
  const code: unknown = error instanceof Error ? (error as { code?: unknown }).code : undefined;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code);
};

type MigrationClient = pg.Client | pg.PoolClient;

/**
 * Runs postgres-migrations over `client`, remembering the first database error any of its
 * statements raised, and rethrows its failure as a MigrationError carrying that error.
 */
async function runMigrations(
  client: MigrationClient,
  dir: string,
  logger: (msg: string) => void,
): Promise<{ applied: string[] }> {
  let failure: (Error & DatabaseErrorFields) | undefined;
  const query = (...args: unknown[]): unknown => {
    const result = (client.query as (...a: unknown[]) => unknown)(...args);
    if (result instanceof Promise) {
      return result.catch((error: unknown) => {
        if (failure === undefined && isDatabaseError(error)) failure = error;
        throw error;
      });
    }
    return result;
  };
  // postgres-migrations only ever calls query() on the client it is given.
  const watched = new Proxy(client, {
    get: (target, property) => (property === 'query' ? query : Reflect.get(target, property, target)),
  });
  // The history is checked under postgres-migrations' own advisory lock (session locks stack:
  // its run takes it again and releases once), so no other migrate adds rows in between.
  await client.query('select pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
  try {
    await checkMigrationHistory(client, dir);
    const applied = await postgresMigrations.migrate({ client: watched }, dir, { logger });
    return { applied: applied.map((migration) => migration.fileName) };
  } catch (error) {
    if (error instanceof MigrationHistoryError) throw error;
    throw new MigrationError(error instanceof Error ? error.message : String(error), failure, error);
  } finally {
    await client.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]).catch(() => {});
  }
}

interface Me {
  readonly name: string;
  readonly superuser: boolean;
  /** Able to act as settle_owner: SET ROLE to it or inherit its privileges. */
  readonly member: boolean;
  /** Holds ADMIN OPTION on settle_owner (may grant it; PostgreSQL 16+ needs it for that). */
  readonly admin: boolean;
  readonly ownerExists: boolean;
  /** server_version_num >= 160000: the role-membership rules of PostgreSQL 16 apply. */
  readonly pg16: boolean;
}

// On PostgreSQL 15 every membership lets its member SET ROLE; from 16 on that is the SET option,
// and a membership may carry ADMIN OPTION alone, which acts as nothing.
const CAN_ACT_AS_OWNER = (member: string, owner: string): string =>
  `(pg_has_role(${member}, ${owner}, 'USAGE') or pg_has_role(${member}, ${owner},
      case when current_setting('server_version_num')::int >= 160000 then 'SET' else 'MEMBER' end))`;

async function whoAmI(client: MigrationClient): Promise<Me> {
  const { rows } = await client.query<Me>(
    `select r.rolname as name, r.rolsuper as superuser,
            coalesce(${CAN_ACT_AS_OWNER('r.oid', 'o.oid')}, false) as member,
            coalesce(pg_has_role(r.oid, o.oid, 'MEMBER WITH ADMIN OPTION'), false) as admin,
            o.oid is not null as "ownerExists",
            current_setting('server_version_num')::int >= 160000 as pg16
       from pg_roles r left join pg_roles o on o.rolname = 'settle_owner'
      where r.rolname = current_user`,
  );
  const me = rows[0];
  if (me === undefined) throw new Error('current_user has no pg_roles row');
  return me;
}

/**
 * The login roles, superusers aside, able to act as settle_owner (SET ROLE to it or inherit its
 * privileges); for an indirect member the revoke names the direct member (a group role) it goes
 * through. A membership with ADMIN OPTION only (PostgreSQL 16+) is not listed: see
 * docs/operations.md, "Migrations", for what it still allows.
 */
export async function ownerMembers(client: MigrationClient): Promise<OwnerMember[]> {
  const { rows } = await client
    .query<OwnerMember>(
      `with recursive members(member, via) as (
       select m.member, m.member from pg_auth_members m where m.roleid = 'settle_owner'::regrole
       union
       select m.member, members.via from pg_auth_members m join members on m.roleid = members.member)
     select distinct r.rolname as role,
            format('REVOKE settle_owner FROM %I;', v.rolname) as revoke
       from members join pg_roles r on r.oid = members.member join pg_roles v on v.oid = members.via
      where r.rolcanlogin and not r.rolsuper
        and ${CAN_ACT_AS_OWNER('r.oid', "'settle_owner'::regrole")}
        and ${CAN_ACT_AS_OWNER('v.oid', "'settle_owner'::regrole")}
      order by 1, 2`,
    )
    .catch(() => ({ rows: [] as OwnerMember[] }));
  return rows;
}

const SETTLE_ROLES = [
  'settle_owner',
  'settle_app',
  'settle_readonly',
  'settle_admin',
  'settle_consumer',
  'settle_reconciler',
];

/** The settle roles the login holds by a grant of its own (PostgreSQL 16+ records the grantor). */
async function selfGranted(client: MigrationClient): Promise<Set<string>> {
  const { rows } = await client.query<{ role: string }>(
    `select r.rolname as role from pg_auth_members m join pg_roles r on r.oid = m.roleid
      where m.member = m.grantor and m.member = (select oid from pg_roles where rolname = current_user)
        and r.rolname = any($1::text[])`,
    [SETTLE_ROLES],
  );
  return new Set(rows.map((row) => row.role));
}

/**
 * On PostgreSQL 16+ a non-superuser login may grant a role only with ADMIN OPTION on it, and
 * needs the SET option (not mere membership) to create objects owned by it. A CREATEROLE login
 * that creates the roles (a fresh cluster: migration 00001) gets ADMIN OPTION on each, from the
 * server, with neither SET nor INHERIT; createrole_self_grant adds a grant of its own with both,
 * which migrate revokes afterwards together with any other grant it made itself. Where the roles
 * exist already, the login must have been given ADMIN OPTION on settle_owner by a superuser.
 */
async function grantOwnerToSelf(client: MigrationClient, me: Me): Promise<void> {
  const statement = me.pg16
    ? `grant settle_owner to ${quoteIdent(me.name)} with inherit true, set true`
    : `grant settle_owner to ${quoteIdent(me.name)}`;
  if (me.pg16 && !me.admin) {
    const error = Object.assign(new Error(`permission denied to grant role "settle_owner"`), {
      code: '42501',
      detail: `${me.name} has no ADMIN OPTION on settle_owner, which PostgreSQL 16 and later require to grant it.`,
      hint:
        `As a superuser: GRANT settle_owner TO ${quoteIdent(me.name)} WITH ADMIN TRUE, INHERIT FALSE, SET FALSE;` +
        ' (docs/operations.md, "Migrations").',
    });
    throw new MigrationError(`${error.message}: ${error.detail} ${error.hint}`, error, error);
  }
  await client.query(statement);
}

/**
 * Runs the migrations with the migrating login a member of settle_owner only while they run:
 * a non-superuser login is granted the membership it lacks first (it needs CREATEROLE, and on
 * PostgreSQL 16+ ADMIN OPTION on settle_owner; on a fresh database 00001 grants it) and always
 * loses it afterwards, so that no login keeps the owner's rights (disabling a guard trigger,
 * rewriting a completed result). A superuser needs no membership and is left as it is.
 */
async function runAsOwnerWhileMigrating(
  client: MigrationClient,
  dir: string,
  logger: (msg: string) => void,
): Promise<MigrateResult> {
  const before = await whoAmI(client);
  const ownGrantsBefore = before.pg16 && !before.superuser ? await selfGranted(client) : new Set<string>();
  let selfGrantSetting: string | undefined;
  if (before.pg16 && !before.superuser) {
    const { rows } = await client.query<{ previous: string }>(
      `select current_setting('createrole_self_grant') as previous, set_config('createrole_self_grant', 'set, inherit', false)`,
    );
    selfGrantSetting = rows[0]?.previous ?? '';
  }
  let result: { applied: string[] } | undefined;
  let failure: unknown;
  try {
    if (!before.superuser && before.ownerExists && !before.member) await grantOwnerToSelf(client, before);
    result = await runMigrations(client, dir, logger);
  } catch (error) {
    failure = error;
  }
  if (selfGrantSetting !== undefined) {
    await client.query(`select set_config('createrole_self_grant', $1, false)`, [selfGrantSetting]).catch(() => {});
  }
  const after = await whoAmI(client).catch(() => before);
  const revokes: string[] = [];
  if (after.pg16 && !after.superuser) {
    const made = await selfGranted(client).catch(() => new Set<string>());
    for (const role of made) if (!ownGrantsBefore.has(role)) revokes.push(role);
  } else if (!after.superuser && after.member) {
    revokes.push('settle_owner');
  }
  for (const role of revokes) {
    await client.query(`revoke ${quoteIdent(role)} from ${quoteIdent(after.name)}`).catch((error: unknown) => {
      logger(`could not revoke ${role} from ${after.name}: ${(error as Error).message}`);
    });
  }
  if (failure !== undefined) throw failure;
  const members = await ownerMembers(client);
  for (const m of members)
    logger(`login ${m.role} can still act as settle_owner; a superuser drops it with: ${m.revoke}`);
  return { applied: result?.applied ?? [], ownerMembers: members };
}

/**
 * Applies pending migrations with postgres-migrations (forward-only, one transaction per file).
 * Refuses, applying nothing, a database whose history does not match the files: an applied
 * migration edited or replaced, or one this version does not have (MigrationHistoryError).
 * Idempotent, and safe when several processes
 * migrate the same database at once: postgres-migrations serializes runs with a session-level
 * advisory lock, and a run that waited finds the work done.
 *
 * A non-superuser migrating login (CREATEROLE) is a member of settle_owner only while the
 * migrations run; `ownerMembers` lists any login left able to act as the owner.
 *
 * A given client must be connected and is left open; a connection string gets its own client.
 * Throws MigrationError (with the failing statement's SQLSTATE as `code`) when a migration fails,
 * MigrationHistoryError (a MigrationError) when the history does not match.
 */
export async function migrate(
  connection: string | pg.Client | pg.PoolClient,
  opts: MigrateOptions = {},
): Promise<MigrateResult> {
  const dir = opts.dir ?? defaultMigrationsDir();
  const logger = opts.log ?? (() => {});

  if (typeof connection !== 'string') return runAsOwnerWhileMigrating(connection, dir, logger);

  const client = new pg.Client({ connectionString: connection });
  client.on('error', (error) => logger(`migration client error: ${error.message}`));
  await client.connect();
  try {
    return await runAsOwnerWhileMigrating(client, dir, logger);
  } finally {
    await client.end();
  }
}
