import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { ModelRun } from './model-driver.js';

/**
 * The connections a model run needs on one database: three application connections of a real
 * login granted settle_app (session_user is the service, as in production), one login granted
 * settle_admin, and a superuser observer (pg_stat_activity, the lease clock, stored state).
 */
export interface ModelSession {
  readonly run: ModelRun;
  close(): Promise<void>;
}

export async function openModelSession(url: string, prefix: string): Promise<ModelSession> {
  const suffix = randomBytes(4).toString('hex');
  const roles = {
    app: `model_app_${suffix}`,
    admin: `model_ops_${suffix}`,
    consumer: `model_feed_${suffix}`,
    reconciler: `model_rec_${suffix}`,
  };
  const open: pg.Client[] = [];
  const connect = async (connectionString: string, name: string): Promise<pg.Client> => {
    const client = new pg.Client({ connectionString, application_name: name });
    client.on('error', () => {});
    open.push(client);
    await client.connect();
    return client;
  };
  const observer = await connect(url, 'model-observer');
  await observer.query(`create role ${roles.app} login; grant settle_app to ${roles.app}`);
  await observer.query(`create role ${roles.admin} login; grant settle_admin to ${roles.admin}`);
  await observer.query(`create role ${roles.consumer} login; grant settle_consumer to ${roles.consumer}`);
  await observer.query(`create role ${roles.reconciler} login; grant settle_reconciler to ${roles.reconciler}`);
  const as = (role: string): string => {
    const u = new URL(url);
    u.username = role;
    u.password = '';
    return u.toString();
  };
  const app = [
    await connect(as(roles.app), 'model-app-0'),
    await connect(as(roles.app), 'model-app-1'),
    await connect(as(roles.app), 'model-app-2'),
  ];
  const admin = await connect(as(roles.admin), 'model-admin');
  const consumer = await connect(as(roles.consumer), 'model-feed');
  const reconciler = await connect(as(roles.reconciler), 'model-reconciler');
  const run = new ModelRun({ app, admin, observer, consumer, reconciler }, prefix);
  await run.init();
  return {
    run,
    async close() {
      await Promise.all(open.filter((c) => c !== observer).map((c) => c.end().catch(() => {})));
      await observer
        .query(
          `drop role if exists ${roles.app}; drop role if exists ${roles.admin}; drop role if exists ${roles.consumer}; drop role if exists ${roles.reconciler}`,
        )
        .catch(() => {});
      await observer.end().catch(() => {});
    },
  };
}
