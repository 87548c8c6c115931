import { defineConfig } from 'vitest/config';

/**
 * Three projects: unit and module tests beside the code; the integration suite on the embedded
 * stores; the same integration suite on PostgreSQL + Redis (skipped loudly when they are missing,
 * a failure with REQUIRE_SERVICES=1).
 */
export default defineConfig({
  test: {
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
