// pg-settle: exactly-once settlement for retried operations, enforced inside PostgreSQL.
export * from './client/index.js';
export { migrate, MigrationError, type MigrateOptions, type MigrateResult } from './db/migrate.js';
