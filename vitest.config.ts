import { availableParallelism } from 'node:os';
import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Three projects: unit and module tests beside the code; the integration suite on the embedded
 * stores; the same integration suite on PostgreSQL + Redis (skipped loudly when they are missing,
 * a failure with REQUIRE_SERVICES=1).
 *
 * Files under test/ that start no app and touch no store (STORELESS) run once, in the unit project.
 *
 * Every project runs without isolation: a worker loads the modules once and runs file after file in
 * them, instead of loading them again for each file (about 3 s of CPU per integration file, a third
 * of the whole run; the unit project takes half the time). Every file starts its own app and stores,
 * so nothing of one file's data reaches the next; a file must not mock modules (vi.mock) or leave
 * process-wide state changed (fake timers, environment variables, listeners).
 */
const STORELESS = [
  'packages/sdk/test/server-events.test.ts',
  'packages/sdk/test/doc-vectors.test.ts',
  'packages/sdk/test/event-order.test.ts',
  'packages/cli/test/readme.test.ts',
  'packages/cli/test/answer-cut-off.test.ts',
  'packages/cli/test/closed-stdout.test.ts',
  'packages/cli/test/output-failures.test.ts',
];

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
          isolate: false,
          include: ['packages/*/src/**/*.test.ts', ...STORELESS],
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          name: 'embedded',
          isolate: false,
          include: ['packages/*/test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...STORELESS],
          env: { PARLOR_TEST_MODE: 'embedded' },
          globalSetup: ['packages/server/test/support/pglite-image-setup.ts'],
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          name: 'cluster',
          isolate: false,
          include: ['packages/*/test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...STORELESS],
          env: { PARLOR_TEST_MODE: 'cluster' },
          globalSetup: ['packages/server/test/support/global-setup.ts'],
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
});
