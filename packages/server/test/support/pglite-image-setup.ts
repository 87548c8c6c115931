import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { migratedImage } from '../../src/platform/db/index.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A file holding a migrated PGlite data directory image (embedded suites start from it). */
    pgliteImage: string;
  }
}

/**
 * Embedded-mode suites open dozens of in-memory databases. Each would create a new cluster (seconds
 * of CPU); instead the run makes one migrated image here and every database loads it
 * (support/app.ts). Removed when the run ends.
 */
export default async function setup(project: TestProject) {
  const dir = mkdtempSync(path.join(tmpdir(), 'parlor-pglite-image-'));
  const file = path.join(dir, 'migrated.tar');
  writeFileSync(file, new Uint8Array(await (await migratedImage()).arrayBuffer()));
  project.provide('pgliteImage', file);
  return () => rmSync(dir, { recursive: true, force: true });
}
