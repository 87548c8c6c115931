import type { TestProject } from 'vitest/node';
import { postgresReachable, redisReachable } from './services.js';

declare module 'vitest' {
  export interface ProvidedContext {
    servicesAvailable: boolean;
  }
}

/**
 * Cluster-mode suites need PostgreSQL and Redis. When either is missing they are skipped with a
 * loud notice, unless REQUIRE_SERVICES=1, which makes a missing service a failure.
 */
export default async function setup(project: TestProject) {
  const problems = (await Promise.all([postgresReachable(), redisReachable()])).filter((p): p is string => p !== null);
  if (problems.length > 0) {
    if (process.env.REQUIRE_SERVICES === '1') {
      throw new Error(`REQUIRE_SERVICES=1 but services are missing:\n  ${problems.join('\n  ')}`);
    }
    const line = '!'.repeat(78);
    process.stderr.write(
      `\n${line}\n!! SKIPPING cluster-mode suites (PostgreSQL + Redis):\n!!   ${problems.join('\n!!   ')}\n${line}\n\n`,
    );
  }
  project.provide('servicesAvailable', problems.length === 0);
}
