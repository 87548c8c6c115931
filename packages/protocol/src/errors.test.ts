import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from './errors.js';

const apiDoc = readFileSync(path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../docs/api.md'), 'utf8');

describe('the error catalogue', () => {
  it('is listed in docs/api.md code for code, with the same statuses', () => {
    const documented = new Map<string, number>();
    for (const m of apiDoc.matchAll(/^\| `(ERR_[A-Z_]+)` \| (\d{3}) \|/gm))
      documented.set(m[1] as string, Number(m[2]));
    const catalogue = new Map(Object.entries(ErrorCodes).map(([code, v]) => [code, v.status as number]));
    expect(documented).toEqual(catalogue);
  });

  it('gives every code a 4xx or 5xx status and a message', () => {
    for (const [code, { status, message }] of Object.entries(ErrorCodes)) {
      expect(code).toMatch(/^ERR_[A-Z_]+$/);
      expect(status).toBeGreaterThanOrEqual(400);
      expect(status).toBeLessThan(600);
      expect(message.length).toBeGreaterThan(5);
    }
  });
});
