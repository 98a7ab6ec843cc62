/**
 * Values the global setup hands to every test worker (`project.provide` -> `inject`).
 * Importing this module (index.ts does) types `inject('adminUrl')` and `inject('templateDb')`.
 */
declare module 'vitest' {
  export interface ProvidedContext {
    /** Superuser connection string to the database `postgres` of the test server. */
    adminUrl: string;
    /** Migrated template database that createTestDatabase() clones. */
    templateDb: string;
    /** `server_version_num` of the test server (150018, 180004, ...). */
    serverVersionNum: number;
  }
}

/** Name of the migrated template database test databases are cloned from. */
export const TEMPLATE_DB = 'settle_template';
