import pg from 'pg';
// postgres-migrations is CommonJS: a default import is its module.exports under NodeNext, tsx
// and vitest alike (named imports depend on cjs-module-lexer spotting the re-exports).
import postgresMigrations from 'postgres-migrations';
import { quoteIdent } from './database-url.js';
import { defaultMigrationsDir } from './migrations-dir.js';

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

/**
 * A migration failed. postgres-migrations rethrows a plain Error that keeps only the message;
 * this one also carries the failing statement's database error as `cause` and its `code`
 * (SQLSTATE), `detail` and `hint`, so that mapDatabaseError turns e.g. SE030 (not a UTF8
 * database) into its class. `code` is undefined when no statement failed (an edited migration:
 * "Hashes don't match", a bad file name).
 */
export class MigrationError extends Error {
  readonly code: string | undefined;
  readonly detail: string | undefined;
  readonly hint: string | undefined;

  constructor(message: string, databaseError: DatabaseErrorFields | undefined, cause: unknown) {
    super(message, { cause: databaseError ?? cause });
    this.name = 'MigrationError';
    this.code = databaseError?.code;
    this.detail = databaseError?.detail;
    this.hint = databaseError?.hint;
  }
}

interface DatabaseErrorFields {
  readonly code: string;
  readonly detail?: string | undefined;
  readonly hint?: string | undefined;
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
async function runMigrations(client: MigrationClient, dir: string, logger: (msg: string) => void): Promise<{ applied: string[] }> {
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
  try {
    const applied = await postgresMigrations.migrate({ client: watched }, dir, { logger });
    return { applied: applied.map((migration) => migration.fileName) };
  } catch (error) {
    throw new MigrationError(error instanceof Error ? error.message : String(error), failure, error);
  }
}

interface Me {
  readonly name: string;
  readonly superuser: boolean;
  readonly member: boolean;
  readonly ownerExists: boolean;
}

async function whoAmI(client: MigrationClient): Promise<Me> {
  const { rows } = await client.query<Me>(
    `select r.rolname as name, r.rolsuper as superuser,
            coalesce(pg_has_role(r.oid, o.oid, 'MEMBER'), false) as member, o.oid is not null as "ownerExists"
       from pg_roles r left join pg_roles o on o.rolname = 'settle_owner'
      where r.rolname = current_user`,
  );
  const me = rows[0];
  if (me === undefined) throw new Error('current_user has no pg_roles row');
  return me;
}

/**
 * The login roles, superusers aside, that are members of settle_owner; for an indirect member
 * the revoke names the direct member (a group role) it goes through.
 */
export async function ownerMembers(client: MigrationClient): Promise<OwnerMember[]> {
  const { rows } = await client.query<OwnerMember>(
    `with recursive members(member, via) as (
       select m.member, m.member from pg_auth_members m where m.roleid = 'settle_owner'::regrole
       union
       select m.member, members.via from pg_auth_members m join members on m.roleid = members.member)
     select r.rolname as role,
            format('REVOKE settle_owner FROM %I;', v.rolname) as revoke
       from members join pg_roles r on r.oid = members.member join pg_roles v on v.oid = members.via
      where r.rolcanlogin and not r.rolsuper
      order by 1, 2`,
  ).catch(() => ({ rows: [] as OwnerMember[] }));
  return rows;
}

/**
 * Runs the migrations with the migrating login a member of settle_owner only while they run:
 * a non-superuser login is granted the membership it lacks first (it needs CREATEROLE; on a
 * fresh database 00001 grants it) and always loses it afterwards, so that no login keeps the
 * owner's rights (disabling a guard trigger, rewriting a completed result): issue 18 §11.
 * A superuser needs no membership and is left as it is.
 */
async function runAsOwnerWhileMigrating(client: MigrationClient, dir: string, logger: (msg: string) => void): Promise<MigrateResult> {
  const before = await whoAmI(client);
  if (!before.superuser && before.ownerExists && !before.member) {
    await client.query(`grant settle_owner to ${quoteIdent(before.name)}`);
  }
  let result: { applied: string[] } | undefined;
  let failure: unknown;
  try {
    result = await runMigrations(client, dir, logger);
  } catch (error) {
    failure = error;
  }
  const after = await whoAmI(client).catch(() => before);
  if (!after.superuser && after.member) {
    await client.query(`revoke settle_owner from ${quoteIdent(after.name)}`).catch((error: unknown) => {
      logger(`could not revoke settle_owner from ${after.name}: ${(error as Error).message}`);
    });
  }
  if (failure !== undefined) throw failure;
  const members = await ownerMembers(client);
  for (const m of members) logger(`login ${m.role} can still act as settle_owner; a superuser drops it with: ${m.revoke}`);
  return { applied: result?.applied ?? [], ownerMembers: members };
}

/**
 * Applies pending migrations with postgres-migrations (forward-only; refuses an edited,
 * already-applied file with "Hashes don't match"). Idempotent, and safe when several processes
 * migrate the same database at once: postgres-migrations serializes runs with a session-level
 * advisory lock, and a run that waited finds the work done.
 *
 * A non-superuser migrating login (CREATEROLE) is a member of settle_owner only while the
 * migrations run; `ownerMembers` lists any login left able to act as the owner.
 *
 * A given client must be connected and is left open; a connection string gets its own client.
 * Throws MigrationError (with the failing statement's SQLSTATE as `code`) when a migration fails.
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
