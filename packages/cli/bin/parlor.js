#!/usr/bin/env node
// The `parlor` bin. It lives outside dist/ because npm links a bin only if its file exists at
// `npm install` time, and dist/ is git-ignored and built later (`npm run build`): a bin pointing into
// dist/ is skipped on a fresh clone, and `npx parlor` would then fetch some registry package named
// `parlor`. This file is tracked, so the link is made; it runs the built CLI, or says how to build it.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const main = new URL('../dist/main.js', import.meta.url);
if (existsSync(main)) {
  await import(main.href);
} else {
  process.stderr.write(
    `error: the parlor CLI is not built (${fileURLToPath(main)} is missing): run \`npm run build\` in the repository root first.\n`,
  );
  process.exitCode = 1;
}
