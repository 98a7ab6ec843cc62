// The settlement feed of a Citus cluster: every node that holds shards has its own feed (its
// events, positions and horizon; docs/scale-out.md, "The settlement feed on Citus"), so a
// consumer of the cluster is one consumer loop per node, each reading and acknowledging that
// node's feed on that node. A key's shard lives on one node, so its events are in one feed, in
// order; each event is in exactly one feed, so exactly once per node is exactly once across the
// cluster. A node that goes away (a restart) fails its loop's batches, which roll back and are
// read again once it answers; the other nodes' loops go on.
import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { CitusRouter } from './citus-routing.js';
import { SettleInputError } from './errors.js';
import { consumeFeed } from './feed.js';
import type { ClientTelemetry } from './telemetry.js';
import type { ConsumeOptions, ConsumeSummary, FeedHandler } from './types.js';

export interface CitusFeedDependencies {
  readonly router: CitusRouter;
  readonly telemetry: ClientTelemetry;
  /** Connection strings by node ("host:port"): citusRouting.nodes. */
  readonly nodes: Readonly<Record<string, string>>;
}

/** What consume() did on a Citus cluster: the totals and each node's share. */
export interface CitusConsumeSummary extends ConsumeSummary {
  readonly perNode: Readonly<Record<string, ConsumeSummary>>;
}

/**
 * Consumes `name` on every node that holds shards (by the client's shard map), one loop per node
 * with that node's pool and NOTIFY listener; resolves when options.signal aborts. The handler's
 * context names the node (`context.node`); in transaction mode `context.connection` is that
 * node's transaction. The consumer must be registered on each of those nodes.
 */
export async function consumeCitusFeed(
  deps: CitusFeedDependencies,
  name: string,
  handler: FeedHandler,
  options: ConsumeOptions = {},
): Promise<CitusConsumeSummary> {
  const shardNodes = await deps.router.shardNodes();
  if (shardNodes.length === 0) {
    throw new SettleInputError(
      'citusRouting: the shard map could not be read, so the nodes whose feeds to read are unknown (see onError)',
      {
        code: 'CITUS_FEED_NO_SHARD_MAP',
      },
    );
  }
  const unlisted = shardNodes.filter((node) => deps.nodes[node] === undefined);
  if (unlisted.length > 0) {
    throw new SettleInputError(
      `citusRouting.nodes has no connection string for ${unlisted.join(', ')}: each node holding shards has its own feed, which must be read on that node`,
      {
        code: 'INVALID_INPUT',
        issues: unlisted.map((node) => ({
          path: ['citusRouting', 'nodes', node],
          message: 'missing: this node holds shards',
        })),
      },
    );
  }
  // One loop failing for good (bad options) stops the others.
  const stop = new AbortController();
  const outer = options.signal;
  const forward = (): void => stop.abort();
  if (outer?.aborted === true) stop.abort();
  outer?.addEventListener('abort', forward, { once: true });
  try {
    const results = await Promise.all(
      shardNodes.map(async (node) => {
        const url = deps.nodes[node] as string;
        const pool = deps.router.poolOfNode(node) as Promise<DatabasePool>;
        try {
          const summary = await consumeFeed(
            { getPool: () => pool, telemetry: deps.telemetry, connectionString: url },
            name,
            (events, context) => handler(events, { ...context, node }),
            { ...options, signal: stop.signal },
          );
          return [node, summary] as const;
        } catch (error) {
          stop.abort();
          throw error;
        }
      }),
    );
    const perNode = Object.fromEntries(results);
    const sum = (field: keyof ConsumeSummary): number => results.reduce((total, [, s]) => total + s[field], 0);
    return { batches: sum('batches'), events: sum('events'), errors: sum('errors'), perNode };
  } finally {
    outer?.removeEventListener('abort', forward);
  }
}

const nodeLagRow = z.object({
  node: z.string(),
  consumer: z.string().nullable(),
  lag_events: z
    .union([z.number(), z.bigint(), z.string()])
    .nullable()
    .transform((v) => (v === null ? null : Number(v))),
  lag_seconds: z.number().nullable(),
  error: z.string().nullable(),
});

/** How far one consumer is behind on one node's feed, or why that node could not say. */
export interface NodeFeedLag {
  /** "host:port" as pg_dist_node names it. */
  readonly node: string;
  /** null on a row that only reports `error` or a node with no consumer. */
  readonly consumer: string | null;
  /** Events written beyond the consumer's positions on this node, summed over its lanes. */
  readonly lagEvents: number | null;
  /** Age in seconds of the oldest event not yet acknowledged on this node (its lanes' maximum). */
  readonly lagSeconds: number | null;
  /** The node did not answer (down, or the caller may not read its feed). */
  readonly error: string | null;
}

/**
 * Each node's feed lag per consumer, read through the coordinator with run_command_on_all_nodes
 * (as the caller, on every node, settle.feed_consumers of that node). Empty where the database is
 * not a Citus coordinator.
 */
export async function citusFeedLag(pool: DatabasePool): Promise<NodeFeedLag[]> {
  const citus = await pool.maybeOne(sql.type(z.object({ ok: z.boolean() }))`
    select true as ok from pg_catalog.pg_extension where extname = 'citus'`);
  if (citus === null) return [];
  let rows: readonly z.output<typeof nodeLagRow>[];
  try {
    rows = await pool.any(sql.type(nodeLagRow)`
    select n.nodename || ':' || n.nodeport as node, l.consumer, l.lag_events, l.lag_seconds,
           case when not r.success then r.result end as error
      from run_command_on_all_nodes($$select coalesce(json_agg(json_build_object(
             'consumer', consumer, 'lag_events', lag_events, 'lag_seconds', lag_seconds)), '[]')
             from (select consumer, sum(lag_events) as lag_events, max(lag_seconds) as lag_seconds
                     from settle.feed_consumers group by consumer order by consumer) c$$) r
      join pg_catalog.pg_dist_node n on n.nodeid = r.nodeid
      left join lateral json_to_recordset(case when r.success then r.result::json else '[]'::json end)
             as l(consumer text, lag_events bigint, lag_seconds float8) on true
     order by n.groupid, l.consumer`);
  } catch (error) {
    // E.g. a role that may not run run_command_on_all_nodes: say so instead of failing the caller.
    return [
      {
        node: 'coordinator',
        consumer: null,
        lagEvents: null,
        lagSeconds: null,
        error: error instanceof Error ? error.message : String(error),
      },
    ];
  }
  // Converted here too: a pool without the result-parser interceptor hands the raw rows over
  // (int8 as BigInt), unparsed by nodeLagRow.
  const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
  return rows.map((r) => ({
    node: r.node,
    consumer: r.consumer,
    lagEvents: num(r.lag_events),
    lagSeconds: num(r.lag_seconds),
    error: r.error,
  }));
}
