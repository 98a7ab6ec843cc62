import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { defaultMigrationsDir } from './migrations-dir.js';

/** One migration as another tool applies it: its file name and its SQL. */
export interface ExportedMigration {
  /** `NNNNN_name.sql`, as in the package's sql/migrations. */
  readonly fileName: string;
  readonly version: number;
  /** `name` of `NNNNN_name.sql`. */
  readonly name: string;
  readonly sql: string;
}

const FILE_NAME = /^(\d{5})_([a-z0-9_]+)\.sql$/;

/**
 * What `pg-settle migrate` does around the files, made part of each file so that any tool that
 * runs a file in one transaction does the same: a login that is not a superuser is able to act
 * as settle_owner while the file runs (a CREATEROLE deploy login: PostgreSQL 15 grants it the
 * membership; 16+ needs ADMIN OPTION on settle_owner, or creates the roles itself in 00001 with
 * createrole_self_grant), and loses every settle role membership the file granted it when the
 * file ends. A superuser is left as it is. The markers are transaction-local settings.
 */
const PROLOGUE = `-- pg-settle: the migrating login acts as settle_owner while this file runs (as pg-settle migrate does).
do $pg_settle$
declare
  v_pg16 boolean := pg_catalog.current_setting('server_version_num')::int >= 160000;
begin
  if (select r.rolsuper from pg_catalog.pg_roles r where r.rolname = current_user) then
    return;
  end if;
  perform pg_catalog.set_config('pg_settle.grants_before', coalesce((
    select pg_catalog.string_agg(g.rolname, ',')
      from pg_catalog.pg_auth_members m join pg_catalog.pg_roles g on g.oid = m.roleid
     where m.member = (select oid from pg_catalog.pg_roles where rolname = current_user)
       and g.rolname like 'settle\\_%'
       and (not v_pg16 or m.grantor = m.member)), ''), true);
  if v_pg16 then
    perform pg_catalog.set_config('createrole_self_grant', 'set, inherit', true);
  end if;
  if exists (select 1 from pg_catalog.pg_roles where rolname = 'settle_owner')
     and not pg_catalog.pg_has_role(current_user, 'settle_owner', 'USAGE')
     and not pg_catalog.pg_has_role(current_user, 'settle_owner', case when v_pg16 then 'SET' else 'MEMBER' end) then
    execute pg_catalog.format(case when v_pg16 then 'grant settle_owner to %I with inherit true, set true'
                                   else 'grant settle_owner to %I' end, current_user);
  end if;
end
$pg_settle$;

`;

const EPILOGUE = `
-- pg-settle: the migrating login keeps no settle role membership this file granted it.
do $pg_settle$
declare
  v_pg16 boolean := pg_catalog.current_setting('server_version_num')::int >= 160000;
  v_role text;
begin
  if (select r.rolsuper from pg_catalog.pg_roles r where r.rolname = current_user) then
    return;
  end if;
  for v_role in
    select g.rolname
      from pg_catalog.pg_auth_members m join pg_catalog.pg_roles g on g.oid = m.roleid
     where m.member = (select oid from pg_catalog.pg_roles where rolname = current_user)
       and g.rolname like 'settle\\_%'
       and (not v_pg16 or m.grantor = m.member)
       and g.rolname <> all (pg_catalog.string_to_array(pg_catalog.current_setting('pg_settle.grants_before', true), ','))
  loop
    execute pg_catalog.format('revoke %I from %I', v_role, current_user);
  end loop;
end
$pg_settle$;
`;

/** The engine's migrations (sql/migrations, read now), each wrapped for a tool that runs files one transaction each. */
export async function exportMigrations(dir: string = defaultMigrationsDir()): Promise<ExportedMigration[]> {
  const files = (await readdir(dir)).filter((f) => f.endsWith('.sql')).sort();
  const out: ExportedMigration[] = [];
  for (const fileName of files) {
    const match = FILE_NAME.exec(fileName);
    if (match === null) throw new Error(`unexpected migration file name: ${fileName}`);
    const body = await readFile(path.join(dir, fileName), 'utf8');
    out.push({
      fileName,
      version: Number(match[1]),
      name: match[2]!,
      sql:
        `-- pg-settle migration ${fileName}, exported by \`pg-settle migrate --print\`: apply the files in order,\n` +
        '-- each in its own transaction (docs/migrations-in-your-tool.md). Do not edit.\n\n' +
        `${PROLOGUE}${body.endsWith('\n') ? body : `${body}\n`}${EPILOGUE}`,
    });
  }
  return out;
}

/**
 * Migration files in `outDir` that this version does not have (`NNNNN_name.sql` under another
 * name): printed by a version whose migrations were numbered differently. A tool would apply them
 * beside the current ones, so writing into such a directory is refused.
 */
export async function staleMigrationFiles(outDir: string, current: readonly string[]): Promise<string[]> {
  const present = await readdir(outDir).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return [] as string[];
    throw error;
  });
  return present.filter((f) => FILE_NAME.test(f) && !current.includes(f)).sort();
}

/**
 * Writes the exported migrations into `outDir` (created if missing); returns the file names
 * written, or the stale files that made it refuse (see staleMigrationFiles), writing nothing.
 */
export async function writeExportedMigrations(
  outDir: string,
  dir?: string,
): Promise<{ written: string[]; stale: string[] }> {
  const migrations = await exportMigrations(dir);
  const stale = await staleMigrationFiles(
    outDir,
    migrations.map((m) => m.fileName),
  );
  if (stale.length > 0) return { written: [], stale };
  await mkdir(outDir, { recursive: true });
  for (const m of migrations) await writeFile(path.join(outDir, m.fileName), m.sql);
  return { written: migrations.map((m) => m.fileName), stale: [] };
}
