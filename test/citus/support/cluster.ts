import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterEach, describe, inject } from 'vitest';
import type { LoginRole } from './roles.js';
import './provided.js';

const provided = inject('citus');

/** Why the Citus suite cannot run here (names the missing extension), or undefined. */
export const citusUnavailable: string | undefined = 'unavailable' in provided ? provided.unavailable : undefined;

/** Which Citus the suite runs on: 'installed', 'external' (CITUS_DATABASE_URL) or PG_SETTLE_CITUS_BIN's directory. */
export const citusBuild: string | undefined = 'build' in provided ? provided.build : undefined;

/**
 * `describe` for the Citus suite: skipped, with the reason in its title, where Citus is not
 * installed (CI); run against the shared coordinator + 2 workers otherwise.
 */
export function describeCitus(name: string, fn: () => void): void {
  if (citusUnavailable !== undefined) describe.skip(`${name} [skipped: ${citusUnavailable}]`, fn);
  else describe(name, fn);
}

function urls(): { coordinatorUrl: string; workers: readonly { node: string; url: string }[] } {
  if ('unavailable' in provided) throw new Error(provided.unavailable);
  return provided;
}

function asUser(url: string, user: string): string {
  const u = new URL(url);
  u.username = user;
  u.password = '';
  return u.toString();
}

/** Connection string of `node` (the coordinator or worker `i`) as `user` (the superuser when omitted): for a child process such as the CLI. */
export function citusUrl(node: 'coordinator' | number, user?: string): string {
  const url = node === 'coordinator' ? urls().coordinatorUrl : urls().workers[node]?.url;
  if (url === undefined) throw new Error(`no worker ${node}`);
  return user === undefined ? url : asUser(url, user);
}

export interface CitusSessions {
  /** A new connection to the coordinator, as the superuser or as one of the login roles. */
  coordinator(role?: LoginRole): Promise<pg.Client>;
  /** A new superuser connection straight to worker `i` (0 or 1). */
  worker(i: number): Promise<pg.Client>;
  /** A new connection to `node` (the coordinator or worker `i`) as `user` (any role that may log in; the superuser when omitted). */
  node(node: 'coordinator' | number, user?: string): Promise<pg.Client>;
  /** Every node: the coordinator first, then the workers. */
  readonly nodes: readonly ('coordinator' | number)[];
  /** Index (into the workers) of the node holding the shard of `key`, that shard's id, and the node as Citus names it (`host:port`). */
  placementOf(key: string): Promise<{ worker: number; shardId: number; node: string }>;
}

/** Connections for the calling test file, closed after each test. */
export function useCitus(): CitusSessions {
  const open: pg.Client[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((c) => c.end().catch(() => {})));
  });
  const connect = async (url: string): Promise<pg.Client> => {
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => {});
    open.push(client);
    await client.connect();
    return client;
  };
  return {
    coordinator: (role) => connect(role === undefined ? urls().coordinatorUrl : asUser(urls().coordinatorUrl, role)),
    worker: (i) => {
      const w = urls().workers[i];
      if (w === undefined) throw new Error(`no worker ${i}`);
      return connect(w.url);
    },
    node: (node, user) => connect(citusUrl(node, user)),
    get nodes() {
      return ['coordinator' as const, ...urls().workers.map((_, i) => i)];
    },
    async placementOf(key) {
      const c = await connect(urls().coordinatorUrl);
      const { rows } = await c.query<{ shardid: string; node: string }>(
        `select p.shardid, p.nodename || ':' || p.nodeport as node from pg_dist_shard_placement p
          where p.shardid = get_shard_id_for_distribution_column('settle_private.operations', $1::text)`,
        [key],
      );
      const row = rows[0];
      if (row === undefined) throw new Error(`no placement for ${key}`);
      const nodes = urls().workers.map((w) => w.node);
      const worker = nodes.indexOf(row.node);
      if (worker < 0) throw new Error(`shard of ${key} is on ${row.node}, not a worker (${nodes.join(', ')})`);
      return { worker, shardId: Number(row.shardid), node: row.node };
    },
  };
}

/** A tenant no other test uses. */
export function uniqueTenant(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`;
}

/**
 * Runs `fn` on `client` with citus.log_remote_commands on and returns what the coordinator sent
 * to which node: `{ command, node }` per remote command (node = "user@host:port", as Citus names the node).
 */
export async function remoteCommandsOf<T>(
  client: pg.Client,
  fn: () => Promise<T>,
): Promise<{ value: T; commands: { command: string; node: string }[] }> {
  const commands: { command: string; node: string }[] = [];
  const onNotice = (n: { message?: string; detail?: string }): void => {
    const m = /^issuing ([\s\S]*)$/.exec(n.message ?? '');
    const node = /on server (\S+)/.exec(n.detail ?? '')?.[1];
    if (m !== null && m[1] !== undefined) commands.push({ command: m[1], node: node ?? '?' });
  };
  await client.query('set citus.log_remote_commands = on');
  client.on('notice', onNotice);
  try {
    const value = await fn();
    return { value, commands };
  } finally {
    client.off('notice', onNotice);
    await client.query('reset citus.log_remote_commands');
  }
}
