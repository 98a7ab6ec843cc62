export { createTestDatabase, type CreateTestDatabaseOptions, type TestDatabase } from './database.js';
export { TEMPLATE_DB } from './provided-context.js';
