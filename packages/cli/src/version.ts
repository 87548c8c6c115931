import { readFileSync } from 'node:fs';

/** The CLI's version, from its package.json (dist/ and src/ both sit one level below it). */
export function cliVersion(): string {
  const pkg: unknown = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  return typeof pkg === 'object' && pkg !== null && 'version' in pkg && typeof pkg.version === 'string'
    ? pkg.version
    : 'unknown';
}
