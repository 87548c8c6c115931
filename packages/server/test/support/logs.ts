import type { Logger } from 'pino';
import { createLogger } from '../../src/platform/logging.js';

/** A log line as written: pino's level number, the message and the logged fields. */
export type LogLine = Record<string, unknown> & { level: number; msg: string };

export interface CapturedLog {
  /** The app's logger (serializers and redaction as in production), writing here. */
  log: Logger;
  /** Every line written so far, parsed. */
  lines(): LogLine[];
  /** The raw text written so far (to check that a value appears nowhere). */
  text(): string;
}

/** Pino's level numbers. */
export const LEVEL = { debug: 20, info: 30, warn: 40, error: 50, fatal: 60 } as const;

/** A logger of the production shape whose output the test reads. */
export function captureLog(level = 'info'): CapturedLog {
  const raw: string[] = [];
  const log = createLogger(level, { write: (line: string) => void raw.push(line) });
  return {
    log,
    lines: () => raw.map((l) => JSON.parse(l) as LogLine),
    text: () => raw.join(''),
  };
}
