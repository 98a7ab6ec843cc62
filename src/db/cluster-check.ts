import type pg from 'pg';

/** One thing a node of a Citus cluster lacks for the engine's logins (see docs/scale-out.md, "Passwords"). */
export interface ClusterProblem {
  /** The node, as Citus names it (`host:port`). */
  readonly node: string;
  /** The login role concerned. */
  readonly role: string;
  /** What is missing and what fails because of it. */
  readonly problem: string;
}

interface HbaRule {
  readonly line: number;
  readonly type: string;
  readonly database: string[] | null;
  readonly user: string[] | null;
  readonly address: string | null;
  readonly netmask: string | null;
  readonly method: string | null;
  readonly error: string | null;
}

interface NodeRow {
  readonly nodeid: number;
  readonly groupid: number;
  readonly nodename: string;
  readonly nodeport: number;
}

interface LoginRow {
  readonly name: string;
  readonly groups: string[];
  readonly member_of: string[];
}

interface RoleOnNode {
  readonly name: string;
  readonly login: boolean;
  readonly password: boolean;
}

const PASSWORD_METHODS = new Set(['scram-sha-256', 'md5', 'password']);

/** IPv4 `a.b.c.d` as a number, or undefined. */
function ipv4(text: string): number | undefined {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
  if (m === null) return undefined;
  const parts = m.slice(1).map(Number);
  if (parts.some((p) => p > 255)) return undefined;
  return (((parts[0] ?? 0) << 24) >>> 0) + ((parts[1] ?? 0) << 16) + ((parts[2] ?? 0) << 8) + (parts[3] ?? 0);
}

/** Whether rule `r` admits a connection from `source` (a node name: an IPv4 literal is matched exactly; anything else may match any address rule). */
function addressMatches(r: HbaRule, source: string): boolean {
  if (r.address === null || r.address === 'all') return true;
  const ip = ipv4(source);
  const net = ipv4(r.address);
  if (r.address === 'samenet') return true; // cannot tell from here
  if (r.address === 'samehost') return source.startsWith('127.') || source === 'localhost';
  if (ip === undefined || net === undefined) return ip === undefined; // a host name: cannot tell, assume the rule applies
  const mask = r.netmask === null ? 0xffffffff : (ipv4(r.netmask) ?? 0xffffffff);
  return (ip & mask) >>> 0 === (net & mask) >>> 0;
}

function userMatches(r: HbaRule, login: LoginRow): boolean {
  const users = r.user ?? [];
  return users.some(
    (u) => u === 'all' || u === login.name || (u.startsWith('+') && login.member_of.includes(u.slice(1))),
  );
}

function databaseMatches(r: HbaRule, database: string, login: LoginRow): boolean {
  const dbs = r.database ?? [];
  return dbs.some(
    (d) =>
      d === 'all' ||
      d === database ||
      (d === 'sameuser' && database === login.name) ||
      (d === 'samerole' && login.member_of.includes(database)),
  );
}

/**
 * What each node of the Citus cluster at `client` (a superuser session on the coordinator) lacks
 * for the engine's logins to make delegated calls: Citus connects from node to node as the calling
 * login (and as settle_owner for calls it does not delegate), so every node's pg_hba.conf must
 * admit each of them from the other nodes, and where it asks for a password Citus needs one
 * (a pg_dist_authinfo entry; a .pgpass file on the connecting node also works but cannot be seen
 * from SQL). Reads pg_hba_file_rules and pg_authid on every node (run_command_on_all_nodes).
 */
