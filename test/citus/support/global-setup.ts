import type { TestProject } from 'vitest/node';
import { distribute } from '../../../src/db/distribute.js';
import { migrate } from '../../../src/db/migrate.js';
import { withPgClient } from '../../../src/db/with-pg-client.js';
import {
  citusBuildUnavailableReason,
  citusUnavailableReason,
  citusWorkerNodes,
  startCitusCluster,
} from '../../../src/dev-server/citus-cluster.js';
import './provided.js';
import { LOGIN_ROLES } from './roles.js';

/**
 * globalSetup of the `citus` project: a coordinator and two workers, migrated and distributed
 * (pg-settle migrate + pg-settle distribute), shared by every test file of the project (each
 * uses its own tenants and keys). `CITUS_DATABASE_URL` uses an existing cluster instead (e.g.
 * `docker compose --profile citus up`): its database is migrated and distributed as is;
 * `CITUS_WORKER_URLS` (comma-separated, in pg_dist_node order) says how to reach its workers.
 * Without Citus the project's tests are skipped with the reason, naming what is missing.
 */
export default async function setup(project: TestProject): Promise<(() => Promise<void>) | undefined> {
  const verbose = process.env.PG_SETTLE_TEST_LOG === '1';
  const log = (msg: string): void => {
    if (verbose) console.log(`[pg-settle citus] ${msg}`);
  };
  const external = process.env.CITUS_DATABASE_URL;
  let coordinatorUrl: string;
  let stop: (() => Promise<void>) | undefined;
  // PG_SETTLE_CITUS_BIN: the bin directory of another PostgreSQL 15 installation whose
  // ../lib/citus.so is another Citus build (e.g. one with citusdata/citus#8824, docs/scale-out.md),
  // to run the whole suite against it.
  const binDir = process.env.PG_SETTLE_CITUS_BIN === '' ? undefined : process.env.PG_SETTLE_CITUS_BIN;
  if (external !== undefined && external !== '') {
    coordinatorUrl = external;
  } else {
    const unavailable = binDir === undefined ? citusUnavailableReason() : citusBuildUnavailableReason(binDir);
    if (unavailable !== undefined) {
      project.provide('citus', {
        unavailable: binDir === undefined ? unavailable : `PG_SETTLE_CITUS_BIN: ${unavailable}`,
      });
      return undefined;
    }
    const cluster = await startCitusCluster({ log, binDir });
    coordinatorUrl = cluster.coordinator.adminUrl;
    stop = cluster.stop;
  }
  try {
    await migrate(coordinatorUrl, { log });
    await distribute(coordinatorUrl);
    await withPgClient(coordinatorUrl, async (c) => {
      // As in the plain template (src/testing/global-setup.ts): tests purge rows they just wrote.
      await c.query(`select settle.set_purge_min_retention(interval '0')`);
      for (const [login, role] of Object.entries(LOGIN_ROLES)) {
        await c.query(`do $$ begin
            if not exists (select 1 from pg_roles where rolname = '${login}') then
              create role ${login} login in role ${role};
            end if;
          end $$`);
      }
    });
    const given = process.env.CITUS_WORKER_URLS;
    const workers = await citusWorkerNodes(
      coordinatorUrl,
      given === undefined || given === '' ? undefined : given.split(','),
    );
    project.provide('citus', {
      coordinatorUrl,
      workers,
      build: external !== undefined && external !== '' ? 'external' : (binDir ?? 'installed'),
    });
  } catch (error) {
    await stop?.();
    throw error;
  }
  return stop;
}
