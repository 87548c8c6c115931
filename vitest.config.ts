import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

/**
 * Three projects: unit and module tests beside the code; the integration suite on the embedded
 * stores; the same integration suite on PostgreSQL + Redis (skipped loudly when they are missing,
 * a failure with REQUIRE_SERVICES=1).
 */
export default defineConfig({
  test: {
    // The integration files spend most of their time waiting on sockets, the databases and Chromium,
    // so one more worker than cores (Vitest's default is one fewer): on 2 cores 3 workers instead of 1.
    maxWorkers: availableParallelism() + 1,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      {
        test: {
          name: 'unit',
          include: ['packages/*/src/**/*.test.ts'],
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          name: 'embedded',
          include: ['packages/*/test/**/*.test.ts'],
          env: { PARLOR_TEST_MODE: 'embedded' },
          globalSetup: ['packages/server/test/support/pglite-image-setup.ts'],
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          name: 'cluster',
          include: ['packages/*/test/**/*.test.ts'],
          env: { PARLOR_TEST_MODE: 'cluster' },
          globalSetup: ['packages/server/test/support/global-setup.ts'],
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
});
