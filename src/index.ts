// pg-settle: exactly-once settlement for retried operations, enforced inside PostgreSQL.
export * from './client/index.js';
// The HTTP middleware's downstream key and key-prefix filter: what a reconciler or a feed consumer
// of the middleware's operations needs without importing a framework adapter.
export { downstreamKeyOf } from './http/core/context.js';
export { byKeyPrefix } from './http/core/key-prefix.js';
export {
  migrate,
  MigrationError,
  MigrationHistoryError,
  type MigrateOptions,
  type MigrateResult,
  type MigrationHistoryMismatch,
  type MigrationHistoryProblem,
} from './db/migrate.js';