export async function checkCluster(client: pg.ClientBase): Promise<ClusterProblem[]> {
  const { rows: nodes } = await client.query<NodeRow>(
    `select nodeid, groupid, nodename, nodeport from pg_catalog.pg_dist_node
      where noderole = 'primary' and isactive order by groupid, nodeid`,
  );
  const { rows: logins } = await client.query<LoginRow>(`
    select r.rolname as name,
           array(select g.rolname::text from pg_catalog.pg_roles g
                  where g.rolname in ('settle_app', 'settle_readonly', 'settle_admin', 'settle_owner')
                    and (g.oid = r.oid or pg_catalog.pg_has_role(r.oid, g.oid, 'member')) order by 1) as groups,
           array(select g.rolname::text from pg_catalog.pg_roles g where pg_catalog.pg_has_role(r.oid, g.oid, 'member')) as member_of
      from pg_catalog.pg_roles r
     where r.rolcanlogin and not r.rolsuper
       and (r.rolname = 'settle_owner' or exists (
             select 1 from pg_catalog.pg_roles g
              where g.rolname in ('settle_app', 'settle_readonly', 'settle_admin') and pg_catalog.pg_has_role(r.oid, g.oid, 'member')))
     order by 1`);
  const { rows: authinfo } = await client.query<{ nodeid: number; rolename: string; password: boolean }>(
    `select nodeid, rolename::text as rolename, authinfo ~ '(^|\\s)password=' as password from pg_catalog.pg_dist_authinfo`,
  );
  const database = (await client.query<{ db: string }>('select pg_catalog.current_database() as db')).rows[0]?.db ?? '';
  const names = logins.map((l) => l.name);
  const perNode = async <T>(sql: string): Promise<Map<number, T>> => {
    const { rows } = await client.query<{ nodeid: number; success: boolean; result: string }>(
      'select nodeid, success, result from run_command_on_all_nodes($1)',
      [sql],
    );
    return new Map(rows.map((r) => [r.nodeid, (r.success ? JSON.parse(r.result) : r.result) as T]));
  };
  const rules = await perNode<HbaRule[] | string>(`
    select coalesce(pg_catalog.json_agg(pg_catalog.json_build_object('line', line_number, 'type', type, 'database', database,
             'user', user_name, 'address', address, 'netmask', netmask, 'method', auth_method, 'error', error) order by line_number), '[]')
      from pg_catalog.pg_hba_file_rules`);
  const quoted = names.map((n) => `'${n.replaceAll("'", "''")}'`).join(', ');
  const roles = await perNode<RoleOnNode[] | string>(
    names.length === 0
      ? `select '[]'`
      : `
    select coalesce(pg_catalog.json_agg(pg_catalog.json_build_object('name', rolname, 'login', rolcanlogin, 'password', rolpassword is not null)), '[]')
      from pg_catalog.pg_authid where rolname in (${quoted})`,
  );

  const problems: ClusterProblem[] = [];
  for (const target of nodes) {
    const node = `${target.nodename}:${target.nodeport}`;
    const hba = rules.get(target.nodeid);
    const known = roles.get(target.nodeid);
    if (typeof hba === 'string' || typeof known === 'string' || hba === undefined || known === undefined) {
      problems.push({
        node,
        role: '*',
        problem: `could not read pg_hba_file_rules / pg_authid there: ${String(typeof hba === 'string' ? hba : known)}`,
      });
      continue;
    }
    const sources = nodes.filter((n) => n.nodeid !== target.nodeid).map((n) => n.nodename);
    for (const login of logins) {
      const onNode = known.find((r) => r.name === login.name);
      const as = login.groups.join(', ');
      if (onNode === undefined) {
        problems.push({
          node,
          role: login.name,
          problem: `role ${login.name} (${as}) does not exist there: run pg-settle distribute again after creating roles, or create it on every node`,
        });
        continue;
      }
      if (!onNode.login) {
        problems.push({
          node,
          role: login.name,
          problem: `role ${login.name} (${as}) cannot log in there (Citus connects as it)`,
        });
        continue;
      }
      for (const source of new Set(sources)) {
        const problem = loginProblem(hba, database, login, onNode, authinfo, target.nodeid, source);
        if (problem !== undefined) {
          problems.push({ node, role: login.name, problem });
          break; // one source is enough to report per role and node
        }
      }
    }
  }
  return problems;
}

function loginProblem(
  hba: readonly HbaRule[],
  database: string,
  login: LoginRow,
  onNode: RoleOnNode,
  authinfo: readonly { nodeid: number; rolename: string; password: boolean }[],
  nodeid: number,
  source: string,
): string | undefined {
  const as = login.groups.join(', ');
  const rule = hba.find(
    (r) =>
      r.error === null &&
      ['host', 'hostssl', 'hostnossl'].includes(r.type) &&
      databaseMatches(r, database, login) &&
      userMatches(r, login) &&
      addressMatches(r, source),
  );
  if (rule === undefined || rule.method === 'reject') {
    return `pg_hba.conf ${rule === undefined ? 'has no rule admitting' : `rejects (line ${rule.line})`} ${login.name} (${as}) from ${source}: its calls routed there fail`;
  }
  if (rule.method !== null && PASSWORD_METHODS.has(rule.method)) {
    if (!onNode.password) {
      return `pg_hba.conf line ${rule.line} asks ${login.name} (${as}) from ${source} for a password (${rule.method}) and the role has none there`;
    }
    const entry = authinfo.find(
      (a) => a.rolename === login.name && (a.nodeid === nodeid || a.nodeid === 0) && a.password,
    );
    if (entry === undefined) {
      return (
        `pg_hba.conf line ${rule.line} asks ${login.name} (${as}) from ${source} for a password (${rule.method}) and pg_dist_authinfo has none for it: ` +
        `its calls routed there fail with "fe_sendauth: no password supplied" (unless a .pgpass file on ${source} has it)`
      );
    }
  } else if (
    rule.method === 'trust' &&
    login.name === 'settle_owner' &&
    (rule.address === null || rule.address === 'all' || rule.netmask === '0.0.0.0')
  ) {
    return `pg_hba.conf line ${rule.line} trusts settle_owner (owner of every engine object) from any address: admit it from the cluster's nodes only, or ask for a password or certificate`;
  }
  return undefined;
}
