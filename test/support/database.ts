import { afterAll, beforeAll } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';

/** The database of one test file; its fields are readable from beforeAll on. */
export type FileDatabase = Omit<TestDatabase, 'drop'>;

/**
 * One cloned, migrated database for the calling test file: created in beforeAll, dropped in
 * afterAll (after `beforeDrop`, which closes what the file opened on it).
 */
export function useTestDatabase(hint: string, options: { readonly beforeDrop?: () => Promise<void> } = {}): FileDatabase {
  let db: TestDatabase | undefined;
  beforeAll(async () => {
    db = await createTestDatabase(hint);
  });
  afterAll(async () => {
    await options.beforeDrop?.();
    await db?.drop();
  });
  const created = (): TestDatabase => {
    if (db === undefined) throw new Error(`useTestDatabase(${hint}): the database is created in beforeAll`);
    return db;
  };
  return {
    get url() {
      return created().url;
    },
    get adminUrl() {
      return created().adminUrl;
    },
    get name() {
      return created().name;
    },
  };
}
