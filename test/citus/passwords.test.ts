import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { expect, it } from 'vitest';
import { distribute } from '../../src/db/distribute.js';
import { newOperation } from '../engine/support/fixtures.js';
import { acquire, complete } from '../engine/support/settle.js';
import { describeCitus, useCitus } from './support/cluster.js';

// Application logins with passwords (scram-sha-256). A delegated call reaches
// the worker over a connection Citus opens as the calling login, so the worker's pg_hba.conf asks
// that connection for the password, which Citus takes from pg_dist_authinfo. Here every node asks
// the members of one group for scram-sha-256 (lines put first in each node's pg_hba.conf for this
// test, then restored): without the entry the call fails and `pg-settle distribute` names what is
// missing on each node; with it the call works and nothing is reported.
const citus = useCitus();
const GROUP = 'settle_citus_password_logins';

interface HbaFile {
  readonly node: 'coordinator' | number;
  readonly file: string;
  readonly text: string;
}

async function writeHba(node: 'coordinator' | number, file: string, text: string): Promise<void> {
  const c = await citus.node(node);
  await c.query('create temp table hba_lines (n integer, line text)');
  await c.query('insert into hba_lines select n, line from unnest($1::text[]) with ordinality as l(line, n)', [
    text.replaceAll('\t', ' ').split('\n'),
  ]);
  await c.query(`copy (select line from hba_lines order by n) to '${file.replaceAll("'", "''")}'`);
  await c.query('select pg_reload_conf()');
  await c.end();
}

/** Resolves once `node` asks `user` for a password (the postmaster has re-read pg_hba.conf), or answers again without one after the restore. */
async function untilPasswordAsked(url: string, asked: boolean): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const c = new pg.Client({ connectionString: url, password: '' });
    c.on('error', () => {});
    const refused = await c.connect().then(
      () => false,
      () => true,
    );
    await c.end().catch(() => {});
    if (refused === asked) return;
    if (Date.now() > deadline)
      throw new Error(`${url}: pg_hba.conf ${asked ? 'not' : 'still'} asking for a password after 60 s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describeCitus('application logins with passwords (scram-sha-256 between the nodes)', () => {
  it('without a pg_dist_authinfo entry the delegated call fails and distribute names what is missing on every node; with it the call works', async () => {
    const su = await citus.coordinator();
    const login = `citus_scram_${randomBytes(3).toString('hex')}`;
    const password = `pw-${randomBytes(12).toString('hex')}`;
    await su.query(`do $$ begin
        if not exists (select 1 from pg_roles where rolname = '${GROUP}') then create role ${GROUP} nologin; end if;
      end $$`);
    await su.query(`create role ${login} login password '${password}' in role settle_app, ${GROUP}`);
    const files: HbaFile[] = [];
    for (const node of citus.nodes) {
      const c = await citus.node(node);
      const file = String(
        (await c.query<{ f: string }>(`select setting as f from pg_settings where name = 'hba_file'`)).rows[0]?.f,
      );
      files.push({
        node,
        file,
        text: String((await c.query<{ t: string }>('select pg_read_file($1) as t', [file])).rows[0]?.t),
      });
    }
    const urlOf = async (node: 'coordinator' | number, pass?: string): Promise<string> => {
      const c = await citus.node(node);
      const u = new URL(`postgresql://${login}@${c.host}:${c.port}/${c.database ?? 'postgres'}`);
      if (pass !== undefined) u.password = pass;
      return u.toString();
    };
    try {
      for (const f of files) {
        await writeHba(
          f.node,
          f.file,
          [`host all +${GROUP} 127.0.0.1/32 scram-sha-256`, `host all +${GROUP} ::1/128 scram-sha-256`, f.text].join(
            '\n',
          ),
        );
        await untilPasswordAsked(await urlOf(f.node), true);
      }
      // The password reached every node (Citus propagates it with the role).
      for (const node of citus.nodes) {
        const c = new pg.Client({ connectionString: await urlOf(node, password) });
        await c.connect();
        await c.end();
      }
      const suUrl = `postgresql://postgres@${su.host}:${su.port}/${su.database ?? 'postgres'}`;
      const before = await distribute(suUrl);
      const mine = before.problems.filter((p) => p.role === login);
      expect(mine.map((p) => p.node).sort()).toEqual(
        (
          await Promise.all(
            citus.nodes.map(async (n) => {
              const c = await citus.node(n);
              return `127.0.0.1:${c.port}`;
            }),
          )
        ).sort(),
      );
      for (const p of mine) expect(p.problem).toMatch(/scram-sha-256.*pg_dist_authinfo has none/);

      const app = new pg.Client({ connectionString: await urlOf('coordinator', password) });
      await app.connect();
      try {
        const op = newOperation('scram');
        await expect(acquire(app, op)).rejects.toThrow(/no password supplied|password authentication failed/);
        await su.query(`insert into pg_dist_authinfo (nodeid, rolename, authinfo) values (0, $1, $2)`, [
          login,
          `password=${password}`,
        ]);
        const ticket = await acquire(app, op);
        expect(await complete(app, ticket, { paid: true })).toMatchObject({ outcome: 'settled' });
      } finally {
        await app.end();
      }
      const after = await distribute(suUrl);
      expect(after.problems.filter((p) => p.role === login)).toEqual([]);
    } finally {
      for (const f of files) {
        await writeHba(f.node, f.file, f.text);
        await untilPasswordAsked(await urlOf(f.node), false);
      }
      await su.query('delete from pg_dist_authinfo where rolename = $1', [login]);
    }
  }, 300_000);
});
