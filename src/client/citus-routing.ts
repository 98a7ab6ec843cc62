// Citus: each keyed call sent straight to the node that holds its key's shard, so the call runs
// where it arrives instead of being delegated by the node the client is connected to (one hop,
// and that node's planning and forwarding, saved; docs/scale-out.md, "Routing keys to their
// node"). Routing only chooses the connection: any node of the cluster gives the same answer for
// any key (a node that does not hold the key delegates the call), so a stale or missing map
// costs a hop, never a wrong result.
import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import { postgresHashText } from './citus-hash.js';
import type { CitusRoutingOptions } from './types.js';

/** One shard of settle_private.operations: its hash range and the node holding it ("host:port"). */
interface ShardRoute {
  readonly min: number;
  readonly max: number;
  readonly node: string;
}

const shardRouteRow = z.object({ min: z.number().int(), max: z.number().int(), node: z.string() });

// The shards of settle_private.operations (every table of the engine is colocated with it, and
// every keyed call touches only its key's shard group), with the active primary holding each.
// Catalogs any login can read: the relation is found by name, not by a regclass cast, which
// would need USAGE on settle_private.
const shardMapQuery = sql.type(shardRouteRow)`
  select s.shardminvalue::integer as min, s.shardmaxvalue::integer as max,
         n.nodename || ':' || n.nodeport as node
    from pg_catalog.pg_dist_shard s
    join pg_catalog.pg_dist_placement p on p.shardid = s.shardid and p.shardstate = 1
    join pg_catalog.pg_dist_node n on n.groupid = p.groupid and n.isactive and n.noderole = 'primary'
   where s.logicalrelid = (select c.oid from pg_catalog.pg_class c
                            join pg_catalog.pg_namespace ns on ns.oid = c.relnamespace
                           where ns.nspname = 'settle_private' and c.relname = 'operations')
   order by 1`;

export interface CitusRouter {
  /** The pool of the node holding `key`'s shard; undefined: use the client's own connection. */
  poolFor(key: string): Promise<DatabasePool | undefined>;
  /** The node ("host:port", as pg_dist_node names it) holding `key`'s shard, by the current map. */
  nodeFor(key: string): Promise<string | undefined>;
  /**
   * `key`'s node could not be reached (`error`, reported to onError): keys of that node go
   * through the client's own connection until the map is next read (refreshMs), and the map is
   * read again at the next call.
   */
  unreachable(key: string, error: unknown): Promise<void>;
  /**
   * Every node holding a shard by the current map ("host:port", sorted), the map read first when
   * none was read yet; empty when no map could be read (the error went to onError).
   */
  shardNodes(): Promise<string[]>;
  /** The pool of `node` ("host:port"): undefined when `nodes` gives no connection string for it. */
  poolOfNode(node: string): Promise<DatabasePool> | undefined;
  end(): Promise<void>;
}

export function createCitusRouter(
  options: CitusRoutingOptions,
  mainPool: () => Promise<DatabasePool>,
  makePool: (connectionString: string) => Promise<DatabasePool>,
): CitusRouter {
  const refreshMs = options.refreshMs ?? 60_000;
  const pools = new Map<string, Promise<DatabasePool>>();
  // Nodes (connection strings) not to route to until a time (ms since the epoch).
  const down = new Map<string, number>();
  let routes: readonly ShardRoute[] = [];
  let loadedAt = Number.NEGATIVE_INFINITY;
  let loading: Promise<void> | undefined;
  const report = (error: unknown): void => options.onError?.(error instanceof Error ? error : new Error(String(error)));

  const load = (): Promise<void> =>
    (loading ??= (async () => {
      try {
        const rows = await (await mainPool()).any(shardMapQuery);
        if (rows.length === 0)
          throw new Error(
            'citusRouting: no shard of settle_private.operations (is this a Citus cluster after pg-settle distribute?)',
          );
        routes = rows;
      } catch (error) {
        // The last map read keeps serving; without one, calls go through the client's own
        // connection until the map can be read (tried again at the next refresh).
        report(error);
      } finally {
        loadedAt = Date.now();
        loading = undefined;
      }
    })());

  const nodeFor = async (key: string): Promise<string | undefined> => {
    if (Date.now() - loadedAt >= refreshMs) {
      // The first map is awaited; a stale one serves while its successor loads.
      if (routes.length === 0) await load();
      else void load();
    }
    const hash = postgresHashText(key);
    // Binary search: the shards' ranges are sorted and disjoint.
    let lo = 0;
    let hi = routes.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const r = routes[mid] as ShardRoute;
      if (hash < r.min) hi = mid - 1;
      else if (hash > r.max) lo = mid + 1;
      else return r.node;
    }
    return undefined;
  };

  const poolOf = (url: string): Promise<DatabasePool> => {
    let pool = pools.get(url);
    if (pool === undefined) {
      pool = makePool(url);
      pools.set(url, pool);
      pool.catch(() => pools.delete(url));
    }
    return pool;
  };

  return {
    nodeFor,
    async poolFor(key) {
      const node = await nodeFor(key);
      const url = node === undefined ? undefined : options.nodes[node];
      if (url === undefined || (down.get(url) ?? 0) > Date.now()) return undefined;
      return poolOf(url);
    },
    async shardNodes() {
      if (routes.length === 0 || Date.now() - loadedAt >= refreshMs) await load();
      return [...new Set(routes.map((r) => r.node))].sort();
    },
    poolOfNode(node) {
      const url = options.nodes[node];
      return url === undefined ? undefined : poolOf(url);
    },
    async unreachable(key, error) {
      report(error);
      const node = await nodeFor(key);
      const url = node === undefined ? undefined : options.nodes[node];
      if (url !== undefined) down.set(url, Date.now() + refreshMs);
      loadedAt = Number.NEGATIVE_INFINITY;
    },
    async end() {
      const all = [...pools.values()];
      pools.clear();
      await Promise.all(all.map(async (p) => (await p.catch(() => undefined))?.end()));
    },
  };
}
