import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';
import { usePerFile } from './per-file.js';

/** The database of one test file; its fields are readable from beforeAll on. */
export type FileDatabase = Omit<TestDatabase, 'drop'>;

/**
 * One cloned, migrated database for the calling test file: created in beforeAll, dropped in
 * afterAll (after `beforeDrop`, which closes what the file opened on it).
 */
export function useTestDatabase(
  hint: string,
  options: { readonly beforeDrop?: () => Promise<void> } = {},
): FileDatabase {
  return usePerFile(
    `useTestDatabase(${hint})`,
    () => createTestDatabase(hint),
    async (db) => {
      await options.beforeDrop?.();
      await db.drop();
    },
    ['url', 'adminUrl', 'name'],
  );
}
