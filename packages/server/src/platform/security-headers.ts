import type { IncomingMessage, ServerResponse } from 'node:http';
import helmet, { type HelmetOptions } from 'helmet';

/**
 * The security headers every answer carries (helmet's set with Parlor's policy), computed once.
 * helmet rebuilds its Content-Security-Policy string on every response; none of Parlor's directives
 * depend on the request (no nonces), so the whole set is a constant and the hot path only copies it.
 */
export const SECURITY_POLICY: Readonly<HelmetOptions> = {
  // The docs page loads its own scripts and styles (its route sets its own CSP); everything else is JSON.
  contentSecurityPolicy: {
    directives: { 'script-src': ["'self'"], 'style-src': ["'self'", 'https:', "'unsafe-inline'"] },
  },
  crossOriginResourcePolicy: { policy: 'same-site' },
};

/** Runs helmet once against a recording response and returns the headers it set, lower-cased. */
export function computeSecurityHeaders(policy: Readonly<HelmetOptions> = SECURITY_POLICY): Record<string, string> {
  const headers: Record<string, string> = {};
  const recorder = {
    setHeader(name: string, value: string | number | readonly string[]) {
      headers[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : String(value);
      return recorder;
    },
    removeHeader(name: string) {
      delete headers[name.toLowerCase()];
    },
  };
  let failure: unknown;
  helmet(policy)({} as IncomingMessage, recorder as unknown as ServerResponse, (err?: unknown) => {
    failure = err;
  });
  if (failure) throw failure;
  return headers;
}
