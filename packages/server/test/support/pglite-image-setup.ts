import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { migratedImage, openDatabase } from '../../src/platform/db/index.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A file holding a migrated PGlite data directory image (embedded suites start from it). */
    pgliteImage: string;
    /** A DATA_DIR holding a migrated embedded store (`pglite/`), for support/app.ts seededDataDir. */
    pgliteDataDir: string;
  }
}

/**
 * Embedded-mode suites open dozens of in-memory databases. Each would create a new cluster (seconds
 * of CPU); instead the run makes one migrated image here and every database loads it
 * (support/app.ts). Suites that keep the store on disk (restarts, DATA_DIR locks, server processes)
 * copy a migrated directory made here once. Both are removed when the run ends.
 */
export default async function setup(project: TestProject) {
  const dir = mkdtempSync(path.join(tmpdir(), 'parlor-pglite-image-'));
  const file = path.join(dir, 'migrated.tar');
  const dataDir = path.join(dir, 'data');
  const [image, store] = await Promise.all([migratedImage(), openDatabase({ url: null, dataDir })]);
  writeFileSync(file, new Uint8Array(await image.arrayBuffer()));
  await store.close();
  project.provide('pgliteImage', file);
  project.provide('pgliteDataDir', dataDir);
  return () => rmSync(dir, { recursive: true, force: true });
}
