import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { randomToken } from './secrets.js';

/**
 * A secret given in configuration, else the one kept in `dataDir/name`, else a new random one
 * written there with mode 0600 (created atomically: an existing file is never overwritten).
 */
export function loadOrCreateSecret(
  configured: string | null,
  dataDir: string,
  name: string,
  prefix = '',
): { value: string; file: string | null } {
  if (configured) return { value: configured, file: null };
  mkdirSync(dataDir, { recursive: true });
  const file = path.join(dataDir, name);
  if (!existsSync(file)) {
    try {
      writeFileSync(file, `${prefix}${randomToken(32)}\n`, { mode: 0o600, flag: 'wx' });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
  }
  chmodSync(file, 0o600);
  return { value: readFileSync(file, 'utf8').trim(), file };
}
