import { defineConfig } from 'vitest/config';

// One PostgreSQL server and one migrated template for the whole run (globalSetup runs once, in
// the root project; both projects inherit what it provides). Each test file clones its own
// database, so files run in parallel. Timeouts are generous for a 2-core shared machine.
// Files share their worker process (isolate: false): no test mocks a module or changes
// process.env, and a fresh process per file re-imported slonik, zod and pg each time (the whole
// suite took 603 s with it, 423 s without, on an idle 2-core machine).
const perProject = {
  pool: 'forks',
  isolate: false,
  testTimeout: 180_000,
  hookTimeout: 240_000,
} as const;

export default defineConfig({
  test: {
    globalSetup: ['./src/testing/global-setup.ts'],
    ...perProject,
    fileParallelism: true,
    // Three on two cores: a file spends about a quarter of its time waiting on the server (commit
    // flushes, lock waits the tests arrange), which a third worker fills. The 16-18 matrix with
    // two CPU hogs running: 268 s with two workers, 220 s with three.
    maxWorkers: 3,
    // Projects do not `extends: true` on purpose: that would copy globalSetup into each project
    // and provision one server per project.
    projects: [
      {
        test: {
          ...perProject,
          name: 'unit',
          include: ['test/**/*.test.ts'],
          exclude: ['test/reliability/**', 'test/citus/**', '**/node_modules/**'],
        },
      },
      {
        test: {
          ...perProject,
          name: 'reliability',
          include: ['test/reliability/**/*.test.ts'],
        },
      },
      {
        // A coordinator + 2 workers from an installed Citus (its own globalSetup); every test is
        // skipped, with the missing extension named, where Citus is not installed.
        test: {
          ...perProject,
          name: 'citus',
          include: ['test/citus/**/*.test.ts'],
          globalSetup: ['./test/citus/support/global-setup.ts'],
          // The files share one cluster; one at a time keeps a 2-core machine responsive.
          fileParallelism: false,
          // After the other projects, not beside them: vitest runs projects of one group order
          // together and refuses a group whose projects differ in workers (`npm test` runs all).
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
